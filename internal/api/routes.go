package api

import (
	"encoding/json"
	"net/http"
	"strconv"

	"github.com/agentd/agentd/agent"
	"github.com/agentd/agentd/conversation"
	"github.com/agentd/agentd/internal/auth"
	"github.com/agentd/agentd/internal/session"
	"github.com/agentd/agentd/profile"
	"github.com/agentd/agentd/restapi"
)

// route is one entry of the route table: it registers the handler and
// documents it in OpenAPI, so the two cannot drift apart.
type route struct {
	method, pattern string
	summary         string
	handler         http.HandlerFunc
	auth            bool // needs the API key when one is set
	body            bool // has a request body (size-limited)
	bodyLimit       int  // which limit: MaxBody (default), MaxMessageBody, MaxUploadBytes
	rawBody         bool // the body is not JSON (no Content-Type check)
	legacy          bool
	req             any // request body type, for the schema
	resp            any // success body type, for the schema
	status          int // success status
	params          []param
	kind            string // "", "sse", "ws", "raw"
	// scope is the credential scope the route needs (default: sessions:read
	// for GET, sessions:write otherwise; scopeNone: none); identity.go.
	scope auth.Scope
}

type param struct {
	name, in, desc string
	typ            string // "string" or "integer"
	required       bool
}

var (
	pID      = param{name: "id", in: "path", desc: "Session id", typ: "string", required: true}
	pReq     = param{name: "requestId", in: "path", desc: "Permission request id", typ: "string", required: true}
	pPath    = param{name: "path", in: "path", desc: "Workspace-relative file path", typ: "string", required: true}
	pProfile = param{name: "id", in: "path", desc: "Profile id", typ: "string", required: true}
	pAfter   = param{name: "after", in: "query", desc: "Return events with seq > after (default 0)", typ: "integer"}
	pLimit   = param{name: "limit", in: "query", desc: "At most this many events (default 1000, max 10000)", typ: "integer"}
	pPurge   = param{name: "purge", in: "query", desc: "Also delete history, files and workspace", typ: "boolean"}
	pMessage = param{name: "messageId", in: "path", desc: "Queued message id", typ: "string", required: true}
	pSHA     = param{name: "sha256", in: "path", desc: "Content hash (hex)", typ: "string", required: true}
	pFormat  = param{name: "format", in: "query", desc: "zip (default) or tar.gz", typ: "string"}
	pInclude = param{name: "include", in: "query", desc: "content: the workspace files' text contents (bounded)", typ: "string"}
	pBlocks  = param{name: "limit", in: "query", desc: "Most main-conversation blocks to return, the last ones (1-1000; default 200); the page also stops before 512 KiB of blocks", typ: "integer"}
	pBefore  = param{name: "before", in: "query", desc: "Return the blocks before this block id (the blocks[0].id of the previous page)", typ: "string"}
)

