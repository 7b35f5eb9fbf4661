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

// A session runs on the server holding its lease (store.LeaseStore). The
// lease's generation is the fence of every write made for the session's
// runtime (events, status, record): once another server has taken the
// lease over, the store refuses them, and this server stops the session's
// runner at once and leaves its environment to the new holder (lease.go).
//
// Session.lease is the generation this server holds (0: none). It is set
// and cleared by the owner goroutine; anyone may read it. While it is
// set, the environment is up or starting, or a turn runs (the owner
// releases the lease when it goes quiescent), and with a Cluster this
// server answers the commands other servers forward to the session's
// holder (cluster.go).

// gen returns the generation this server holds on the session, 0 if none.
func (s *Session) gen() int64 { return s.lease.Load() }

// holding reports whether this server holds the session's lease.
func (s *Session) holding() bool { return s.lease.Load() > 0 }

// takeLease makes sure this server holds the session's lease (owner
// goroutine): it renews it, or takes it when no other server's lease is
// unexpired (ErrLeased otherwise). A lease new to this server reloads the
// record from the store (another server may have changed it) and starts
// serving forwarded commands. It returns whether the record says another
// server left the session active (it died, or handed it over): the caller
// adopts it (adopt) before anything else.
func (o *owner) takeLease(ctx context.Context) (orphaned bool, err error) {
	s := o.s
	m := s.m
	gen, err := m.cfg.Store.AcquireLease(ctx, s.id, m.cfg.Holder, m.cfg.LeaseTTL)
	switch {
	case errors.Is(err, store.ErrLeaseHeld):
		return false, ErrLeased
	case errors.Is(err, store.ErrNotFound):
		return false, fmt.Errorf("%w: %q", ErrNotFound, s.id)
	case err != nil:
		return false, fmt.Errorf("acquire lease: %w", err)
	}
	held := s.lease.Load()
	if held == gen {
		return false, nil
	}
	if held != 0 {
		// Held, lost to another server and taken back: what runs here
		// is stale.
		o.leaseLost(held, "the lease passed to another server and back")
	}
	rec, err := m.cfg.Store.LoadSession(ctx, s.id)
	if err != nil {
		_ = m.cfg.Store.ReleaseLease(context.WithoutCancel(ctx), s.id, m.cfg.Holder)
		if errors.Is(err, store.ErrNotFound) {
			return false, fmt.Errorf("%w: %q", ErrNotFound, s.id)
		}
		return false, fmt.Errorf("load session: %w", err)
	}
	s.mu.Lock()
	from := s.rec.Status
	s.rec = rec
	s.mu.Unlock()
	if m.cfg.Metrics != nil && from != rec.Status {
		m.cfg.Metrics.StatusChanged(from, rec.Status)
	}
	s.lease.Store(gen)
	o.serve()
	return rec.Status.Active() && o.env == nil && !o.starting && o.turn == nil, nil
}

// releaseLease gives the session's lease up (owner goroutine), when
// nothing runs here any more.
func (o *owner) releaseLease() {
	s := o.s
	if s.lease.Swap(0) == 0 {
		return
	}
	o.unserve()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := s.m.cfg.Store.ReleaseLease(ctx, s.id, s.m.cfg.Holder); err != nil {
		s.m.log.Warn("release lease", "session", s.id, "err", err)
	}
	s.m.announce(notice{Kind: noticeReleased, SessionID: s.id})
}

// holdForWrite makes sure this server may write the session's record and
// log (owner goroutine). In a fleet, a server that does not hold the lease
// takes it, which reloads the record another server may have changed (a
// write of the copy it had would undo theirs), and the returned release
// lets it go again unless something runs here by then. ErrLeased: another
// server holds it (route forwards the command there). Without a fleet, or
// with the lease held, it does nothing.
func (o *owner) holdForWrite(ctx context.Context) (release func(), err error) {
	s := o.s
	if s.m.cluster == nil || s.holding() {
		return func() {}, nil
	}
	orphaned, err := o.takeLease(ctx)
	if err != nil {
		return nil, err
	}
	if orphaned {
		if err := o.adopt(takeoverReason, agent.CodeServerLost); err != nil {
			o.releaseLease()
			return nil, fmt.Errorf("take the session over: %w", err)
		}
	}
	return func() {
		if o.env == nil && !o.starting && o.turn == nil {
			o.releaseLease()
		}
	}, nil
}

