package api

import (
	"context"
	"fmt"
	"net/http"
	"strconv"

	"github.com/agentd/agentd/conversation"
	"github.com/agentd/agentd/store"
)

// AuditReader reads a session's audit records (store.AuditStore).
type AuditReader interface {
	ReadAudit(ctx context.Context, sessionID string, after int64, limit int) ([]store.AuditRecord, error)
}

// ModelUsage reports what the model proxy counted for a session and its
// token budget (0: none).
type ModelUsage interface {
	SessionUsage(ctx context.Context, sessionID string) (conversation.Usage, int64)
}

// AuditPage is the answer of GET /api/sessions/{id}/audit.
type AuditPage struct {
	Records []store.AuditRecord `json:"records"`
	// Last is the id of the last record returned (after when none): pass it
	// as after to read on.
	Last int64 `json:"last"`
	// ModelUsage is the model proxy's count of the session's tokens, the
	// one its budget is checked against (absent without the proxy).
	ModelUsage *conversation.Usage `json:"modelUsage,omitempty"`
	// TokenBudget is the session's budget (absent when none).
	TokenBudget int64 `json:"tokenBudget,omitempty"`
}

func (s *Server) handleAudit(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	if _, err := s.cfg.Sessions.Get(id); err != nil {
		s.fail(w, r, err)
		return
	}
	after, err := parseCursor("after", r.URL.Query().Get("after"))
	if err != nil {
		s.fail(w, r, err)
		return
	}
	limit := defaultPage
	if v := r.URL.Query().Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n <= 0 {
			s.fail(w, r, cursorError(fmt.Sprintf("limit must be a positive integer, got %q", v)))
			return
		}
		limit = min(n, maxPage)
	}
	page := AuditPage{Records: []store.AuditRecord{}, Last: after}
	if s.cfg.Audit != nil {
		recs, err := s.cfg.Audit.ReadAudit(r.Context(), id, after, limit)
		if err != nil {
			s.fail(w, r, err)
			return
		}
		if len(recs) > 0 {
			page.Records, page.Last = recs, recs[len(recs)-1].ID
		}
	}
	if s.cfg.ModelUsage != nil {
		u, budget := s.cfg.ModelUsage.SessionUsage(r.Context(), id)
		page.ModelUsage, page.TokenBudget = &u, budget
	}
	writeJSON(w, http.StatusOK, page)
}
