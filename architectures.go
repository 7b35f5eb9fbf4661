package agentd

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
