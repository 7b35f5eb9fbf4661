package agentd_test

import (
	"testing"

	"github.com/agentd/agentd"
	"github.com/agentd/agentd/internal/agent"
)

func TestClaudeCodeIsRegisteredWithItsAliases(t *testing.T) {
	r := agent.NewRegistry()
	agentd.RegisterArchitectures(r)
	for _, name := range []string{"claude-code", "claude-agent-sdk", "claude-sdk"} {
		a, ok := r.Lookup(name)
		if !ok || a.Name() != "claude-code" {
			t.Fatalf("%s: %v %v", name, a, ok)
		}
		if _, ok := a.(agent.Prober); !ok {
			t.Fatalf("%s: not a Prober", name)
		}
	}
}