func (s *Server) table() []route {
	return []route{
		{method: "GET", pattern: "/health", summary: "Liveness", handler: s.handleHealth, resp: restapi.Health{}, status: 200},
		{method: "GET", pattern: "/metrics", summary: "Prometheus metrics (an admin credential when auth is on)", handler: s.handleMetrics(), auth: true, scope: auth.ScopeAdmin, status: 200, kind: "raw"},
		{method: "GET", pattern: "/api/openapi.json", summary: "This document", handler: s.handleOpenAPI, auth: true, scope: scopeNone, status: 200, kind: "raw"},
		{method: "GET", pattern: "/api/auth", summary: "Whether and how to authenticate (token, OIDC)", handler: s.handleAuth, resp: restapi.AuthInfo{}, status: 200},
		{method: "GET", pattern: "/api/agent-profiles", summary: "List agent profiles", handler: s.handleProfiles, auth: true, resp: restapi.ProfileList{}, status: 200},
		{method: "GET", pattern: "/api/agent-profiles/{id}", summary: "One agent profile", handler: s.handleProfile, auth: true, resp: profile.Profile{}, status: 200, params: []param{pProfile}},
		{method: "GET", pattern: "/api/architectures", summary: "Architectures and whether their agent CLI is available", handler: s.handleArchitectures, auth: true, resp: restapi.ArchitectureList{}, status: 200},
		{method: "GET", pattern: "/api/sandboxes", summary: "Sandbox backends: what each isolates, limits, warm pools", handler: s.handleSandboxes, auth: true, resp: restapi.SandboxList{}, status: 200},
		{method: "POST", pattern: "/api/sessions", summary: "Create a session", handler: s.handleCreate, auth: true, body: true, req: restapi.CreateSessionRequest{}, resp: restapi.CreateSessionResponse{}, status: 201},
		{method: "GET", pattern: "/api/sessions", summary: "List sessions", handler: s.handleList, auth: true, resp: restapi.SessionList{}, status: 200},
		{method: "GET", pattern: "/api/sessions/{id}", summary: "A session's state, its last blocks (paged)", handler: s.handleGet, auth: true, resp: restapi.SessionState{}, status: 200, params: []param{pID, pInclude, pBlocks, pBefore}},
		{method: "DELETE", pattern: "/api/sessions/{id}", summary: "Terminate a session's environment (purge=true also deletes it)", handler: s.handleDelete, auth: true, resp: restapi.SessionSuccess{}, status: 200, params: []param{pID, pPurge}},
		{method: "PATCH", pattern: "/api/sessions/{id}", summary: "Rename a session", handler: s.handleRename, auth: true, body: true, req: restapi.RenameSessionRequest{}, resp: restapi.SessionSummary{}, status: 200, params: []param{pID}},
		{method: "PATCH", pattern: "/api/sessions/{id}/options", summary: "Change a session's options (for its agent's next start)", handler: s.handleUpdateOptions, auth: true, body: true, req: restapi.UpdateOptionsRequest{}, resp: restapi.UpdateOptionsResponse{}, status: 200, params: []param{pID}},
		{method: "POST", pattern: "/api/sessions/{id}/sync", summary: "Persist the session's workspace and agent transcript to the store now", handler: s.handleSync, auth: true, body: true, resp: restapi.SyncResponse{}, status: 200, params: []param{pID}},
		{method: "POST", pattern: "/api/sessions/{id}/environment/terminate", summary: "Stop the session's environment, keeping the session (the next message starts a new one)", handler: s.handleTerminateEnvironment, auth: true, body: true, resp: restapi.TerminateEnvironmentResponse{}, status: 200, params: []param{pID}},
		{method: "POST", pattern: "/api/sessions/{id}/messages", summary: "Send a user message: starts a turn, or waits in the session's queue while one runs (queue:false: 409 instead)", handler: s.handleMessage, auth: true, body: true, bodyLimit: msgBody, req: restapi.MessageRequest{}, resp: restapi.MessageResponse{}, status: 202, params: []param{pID}},
		{method: "GET", pattern: "/api/sessions/{id}/queue", summary: "The messages waiting for their turn", handler: s.handleQueue, auth: true, resp: restapi.QueuedMessageList{}, status: 200, params: []param{pID}},
		{method: "DELETE", pattern: "/api/sessions/{id}/queue/{messageId}", summary: "Drop a queued message", handler: s.handleCancelQueued, auth: true, resp: restapi.Success{}, status: 200, params: []param{pID, pMessage}},
		{method: "POST", pattern: "/api/sessions/{id}/interrupt", summary: "Interrupt the running turn", handler: s.handleInterrupt, auth: true, body: true, resp: restapi.Success{}, status: 202, params: []param{pID}},
		{method: "POST", pattern: "/api/sessions/{id}/permissions/{requestId}", summary: "Answer a permission request", handler: s.handlePermission, auth: true, body: true, req: restapi.PermissionAnswer{}, resp: restapi.Success{}, status: 200, params: []param{pID, pReq}},
		{method: "GET", pattern: "/api/sessions/{id}/files", summary: "List the workspace", handler: s.handleFiles, auth: true, resp: restapi.FileList{}, status: 200, params: []param{pID}},
		{method: "GET", pattern: "/api/sessions/{id}/files/{path...}", summary: "A workspace file's bytes", handler: s.handleFile, auth: true, status: 200, params: []param{pID, pPath}, kind: "raw"},
		{method: "PUT", pattern: "/api/sessions/{id}/files/{path...}", summary: "Write a workspace file (the raw body, at most MaxUploadBytes)", handler: s.handlePutFile, auth: true, body: true, bodyLimit: uploadBody, rawBody: true, resp: restapi.FileEntry{}, status: 200, params: []param{pID, pPath}},
		{method: "GET", pattern: "/api/sessions/{id}/changes", summary: "What each turn, and the whole session, changed in the workspace", handler: s.handleChanges, auth: true, resp: restapi.SessionChanges{}, status: 200, params: []param{pID}},
		{method: "GET", pattern: "/api/sessions/{id}/changes/content/{sha256}", summary: "A file content kept by the workspace snapshots, by sha256", handler: s.handleChangedContent, auth: true, status: 200, params: []param{pID, pSHA}, kind: "raw"},
		{method: "GET", pattern: "/api/sessions/{id}/artifacts/{sha256}", summary: "An artifact's bytes (a large output kept whole, an image, a file), by sha256: ETag, Range, Content-Disposition", handler: s.handleArtifact, auth: true, status: 200, params: []param{pID, pSHA}, kind: "raw"},
		{method: "GET", pattern: "/api/sessions/{id}/archive", summary: "The workspace as a zip or tar.gz download", handler: s.handleArchive, auth: true, status: 200, params: []param{pID, pFormat}, kind: "raw"},
		{method: "GET", pattern: "/api/sessions/{id}/events", summary: "Events after a seq: a JSON page, or SSE with Accept: text/event-stream", handler: s.handleEvents, auth: true, resp: restapi.EventPage{}, status: 200, params: []param{pID, pAfter, pLimit}, kind: "sse"},
		{method: "GET", pattern: "/api/sessions/{id}/audit", summary: "Audit records (executor calls, model requests) after an id, and the model proxy's token count", handler: s.handleAudit, auth: true, resp: AuditPage{}, status: 200, params: []param{pID, {name: "after", in: "query", desc: "Return records with id > after (default 0)", typ: "integer"}, {name: "limit", in: "query", desc: "At most this many records (default 1000, max 10000)", typ: "integer"}}},
		{method: "GET", pattern: "/api/sessions/{id}/pty", summary: "WebSocket: a terminal in the session's sandbox", handler: s.handlePTY, auth: true, status: 101, params: []param{pID, {name: "rows", in: "query", typ: "integer", desc: "Terminal rows"}, {name: "cols", in: "query", typ: "integer", desc: "Terminal columns"}}, kind: "ws"},
		{method: "GET", pattern: "/api/ws", summary: "WebSocket: join sessions and receive their events", handler: s.handleWS, auth: true, status: 101, kind: "ws"},

		{method: "POST", pattern: "/sessions", summary: "Legacy alias of POST /api/sessions", handler: s.handleCreate, auth: true, body: true, legacy: true, req: restapi.CreateSessionRequest{}, resp: restapi.CreateSessionResponse{}, status: 201},
		{method: "POST", pattern: "/sessions/create", summary: "Legacy alias of POST /api/sessions", handler: s.handleCreate, auth: true, body: true, legacy: true, req: restapi.CreateSessionRequest{}, resp: restapi.CreateSessionResponse{}, status: 201},
		{method: "GET", pattern: "/sessions", summary: "Legacy alias of GET /api/sessions", handler: s.handleList, auth: true, legacy: true, resp: restapi.SessionList{}, status: 200},
		{method: "GET", pattern: "/sessions/{id}", summary: "Legacy alias of GET /api/sessions/{id}", handler: s.handleGet, auth: true, legacy: true, resp: restapi.SessionState{}, status: 200, params: []param{pID}},
		{method: "POST", pattern: "/sessions/{id}/message", summary: "Legacy alias of POST /api/sessions/{id}/messages", handler: s.handleMessage, auth: true, body: true, legacy: true, req: restapi.MessageRequest{}, resp: restapi.MessageResponse{}, status: 202, params: []param{pID}},
		{method: "DELETE", pattern: "/sessions/{id}", summary: "Legacy alias of DELETE /api/sessions/{id}", handler: s.handleDelete, auth: true, legacy: true, resp: restapi.SessionSuccess{}, status: 200, params: []param{pID, pPurge}},
	}
}

