package agentd

import "github.com/agentd/agentd/internal/agent"

// builtins register the architectures that drive external agent CLIs; each
// adds itself from its own arch_*.go file.
var builtins []func(*agent.Registry)

func registerAgentArchitectures(r *agent.Registry) {
	for _, register := range builtins {
		register(r)
	}
}

// AgentCLI names an agent CLI version agentd is tested with.
type AgentCLI struct {
	Architecture string
	Package      string
	Version      string
	Command      string
}

// SupportedAgents are the agent CLI versions the end-to-end tests run
// (tools/agents/package.json pins them).
var SupportedAgents = []AgentCLI{
	{"claude-code", "@anthropic-ai/claude-code", "2.1.197", "claude"},
	{"codex", "@openai/codex", "0.169.0", "codex"},
	{"gemini-cli", "@google/gemini-cli", "0.61.0", "gemini"},
	{"opencode", "opencode-ai", "1.18.33", "opencode"},
}
