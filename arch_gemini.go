package agentd

import (
	"github.com/agentd/agentd/internal/agent"
	"github.com/agentd/agentd/internal/agent/gemini"
)

func init() {
	builtins = append(builtins, func(r *agent.Registry) { r.Register(gemini.Architecture{}) })
}