func (s *Server) handleProfiles(w http.ResponseWriter, r *http.Request) {
	ps, err := s.cfg.Profiles.List(r.Context())
	if err != nil {
		s.fail(w, r, err)
		return
	}
	out := restapi.ProfileList{Profiles: make([]profile.Summary, 0, len(ps))}
	for _, p := range ps {
		out.Profiles = append(out.Profiles, p.Summary())
	}
	writeJSON(w, http.StatusOK, out)
}

func (s *Server) handleProfile(w http.ResponseWriter, r *http.Request) {
	p, err := s.cfg.Profiles.Get(r.Context(), r.PathValue("id"))
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, p)
}

func (s *Server) handleArchitectures(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := shortCtx(r)
	defer cancel()
	infos := s.cfg.Architectures.Describe(ctx)
	out := restapi.ArchitectureList{Architectures: make([]restapi.ArchitectureInfo, len(infos))}
	for i, in := range infos {
		out.Architectures[i] = restapi.ArchitectureInfo(in)
	}
	writeJSON(w, http.StatusOK, out)
}

func (s *Server) handleCreate(w http.ResponseWriter, r *http.Request) {
	var req restapi.CreateSessionRequest
	if err := decode(r, &req, false); err != nil {
		s.fail(w, r, err)
		return
	}
	p := PrincipalOf(r.Context())
	if err := s.cfg.Auth.CheckCreate(r.Context(), p); err != nil {
		s.fail(w, r, err)
		return
	}
	creq := session.CreateRequest{AgentProfileRef: req.AgentProfileRef, Architecture: req.Architecture,
		SessionOptions: req.SessionOptions, Name: req.Name}
	if s.cfg.Auth.MultiUser() {
		creq.Owner, creq.Tenant = p.UserID, p.Tenant
	}
	rec, err := s.cfg.Sessions.Create(r.Context(), creq, p.UserID)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusCreated, restapi.CreateSessionResponse{SessionID: rec.ID, Status: rec.Status, Runtime: rec.Runtime, CreatedAt: rec.CreatedAt, SessionOptions: rec.SessionOptions})
}

