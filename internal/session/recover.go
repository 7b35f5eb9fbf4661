package session

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/agentd/agentd/agent"
	"github.com/agentd/agentd/conversation"
	"github.com/agentd/agentd/sandbox"
	"github.com/agentd/agentd/store"
)

// restartReason is why a turn running when this server stopped failed.
const restartReason = "the server restarted while this turn was running; the agent process was stopped with it"

// takeoverReason is why a turn running on a server that stopped failed,
// when another server took the session over.
const takeoverReason = "the server running this turn stopped (its lease on the session expired, or it was stopped); another server took the session over"

// recoverOrSettle handles, at start-up, a session that was active when
// the previous server stopped. With a sandbox whose environments outlive
// the server (sandbox.Recoverer) and a recorded handle, the owner
// re-attaches to the environment and, when the runner can (agent.Resumer),
// takes over the turn that was running. Otherwise the session is settled:
// see settle.
//
// A session whose lease another server holds is left alone: it was not
// active here but runs there (two servers share the store). Taking the
// lease first also fences that server out should its lease have expired.
func (m *Manager) recoverOrSettle(ctx context.Context, s *Session) error {
	_, err := doSync(ctx, s, func(o *owner, done func(struct{}, error)) {
		orphaned, err := o.takeLease(ctx)
		switch {
		case errors.Is(err, ErrLeased):
			m.log.Info("session runs on another server; left to it", "session", s.id)
			done(struct{}{}, nil)
		case err != nil:
			done(struct{}{}, err)
		case !orphaned:
			done(struct{}{}, nil)
		default:
			done(struct{}{}, o.adopt(restartReason, agent.CodeServerRestarted))
		}
	})
	return err
}

// recover runs in the owner goroutine (lease held): re-attach in the
// background, then resume or settle the running turn. why says how the
// previous server went away; statusWhy is the short form for a status
// event.
func (o *owner) recover(rc sandbox.Recoverer, why, statusWhy string) {
	s := o.s
	m := s.m
	o.starting, o.recovering = true, true
	gen := s.gen()
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
			defer o.runAfterRecover()
			o.starting, o.recovering = false, false
			waiters := o.readyWait
			o.readyWait = nil
			if err == nil && s.gen() != gen {
				// The lease was lost meanwhile: the environment is the new
				// holder's.
				envCancel()
				if rel, ok := env.(sandbox.Releaser); ok {
					rel.Release()
				}
				for _, w := range waiters {
					w(ErrLeased)
				}
				return
			}
			if err != nil {
				envCancel()
				reason := fmt.Sprintf("the session's environment could not be re-attached (%s): %v", statusWhy, err)
				if errors.Is(err, sandbox.ErrGone) {
					reason = fmt.Sprintf("the session's executor is gone (it died while no server was attached to it): %v", err)
				}
				m.log.Warn("recover environment", "session", s.id, "err", err)
				if serr := m.settle(context.Background(), s, s.gen(), reason, agent.CodeSandboxError, statusWhy); serr != nil {
					m.log.Error("settle session", "session", s.id, "err", serr)
				}
				for _, w := range waiters {
					w(err)
				}
				return
			}
			o.env, o.runner, o.host, o.envCancel, o.envLost = env, runner, h, envCancel, false
			m.log.Info("environment re-attached", "session", s.id, "sandbox", m.cfg.Sandbox.Name())
			if stErr != nil || st.ActiveQueryID == "" {
				o.setStatus(conversation.SessionIdle, "environment re-attached ("+statusWhy+")", "")
				if len(waiters) == 0 {
					o.startIdle()
				}
			} else {
				o.resumeTurn(st, statusWhy)
			}
			for _, w := range waiters {
				w(nil)
			}
		}
	})
}

// resumeTurn takes over the turn st says was running.
func (o *owner) resumeTurn(st conversation.State, why string) {
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
	turn := &turnState{queryID: queryID, actor: actor, started: time.Now(), cancel: cancel}
	o.turn = turn
	res, ok := o.runner.(agent.Resumer)
	if !ok {
		o.finishTurn(agent.TurnResult{}, agent.Fail(agent.CodeServerRestarted,
			"the session's server went away (%s) while this turn was running and the %s agent cannot resume a turn in flight; its environment was kept", why, s.record().Architecture))
		return
	}
	o.setStatus(conversation.SessionRunning, "turn resumed ("+why+")", actor)
	o.host.setTurn(actor, queryID)
	t := agent.Turn{QueryID: queryID, Content: content}
	h := o.host
	o.goJob(func() func(*owner) {
		r, err := res.Resume(tctx, t, st)
		syncTurnFiles(h)
		return func(o *owner) {
			if o.turn == turn { // else abandoned: the lease was lost
				o.finishTurn(r, err)
			}
		}
	})
}

// settle closes out a session that was active when its server stopped
// and cannot continue: the turn that was running gets query:failed with
// the reason, open permission requests are resolved, and the session is
// marked terminated. Its history stays intact and the next message starts
// a new environment (on a workspace restored from the store when its
// folder is not here). Writes are fenced by gen, the lease this server
// took; the caller releases it when nothing else runs.
func (m *Manager) settle(ctx context.Context, s *Session, gen int64, reason, code, statusWhy string) error {
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
	// Texts the turn left truncated and open: stored from their spool as
	// far as the log has them (or said lost), and the spool removed.
	evs = append(evs, m.finishOpenTexts(ctx, s.id)...)
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
	evs = append(evs, statusEvent(rec.Runtime, statusWhy, ""))
	if _, err := s.appendEvents(ctx, gen, evs...); err != nil {
		return fmt.Errorf("record restart: %w", err)
	}
	if err := s.saveRecord(ctx, gen, rec); err != nil && !errors.Is(err, store.ErrNotFound) {
		return fmt.Errorf("update session: %w", err)
	}
	// The environment is gone: so are its credentials (an agent process
	// that outlived a crashed server must not keep model access).
	m.revokeCredentials(s.id)
	m.changed(m.summary(ctx, rec))
	return nil
}
