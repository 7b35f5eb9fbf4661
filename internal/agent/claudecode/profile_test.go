package claudecode

import (
	"context"
	"encoding/json"
	"path"
	"slices"
	"strings"
	"testing"

	"github.com/agentd/agentd/agent"
	"github.com/agentd/agentd/profile"
)

func testProfile() profile.Profile {
	return profile.Profile{
		ID: "p", Name: "P",
		SystemPrompt: "You are terse.",
		Skills: []profile.Skill{
			{Name: "deploy", Description: "Deploys: carefully", Content: "Run make deploy.", Files: map[string]string{"scripts/run.sh": "echo run", "notes.md": "n"}},
			{Name: "own-header", Content: "---\nname: own-header\ndescription: mine\n---\nBody"},
		},
		Subagents:       []profile.Subagent{{Name: "reviewer", Description: "Reviews code", Prompt: "Review it.", Tools: []string{"Read", "Grep"}, Model: "haiku"}},
		Commands:        []profile.Command{{Name: "hi", Description: "Says hi", Content: "Say hi to $ARGUMENTS"}},
		Rules:           []profile.Rule{{Name: "style", Content: "Use tabs."}},
		MCPServers:      map[string]profile.MCPServer{"local": {Type: "stdio", Command: "mcp-srv", Args: []string{"--x"}, Env: map[string]string{"A": "1"}}, "remote": {Type: "http", URL: "http://mcp.example/mcp", Headers: map[string]string{"Authorization": "Bearer t"}}},
		AllowedTools:    []string{"Read", "Bash(git:*)"},
		DisallowedTools: []string{"WebFetch"},
	}
}

func TestMaterializeProfile(t *testing.T) {
	m, err := materialize(testProfile(), "/work/ws")
	if err != nil {
		t.Fatal(err)
	}
	files := map[string]string{}
	for _, f := range m.files {
		files[f.Path] = string(f.Content)
	}
	want := map[string]string{
		".agentd/claude/skills/deploy/SKILL.md":       "---\nname: deploy\ndescription: 'Deploys: carefully'\n---\nRun make deploy.",
		".agentd/claude/skills/deploy/scripts/run.sh": "echo run",
		".agentd/claude/skills/deploy/notes.md":       "n",
		".agentd/claude/skills/own-header/SKILL.md":   "---\nname: own-header\ndescription: mine\n---\nBody",
		".agentd/claude/agents/reviewer.md":           "---\nname: reviewer\ndescription: Reviews code\ntools: Read, Grep\nmodel: haiku\n---\nReview it.",
		".agentd/claude/commands/hi.md":               "---\ndescription: Says hi\n---\nSay hi to $ARGUMENTS",
		".agentd/claude/rules/style.md":               "Use tabs.",
		".agentd/claude/" + systemPromptFile:          "You are terse.",
	}
	for p, c := range want {
		if files[p] != c {
			t.Errorf("%s = %q, want %q", p, files[p], c)
		}
	}
	var mcp struct {
		MCPServers map[string]mcpServerJSON `json:"mcpServers"`
	}
	if err := json.Unmarshal([]byte(files[".agentd/claude/"+mcpConfigFile]), &mcp); err != nil {
		t.Fatal(err)
	}
	if s := mcp.MCPServers["local"]; s.Type != "stdio" || s.Command != "mcp-srv" || s.Args[0] != "--x" || s.Env["A"] != "1" {
		t.Errorf("stdio server %+v", s)
	}
	if s := mcp.MCPServers["remote"]; s.Type != "http" || s.URL != "http://mcp.example/mcp" || s.Headers["Authorization"] != "Bearer t" {
		t.Errorf("http server %+v", s)
	}
	wantArgs := []string{
		"--append-system-prompt-file=/work/ws/.agentd/claude/" + systemPromptFile,
		"--mcp-config=/work/ws/.agentd/claude/" + mcpConfigFile,
		"--allowedTools=Read,Bash(git:*)",
		"--disallowedTools=WebFetch",
	}
	if !slices.Equal(m.args, wantArgs) {
		t.Errorf("args %q\nwant %q", m.args, wantArgs)
	}
	if m.configDir != "/work/ws/.agentd/claude" {
		t.Errorf("config dir %q", m.configDir)
	}
}

func TestMaterializeEmptyProfile(t *testing.T) {
	m, err := materialize(profile.Default(), "/w")
	if err != nil || len(m.files) != 0 || len(m.args) != 0 {
		t.Fatalf("%+v %v", m, err)
	}
}