func (s *Server) handleList(w http.ResponseWriter, r *http.Request) {
	visible, err := s.visibleFilter(r.Context(), PrincipalOf(r.Context()))
	if err != nil {
		s.fail(w, r, err)
		return
	}
	list := s.cfg.Sessions.List(r.Context())
	out := restapi.SessionList{Sessions: make([]restapi.SessionSummary, 0, len(list))}
	for _, sum := range list {
		if visible(sum.Owner, sum.SessionID) {
			out.Sessions = append(out.Sessions, sum)
		}
	}
	writeJSON(w, http.StatusOK, out)
}

func (s *Server) handleGet(w http.ResponseWriter, r *http.Request) {
	content, err := includeContent(r)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	limit, before, err := blockPage(r)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	rec, st, err := s.cfg.Sessions.State(r.Context(), r.PathValue("id"))
	if err != nil {
		s.fail(w, r, err)
		return
	}
	blocks, offset, err := pageBlocks(st.Blocks, limit, before)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, restapi.SessionState{
		SessionID: rec.ID, Type: rec.Architecture, AgentProfileReference: rec.AgentProfileRef, Name: rec.Name,
		Status: rec.Status, CreatedAt: rec.CreatedAt, LastActivity: rec.LastActivity, SessionOptions: rec.SessionOptions,
		Blocks: blocks, BlockOffset: offset, TotalBlocks: len(st.Blocks), HasMore: offset > 0, Subagents: st.Subagents, WorkspaceFiles: s.sessionFiles(r.Context(), rec.ID, st.WorkspaceFiles, content),
		Runtime: rec.Runtime, LastSeq: st.LastSeq, Usage: st.Usage, CostUSD: st.CostUSD, Model: st.Model,
		PendingPermissions: st.PendingPermissions, ActiveQueryID: st.ActiveQueryID, Turns: st.Turns,
		QueuedMessages: st.QueuedMessages, PermissionRules: st.PermissionRules,
	})
}

