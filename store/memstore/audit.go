package memstore

import (
	"context"
	"fmt"

	"github.com/agentd/agentd/conversation"
	"github.com/agentd/agentd/store"
)

var (
	_ store.AuditStore      = (*Store)(nil)
	_ store.ModelTokenStore = (*Store)(nil)
)

// auditLog is the Store's audit records and model tokens, guarded by
// Store.mu. Its maps are made on first use, so New needs no change.
type auditLog struct {
	lastID  int64
	records map[string][]store.AuditRecord // by session, id order
	tokens  map[string]store.ModelToken    // by hash
}

// deleteAuditLocked forgets a session's records and tokens.
func (s *Store) deleteAuditLocked(id string) {
	delete(s.audit.records, id)
	for h, t := range s.audit.tokens {
		if t.SessionID == id {
			delete(s.audit.tokens, h)
		}
	}
}

func (s *Store) AppendAudit(ctx context.Context, records []store.AuditRecord) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.audit.records == nil {
		s.audit.records = make(map[string][]store.AuditRecord)
	}
	for _, r := range records {
		if _, ok := s.sessions[r.SessionID]; !ok {
			continue // purged while the record waited
		}
		s.audit.lastID++
		r.ID = s.audit.lastID
		if r.Usage != nil {
			u := *r.Usage
			r.Usage = &u
		}
		s.audit.records[r.SessionID] = append(s.audit.records[r.SessionID], r)
	}
	return nil
}

func (s *Store) ReadAudit(ctx context.Context, sessionID string, after int64, limit int) ([]store.AuditRecord, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	out := []store.AuditRecord{}
	for _, r := range s.audit.records[sessionID] {
		if r.ID <= after {
			continue
		}
		if limit > 0 && len(out) == limit {
			break
		}
		if r.Usage != nil {
			u := *r.Usage
			r.Usage = &u
		}
		out = append(out, r)
	}
	return out, nil
}

func (s *Store) AuditUsage(ctx context.Context, sessionID string) (conversation.Usage, error) {
	if err := ctx.Err(); err != nil {
		return conversation.Usage{}, err
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	var u conversation.Usage
	for _, r := range s.audit.records[sessionID] {
		if r.Usage != nil {
			u = u.Add(*r.Usage)
		}
	}
	return u, nil
}

func (s *Store) SaveModelToken(ctx context.Context, t store.ModelToken) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if t.Hash == "" {
		return fmt.Errorf("save model token of %q: empty hash", t.SessionID)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.sessions[t.SessionID]; !ok {
		return fmt.Errorf("save model token of %q: session: %w", t.SessionID, store.ErrNotFound)
	}
	if s.audit.tokens == nil {
		s.audit.tokens = make(map[string]store.ModelToken)
	}
	if _, ok := s.audit.tokens[t.Hash]; ok {
		return fmt.Errorf("save model token of %q: %w", t.SessionID, store.ErrExists)
	}
	s.audit.tokens[t.Hash] = t
	return nil
}

func (s *Store) LookupModelToken(ctx context.Context, hash string) (store.ModelToken, error) {
	if err := ctx.Err(); err != nil {
		return store.ModelToken{}, err
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	t, ok := s.audit.tokens[hash]
	if !ok {
		return store.ModelToken{}, fmt.Errorf("look up model token: %w", store.ErrNotFound)
	}
	return t, nil
}

func (s *Store) DeleteModelTokens(ctx context.Context, sessionID string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for h, t := range s.audit.tokens {
		if t.SessionID == sessionID {
			delete(s.audit.tokens, h)
		}
	}
	return nil
}
