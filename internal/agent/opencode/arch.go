package opencode

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
const Name = "opencode"

// HomeDir holds OpenCode's config, data, cache and state (the XDG folders
// the runner points it at), relative to the workspace. The server does not
// watch .agentd.
const HomeDir = ".agentd/opencode"

// DefaultModel is the model asked of an OpenAI-compatible endpoint
// (OPENAI_BASE_URL) when neither the session nor the profile names one.
const DefaultModel = "gpt-5.5"

// Architecture runs `opencode serve` inside the session's environment (one
// long-lived server per active session, on a loopback port it picks,
// protected by a random password) and drives it over its HTTP API: one
// OpenCode session per agentd session, prompt_async per turn, the /event
// SSE stream converted to events, permission.asked answered through the
// permission API, abort for interrupts. The zero value is ready to use.
type Architecture struct {
	// Command is the OpenCode CLI (default "opencode").
	Command string
	// StopGrace is how long the server gets between SIGINT and SIGKILL
	// (default 3s).
	StopGrace time.Duration
	// StartTimeout bounds the server's start, up to its event stream
	// being connected (default 2m).
	StartTimeout time.Duration
}

func (a Architecture) command() string { return agentcli.Command(a.Command, "opencode") }

func (a Architecture) stopGrace() time.Duration { return agentcli.StopGrace(a.StopGrace) }

func (a Architecture) startTimeout() time.Duration { return agentcli.StartTimeout(a.StartTimeout) }

// Name implements agent.Architecture.
func (Architecture) Name() string { return Name }

// AcceptsImages: a prompt's file parts carry images as data: URLs
// (agent.ImageAccepter).
func (Architecture) AcceptsImages() bool { return true }

// ParseVersion extracts the version from `opencode --version` output
// ("1.18.33"); "" when there is none.
func ParseVersion(out string) string { return agentcli.ParseVersion(out) }

// Probe implements agent.Prober: `opencode --version` on this host.
func (a Architecture) Probe(ctx context.Context) (string, error) {
	return agentcli.Probe(ctx, a.command())
}

// Start implements agent.Architecture: it writes OpenCode's config; the
// server starts with the first turn, so a missing or broken CLI fails that
// turn (query:failed) rather than the environment.
func (a Architecture) Start(ctx context.Context, h agent.Host) (agent.Runner, error) {
	prof := h.Profile()
	perm, err := permissions(prof)
	if err != nil {
		return nil, agent.Fail(agent.CodeInternal, "%v", err)
	}
	baseURL, err := agentcli.ReadEnv(ctx, h.Env(), "OPENAI_BASE_URL")
	if err != nil {
		return nil, agent.Fail(agent.CodeSandboxError, "opencode: read the environment: %v", err)
	}
	cfg := config(configParams{BaseURL: baseURL, Model: h.Options().Model, Permission: perm, MCP: prof.MCPServers})
	data, err := json.MarshalIndent(cfg, "", "  ")
	if err != nil {
		return nil, agent.Fail(agent.CodeInternal, "opencode config: %v", err)
	}
	if err := h.Env().WriteFile(ctx, HomeDir+"/config/opencode/opencode.json", data, 0o600); err != nil {
		return nil, agent.Fail(agent.CodeSandboxError, "opencode: write config: %v", err)
	}
	return newRunner(a, h), nil
}

// permissionKey maps a tool name as profiles write it to OpenCode's
// permission key (edit covers OpenCode's write, edit, patch and multiedit
// tools).
func permissionKey(tool string) string {
	t := strings.ToLower(strings.TrimSpace(tool))
	switch t {
	case "write", "patch", "multiedit", "apply_patch":
		return "edit"
	}
	return t
}

