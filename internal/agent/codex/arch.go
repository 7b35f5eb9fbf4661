package codex

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/agentd/agentd/agent"
	"github.com/agentd/agentd/internal/agent/agentcli"
	"github.com/agentd/agentd/profile"
)

// Name is the architecture name.
const Name = "codex"

// HomeDir is where the runner keeps Codex's state (CODEX_HOME: config.toml,
// the thread rollouts), relative to the workspace. The server does not
// watch .agentd, so Codex's own files never show up as workspace changes.
const HomeDir = ".agentd/codex"

// Architecture drives `codex app-server` (JSON-RPC 2.0 over stdio): one
// long-lived process per active session, one Codex thread per session
// (resumed by id when the process or the server restarts), one Codex turn
// per agentd turn. The zero value is ready to use.
type Architecture struct {
	// Command is the Codex CLI (default "codex", looked up in the
	// environment's PATH).
	Command string
	// StopGrace is how long an interrupted or closed process gets between
	// SIGINT and SIGKILL (default 3s).
	StopGrace time.Duration
	// StartTimeout bounds the handshake (initialize and thread start or
	// resume) of a new process (default 2m: a cold npm-installed CLI can
	// take a while on a loaded machine).
	StartTimeout time.Duration
}

func (a Architecture) command() string { return agentcli.Command(a.Command, "codex") }

func (a Architecture) stopGrace() time.Duration { return agentcli.StopGrace(a.StopGrace) }

func (a Architecture) startTimeout() time.Duration { return agentcli.StartTimeout(a.StartTimeout) }

// Name implements agent.Architecture.
func (Architecture) Name() string { return Name }

// AcceptsImages: the app-server's turn/start takes images as data: URLs
// (agent.ImageAccepter).
func (Architecture) AcceptsImages() bool { return true }

// ParseVersion extracts the version from `codex --version` output
// ("codex-cli 0.169.0"); "" when there is none.
func ParseVersion(out string) string { return agentcli.ParseVersion(out) }

// Probe implements agent.Prober: it runs `codex --version` on this host
// (the local sandbox runs agents with the server's PATH).
func (a Architecture) Probe(ctx context.Context) (string, error) {
	return agentcli.Probe(ctx, a.command())
}

// approval is how a profile's approvalMode maps onto Codex.
type approval struct {
	policy    string // thread approvalPolicy
	sandbox   string // thread sandbox mode
	autoPatch bool   // answer file-change approvals "accept" without asking
}

// approvalFor maps profile.ApprovalMode. Codex's own sandbox is off
// (danger-full-access) except in plan mode: the agentd sandbox is the
// isolation, and Codex's bubblewrap does not work inside most containers.
func approvalFor(mode string) (approval, error) {
	switch mode {
	case "", "default":
		// Ask (through the permission API) for everything Codex does not
		// know to be read-only.
		return approval{policy: "untrusted", sandbox: "danger-full-access"}, nil
	case "auto_edit":
		return approval{policy: "untrusted", sandbox: "danger-full-access", autoPatch: true}, nil
	case "yolo":
		return approval{policy: "never", sandbox: "danger-full-access"}, nil
	case "plan":
		return approval{policy: "never", sandbox: "read-only"}, nil
	}
	return approval{}, fmt.Errorf("codex: unknown approvalMode %q (want default, auto_edit, yolo or plan)", mode)
}

// Start implements agent.Architecture. It writes CODEX_HOME/config.toml;
// the app-server process starts with the first turn, so a missing or
// broken CLI fails that turn (query:failed) rather than the environment.
func (a Architecture) Start(ctx context.Context, h agent.Host) (agent.Runner, error) {
	prof := h.Profile()
	appr, err := approvalFor(prof.ApprovalMode)
	if err != nil {
		return nil, agent.Fail(agent.CodeInternal, "%v", err)
	}
	baseURL, err := agentcli.ReadEnv(ctx, h.Env(), "OPENAI_BASE_URL")
	if err != nil {
		return nil, agent.Fail(agent.CodeSandboxError, "codex: read the environment: %v", err)
	}
	cfg := renderConfig(configParams{BaseURL: baseURL, Model: h.Options().Model, MCP: prof.MCPServers})
	if err := h.Env().WriteFile(ctx, HomeDir+"/config.toml", []byte(cfg), 0o600); err != nil {
		return nil, agent.Fail(agent.CodeSandboxError, "codex: write config: %v", err)
	}
	return newRunner(a, h, appr), nil
}

