package api

import (
	"context"
	"net/http"

	"github.com/agentd/agentd/restapi"
)

// SandboxLister describes the server's sandbox backends (GET
// /api/sandboxes).
type SandboxLister interface {
	Sandboxes(ctx context.Context) restapi.SandboxList
}

func (s *Server) handleSandboxes(w http.ResponseWriter, r *http.Request) {
	out := restapi.SandboxList{Sandboxes: []restapi.SandboxInfo{}}
	if s.cfg.Sandboxes != nil {
		out = s.cfg.Sandboxes.Sandboxes(r.Context())
	}
	writeJSON(w, http.StatusOK, out)
}
