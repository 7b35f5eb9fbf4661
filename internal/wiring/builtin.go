// Package wiring assembles an agentd server from its configuration: the
// built-in architectures and sandbox backends, and the parts the root
// package's New connects.
package wiring

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/agentd/agentd/agent"
	"github.com/agentd/agentd/internal/agent/claudecode"
	"github.com/agentd/agentd/internal/agent/codex"
	"github.com/agentd/agentd/internal/agent/gemini"
	"github.com/agentd/agentd/internal/agent/opencode"
	"github.com/agentd/agentd/internal/agent/shell"
	"github.com/agentd/agentd/internal/sandbox/bwrap"
	"github.com/agentd/agentd/internal/sandbox/executor"
	"github.com/agentd/agentd/sandbox"
)

// Builtin is a built-in architecture and the other names it answers to.
type Builtin struct {
	Architecture agent.Architecture
	Aliases      []string
}

// Architectures lists the built-in architectures: the one place they are
// named.
func Architectures() []Builtin {
	return []Builtin{
		{Architecture: shell.Architecture{}},
		{Architecture: claudecode.New(claudecode.Options{}), Aliases: []string{"claude-agent-sdk", "claude-sdk"}},
		{Architecture: codex.Architecture{}},
		{Architecture: gemini.Architecture{}},
		{Architecture: opencode.Architecture{}},
	}
}

// Registry returns a registry of the built-in architectures and then
// extra, an embedding program's (agentd.Config.Architectures). A name
// taken twice is an error. With bounded, the sessions keep long block
// texts out of the log (session.Config.OutputLimit), so the shell records
// a command's whole output rather than its first 8 MiB.
func Registry(extra []agent.Architecture, bounded bool) (*agent.Registry, error) {
	r := agent.NewRegistry()
	for _, b := range Architectures() {
		if _, ok := b.Architecture.(shell.Architecture); ok && bounded {
			b.Architecture = shell.Architecture{MaxOutput: -1}
		}
		r.Register(b.Architecture, b.Aliases...)
	}
	for _, a := range extra {
		if a == nil {
			return nil, errors.New("architectures: a nil architecture")
		}
		if _, dup := r.Lookup(a.Name()); dup || a.Name() == "" {
			return nil, fmt.Errorf("architecture %q: the name is empty or already taken", a.Name())
		}
		r.Register(a)
	}
	return r, nil
}

// SandboxBackend is a built-in sandbox backend.
type SandboxBackend struct {
	Name string
	// Host: its agents run from this host's PATH (where the server probes
	// the agent CLIs).
	Host bool
	// build makes the backend as configured; nil for local, which every
	// server has.
	build func(s *Server, dataDir string) (sandbox.Provider, error)
}

// Sandboxes lists the built-in sandbox backends: the one place they are
// named.
func Sandboxes() []SandboxBackend {
	return []SandboxBackend{
		{Name: "local", Host: true},
		{Name: "executor", Host: true, build: (*Server).executorSandbox},
		{Name: "bwrap", Host: true, build: (*Server).executorSandbox},
		{Name: "docker", build: (*Server).dockerSandbox},
		{Name: "kubernetes", build: (*Server).kubernetesSandbox},
	}
}

// hostSandbox reports whether name is a built-in backend whose agents run
// from this host's PATH.
func hostSandbox(name string) bool {
	bs := Sandboxes()
	i := slices.IndexFunc(bs, func(b SandboxBackend) bool { return b.Name == name })
	return i >= 0 && bs[i].Host
}

// builtinSandbox builds the built-in backend name.
func (s *Server) builtinSandbox(name, dataDir string) (sandbox.Provider, error) {
	var names []string
	for _, b := range Sandboxes() {
		if b.Name == name && b.build != nil {
			return b.build(s, dataDir)
		}
		names = append(names, b.Name)
	}
	return nil, fmt.Errorf("unknown sandbox %q (%s)", name, strings.Join(names, ", "))
}

// executorSandbox builds the executor backend, or bwrap (the executor in
// bubblewrap namespaces).
func (s *Server) executorSandbox(string) (sandbox.Provider, error) {
	name := s.cfg.Sandbox
	if err := hostIsolationSupported(name); err != nil {
		return nil, err
	}
	mode, err := executor.ParseLimitMode(s.cfg.SandboxLimitMode)
	if err != nil {
		return nil, fmt.Errorf("%s sandbox: %w", name, err)
	}
	opts := executor.Options{
		RunAsUser: s.cfg.RunAsUser, UserPool: s.cfg.RunAsUserPool,
		Limits: s.cfg.SandboxLimits, LimitMode: mode, Nice: s.cfg.AgentNice,
		OnCall: s.audit.ExecutorCall,
		// Each environment reaches the model through a socket of its
		// own, relayed to a loopback port inside (docs/security.md).
		ModelProxy: s.executorModelProxy(),
		Logger:     s.log,
	}
	var p interface {
		sandbox.Provider
		LimitsEnforcement() string
	}
	if name == "bwrap" {
		p, err = bwrap.New(bwrap.Options{Options: opts, ReadOnly: s.cfg.SandboxReadOnly, SandboxUID: s.cfg.SandboxUID})
	} else {
		p, err = executor.New(opts)
	}
	if err != nil {
		return nil, fmt.Errorf("%s sandbox: %w", name, err)
	}
	s.log.Info("sandbox", "backend", name, "limits", p.LimitsEnforcement(), "user", s.cfg.RunAsUser,
		"userPool", len(s.cfg.RunAsUserPool) > 0, "modelProxy", opts.ModelProxy != nil)
	return p, nil
}
