package profile_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentd/agentd/profile"
)

func write(t *testing.T, dir, name, body string) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestLoadDir(t *testing.T) {
	dir := t.TempDir()
	write(t, dir, "reviewer.yaml", `
name: Reviewer
description: Reviews code
systemPrompt: Be terse.
model: claude-sonnet-4-5
skills:
  - name: lint
    content: "# Lint"
subagents:
  - name: tester
    prompt: Run the tests
    tools: [Bash]
commands:
  - name: ship
    content: Ship it
rules:
  - name: style
    content: Tabs
mcpServers:
  files:
    type: stdio
    command: mcp-files
    args: [--root, .]
  web:
    type: http
    url: http://127.0.0.1:9/mcp
defaultWorkspaceFiles:
  - path: notes/README.md
    content: hello
environmentVariables:
  FOO: bar
allowedTools: [Read, "Bash(git:*)"]
disallowedTools: [WebFetch]
`)
	write(t, dir, "json-one.json", `{"id":"j1","name":"J"}`)
	write(t, dir, "broken.yaml", "name: [")
	write(t, dir, "unknown-field.yaml", "name: X\nsystemPromt: typo\n")
	write(t, dir, "bad-mcp.json", `{"id":"m","mcpServers":{"x":{"type":"carrier-pigeon"}}}`)
	write(t, dir, "escape.yaml", "defaultWorkspaceFiles:\n  - path: ../outside\n    content: x\n")
	write(t, dir, "dup.yaml", "id: j1\n")
	write(t, dir, "ignored.txt", "not a profile")
	ps, errs := profile.LoadDir(dir)
	ids := []string{}
	for _, p := range ps {
		ids = append(ids, p.ID)
	}
	if strings.Join(ids, ",") != "j1,reviewer" {
		t.Fatalf("loaded %v", ids)
	}
	if len(errs) != 5 {
		t.Fatalf("errors %v", errs)
	}
	for _, e := range errs {
		var le *profile.LoadError
		if !errors.As(e, &le) || le.File == "" {
			t.Fatalf("error does not name its file: %v", e)
		}
	}
	r := ps[1]
	if r.Name != "Reviewer" || r.MCPServers["files"].Args[1] != "." || r.MCPServers["web"].URL == "" ||
		r.DefaultWorkspaceFiles[0].Path != "notes/README.md" || r.EnvironmentVariables["FOO"] != "bar" ||
		r.AllowedTools[1] != "Bash(git:*)" || r.Subagents[0].Tools[0] != "Bash" || r.Skills[0].Content != "# Lint" {
		t.Fatalf("fields lost: %+v", r)
	}
}

func TestLoadDirMissing(t *testing.T) {
	_, errs := profile.LoadDir(filepath.Join(t.TempDir(), "nope"))
	if len(errs) != 1 {
		t.Fatalf("errs %v", errs)
	}
}

func TestSandboxSettings(t *testing.T) {
	dir := t.TempDir()
	write(t, dir, "big.yaml", `
name: Big
sandbox:
  image: registry.example/agentd-sandbox:1.2
  memoryBytes: 8589934592
  pids: 8192
  cpuPercent: 200
`)
	write(t, dir, "bad.yaml", `
name: Bad
sandbox: {pids: -1, image: "two words"}
`)
	ps, errs := profile.LoadDir(dir)
	if len(ps) != 1 || len(errs) != 1 {
		t.Fatalf("profiles %+v errors %v", ps, errs)
	}
	sb := ps[0].Sandbox
	if sb == nil || sb.Image != "registry.example/agentd-sandbox:1.2" || sb.MemoryBytes != 8<<30 || sb.Pids != 8192 || sb.CPUPercent != 200 {
		t.Fatalf("sandbox %+v", sb)
	}
	if msg := errs[0].Error(); !strings.Contains(msg, "bad.yaml") || !strings.Contains(msg, "negative") || !strings.Contains(msg, "two words") {
		t.Fatalf("error %q", msg)
	}
}
