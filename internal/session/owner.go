package session

import (
	"fmt"

	"github.com/agentd/agentd/store"
)

// Record returns a copy of the session's record.
func (s *Session) Record() store.Session { return s.record() }

// NotFound is the error of an unknown session, for callers that must
// answer exactly as for one (a session the caller may not know exists).
func NotFound(id string) error { return fmt.Errorf("%w: %q", ErrNotFound, id) }

// Owner returns the user who created a session and that user's tenant
// ("" for sessions made without users); ok is false for an unknown session.
func (m *Manager) Owner(sessionID string) (owner, tenant string, ok bool) {
	s, err := m.Get(sessionID)
	if err != nil {
		return "", "", false
	}
	rec := s.record()
	return rec.Owner, rec.Tenant, true
}
