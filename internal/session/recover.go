package session

import (
	"context"
	"fmt"
	"time"

	"github.com/agentd/agentd/conversation"
	"github.com/agentd/agentd/internal/agent"
)

// settle closes out a session that was active when the server stopped: the
// turn that was running gets query:failed with the reason, open permission
// requests are resolved, and the session is marked terminated. Its history
// stays intact and the next message starts a new environment.
func (m *Manager) settle(ctx context.Context, s *Session) error {
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
		evs = append(evs, conversation.NewEvent(conversation.QueryFailed{
			QueryID: st.ActiveQueryID,
			Error:   "the server restarted while this turn was running; the agent process was stopped with it",
			Code:    agent.CodeServerRestarted,
		}))
	}
	s.mu.Lock()
	s.rec.Status = conversation.SessionTerminated
	s.rec.Runtime.Status = conversation.SessionTerminated
	s.rec.Runtime.ActiveQueryID = ""
	s.rec.LastActivity = time.Now().UTC().Truncate(time.Millisecond)
	rec := s.rec
	s.mu.Unlock()
	evs = append(evs, statusEvent(rec.Runtime, "server restarted", ""))
	if _, err := m.cfg.Log.Append(ctx, s.id, evs...); err != nil {
		return fmt.Errorf("record restart: %w", err)
	}
	if err := m.cfg.Store.UpdateSession(ctx, rec); err != nil {
		return fmt.Errorf("update session: %w", err)
	}
	_ = m.cfg.Store.ReleaseLease(ctx, s.id, m.cfg.Holder)
	return nil
}
