package agentd

import (
	"github.com/agentd/agentd/internal/agent"
	"github.com/agentd/agentd/internal/agent/codex"
)

func init() {
	builtins = append(builtins, func(r *agent.Registry) { r.Register(codex.Architecture{}) })
}