// DefaultBaseURL is the Responses endpoint used when the environment sets
// no OPENAI_BASE_URL.
const DefaultBaseURL = "https://api.openai.com/v1"

type configParams struct {
	BaseURL string
	Model   string
	MCP     map[string]profile.MCPServer
}

// renderConfig writes CODEX_HOME/config.toml: a model provider "agentd"
// for the environment's OpenAI endpoint (Codex ignores OPENAI_BASE_URL,
// and speaks only the Responses API) whose key Codex reads from
// OPENAI_API_KEY itself, so the key is never written down or put in argv;
// the multi-agent tools; the profile's MCP servers.
func renderConfig(p configParams) string {
	var b strings.Builder
	b.WriteString("# Written by agentd at every start of the session's environment; edits are lost.\n")
	if p.Model != "" {
		fmt.Fprintf(&b, "model = %s\n", tomlString(p.Model))
	}
	b.WriteString("model_provider = \"agentd\"\n")
	b.WriteString("check_for_update_on_startup = false\n\n")
	base := p.BaseURL
	if base == "" {
		base = DefaultBaseURL
	}
	b.WriteString("[model_providers.agentd]\n")
	b.WriteString("name = \"agentd\"\n")
	fmt.Fprintf(&b, "base_url = %s\n", tomlString(base))
	b.WriteString("env_key = \"OPENAI_API_KEY\"\n")
	b.WriteString("wire_api = \"responses\"\n")
	b.WriteString("\n[analytics]\nenabled = false\n")
	// Codex's multi-agent tools (spawn_agent, wait_agent, …) are off by
	// default for most models; agentd maps subagents for every
	// architecture, so they are always on. Codex's own prompt tells the
	// model to spawn only when the user asks for delegation.
	b.WriteString("\n[features]\nmulti_agent_v2 = true\n")
	names := make([]string, 0, len(p.MCP))
	for n := range p.MCP {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		s := p.MCP[n]
		fmt.Fprintf(&b, "\n[mcp_servers.%s]\n", tomlString(n))
		if s.URL != "" {
			fmt.Fprintf(&b, "url = %s\n", tomlString(s.URL))
			if len(s.Headers) > 0 {
				fmt.Fprintf(&b, "http_headers = %s\n", tomlTable(s.Headers))
			}
			continue
		}
		fmt.Fprintf(&b, "command = %s\n", tomlString(s.Command))
		if len(s.Args) > 0 {
			parts := make([]string, len(s.Args))
			for i, a := range s.Args {
				parts[i] = tomlString(a)
			}
			fmt.Fprintf(&b, "args = [%s]\n", strings.Join(parts, ", "))
		}
		if len(s.Env) > 0 {
			fmt.Fprintf(&b, "env = %s\n", tomlTable(s.Env))
		}
	}
	return b.String()
}

// tomlString quotes s as a TOML basic string.
func tomlString(s string) string {
	var b strings.Builder
	b.WriteByte('"')
	for _, r := range s {
		switch {
		case r == '"':
			b.WriteString(`\"`)
		case r == '\\':
			b.WriteString(`\\`)
		case r == '\n':
			b.WriteString(`\n`)
		case r == '\r':
			b.WriteString(`\r`)
		case r == '\t':
			b.WriteString(`\t`)
		case r < 0x20 || r == 0x7f:
			fmt.Fprintf(&b, `\u%04X`, r)
		default:
			b.WriteRune(r)
		}
	}
	b.WriteByte('"')
	return b.String()
}

func tomlTable(m map[string]string) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = tomlString(k) + " = " + tomlString(m[k])
	}
	return "{ " + strings.Join(parts, ", ") + " }"
}
