package gemini

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/agentd/agentd/agent"
	"github.com/agentd/agentd/internal/agent/agentcli"
	"github.com/agentd/agentd/profile"
)

// Name is the architecture name.
const Name = "gemini-cli"

// HomeDir is GEMINI_CLI_HOME, relative to the workspace: Gemini keeps its
// settings, memory file and chat sessions in HomeDir/.gemini. The server
// does not watch .agentd.
const HomeDir = ".agentd/gemini"

// Architecture runs `gemini --output-format stream-json` once per turn,
// the prompt on stdin, with `--session-id` on the first turn and
// `--resume` on the later ones so every turn sees the earlier ones. Gemini
// CLI has no permission channel in this mode: the profile's approvalMode
// and allowedTools decide what runs, and a tool that would need a
// confirmation fails at once instead of waiting. The zero value is ready
// to use.
type Architecture struct {
	// Command is the Gemini CLI (default "gemini").
	Command string
	// StopGrace is how long an interrupted process gets between SIGINT and
	// SIGKILL (default 3s).
	StopGrace time.Duration
}

func (a Architecture) command() string { return agentcli.Command(a.Command, "gemini") }

func (a Architecture) stopGrace() time.Duration { return agentcli.StopGrace(a.StopGrace) }

// Name implements agent.Architecture.
func (Architecture) Name() string { return Name }

// AcceptsImages: images are written into the workspace and referenced
// with @path in the prompt (agent.ImageAccepter).
func (Architecture) AcceptsImages() bool { return true }

// ParseVersion extracts the version from `gemini --version` output
// ("0.61.0"); "" when there is none.
func ParseVersion(out string) string { return agentcli.ParseVersion(out) }

// Probe implements agent.Prober: `gemini --version` on this host.
func (a Architecture) Probe(ctx context.Context) (string, error) {
	return agentcli.Probe(ctx, a.command())
}

// approvalArgs maps the profile's approvalMode and allowedTools to Gemini
// CLI flags. allowedTools are Gemini tool names, optionally with an
// argument pattern as the CLI takes them ("run_shell_command(git)").
func approvalArgs(p profile.Profile) ([]string, error) {
	mode := p.ApprovalMode
	switch mode {
	case "":
		mode = "default"
	case "default", "auto_edit", "yolo", "plan":
	default:
		return nil, fmt.Errorf("gemini-cli: unknown approvalMode %q (want default, auto_edit, yolo or plan)", mode)
	}
	args := []string{"--approval-mode", mode}
	if mode != "yolo" {
		for _, t := range p.AllowedTools {
			if t = strings.TrimSpace(t); t != "" {
				args = append(args, "--allowed-tools", t)
			}
		}
	}
	return args, nil
}

// settings is HomeDir/.gemini/settings.json: API-key auth (with
// GOOGLE_GEMINI_BASE_URL set and no selectedType, Gemini CLI 0.61 picks
// the gateway auth and exits), no telemetry, usage statistics or update
// checks, the profile's disallowed tools excluded and its MCP servers.
func settings(p profile.Profile) ([]byte, error) {
	s := map[string]any{
		"security":  map[string]any{"auth": map[string]any{"selectedType": "gemini-api-key"}},
		"privacy":   map[string]any{"usageStatisticsEnabled": false},
		"telemetry": map[string]any{"enabled": false},
		"general":   map[string]any{"enableAutoUpdate": false, "enableAutoUpdateNotification": false},
	}
	if len(p.DisallowedTools) > 0 {
		s["tools"] = map[string]any{"exclude": p.DisallowedTools}
	}
	if len(p.MCPServers) > 0 {
		names := make([]string, 0, len(p.MCPServers))
		for n := range p.MCPServers {
			names = append(names, n)
		}
		sort.Strings(names)
		servers := map[string]any{}
		for _, n := range names {
			m := p.MCPServers[n]
			c := map[string]any{}
			if m.URL != "" {
				c["httpUrl"] = m.URL
				if len(m.Headers) > 0 {
					c["headers"] = m.Headers
				}
			} else {
				c["command"] = m.Command
				if len(m.Args) > 0 {
					c["args"] = m.Args
				}
				if len(m.Env) > 0 {
					c["env"] = m.Env
				}
			}
			servers[n] = c
		}
		s["mcpServers"] = servers
	}
	return json.MarshalIndent(s, "", "  ")
}

// memory is the global GEMINI.md: the profile's system prompt and rules,
// which Gemini CLI adds to its context.
func memory(p profile.Profile) string {
	if s := agentcli.Instructions(p); s != "" {
		return s + "\n"
	}
	return ""
}

// Start implements agent.Architecture: it writes Gemini's settings (and
// memory file); the CLI itself runs per turn.
func (a Architecture) Start(ctx context.Context, h agent.Host) (agent.Runner, error) {
	prof := h.Profile()
	args, err := approvalArgs(prof)
	if err != nil {
		return nil, agent.Fail(agent.CodeInternal, "%v", err)
	}
	set, err := settings(prof)
	if err != nil {
		return nil, agent.Fail(agent.CodeInternal, "gemini-cli settings: %v", err)
	}
	env := h.Env()
	if err := env.WriteFile(ctx, HomeDir+"/.gemini/settings.json", set, 0o600); err != nil {
		return nil, agent.Fail(agent.CodeSandboxError, "gemini-cli: write settings: %v", err)
	}
	mem := memory(prof)
	if mem != "" {
		if err := env.WriteFile(ctx, HomeDir+"/.gemini/GEMINI.md", []byte(mem), 0o644); err != nil {
			return nil, agent.Fail(agent.CodeSandboxError, "gemini-cli: write GEMINI.md: %v", err)
		}
	} else if err := env.Remove(ctx, HomeDir+"/.gemini/GEMINI.md"); err != nil && !isNotExist(err) {
		return nil, agent.Fail(agent.CodeSandboxError, "gemini-cli: remove stale GEMINI.md: %v", err)
	}
	return newRunner(a, h, args), nil
}