// adopt takes over a session another server left active (owner
// goroutine, lease held): with a sandbox whose environments outlive their
// server and a recorded handle, it re-attaches to the environment and
// resumes the running turn (asynchronously: the owner is starting);
// otherwise it settles the session (the turn fails with code, the session
// is terminated) and its workspace is restored from the store by the next
// environment start. why says what happened to the previous holder.
func (o *owner) adopt(why, code string) error {
	s := o.s
	m := s.m
	rec := s.record()
	statusWhy := "taken over from a server that stopped"
	if code == agent.CodeServerRestarted {
		statusWhy = "server restarted"
	}
	m.log.Info("taking a session over", "session", s.id, "status", rec.Status, "why", statusWhy)
	m.metrics.takeovers.Inc()
	if rc, ok := m.cfg.Sandbox.(sandbox.Recoverer); ok && len(rec.SandboxState) > 0 {
		o.recover(rc, why, statusWhy)
		return nil
	}
	return m.settle(context.Background(), s, s.gen(), why, code, statusWhy)
}

// leaseLost stops what runs here for the session after its lease (of
// generation gen; 0: whatever is held) was lost: another server has taken
// it over (a renewal or a fenced write was refused), or it could not be
// renewed within its ttl. Nothing more is written for the session: the
// running turn is abandoned to the new holder (a re-attachable runner is
// detached and its environment released, its processes going on; local
// processes are stopped), and the reason is logged. Owner goroutine.
func (o *owner) leaseLost(gen int64, why string) {
	s := o.s
	m := s.m
	held := s.lease.Load()
	if held == 0 || (gen != 0 && held != gen) {
		return // handled already, or about another lease
	}
	s.lease.Store(0)
	o.unserve()
	m.metrics.leasesLost.Inc()
	env, runner := o.env, o.runner
	_, recoverable := m.cfg.Sandbox.(sandbox.Recoverer)
	rel, releasable := env.(sandbox.Releaser)
	detach := recoverable && releasable
	m.log.Warn("session lease lost: its runner stopped here, the environment is left to the new holder",
		"session", s.id, "generation", held, "why", why, "turn", o.turnID(), "environmentKept", env != nil && detach)
	o.stopIdle()
	if t := o.turn; t != nil {
		o.turn = nil
		s.turnActor.Store(nil)
		if t.graceTimer != nil {
			t.graceTimer.Stop()
		}
		if d, ok := runner.(agent.Detacher); ok && detach {
			d.Detach() // the agent goes on in the environment
		} else {
			t.cancel()
		}
	}
	if env != nil {
		if o.envCancel != nil {
			o.envCancel()
		}
		o.env, o.runner, o.host, o.envCancel = nil, nil, nil, nil
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		if detach {
			rel.Release()
		} else {
			if runner != nil {
				if err := runner.Close(ctx); err != nil {
					m.log.Warn("close runner", "session", s.id, "err", err)
				}
			}
			if err := env.Terminate(ctx); err != nil {
				m.log.Warn("terminate environment", "session", s.id, "err", err)
			}
			m.revokeCredentials(s.id)
		}
		cancel()
	}
	// Open permission requests are the new holder's to settle.
	s.perms.denyAll(agent.PermissionDecision{Behavior: conversation.Deny, By: conversation.ByInterrupt, Message: "the session moved to another server"})
	waiters := o.readyWait
	o.readyWait = nil
	for _, w := range waiters {
		w(ErrLeased)
	}
	o.terminating = ""
	for _, c := range o.terminated {
		close(c)
	}
	o.terminated = nil
}

func (o *owner) turnID() string {
	if o.turn != nil {
		return o.turn.queryID
	}
	return ""
}

// appendEvents appends events for the session: fenced by gen when it is
// set (a write for the runtime of the lease of that generation), so that
// the store refuses it once another server holds the lease, which then
// stops what runs here (leaseLost).
func (s *Session) appendEvents(ctx context.Context, gen int64, events ...conversation.Event) ([]conversation.Event, error) {
	if gen <= 0 {
		return s.m.cfg.Log.Append(ctx, s.id, events...)
	}
	out, err := s.m.cfg.Log.AppendFenced(ctx, s.id, gen, events...)
	if errors.Is(err, store.ErrFenced) {
		s.fenced(gen)
	}
	return out, err
}

// saveRecord stores rec, fenced by gen when it is set.
func (s *Session) saveRecord(ctx context.Context, gen int64, rec store.Session) error {
	if gen <= 0 {
		return s.m.cfg.Store.UpdateSession(ctx, rec)
	}
	err := s.m.cfg.Store.UpdateSession(ctx, rec, store.Fence{SessionID: s.id, Generation: gen})
	if errors.Is(err, store.ErrFenced) {
		s.fenced(gen)
	}
	return err
}

// fenced handles a write of generation gen that the store refused: the
// lease is another server's now.
func (s *Session) fenced(gen int64) {
	// Not from the caller's goroutine, which may be the owner's.
	go func() {
		_ = s.do(func(o *owner) {
			o.leaseLost(gen, "the store refused a write: another server holds the session's lease")
		})
	}()
}
