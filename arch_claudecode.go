package agentd

import (
	"github.com/agentd/agentd/internal/agent"
	"github.com/agentd/agentd/internal/agent/claudecode"
)

func init() {
	builtins = append(builtins, func(r *agent.Registry) {
		r.Register(claudecode.New(claudecode.Options{}), "claude-agent-sdk", "claude-sdk")
	})
}
