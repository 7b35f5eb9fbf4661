// Package claudecode drives Claude Code: the claude-code architecture
// (architecture.go), the runner and its CLI process (runner.go, process.go,
// pipe.go), the control protocol (control.go), the CLI's config folder
// (profile.go), live subagent transcripts (subagents_live.go), and turns
// that survive a server restart (restart.go, resume.go). What the CLI
// writes is turned into events by package claudeconv.
package claudecode

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"strings"
	"sync"
	"time"

	"github.com/agentd/agentd/agent"
	"github.com/agentd/agentd/sandbox"
)

// Name is the architecture's canonical name.
const Name = "claude-code"

// Options tune the claude-code architecture. Zero values take the defaults
// noted on each field.
type Options struct {
	// Command is the CLI to run (default "claude", looked up on the
	// sandbox's PATH).
	Command string
	// InterruptTimeout is how long an interrupted turn may take to end after
	// the control protocol's interrupt before the CLI gets SIGINT
	// (default 3s).
	InterruptTimeout time.Duration
	// KillTimeout is how long after SIGINT the CLI's process group is
	// killed (default 2s).
	KillTimeout time.Duration
	// CloseTimeout is how long Close waits for the CLI to exit after its
	// stdin is closed (it saves its transcript then) before stopping it
	// (default 5s).
	CloseTimeout time.Duration
	// FlushTimeout bounds the wait for Claude Code's buffered transcript
	// writes (about every 100 ms) when agentd reads a transcript file
	// (default 2s).
	FlushTimeout time.Duration
	// SubagentPoll is how often a running subagent's transcript is read
	// (default 100ms).
	SubagentPoll time.Duration
	// MaxBadLines is how many consecutive stdout lines that are not
	// stream-json the CLI may print before the turn fails with
	// AGENT_PROTOCOL (default 100). Each bad line is also logged.
	MaxBadLines int
	// ExtraArgs are appended to every command line.
	ExtraArgs []string
}

func (o Options) withDefaults() Options {
	if o.Command == "" {
		o.Command = "claude"
	}
	if o.InterruptTimeout <= 0 {
		o.InterruptTimeout = 3 * time.Second
	}
	if o.KillTimeout <= 0 {
		o.KillTimeout = 2 * time.Second
	}
	if o.CloseTimeout <= 0 {
		o.CloseTimeout = 5 * time.Second
	}
	if o.FlushTimeout <= 0 {
		o.FlushTimeout = 2 * time.Second
	}
	if o.SubagentPoll <= 0 {
		o.SubagentPoll = 100 * time.Millisecond
	}
	if o.MaxBadLines <= 0 {
		o.MaxBadLines = 100
	}
	return o
}

// Architecture is the claude-code architecture: one long-lived Claude Code
// CLI per active session, spoken to in stream-json with the control
// protocol (see docs/claude-code.md). It is safe for concurrent use.
type Architecture struct {
	opts Options

	probeMu  sync.Mutex // guards probeKey, probeVer
	probeKey string
	probeVer string
}

var (
	_ agent.Architecture = (*Architecture)(nil)
	_ agent.Prober       = (*Architecture)(nil)
)

// New returns the architecture.
func New(opts Options) *Architecture {
	return &Architecture{opts: opts.withDefaults()}
}

// Name implements agent.Architecture.
func (a *Architecture) Name() string { return Name }

// AcceptsImages: Claude Code takes image blocks in a stream-json user
// message (agent.ImageAccepter).
func (a *Architecture) AcceptsImages() bool { return true }

// Start implements agent.Architecture: it writes the profile's files under
// the session's Claude config folder. The CLI itself starts with the first
// turn (and again, resuming, after it exited).
func (a *Architecture) Start(ctx context.Context, h agent.Host) (agent.Runner, error) {
	m, err := materialize(h.Profile(), h.Env().WorkDir())
	if err != nil {
		return nil, agent.Fail(agent.CodeInternal, "agent profile %q: %v", h.Profile().ID, err)
	}
	for _, p := range m.clean {
		if err := h.Env().Remove(ctx, p); err != nil && !errors.Is(err, sandbox.ErrNotFound) && !errors.Is(err, fs.ErrNotExist) {
			return nil, agent.Fail(agent.CodeSandboxError, "clear Claude Code configuration: %v", err)
		}
	}
	if err := h.Env().WriteFiles(ctx, m.files); err != nil {
		return nil, agent.Fail(agent.CodeSandboxError, "write Claude Code configuration: %v", err)
	}
	return newRunner(a.opts, h, m), nil
}

// Probe implements agent.Prober: `claude --version` on this server's PATH.
// The answer is cached for as long as the binary found stays the same file.
func (a *Architecture) Probe(ctx context.Context) (string, error) {
	bin, err := exec.LookPath(a.opts.Command)
	if err != nil {
		return "", agent.NotInstalled(a.opts.Command)
	}
	fi, err := os.Stat(bin)
	if err != nil {
		return "", fmt.Errorf("%s: %w", bin, err)
	}
	key := fmt.Sprintf("%s|%d|%d", bin, fi.Size(), fi.ModTime().UnixNano())
	a.probeMu.Lock()
	if a.probeKey == key {
		v := a.probeVer
		a.probeMu.Unlock()
		return v, nil
	}
	a.probeMu.Unlock()

	ctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "--version")
	cmd.Env = append(os.Environ(), cliEnv("")...)
	cmd.WaitDelay = time.Second
	out, err := cmd.Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) && len(ee.Stderr) > 0 {
			return "", fmt.Errorf("%s --version: %v: %s", bin, err, strings.TrimSpace(string(ee.Stderr)))
		}
		return "", fmt.Errorf("%s --version: %w", bin, err)
	}
	v := parseVersion(string(out))
	if v == "" {
		return "", fmt.Errorf("%s --version printed no version: %q", bin, strings.TrimSpace(string(out)))
	}
	a.probeMu.Lock()
	a.probeKey, a.probeVer = key, v
	a.probeMu.Unlock()
	return v, nil
}

// parseVersion reads "2.1.197 (Claude Code)" as "2.1.197".
func parseVersion(out string) string {
	f := strings.Fields(out)
	if len(f) == 0 {
		return ""
	}
	return f[0]
}

// cliEnv is the environment agentd adds for the CLI: its config folder, and
// the switches that keep it from calling home. The model endpoint and key
// come from the sandbox environment (the server's provider settings).
func cliEnv(configDir string) []string {
	env := []string{"DISABLE_AUTOUPDATER=1", "DISABLE_TELEMETRY=1", "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1"}
	if configDir != "" {
		env = append(env, "CLAUDE_CONFIG_DIR="+configDir)
	}
	return env
}
