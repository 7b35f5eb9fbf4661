package session

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/agentd/agentd/conversation"
	"github.com/agentd/agentd/internal/agent"
	"github.com/agentd/agentd/internal/sandbox"
	"github.com/agentd/agentd/store"
)

// recoverOrSettle handles a session that was active when the previous
// server stopped. With a sandbox whose environments outlive the server
// (sandbox.Recoverer) and a recorded handle, the owner re-attaches to the
// environment and, when the runner can (agent.Resumer), takes over the turn
// that was running. Otherwise the session is settled: see settle.
//
// A session whose lease another server holds is left alone: it was not
// active here but runs there (two servers share the store). Taking the
// lease first also fences that server out should its lease have expired.
func (m *Manager) recoverOrSettle(ctx context.Context, s *Session) error {
	if _, err := m.cfg.Store.AcquireLease(ctx, s.id, m.cfg.Holder, m.cfg.LeaseTTL); err != nil {
		if errors.Is(err, store.ErrLeaseHeld) {
			m.log.Info("session runs on another server; left to it", "session", s.id)
			return nil
		}
		return fmt.Errorf("acquire lease: %w", err)
	}
	rec := s.record()
	rc, ok := m.cfg.Sandbox.(sandbox.Recoverer)
	if !ok || len(rec.SandboxState) == 0 {
		return m.settle(ctx, s, "the server restarted while this turn was running; the agent process was stopped with it", agent.CodeServerRestarted)
	}
	return s.do(func(o *owner) { o.recover(rc) })
}

// recover runs in the owner goroutine: re-attach in the background, then
// resume or settle the running turn.
func (o *owner) recover(rc sandbox.Recoverer) {
	s := o.s
	m := s.m
	o.starting = true
	envCtx, envCancel := context.WithCancel(context.Background())
	rec := s.record()
	o.goJob(func() func(*owner) {
		ctx := envCtx
		prof, err := m.cfg.Profiles.Get(ctx, rec.AgentProfileRef)
		var env sandbox.Environment
		var spec sandbox.Spec
		if err == nil {
			spec, err = m.spec(ctx, rec, prof)
		}
		if err == nil {
			env, err = rc.Recover(ctx, spec, rec.SandboxState)
		}
		var runner agent.Runner
		var h *host
		if err == nil {
			if runner, h, err = m.attachEnvironment(ctx, s, env, rec, ""); err != nil {
				terminateQuietly(env)
			}
		}
		st, stErr := m.states.get(context.Background(), s.id)
		return func(o *owner) {
			o.starting = false
			if err != nil {
				envCancel()
				reason := fmt.Sprintf("the session's environment did not survive the restart: %v", err)
				if errors.Is(err, sandbox.ErrGone) {
					reason = fmt.Sprintf("the session's executor is gone (it died while the server was down): %v", err)
				}
				m.log.Warn("recover environment", "session", s.id, "err", err)
				if serr := m.settle(context.Background(), s, reason, agent.CodeSandboxError); serr != nil {
					m.log.Error("settle session", "session", s.id, "err", serr)
				}
				return
			}
			o.env, o.runner, o.host, o.envCancel, o.envLost = env, runner, h, envCancel, false
			m.log.Info("environment re-attached", "session", s.id, "sandbox", m.cfg.Sandbox.Name())
			if stErr != nil || st.ActiveQueryID == "" {
				o.setStatus(conversation.SessionIdle, "environment re-attached after a restart", "")
				o.startIdle()
				return
			}
			o.resumeTurn(st)
		}
	})
}

// resumeTurn takes over the turn st says was running.
func (o *owner) resumeTurn(st conversation.State) {
	s := o.s
	queryID := st.ActiveQueryID
	var content string
	for _, b := range st.Blocks {
		if b.ID == queryID+"-user" {
			content = b.Content
		}
	}
	actor := ""
	tctx, cancel := context.WithCancel(context.Background())
	o.turn = &turnState{queryID: queryID, actor: actor, started: time.Now(), cancel: cancel}
	res, ok := o.runner.(agent.Resumer)
	if !ok {
		o.finishTurn(agent.TurnResult{}, agent.Fail(agent.CodeServerRestarted,
			"the server restarted while this turn was running and the %s agent cannot resume a turn in flight; its environment was kept", s.record().Architecture))
		return
	}
	o.setStatus(conversation.SessionRunning, "turn resumed after a restart", actor)
	o.host.setTurn(actor, queryID)
	t := agent.Turn{QueryID: queryID, Content: content}
	h := o.host
	o.goJob(func() func(*owner) {
		r, err := res.Resume(tctx, t, st)
		syncTurnFiles(h)
		return func(o *owner) { o.finishTurn(r, err) }
	})
}

// settle closes out a session that was active when the server stopped and
// cannot continue: the turn that was running gets query:failed with the
// reason, open permission requests are resolved, and the session is marked
// terminated. Its history stays intact and the next message starts a new
// environment.
func (m *Manager) settle(ctx context.Context, s *Session, reason, code string) error {
	st, err := m.states.get(ctx, s.id)
	if err != nil {
		return fmt.Errorf("read log: %w", err)
	}
	var evs []conversation.Event
	for _, p := range st.PendingPermissions {
		evs = append(evs, conversation.NewEvent(conversation.PermissionResolved{
			RequestID: p.RequestID, Behavior: conversation.Deny, By: conversation.ByInterrupt,
			Message: "the server restarted before the request was answered",
		}))
	}
	if st.ActiveQueryID != "" {
		evs = append(evs, conversation.NewEvent(conversation.QueryFailed{QueryID: st.ActiveQueryID, Error: reason, Code: code}))
	}
	s.mu.Lock()
	s.rec.Status = conversation.SessionTerminated
	s.rec.Runtime.Status = conversation.SessionTerminated
	s.rec.Runtime.ActiveQueryID = ""
	s.rec.SandboxState = nil
	s.rec.LastActivity = time.Now().UTC().Truncate(time.Millisecond)
	rec := s.rec
	s.mu.Unlock()
	evs = append(evs, statusEvent(rec.Runtime, "server restarted", ""))
	if _, err := m.cfg.Log.Append(ctx, s.id, evs...); err != nil {
		return fmt.Errorf("record restart: %w", err)
	}
	if err := m.cfg.Store.UpdateSession(ctx, rec); err != nil && !errors.Is(err, store.ErrNotFound) {
		return fmt.Errorf("update session: %w", err)
	}
	_ = m.cfg.Store.ReleaseLease(ctx, s.id, m.cfg.Holder)
	// The environment is gone: so are its credentials (an agent process
	// that outlived a crashed server must not keep model access).
	m.revokeCredentials(s.id)
	return nil
}
