package claudecode

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/agentd/agentd/agent"
	"github.com/agentd/agentd/conversation"
	"github.com/agentd/agentd/sandbox"
)

// Server restarts with an environment that outlives the server (the
// executor sandbox): Detach at shutdown, Resume after the restart, and
// no second CLI next to one an earlier server left. See resume.go for how
// a resumed turn emits exactly what the log lacks.

var (
	_ agent.Resumer  = (*runner)(nil)
	_ agent.Detacher = (*runner)(nil)
)

// Detach implements agent.Detacher: a running turn returns
// agent.ErrDetached at once, the CLI keeps running in the environment, and
// this runner stores nothing more (no event, no permission answer). The
// runner takes no more turns; Close then leaves the CLI alone.
func (r *runner) Detach() {
	r.mu.Lock()
	if r.detached {
		r.mu.Unlock()
		return
	}
	r.detached = true
	p := r.proc
	r.mu.Unlock()
	if p != nil {
		p.detach()
	}
}

// Resume implements agent.Resumer: it takes over the turn an earlier
// server was running. It re-attaches to the CLI (its stable tag) with its
// stdout replayed from where the turn's output started (the turn mark in
// the agent state), converts the turn again with the converter as it was
// at that point, emits only what the log (st, reduced) lacks, and follows
// the turn live to its end. Without a mark for this turn the message never
// reached the CLI, and the turn runs as a new one.
func (r *runner) Resume(ctx context.Context, t agent.Turn, st conversation.State) (agent.TurnResult, error) {
	done, err := r.beginTurn()
	if err != nil {
		return agent.TurnResult{}, err
	}
	defer r.endTurn(done)
	at, ok := r.host.Env().(sandbox.Attacher)
	if !ok {
		return agent.TurnResult{}, agent.Fail(agent.CodeServerRestarted, "the server restarted while this turn was running and the sandbox cannot re-attach to Claude Code")
	}
	m := r.currentState().Turn
	if m == nil || m.QueryID != t.QueryID || m.Tag == "" {
		r.emitLog(ctx, conversation.LevelInfo, "the server restarted before this turn's message reached Claude Code; sending it now", nil)
		return r.turn(ctx, t)
	}
	pr, err := attachPipe(ctx, at, r.opts.Command, m.Tag, m.Offset)
	r.mu.Lock()
	r.orphanChecked = true // taken over, or not there
	r.mu.Unlock()
	if err != nil {
		if errors.Is(err, sandbox.ErrNotFound) {
			return agent.TurnResult{}, agent.Fail(agent.CodeServerRestarted, "cannot resume the turn after the server restart: the Claude Code process is gone from the environment")
		}
		return agent.TurnResult{}, agent.Fail(agent.CodeSandboxError, "re-attach to Claude Code: %v", err)
	}
	p := newProcess(r, pr, m.Tag, false, true)
	p.attached = true
	// What it was started with is not known here: the session's options
	// now are the best guess (a later change is compared with them).
	p.shared.model, p.shared.mode = r.host.Options().Model, permissionMode(r.host.Options().Extra)
	// Request ids of our control requests must not repeat the earlier
	// server's.
	p.ctl.prefix = fmt.Sprintf("agentd-%x-", time.Now().UnixNano())
	p.rd.conv.Restore(m.Seed)
	p.rd.filter = newReplayFilter(st, t.QueryID)
	p.rd.answered = m.Perms
	p.shared.idle = turnStart{offset: m.Offset, seed: m.Seed}
	w := &turnWait{done: make(chan turnEnd, 1)}
	p.shared.turn, p.shared.turnQuery = w, t.QueryID
	r.mu.Lock()
	r.proc = p
	detached := r.detached
	r.mu.Unlock()
	if detached {
		p.detach()
	}
	r.emitLog(ctx, conversation.LevelInfo, fmt.Sprintf("re-attached to Claude Code after a server restart; replaying turn %s from byte %d of its output", t.QueryID, m.Offset), nil)
	p.begin()
	if !m.Sent {
		// The server stopped around the message's write. The CLI answers
		// every message at once (its init line); silence means it never
		// got it.
		timer := time.NewTimer(r.opts.FlushTimeout)
		select {
		case <-p.firstLine:
		case <-p.exitedCh:
		case <-p.detachCh:
		case <-ctx.Done():
		case <-timer.C:
			p.sendMessage(ctx, t)
		}
		timer.Stop()
	}
	end := p.waitTurn(ctx, w)
	if end.err != nil {
		return agent.TurnResult{}, end.err
	}
	return agent.TurnResult{Result: end.result}, nil
}

// stopOrphan stops the CLI of this session that an earlier server left
// running in the environment, if there is one: once per runner, before it
// starts a CLI of its own or closes. The CLI gets its stdin closed (it then
// saves its transcript and exits), and is stopped after CloseTimeout. No
// such process is fine.
func (r *runner) stopOrphan(ctx context.Context) {
	r.mu.Lock()
	checked := r.orphanChecked
	r.orphanChecked = true
	var from int64
	if m := r.state.Turn; m != nil && m.Tag == r.tag {
		from = m.Offset // skip replaying what no one reads
	}
	r.mu.Unlock()
	at, ok := r.host.Env().(sandbox.Attacher)
	if checked || !ok {
		return
	}
	pr, err := attachPipe(ctx, at, r.opts.Command, r.tag, from)
	if err != nil && from > 0 && !errors.Is(err, sandbox.ErrNotFound) {
		pr, err = attachPipe(ctx, at, r.opts.Command, r.tag, 0)
	}
	if errors.Is(err, sandbox.ErrNotFound) {
		return
	}
	if err != nil {
		r.host.Logger().Warn("look for a Claude Code process left by an earlier server", "err", err)
		return
	}
	go func() {
		for range pr.Lines() {
		}
	}()
	_ = pr.CloseStdin()
	if !waitClosed(ctx, pr.Done(), r.opts.CloseTimeout) {
		pr.Stop(ctx, r.opts.KillTimeout)
	}
	r.emitLog(ctx, conversation.LevelInfo, "stopped the Claude Code process an earlier server left running (no turn of it to resume)", nil)
}
