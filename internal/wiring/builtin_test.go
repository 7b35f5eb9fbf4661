package wiring

import (
	"context"
	"slices"
	"strings"
	"testing"

	"go.uber.org/goleak"

	"github.com/agentd/agentd/agent"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestClaudeCodeIsRegisteredWithItsAliases(t *testing.T) {
	r, err := Registry(nil, true)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"claude-code", "claude-agent-sdk", "claude-sdk"} {
		a, ok := r.Lookup(name)
		if !ok || a.Name() != "claude-code" {
			t.Fatalf("%s: %v %v", name, a, ok)
		}
		if _, ok := a.(agent.Prober); !ok {
			t.Fatalf("%s: not a Prober", name)
		}
	}
	want := []string{"claude-code", "codex", "gemini-cli", "opencode", "shell"}
	if got := r.Names(); !slices.Equal(got, want) {
		t.Fatalf("names %v, want %v", got, want)
	}
}

type named string

func (n named) Name() string { return string(n) }
func (named) Start(context.Context, agent.Host) (agent.Runner, error) {
	return nil, nil
}

func TestRegistryTakesExtraArchitectures(t *testing.T) {
	r, err := Registry([]agent.Architecture{named("echo")}, true)
	if err != nil {
		t.Fatal(err)
	}
	if a, ok := r.Lookup("echo"); !ok || a.Name() != "echo" {
		t.Fatalf("echo: %v %v", a, ok)
	}
	for _, bad := range []agent.Architecture{named("shell"), named("claude-sdk"), named(""), nil} {
		if _, err := Registry([]agent.Architecture{bad}, true); err == nil {
			t.Errorf("%v: no error", bad)
		}
	}
	if _, err := Registry([]agent.Architecture{named("x"), named("x")}, true); err == nil {
		t.Error("x twice: no error")
	}
}

func TestBuiltinSandboxes(t *testing.T) {
	for name, host := range map[string]bool{"local": true, "executor": true, "bwrap": true, "docker": false, "kubernetes": false, "mine": false} {
		if hostSandbox(name) != host {
			t.Errorf("hostSandbox(%q) = %v", name, !host)
		}
	}
	_, err := (&Server{}).builtinSandbox("nope", t.TempDir())
	if err == nil || !strings.Contains(err.Error(), `unknown sandbox "nope" (local, executor, bwrap, docker, kubernetes)`) {
		t.Fatalf("unknown sandbox: %v", err)
	}
}
