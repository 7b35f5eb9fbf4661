package session

import (
	"context"
	"time"

	"github.com/agentd/agentd/agent"
	"github.com/agentd/agentd/conversation"
)

// Credentials issues the model credentials of a session's environments:
// the model proxy hands out a per-session token and its own address in
// place of the server's API keys and endpoints. Implementations are safe
// for concurrent use.
type Credentials interface {
	// Issue returns the environment variables for a new (or re-attached)
	// environment of the session, given what it would get otherwise. An
	// error fails the environment's start: keys are never passed on as a
	// fallback.
	Issue(ctx context.Context, sessionID string, env map[string]string) (map[string]string, error)
	// Revoke invalidates what Issue handed out for the session; called when
	// its environment is gone (terminated, failed to start, or lost in a
	// restart), not when it is left running for the next server.
	Revoke(ctx context.Context, sessionID string) error
}

// revokeCredentials revokes the session's credentials, logging a failure.
func (m *Manager) revokeCredentials(id string) {
	if m.cfg.Credentials == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := m.cfg.Credentials.Revoke(ctx, id); err != nil {
		m.log.Error("revoke model credentials", "session", id, "err", err)
	}
}

// FailTurn reports a failure that comes from outside the runner (the model
// proxy refusing a session over its budget): an error event with cause's
// code (agent.CodeOf) goes to the session's log, and a running turn is
// stopped and ends with query:failed carrying that code and message. It
// returns once the owner has taken note, so a caller may act (answer the
// refused request) knowing the turn will end as a failure. A second
// failure while the turn is ending adds nothing.
func (m *Manager) FailTurn(ctx context.Context, sessionID string, cause error) error {
	s, err := m.Get(sessionID)
	if err != nil {
		return err
	}
	_, err = doSync(ctx, s, func(o *owner, done func(struct{}, error)) {
		o.failTurn(cause)
		done(struct{}{}, nil)
	})
	return err
}

func (o *owner) failTurn(cause error) {
	t := o.turn
	if t != nil && t.failure != nil {
		return
	}
	actor := ""
	if t != nil {
		actor = t.actor
	}
	ev := withActor(conversation.NewEvent(conversation.ErrorEvent{Message: cause.Error(), Code: agent.CodeOf(cause)}), actor)
	if _, err := o.s.appendEvents(context.Background(), o.s.gen(), ev.From(conversation.SourceServer)); err != nil {
		o.s.m.log.Error("record failure", "session", o.s.id, "err", err)
	}
	if t == nil {
		return
	}
	t.failure = cause
	o.s.m.log.Warn("turn failed from outside the agent", "session", o.s.id, "query", t.queryID, "code", agent.CodeOf(cause), "err", cause)
	_ = o.interrupt("")
}

// TurnActor returns the principal of the session's running turn ("" when
// none runs or it has none), for audit records.
func (m *Manager) TurnActor(sessionID string) string {
	s, err := m.Get(sessionID)
	if err != nil {
		return ""
	}
	if a := s.turnActor.Load(); a != nil {
		return *a
	}
	return ""
}
