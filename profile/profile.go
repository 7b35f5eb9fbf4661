// Package profile defines agent profiles: what an agent is told, may use and
// finds in its workspace. Profiles are loaded from a folder of YAML or JSON
// files (one profile a file), from the store, and from the built-in default.
package profile

// Profile is an agent profile. Field names are the same in YAML and JSON.
type Profile struct {
	ID           string `json:"id" yaml:"id"`
	Name         string `json:"name" yaml:"name"`
	Description  string `json:"description,omitempty" yaml:"description,omitempty"`
	SystemPrompt string `json:"systemPrompt,omitempty" yaml:"systemPrompt,omitempty"`
	// Model is the default model; sessionOptions.model overrides it.
	Model string `json:"model,omitempty" yaml:"model,omitempty"`
	// Architecture is the default architecture for sessions of this profile
	// when the create request names none.
	Architecture string `json:"architecture,omitempty" yaml:"architecture,omitempty"`

	Skills    []Skill    `json:"skills,omitempty" yaml:"skills,omitempty"`
	Subagents []Subagent `json:"subagents,omitempty" yaml:"subagents,omitempty"`
	Commands  []Command  `json:"commands,omitempty" yaml:"commands,omitempty"`
	Rules     []Rule     `json:"rules,omitempty" yaml:"rules,omitempty"`

	MCPServers map[string]MCPServer `json:"mcpServers,omitempty" yaml:"mcpServers,omitempty"`

	DefaultWorkspaceFiles []File            `json:"defaultWorkspaceFiles,omitempty" yaml:"defaultWorkspaceFiles,omitempty"`
	EnvironmentVariables  map[string]string `json:"environmentVariables,omitempty" yaml:"environmentVariables,omitempty"`

	// AllowedTools are answered "allow" without asking a client;
	// DisallowedTools are never offered to (or are denied for) the agent.
	// Entries use the agent's tool names, with Claude Code's patterns such as
	// "Bash(git:*)" passed through to the CLI.
	AllowedTools    []string `json:"allowedTools,omitempty" yaml:"allowedTools,omitempty"`
	DisallowedTools []string `json:"disallowedTools,omitempty" yaml:"disallowedTools,omitempty"`

	// ApprovalMode applies to agents without a permission channel (Gemini
	// CLI): "default", "auto_edit" or "yolo".
	ApprovalMode string `json:"approvalMode,omitempty" yaml:"approvalMode,omitempty"`

	// Sandbox overrides the server's sandbox settings for this profile's
	// sessions (nil or zero fields: the server's).
	Sandbox *Sandbox `json:"sandbox,omitempty" yaml:"sandbox,omitempty"`
}

// Sandbox is a profile's sandbox settings.
type Sandbox struct {
	// Image is the container image of the docker backend (built with
	// scripts/sandbox-image.sh or FROM it); other backends ignore it.
	Image string `json:"image,omitempty" yaml:"image,omitempty"`
	// MemoryBytes, Pids (threads included) and CPUPercent (100 = one
	// core) bound each environment of the executor, bwrap and docker
	// backends, in place of the server's --sandbox-* limits.
	MemoryBytes int64 `json:"memoryBytes,omitempty" yaml:"memoryBytes,omitempty"`
	Pids        int64 `json:"pids,omitempty" yaml:"pids,omitempty"`
	CPUPercent  int   `json:"cpuPercent,omitempty" yaml:"cpuPercent,omitempty"`
}

// Skill is a Claude Code style skill: a folder with a SKILL.md and optional
// extra files.
type Skill struct {
	Name        string            `json:"name" yaml:"name"`
	Description string            `json:"description,omitempty" yaml:"description,omitempty"`
	Content     string            `json:"content" yaml:"content"`
	Files       map[string]string `json:"files,omitempty" yaml:"files,omitempty"`
}

// Subagent is a named subagent definition.
type Subagent struct {
	Name        string   `json:"name" yaml:"name"`
	Description string   `json:"description,omitempty" yaml:"description,omitempty"`
	Prompt      string   `json:"prompt" yaml:"prompt"`
	Tools       []string `json:"tools,omitempty" yaml:"tools,omitempty"`
	Model       string   `json:"model,omitempty" yaml:"model,omitempty"`
}

// Command is a slash command.
type Command struct {
	Name        string `json:"name" yaml:"name"`
	Description string `json:"description,omitempty" yaml:"description,omitempty"`
	Content     string `json:"content" yaml:"content"`
}

// Rule is a standing instruction file (Claude Code's .claude/rules/*.md).
type Rule struct {
	Name    string `json:"name" yaml:"name"`
	Content string `json:"content" yaml:"content"`
}

// MCPServer is an MCP server, stdio (Command/Args/Env) or http (URL/Headers).
type MCPServer struct {
	Type    string            `json:"type" yaml:"type"` // "stdio" or "http"
	Command string            `json:"command,omitempty" yaml:"command,omitempty"`
	Args    []string          `json:"args,omitempty" yaml:"args,omitempty"`
	Env     map[string]string `json:"env,omitempty" yaml:"env,omitempty"`
	URL     string            `json:"url,omitempty" yaml:"url,omitempty"`
	Headers map[string]string `json:"headers,omitempty" yaml:"headers,omitempty"`
}

// File is a file written into a new session's workspace.
type File struct {
	Path    string `json:"path" yaml:"path"`
	Content string `json:"content" yaml:"content"`
}

// Summary is what GET /api/agent-profiles lists.
type Summary struct {
	ID          string `json:"id"`
	Name        string `json:"name"`
	Description string `json:"description"`
}

// Summary returns the listing form of p.
func (p Profile) Summary() Summary {
	return Summary{ID: p.ID, Name: p.Name, Description: p.Description}
}

// DefaultID is the id of the built-in profile.
const DefaultID = "default"

// Default is the built-in profile every server has.
func Default() Profile {
	return Profile{
		ID:          DefaultID,
		Name:        "Default",
		Description: "Built-in profile: no system prompt additions, no extra tools, the agent's defaults.",
	}
}