func (s *Server) handleDelete(w http.ResponseWriter, r *http.Request) {
	purge := false
	if v := r.URL.Query().Get("purge"); v != "" {
		b, err := strconv.ParseBool(v)
		if err != nil {
			s.fail(w, r, badRequest("purge must be true or false"))
			return
		}
		purge = b
	}
	if err := s.cfg.Sessions.Delete(r.Context(), r.PathValue("id"), purge, Principal(r.Context())); err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, restapi.SessionSuccess{Success: true, SessionID: r.PathValue("id")})
}

func (s *Server) handleMessage(w http.ResponseWriter, r *http.Request) {
	var req restapi.MessageRequest
	if err := decode(r, &req, false); err != nil {
		s.fail(w, r, err)
		return
	}
	id := r.PathValue("id")
	sess, err := s.cfg.Sessions.Get(id)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	ctx, cancel := shortCtx(r)
	defer cancel()
	msg, err := s.messageOf(ctx, id, req) // content.go
	if err != nil {
		s.fail(w, r, err)
		return
	}
	if req.Queue != nil && !*req.Queue {
		// The client asked not to queue: 409 while a turn runs.
		qid, err := sess.SendMessage(ctx, msg, Principal(r.Context()))
		if err != nil {
			s.fail(w, r, err)
			return
		}
		writeJSON(w, http.StatusAccepted, restapi.MessageResponse{Success: true, SessionID: sess.ID(), QueryID: qid})
		return
	}
	res, err := sess.SubmitMessage(ctx, msg, Principal(r.Context()))
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusAccepted, restapi.MessageResponse{Success: true, SessionID: sess.ID(), QueryID: res.QueryID,
		Queued: res.MessageID != "", MessageID: res.MessageID})
}

func (s *Server) handleInterrupt(w http.ResponseWriter, r *http.Request) {
	sess, err := s.cfg.Sessions.Get(r.PathValue("id"))
	if err != nil {
		s.fail(w, r, err)
		return
	}
	ctx, cancel := shortCtx(r)
	defer cancel()
	if err := sess.Interrupt(ctx, Principal(r.Context())); err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusAccepted, restapi.Success{Success: true})
}

func (s *Server) handlePermission(w http.ResponseWriter, r *http.Request) {
	var req restapi.PermissionAnswer
	if err := decode(r, &req, false); err != nil {
		s.fail(w, r, err)
		return
	}
	if req.Behavior != conversation.Allow && req.Behavior != conversation.Deny {
		s.fail(w, r, badRequest(`behavior must be "allow" or "deny"`))
		return
	}
	switch req.Scope {
	case "", conversation.ScopeOnce:
	case conversation.ScopeSession:
		if req.Behavior != conversation.Allow {
			s.fail(w, r, badRequest(`scope "session" needs behavior "allow"`))
			return
		}
	default:
		s.fail(w, r, badRequest(`scope must be "once" or "session"`))
		return
	}
	if len(req.UpdatedInput) > 0 && string(req.UpdatedInput) != "null" {
		var obj map[string]any
		if json.Unmarshal(req.UpdatedInput, &obj) != nil {
			s.fail(w, r, badRequest("updatedInput must be a JSON object"))
			return
		}
	}
	sess, err := s.cfg.Sessions.Get(r.PathValue("id"))
	if err != nil {
		s.fail(w, r, err)
		return
	}
	err = sess.Answer(r.Context(), r.PathValue("requestId"), agent.PermissionDecision{
		Behavior: req.Behavior, Message: req.Message, UpdatedInput: req.UpdatedInput, Scope: req.Scope,
	}, Principal(r.Context()))
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, restapi.Success{Success: true})
}

func (s *Server) handleFiles(w http.ResponseWriter, r *http.Request) {
	files, err := s.cfg.Sessions.ListFiles(r.Context(), r.PathValue("id"))
	if err != nil {
		s.fail(w, r, err)
		return
	}
	out := restapi.FileList{Files: make([]restapi.FileEntry, len(files))}
	for i, f := range files {
		out.Files[i] = restapi.FileEntry(f)
	}
	writeJSON(w, http.StatusOK, out)
}
