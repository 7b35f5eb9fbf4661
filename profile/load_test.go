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
