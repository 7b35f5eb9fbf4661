package opencode

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os/exec"
	"regexp"
	"sort"
	"strings"
	"time"

	"github.com/agentd/agentd/internal/agent"
	"github.com/agentd/agentd/internal/sandbox"
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

func (a Architecture) command() string {
	if a.Command != "" {
		return a.Command
	}
	return "opencode"
}

func (a Architecture) stopGrace() time.Duration {
	if a.StopGrace > 0 {
		return a.StopGrace
	}
	return 3 * time.Second
}

func (a Architecture) startTimeout() time.Duration {
	if a.StartTimeout > 0 {
		return a.StartTimeout
	}
	return 2 * time.Minute
}

// Name implements agent.Architecture.
func (Architecture) Name() string { return Name }

var versionRE = regexp.MustCompile(`\d+\.\d+\.\d+[0-9A-Za-z.+-]*`)

// ParseVersion extracts the version from `opencode --version` output
// ("1.18.33"); "" when there is none.
func ParseVersion(out string) string { return versionRE.FindString(out) }

// Probe implements agent.Prober: `opencode --version` on this host.
func (a Architecture) Probe(ctx context.Context) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, a.command(), "--version").Output()
	if err != nil {
		if errors.Is(err, exec.ErrNotFound) {
			return "", fmt.Errorf("%s is not installed or not on PATH", a.command())
		}
		return "", fmt.Errorf("%s --version: %w", a.command(), err)
	}
	v := ParseVersion(string(out))
	if v == "" {
		return "", fmt.Errorf("%s --version printed no version: %q", a.command(), strings.TrimSpace(string(out)))
	}
	return v, nil
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
	baseURL, err := readEnv(ctx, h.Env(), "OPENAI_BASE_URL")
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

// readEnv returns the value of an environment variable as processes in env
// see it ("" when unset): the runner cannot read the sandbox's environment
// otherwise.
func readEnv(ctx context.Context, env sandbox.Environment, name string) (string, error) {
	if !envNameRE.MatchString(name) {
		return "", fmt.Errorf("bad variable name %q", name)
	}
	p, err := env.Exec(ctx, sandbox.Cmd{Argv: []string{"sh", "-c", `printf '%s' "${` + name + `-}"`}})
	if err != nil {
		return "", err
	}
	var out []byte
	for c := range p.Output() {
		if c.Stream == sandbox.Stdout && len(out) < 64<<10 {
			out = append(out, c.Data...)
		}
	}
	st, err := p.Wait(context.WithoutCancel(ctx))
	if err != nil {
		return "", err
	}
	if !st.Success() {
		return "", fmt.Errorf("sh exited with %d", st.Code)
	}
	return string(out), nil
}

var envNameRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

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
			"models":  map[string]any{model: map[string]any{"name": model, "tool_call": true}},
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

// instructions joins the profile's system prompt and rules; the runner
// sends them as each prompt's system text.
func instructions(p profile.Profile) string {
	parts := []string{}
	if s := strings.TrimSpace(p.SystemPrompt); s != "" {
		parts = append(parts, s)
	}
	for _, r := range p.Rules {
		if c := strings.TrimSpace(r.Content); c != "" {
			parts = append(parts, "# "+r.Name+"\n\n"+c)
		}
	}
	return strings.Join(parts, "\n\n")
}
