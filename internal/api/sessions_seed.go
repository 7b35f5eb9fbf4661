package api

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/agentd/agentd/conversation"
	"github.com/agentd/agentd/restapi"
)

// Routes the seed's clients call besides the first set (docs/api.md):
// options, sync, environment terminate, and workspace file contents.

func (s *Server) handleUpdateOptions(w http.ResponseWriter, r *http.Request) {
	var req restapi.UpdateOptionsRequest
	if err := decode(r, &req, false); err != nil {
		s.fail(w, r, err)
		return
	}
	if t := bytes.TrimSpace(req.SessionOptions); len(t) == 0 || t[0] != '{' {
		s.fail(w, r, badRequest(`body must be {"sessionOptions": {…}}`))
		return
	}
	ctx, cancel := shortCtx(r)
	defer cancel()
	id := r.PathValue("id")
	opts, err := s.cfg.Sessions.UpdateOptions(ctx, id, req.SessionOptions, Principal(r.Context()))
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, restapi.UpdateOptionsResponse{Success: true, SessionID: id, SessionOptions: opts})
}

func (s *Server) handleSync(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), syncTimeout)
	defer cancel()
	id := r.PathValue("id")
	res, err := s.cfg.Sessions.Sync(ctx, id)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, restapi.SyncResponse{Success: true, SessionID: id,
		Files:       restapi.SyncFiles{Saved: res.Saved, Deleted: res.Deleted, Unchanged: res.Unchanged, Skipped: res.Skipped},
		Transcripts: res.Transcripts})
}

// syncTimeout bounds a sync: it reads the whole workspace.
const syncTimeout = 5 * time.Minute

func (s *Server) handleTerminateEnvironment(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	sess, err := s.cfg.Sessions.Get(id)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	ctx, cancel := shortCtx(r)
	defer cancel()
	if err := sess.Terminate(ctx, "environment terminated", Principal(r.Context())); err != nil {
		s.fail(w, r, err)
		return
	}
	rec, _, err := s.cfg.Sessions.State(ctx, id)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, restapi.TerminateEnvironmentResponse{Success: true, SessionID: id, Runtime: rec.Runtime})
}

// Bounds of GET /api/sessions/{id}?include=content.
const (
	fileContentMax  = 256 << 10 // one file
	filesContentMax = 8 << 20   // the answer's contents together
)

// includeContent reads ?include: "content" (a comma-separated list, for
// more later) asks for the workspace files' contents.
func includeContent(r *http.Request) (bool, error) {
	content := false
	for _, v := range r.URL.Query()["include"] {
		for _, part := range strings.Split(v, ",") {
			switch strings.TrimSpace(part) {
			case "content":
				content = true
			case "":
			default:
				return false, badRequest(fmt.Sprintf("include %q: the only value is \"content\"", part))
			}
		}
	}
	return content, nil
}

// sessionFiles is the state's workspace files, with their contents when
// asked: text files up to fileContentMax each and filesContentMax in all,
// read from the workspace now (a file changed since its last event is
// read as it is now).
func (s *Server) sessionFiles(ctx context.Context, id string, files []conversation.WorkspaceFile, content bool) []restapi.SessionFile {
	out := make([]restapi.SessionFile, len(files))
	for i, f := range files {
		out[i] = restapi.SessionFile{Path: f.Path, Size: f.Size, SHA256: f.SHA256}
	}
	if !content {
		return out
	}
	budget := filesContentMax
	for i := range out {
		f := &out[i]
		if f.Size != nil && *f.Size > fileContentMax {
			f.ContentOmitted = "too_large"
			continue
		}
		data, err := s.cfg.Sessions.ReadFile(ctx, id, f.Path)
		switch {
		case err != nil:
			f.ContentOmitted = "unreadable"
		case len(data) > fileContentMax:
			f.ContentOmitted = "too_large"
		case !utf8.Valid(data) || slices.Contains(data, 0):
			f.ContentOmitted = "binary"
		case len(data) > budget:
			f.ContentOmitted = "total_limit"
		default:
			budget -= len(data)
			text := string(data)
			f.Content = &text
		}
	}
	return out
}