// permissions is OpenCode's permission config for a profile. Tools with
// side effects (bash, edit, webfetch) ask, and the question goes to
// agentd's permission API, unless the approvalMode or the profile's
// allowed/disallowed tools decide; the question tool is denied (there is
// nobody to answer it in a headless run).
func permissions(p profile.Profile) (map[string]any, error) {
	perm := map[string]any{}
	set := func(v string, keys ...string) {
		for _, k := range keys {
			perm[k] = v
		}
	}
	switch p.ApprovalMode {
	case "", "default":
		set("ask", "bash", "edit", "webfetch", "external_directory", "doom_loop")
	case "auto_edit":
		set("ask", "bash", "webfetch", "external_directory", "doom_loop")
		set("allow", "edit")
	case "yolo":
		set("allow", "bash", "edit", "webfetch", "external_directory", "doom_loop")
	case "plan":
		set("deny", "bash", "edit")
		set("ask", "webfetch", "external_directory", "doom_loop")
	default:
		return nil, fmt.Errorf("opencode: unknown approvalMode %q (want default, auto_edit, yolo or plan)", p.ApprovalMode)
	}
	set("deny", "question")
	apply := func(list []string, action string) {
		for _, t := range list {
			name, arg, hasArg := strings.Cut(t, "(")
			key := permissionKey(name)
			if key == "" {
				continue
			}
			if !hasArg {
				perm[key] = action
				continue
			}
			// "bash(git *)": a pattern rule, the rest as before.
			arg = strings.TrimSuffix(arg, ")")
			rules, ok := perm[key].(map[string]string)
			if !ok {
				rules = map[string]string{}
				if prev, ok := perm[key].(string); ok {
					rules["*"] = prev
				}
				perm[key] = rules
			}
			rules[arg] = action
		}
	}
	apply(p.AllowedTools, "allow")
	apply(p.DisallowedTools, "deny")
	return perm, nil
}

type configParams struct {
	BaseURL    string
	Model      string
	Permission map[string]any
	MCP        map[string]profile.MCPServer
}

// config is the global opencode.json (XDG_CONFIG_HOME/opencode): an
// OpenAI-compatible provider "agentd" for the environment's
// OPENAI_BASE_URL, whose key OpenCode reads from OPENAI_API_KEY itself
// ({env:…}, never written down), the permissions and MCP servers; no
// sharing, no update checks. A model with a provider prefix
// ("anthropic/…") is used as is.
func config(p configParams) map[string]any {
	c := map[string]any{
		"$schema":    "https://opencode.ai/config.json",
		"autoupdate": false,
		"share":      "disabled",
		"permission": p.Permission,
	}
	model := p.Model
	switch {
	case strings.Contains(model, "/"):
		c["model"] = model
	case p.BaseURL != "":
		if model == "" {
			model = DefaultModel
		}
		c["provider"] = map[string]any{"agentd": map[string]any{
			"npm":     "@ai-sdk/openai-compatible",
			"name":    "agentd",
			"options": map[string]any{"baseURL": p.BaseURL, "apiKey": "{env:OPENAI_API_KEY}"},
			// Images (a user's): the model takes them, so OpenCode sends
			// them on instead of refusing them.
			"models": map[string]any{model: map[string]any{"name": model, "tool_call": true, "attachment": true,
				"modalities": map[string]any{"input": []string{"text", "image"}, "output": []string{"text"}}}},
		}}
		c["model"] = "agentd/" + model
		c["small_model"] = "agentd/" + model
	case model != "":
		c["model"] = "openai/" + model
	}
	if len(p.MCP) > 0 {
		names := make([]string, 0, len(p.MCP))
		for n := range p.MCP {
			names = append(names, n)
		}
		sort.Strings(names)
		mcp := map[string]any{}
		for _, n := range names {
			s := p.MCP[n]
			if s.URL != "" {
				m := map[string]any{"type": "remote", "url": s.URL}
				if len(s.Headers) > 0 {
					m["headers"] = s.Headers
				}
				mcp[n] = m
				continue
			}
			m := map[string]any{"type": "local", "command": append([]string{s.Command}, s.Args...)}
			if len(s.Env) > 0 {
				m["environment"] = s.Env
			}
			mcp[n] = m
		}
		c["mcp"] = mcp
	}
	return c
}
