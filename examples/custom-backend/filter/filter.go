// Package filter is an agent architecture written outside agentd, against
// its public agent package only: the "agent" is a filter command (tr, sed,
// a script) run in the session's sandbox, the user's message on its
// standard input, its standard output streamed back as the assistant's
// answer.
package filter

import (
	"context"
	"errors"
	"strings"
	"sync"
	"time"

	"github.com/agentd/agentd/agent"
	"github.com/agentd/agentd/conversation"
	"github.com/agentd/agentd/sandbox"
)

// Architecture runs Command for each message.
type Architecture struct {
	// ArchName is the architecture's name, as sessions ask for it.
	ArchName string
	// Command is the filter's command line.
	Command []string
}

var _ agent.Architecture = Architecture{}

// Name implements agent.Architecture.
func (a Architecture) Name() string { return a.ArchName }

// Start implements agent.Architecture: there is nothing to prepare; each
// turn starts the command.
func (a Architecture) Start(ctx context.Context, h agent.Host) (agent.Runner, error) {
	return &runner{arch: a, host: h}, nil
}

// runner runs one turn at a time; Interrupt and Close may come from
// other goroutines while it runs.
type runner struct {
	arch Architecture
	host agent.Host

	mu          sync.Mutex // guards proc and interrupted
	proc        sandbox.Process
	interrupted bool
}

func (r *runner) Turn(ctx context.Context, t agent.Turn) (agent.TurnResult, error) {
	a := r.arch
	h := r.host
	id := t.QueryID + "-answer"
	block := conversation.Block{
		ID: id, Type: conversation.BlockAssistantText, Status: conversation.StatusPending,
		Timestamp: time.Now().UTC().Truncate(time.Millisecond),
	}
	if err := h.Emit(ctx, conversation.Upsert(block)); err != nil {
		return agent.TurnResult{}, err
	}
	// The block settles however the turn ends.
	var answer strings.Builder
	settle := func(status conversation.BlockStatus) {
		block.Status, block.Content = status, answer.String()
		_ = h.Emit(context.WithoutCancel(ctx), conversation.Upsert(block))
	}
	p, err := h.Env().Exec(ctx, sandbox.Cmd{Argv: a.Command, Stdin: true, Tag: t.QueryID})
	if err != nil {
		settle(conversation.StatusError)
		return agent.TurnResult{}, agent.Fail(agent.CodeSandboxError, "start %s: %v", a.Command[0], err)
	}
	r.mu.Lock()
	r.proc, r.interrupted = p, false
	r.mu.Unlock()
	defer func() {
		r.mu.Lock()
		r.proc = nil
		r.mu.Unlock()
	}()
	stop := context.AfterFunc(ctx, func() { _ = p.Kill() })
	defer stop()
	go func() {
		_, _ = p.Write([]byte(t.Content))
		_ = p.CloseStdin()
	}()
	var emitErr error
	for c := range p.Output() {
		if c.Stream != sandbox.Stdout || emitErr != nil {
			continue
		}
		answer.Write(c.Data)
		emitErr = h.Emit(ctx, conversation.Delta(id, string(c.Data)))
	}
	st, err := p.Wait(context.WithoutCancel(ctx))
	r.mu.Lock()
	interrupted := r.interrupted
	r.mu.Unlock()
	switch {
	case interrupted || ctx.Err() != nil:
		settle(conversation.StatusComplete)
		return agent.TurnResult{}, agent.ErrInterrupted
	case err != nil:
		settle(conversation.StatusError)
		return agent.TurnResult{}, agent.Fail(agent.CodeSandboxError, "wait for %s: %v", a.Command[0], err)
	case emitErr != nil:
		settle(conversation.StatusError)
		return agent.TurnResult{}, emitErr
	case !st.Success():
		settle(conversation.StatusError)
		return agent.TurnResult{}, agent.Fail(agent.CodeAgentExited, "%s exited with %d %s", a.Command[0], st.Code, st.Signal)
	}
	settle(conversation.StatusComplete)
	return agent.TurnResult{Result: answer.String()}, nil
}

// Interrupt stops the running turn's command.
func (r *runner) Interrupt(ctx context.Context) error {
	r.mu.Lock()
	p := r.proc
	r.interrupted = true
	r.mu.Unlock()
	if p == nil {
		return nil
	}
	if err := p.Kill(); err != nil && !errors.Is(err, sandbox.ErrTerminated) {
		return err
	}
	return nil
}

// Close stops what runs; the runner holds nothing else.
func (r *runner) Close(ctx context.Context) error { return r.Interrupt(ctx) }
