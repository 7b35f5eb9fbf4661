package agentd

import (
	"github.com/agentd/agentd/internal/agent"
	"github.com/agentd/agentd/internal/agent/opencode"
)

func init() {
	builtins = append(builtins, func(r *agent.Registry) { r.Register(opencode.Architecture{}) })
}
