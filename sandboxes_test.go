package agentd_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/agentd/agentd"
	"github.com/agentd/agentd/agent"
	"github.com/agentd/agentd/internal/agentdtest"
	"github.com/agentd/agentd/sandbox"
)

// GET /api/sandboxes for the built-in backends: the executor sandbox with
// a model proxy is the default, survives restarts and protects the key;
// local protects nothing. Every backend lists every threat once.
func TestSandboxesListed(t *testing.T) {
	srv := agentdtest.Start(t, agentd.Config{Sandbox: "executor", SandboxLimitMode: "off",
		Env: map[string]string{"ANTHROPIC_API_KEY": "sk-ant-test-not-a-real-key"}})
	sbs, err := srv.Client.Sandboxes(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(sbs) != 2 || sbs[0].Name != "executor" || sbs[1].Name != "local" {
		t.Fatalf("sandboxes %+v", sbs)
	}
	for _, sb := range sbs {
		seen := map[string]bool{}
		protected := map[string]bool{}
		for _, p := range sb.Protections {
			if seen[p.Threat] || p.Detail == "" {
				t.Errorf("%s: threat %+v listed twice or without detail", sb.Name, p)
			}
			seen[p.Threat] = true
			protected[p.Threat] = p.Protected
		}
		for _, th := range sandbox.Threats {
			if !seen[string(th)] {
				t.Errorf("%s: threat %s missing", sb.Name, th)
			}
		}
		switch sb.Name {
		case "executor":
			if !sb.Default || !sb.SurvivesRestart || !protected["providerKey"] || protected["network"] || protected["exhaustion"] {
				t.Errorf("executor %+v", sb)
			}
		case "local":
			if sb.Default || sb.SurvivesRestart || protected["otherWorkspaces"] || protected["exhaustion"] || !protected["providerKey"] {
				t.Errorf("local %+v", sb)
			}
		}
		if sb.Pools == nil {
			t.Errorf("%s: pools is null, want []", sb.Name)
		}
	}
}

// An embedding program's architecture may not take a built-in's name: New
// refuses it (and releases the data folder, so the next New may start).
func TestArchitectureNameClash(t *testing.T) {
	dir := t.TempDir()
	_, err := agentd.New(context.Background(), agentd.Config{
		DataDir: dir, DisableUI: true, Env: map[string]string{},
		Architectures: []agent.Architecture{clash{}},
	})
	if err == nil || !strings.Contains(err.Error(), `"claude-sdk"`) {
		t.Fatalf("New with an architecture named claude-sdk: %v", err)
	}
	srv, err := agentd.New(context.Background(), agentd.Config{DataDir: dir, DisableUI: true, Env: map[string]string{}})
	if err != nil {
		t.Fatalf("New after a refused one: %v", err)
	}
	if err := srv.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// clash is an architecture named like a built-in's alias.
type clash struct{}

func (clash) Name() string { return "claude-sdk" }
func (clash) Start(context.Context, agent.Host) (agent.Runner, error) {
	return nil, errors.New("never started")
}
