// Package wiring assembles an agentd server from its configuration: the
// built-in architectures and sandbox backends, and the parts the root
// package's New connects.
package wiring

import (
	"errors"
	"fmt"

	"github.com/agentd/agentd/agent"
	"github.com/agentd/agentd/internal/agent/claudecode"
	"github.com/agentd/agentd/internal/agent/codex"
	"github.com/agentd/agentd/internal/agent/gemini"
	"github.com/agentd/agentd/internal/agent/opencode"
	"github.com/agentd/agentd/internal/agent/shell"
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
// taken twice is an error.
func Registry(extra []agent.Architecture) (*agent.Registry, error) {
	r := agent.NewRegistry()
	for _, b := range Architectures() {
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