func TestMaterializeRejectsBadNames(t *testing.T) {
	for name, p := range map[string]profile.Profile{
		"skill name":   {Skills: []profile.Skill{{Name: "../evil", Content: "x"}}},
		"skill file":   {Skills: []profile.Skill{{Name: "ok", Content: "x", Files: map[string]string{"../../x": "y"}}}},
		"agent name":   {Subagents: []profile.Subagent{{Name: "a/b", Prompt: "x"}}},
		"command name": {Commands: []profile.Command{{Name: ".hidden", Content: "x"}}},
		"rule name":    {Rules: []profile.Rule{{Name: "", Content: "x"}}},
		"mcp type":     {MCPServers: map[string]profile.MCPServer{"x": {Type: "carrier-pigeon"}}},
		"mcp command":  {MCPServers: map[string]profile.MCPServer{"x": {Type: "stdio"}}},
		"mcp url":      {MCPServers: map[string]profile.MCPServer{"x": {Type: "http"}}},
	} {
		if _, err := materialize(p, "/w"); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

func TestStartWritesTheProfileAndClearsStaleFiles(t *testing.T) {
	h := newTestHost(t, fakeCLIDir(t))
	ctx := context.Background()
	stale := path.Join(configRel, "skills", "removed", "SKILL.md")
	if err := h.env.WriteFile(ctx, stale, []byte("old"), 0o644); err != nil {
		t.Fatal(err)
	}
	keep := path.Join(configRel, "projects", "x", "s.jsonl")
	if err := h.env.WriteFile(ctx, keep, []byte("{}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	h.prof = testProfile()
	r := startRunner(t, h, fastOpts)
	if _, err := h.env.ReadFile(ctx, stale); err == nil {
		t.Error("a skill no longer in the profile is still there")
	}
	if _, err := h.env.ReadFile(ctx, keep); err != nil {
		t.Error("Start removed the CLI's own files")
	}
	if b, err := h.env.ReadFile(ctx, path.Join(configRel, "agents", "reviewer.md")); err != nil || !strings.Contains(string(b), "Review it.") {
		t.Errorf("agent file: %q %v", b, err)
	}
	mustTurn(t, r, "q1", "hello")
	argv := strings.Join(fakeStarts(t, h)[0].Argv, " ")
	for _, want := range []string{"--append-system-prompt-file=", "--mcp-config=", "--allowedTools=Read,Bash(git:*)", "--disallowedTools=WebFetch"} {
		if !strings.Contains(argv, want) {
			t.Errorf("argv %q lacks %q", argv, want)
		}
	}
}

func TestStartRefusesABadProfile(t *testing.T) {
	h := newTestHost(t, fakeCLIDir(t))
	h.prof = profile.Profile{ID: "bad", Skills: []profile.Skill{{Name: "../x"}}}
	_, err := New(Options{}).Start(context.Background(), h)
	if err == nil || !strings.Contains(err.Error(), "skill name") {
		t.Fatalf("err %v", err)
	}
}

func TestProbe(t *testing.T) {
	a := New(Options{Command: "claude-definitely-missing"})
	if _, err := a.Probe(context.Background()); err == nil || !strings.Contains(err.Error(), "not installed") {
		t.Fatalf("missing: %v", err)
	}
	dir := fakeCLIDir(t)
	t.Setenv("PATH", dir+":"+"/usr/bin:/bin")
	a = New(Options{})
	for range 2 { // the second answer comes from the cache
		v, err := a.Probe(context.Background())
		if err != nil || v != "9.9.9" {
			t.Fatalf("probe: %q %v", v, err)
		}
	}
	broken := writeScript(t, `echo "no such option" >&2; exit 2`)
	t.Setenv("PATH", broken)
	if _, err := New(Options{}).Probe(context.Background()); err == nil || !strings.Contains(err.Error(), "no such option") {
		t.Fatalf("broken: %v", err)
	}
	var _ agent.Prober = a
}

func TestProjectDirName(t *testing.T) {
	for in, want := range map[string]string{
		"/tmp/cc/exp/ws":           "-tmp-cc-exp-ws",
		"/tmp/cc/exp/w_s.x+y":      "-tmp-cc-exp-w-s-x-y",
		"/data/workspaces/01a2-ff": "-data-workspaces-01a2-ff",
	} {
		if got := projectDirName(in); got != want {
			t.Errorf("%s: %s, want %s", in, got, want)
		}
	}
}
