// Command fakeagentd is a small stand-in for `agentd serve` that follows the
// contract in docs/api.md closely enough to develop and smoke-test the web UI
// before (or without) the real server: the shell architecture only, events
// kept in JSON-lines files under --data-dir so a restart resumes, the
// WebSocket join/resume protocol, the PTY socket, and the UI from web/dist.
// It is a development tool, not a second implementation of agentd: the
// browser tests run against the real binary (AGENTD_BIN).
//
// Usage: fakeagentd serve --addr 127.0.0.1:0 --data-dir DIR [--dist web/dist]
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/coder/websocket"
	"github.com/creack/pty"

	"github.com/agentd/agentd/conversation"
	"github.com/agentd/agentd/web"
)

func main() {
	if len(os.Args) < 2 || os.Args[1] != "serve" {
		fmt.Fprintln(os.Stderr, "usage: fakeagentd serve --addr HOST:PORT --data-dir DIR [--dist DIR]")
		os.Exit(2)
	}
	fs := flag.NewFlagSet("serve", flag.ExitOnError)
	addr := fs.String("addr", "127.0.0.1:8080", "listen address")
	dataDir := fs.String("data-dir", "./data", "data directory")
	dist := fs.String("dist", "", "serve the UI from this folder instead of the embedded build")
	apiKey := fs.String("api-key", "", "require this bearer key")
	_ = fs.Parse(os.Args[2:])
	s := &server{dir: *dataDir, key: *apiKey, sessions: map[string]*session{}}
	if err := s.load(); err != nil {
		slog.Error("load", "err", err)
		os.Exit(1)
	}
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		slog.Error("listen", "err", err)
		os.Exit(1)
	}
	ui := web.Handler()
	if *dist != "" {
		ui = web.NewHandler(os.DirFS(*dist))
	}
	fmt.Printf("agentd listening on http://%s\n", ln.Addr())
	_ = http.Serve(ln, s.routes(ui))
}

type session struct {
	mu       sync.Mutex
	perms    map[string]chan string
	Meta     map[string]any `json:"meta"`
	events   []conversation.Event
	subs     map[chan conversation.Event]struct{}
	turns    int
	cancel   context.CancelFunc
	activeQ  string
	log      *os.File
	workdir  string
	statusNm string
}

type server struct {
	dir      string
	key      string
	mu       sync.Mutex
	sessions map[string]*session
	listSubs map[chan map[string]any]struct{}
}

func (s *server) load() error {
	if err := os.MkdirAll(filepath.Join(s.dir, "sessions"), 0o755); err != nil {
		return err
	}
	ents, _ := os.ReadDir(filepath.Join(s.dir, "sessions"))
	for _, e := range ents {
		if !strings.HasSuffix(e.Name(), ".jsonl") {
			continue
		}
		id := strings.TrimSuffix(e.Name(), ".jsonl")
		metaB, err := os.ReadFile(filepath.Join(s.dir, "sessions", id+".json"))
		if err != nil {
			continue
		}
		ss := &session{subs: map[chan conversation.Event]struct{}{}, workdir: filepath.Join(s.dir, "work", id)}
		_ = json.Unmarshal(metaB, &ss.Meta)
		f, err := os.Open(filepath.Join(s.dir, "sessions", e.Name()))
		if err != nil {
			return err
		}
		sc := bufio.NewScanner(f)
		sc.Buffer(make([]byte, 1<<20), 64<<20)
		for sc.Scan() {
			var ev conversation.Event
			if json.Unmarshal(sc.Bytes(), &ev) == nil {
				ss.events = append(ss.events, ev)
			}
		}
		f.Close()
		st, _ := conversation.Reduce(ss.events)
		for _, ev := range ss.events {
			if ev.Type == conversation.TypeQueryStarted {
				ss.turns++
			}
		}
		ss.log, err = os.OpenFile(filepath.Join(s.dir, "sessions", e.Name()), os.O_APPEND|os.O_WRONLY, 0o644)
		if err != nil {
			return err
		}
		s.sessions[id] = ss
		if st.ActiveQueryID != "" {
			// The turn's process died with the previous server.
			s.emit(id, ss, conversation.NewEvent(conversation.QueryFailed{QueryID: st.ActiveQueryID, Error: "server restarted during the turn", Code: "INTERRUPTED"}))
			s.emit(id, ss, conversation.NewEvent(conversation.StatusChange{Status: conversation.SessionIdle, Runtime: conversation.Runtime{Status: conversation.SessionIdle, Architecture: "shell"}}))
		}
	}
	return nil
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}

func fail(w http.ResponseWriter, status int, code, msg string) {
	writeJSON(w, status, map[string]string{"error": msg, "code": code})
}

func (s *server) auth(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if s.key != "" && strings.HasPrefix(r.URL.Path, "/api/") && r.URL.Path != "/api/auth" {
			tok := strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ")
			if tok == "" {
				tok = r.URL.Query().Get("access_token")
			}
			if tok != s.key {
				fail(w, 401, "UNAUTHORIZED", "missing or wrong API key")
				return
			}
		}
		next.ServeHTTP(w, r)
	})
}

func (s *server) routes(ui http.Handler) http.Handler {
	m := http.NewServeMux()
	m.HandleFunc("GET /health", func(w http.ResponseWriter, r *http.Request) { writeJSON(w, 200, map[string]string{"status": "ok"}) })
	m.HandleFunc("GET /api/auth", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, 200, map[string]bool{"required": s.key != ""})
	})
	m.HandleFunc("GET /api/agent-profiles", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, 200, map[string]any{"profiles": []map[string]string{{"id": "default", "name": "default", "description": "built-in"}}})
	})
	m.HandleFunc("GET /api/architectures", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, 200, map[string]any{"architectures": []map[string]any{
			{"name": "shell", "aliases": []string{}, "available": true},
			{"name": "claude-code", "aliases": []string{"claude-sdk"}, "available": false},
		}})
	})
	m.HandleFunc("POST /api/sessions", s.create)
	m.HandleFunc("GET /api/sessions", func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		list := make([]map[string]any, 0, len(s.sessions))
		for id, ss := range s.sessions {
			list = append(list, s.summary(id, ss))
		}
		s.mu.Unlock()
		sort.Slice(list, func(i, j int) bool { return list[i]["createdAt"].(string) > list[j]["createdAt"].(string) })
		writeJSON(w, 200, map[string]any{"sessions": list})
	})
	m.HandleFunc("GET /api/sessions/{id}", func(w http.ResponseWriter, r *http.Request) {
		ss := s.get(w, r)
		if ss == nil {
			return
		}
		ss.mu.Lock()
		st, _ := conversation.Reduce(ss.events)
		ss.mu.Unlock()
		var out map[string]any
		b, _ := json.Marshal(st)
		_ = json.Unmarshal(b, &out)
		for k, v := range s.summary(r.PathValue("id"), ss) {
			if k != "status" || out["status"] == "" {
				out[k] = v
			}
		}
		writeJSON(w, 200, out)
	})
	m.HandleFunc("POST /api/sessions/{id}/messages", s.message)
	m.HandleFunc("POST /api/sessions/{id}/interrupt", func(w http.ResponseWriter, r *http.Request) {
		ss := s.get(w, r)
		if ss == nil {
			return
		}
		ss.mu.Lock()
		c := ss.cancel
		ss.mu.Unlock()
		if c == nil {
			fail(w, 409, "NO_ACTIVE_TURN", "no turn is running")
			return
		}
		c()
		writeJSON(w, 202, map[string]bool{"success": true})
	})
	m.HandleFunc("GET /api/sessions/{id}/files", func(w http.ResponseWriter, r *http.Request) {
		ss := s.get(w, r)
		if ss == nil {
			return
		}
		files := []map[string]any{}
		_ = filepath.WalkDir(ss.workdir, func(p string, d os.DirEntry, err error) error {
			if err != nil || p == ss.workdir {
				return nil
			}
			info, _ := d.Info()
			rel, _ := filepath.Rel(ss.workdir, p)
			files = append(files, map[string]any{"path": rel, "size": info.Size(), "isDir": d.IsDir(), "modTime": info.ModTime()})
			return nil
		})
		writeJSON(w, 200, map[string]any{"files": files})
	})
	m.HandleFunc("GET /api/sessions/{id}/files/{path...}", func(w http.ResponseWriter, r *http.Request) {
		ss := s.get(w, r)
		if ss == nil {
			return
		}
		p := filepath.Join(ss.workdir, filepath.FromSlash(r.PathValue("path")))
		if !strings.HasPrefix(p, ss.workdir+string(filepath.Separator)) {
			fail(w, 400, "INVALID_PATH", "path outside the workspace")
			return
		}
		b, err := os.ReadFile(p)
		if err != nil {
			fail(w, 404, "FILE_NOT_FOUND", "no such file")
			return
		}
		_, _ = w.Write(b)
	})
	m.HandleFunc("GET /api/sessions/{id}/events", func(w http.ResponseWriter, r *http.Request) {
		ss := s.get(w, r)
		if ss == nil {
			return
		}
		var after int64
		fmt.Sscan(r.URL.Query().Get("after"), &after)
		ss.mu.Lock()
		evs := append([]conversation.Event{}, ss.events[min(int(after), len(ss.events)):]...)
		last := int64(len(ss.events))
		ss.mu.Unlock()
		writeJSON(w, 200, map[string]any{"events": evs, "lastSeq": last})
	})
	m.HandleFunc("POST /api/sessions/{id}/permissions/{rid}", s.answer)
	m.HandleFunc("GET /api/sessions/{id}/pty", s.pty)
	m.HandleFunc("GET /api/ws", s.ws)
	m.Handle("/", ui)
	return s.auth(m)
}

func (s *server) get(w http.ResponseWriter, r *http.Request) *session {
	s.mu.Lock()
	ss := s.sessions[r.PathValue("id")]
	s.mu.Unlock()
	if ss == nil {
		fail(w, 404, "SESSION_NOT_FOUND", "no such session")
	}
	return ss
}

func (s *server) summary(id string, ss *session) map[string]any {
	out := map[string]any{}
	for k, v := range ss.Meta {
		out[k] = v
	}
	out["sessionId"] = id
	ss.mu.Lock()
	out["lastSeq"] = len(ss.events)
	if n := len(ss.events); n > 0 {
		out["lastActivity"] = ss.events[n-1].Context.Timestamp.Format(time.RFC3339Nano)
	}
	st := "idle"
	for i := len(ss.events) - 1; i >= 0; i-- {
		if ss.events[i].Type == conversation.TypeStatus {
			var p conversation.StatusChange
			_ = json.Unmarshal(ss.events[i].Payload, &p)
			st = string(p.Status)
			break
		}
	}
	ss.mu.Unlock()
	out["status"] = st
	return out
}

func (s *server) create(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Architecture    string         `json:"architecture"`
		AgentProfileRef string         `json:"agentProfileRef"`
		Name            string         `json:"name"`
		SessionOptions  map[string]any `json:"sessionOptions"`
	}
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		fail(w, 400, "BAD_REQUEST", err.Error())
		return
	}
	if req.Architecture != "shell" {
		fail(w, 400, "UNKNOWN_ARCHITECTURE", "fakeagentd runs shell sessions only")
		return
	}
	id := fmt.Sprintf("s%d", time.Now().UnixNano())
	now := time.Now().UTC().Format(time.RFC3339Nano)
	ss := &session{subs: map[chan conversation.Event]struct{}{}, workdir: filepath.Join(s.dir, "work", id)}
	ss.Meta = map[string]any{"type": "shell", "agentProfileReference": "default", "name": req.Name, "createdAt": now, "lastActivity": now}
	_ = os.MkdirAll(ss.workdir, 0o755)
	b, _ := json.Marshal(ss.Meta)
	_ = os.WriteFile(filepath.Join(s.dir, "sessions", id+".json"), b, 0o644)
	var err error
	ss.log, err = os.OpenFile(filepath.Join(s.dir, "sessions", id+".jsonl"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		fail(w, 500, "INTERNAL", err.Error())
		return
	}
	s.mu.Lock()
	s.sessions[id] = ss
	s.mu.Unlock()
	s.emit(id, ss, conversation.NewEvent(conversation.StatusChange{Status: conversation.SessionReady, Runtime: conversation.Runtime{Status: conversation.SessionReady, Architecture: "shell"}}))
	writeJSON(w, 201, map[string]any{"sessionId": id, "runtime": map[string]string{"status": "ready", "architecture": "shell"}, "createdAt": now})
}

// emit appends e durably and fans it out.
func (s *server) emit(id string, ss *session, e conversation.Event) {
	ss.mu.Lock()
	e.Seq = int64(len(ss.events) + 1)
	e.Context.SessionID = id
	if e.Context.ConversationID == "" {
		e.Context.ConversationID = "main"
	}
	if e.Context.Source == "" {
		e.Context.Source = conversation.SourceServer
	}
	e.Context.Timestamp = time.Now().UTC()
	b, _ := json.Marshal(e)
	_, _ = ss.log.Write(append(b, '\n'))
	ss.events = append(ss.events, e)
	var slow []chan conversation.Event
	for ch := range ss.subs {
		select {
		case ch <- e:
		default:
			slow = append(slow, ch)
		}
	}
	for _, ch := range slow {
		delete(ss.subs, ch)
		close(ch)
	}
	ss.mu.Unlock()
	if e.Type == conversation.TypeStatus || e.Type == conversation.TypeQueryStarted || e.Type == conversation.TypeSessionIdle {
		sum := s.summary(id, ss)
		s.mu.Lock()
		for ch := range s.listSubs {
			select {
			case ch <- sum:
			default:
			}
		}
		s.mu.Unlock()
	}
}

func (s *server) message(w http.ResponseWriter, r *http.Request) {
	ss := s.get(w, r)
	if ss == nil {
		return
	}
	id := r.PathValue("id")
	var req struct {
		Content string `json:"content"`
	}
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil || req.Content == "" {
		fail(w, 400, "BAD_REQUEST", "content is required")
		return
	}
	ss.mu.Lock()
	if ss.cancel != nil {
		ss.mu.Unlock()
		fail(w, 409, "SESSION_BUSY", "a turn is running")
		return
	}
	ss.turns++
	q := fmt.Sprintf("q%d", ss.turns)
	ctx, cancel := context.WithCancel(context.Background())
	ss.cancel = cancel
	ss.mu.Unlock()
	src := func(e conversation.Event, from conversation.Source) conversation.Event { return e.From(from) }
	s.emit(id, ss, src(conversation.Upsert(conversation.Block{ID: q + "-user", Type: conversation.BlockUserMessage, Content: req.Content, Status: conversation.StatusComplete}), conversation.SourceClient))
	s.emit(id, ss, conversation.NewEvent(conversation.QueryStarted{QueryID: q, Content: req.Content}))
	s.emit(id, ss, conversation.NewEvent(conversation.StatusChange{Status: conversation.SessionRunning, Runtime: conversation.Runtime{Status: conversation.SessionRunning, Architecture: "shell", ActiveQueryID: q}}))
	writeJSON(w, 202, map[string]any{"success": true, "sessionId": id, "queryId": q})
	switch {
	case req.Content == "demo":
		go s.demo(ctx, id, ss, q)
	case strings.HasPrefix(req.Content, "ask:"):
		go s.ask(ctx, id, ss, q, strings.TrimSpace(strings.TrimPrefix(req.Content, "ask:")))
	default:
		go s.run(ctx, id, ss, q, req.Content)
	}
}

// finish ends a scripted turn.
func (s *server) finish(id string, ss *session, q string) {
	ss.mu.Lock()
	ss.cancel = nil
	ss.mu.Unlock()
	s.emit(id, ss, conversation.NewEvent(conversation.QueryCompleted{QueryID: q}))
	s.emit(id, ss, conversation.NewEvent(conversation.StatusChange{Status: conversation.SessionIdle, Runtime: conversation.Runtime{Status: conversation.SessionIdle, Architecture: "shell"}}))
}

// demo emits one of every kind of block, for UI work and rendering tests.
func (s *server) demo(ctx context.Context, id string, ss *session, q string) {
	r := func(e conversation.Event) conversation.Event { return e.From(conversation.SourceRunner) }
	s.emit(id, ss, r(conversation.Upsert(conversation.Block{ID: q + "-think", Type: conversation.BlockThinking, Status: conversation.StatusPending})))
	for _, part := range []string{"Let me look ", "at the code ", "first."} {
		s.emit(id, ss, r(conversation.Delta(q+"-think", part)))
	}
	s.emit(id, ss, r(conversation.Upsert(conversation.Block{ID: q + "-think", Type: conversation.BlockThinking, Status: conversation.StatusComplete})))
	md := "## Plan\n\nI will **fix** the `greeting` in [main.go](https://example.com/main.go):\n\n1. edit the file\n2. run the tests\n\n```go\nfmt.Println(\"hi\")\n```\n\n<script>alert(1)</script>"
	s.emit(id, ss, r(conversation.Upsert(conversation.Block{ID: q + "-text", Type: conversation.BlockAssistantText, Status: conversation.StatusPending, Model: "demo-model"})))
	for i := 0; i < len(md); i += 16 {
		s.emit(id, ss, r(conversation.Delta(q+"-text", md[i:min(i+16, len(md))])))
	}
	edit, _ := json.Marshal(map[string]string{"file_path": "main.go", "old_string": "fmt.Println(\"hello\")\nreturn", "new_string": "fmt.Println(\"hi\")\nreturn"})
	s.emit(id, ss, r(conversation.Upsert(conversation.Block{ID: q + "-edit", Type: conversation.BlockToolUse, ToolName: "Edit", ToolUseID: q + "-edit", Input: edit, Status: conversation.StatusComplete})))
	s.emit(id, ss, r(conversation.Upsert(conversation.Block{ID: q + "-edit-result", Type: conversation.BlockToolResult, ToolUseID: q + "-edit", Output: "The file main.go has been updated.", Status: conversation.StatusComplete})))
	task, _ := json.Marshal(map[string]string{"description": "Explore the repo", "prompt": "List the Go files"})
	tu := q + "-task"
	s.emit(id, ss, r(conversation.Upsert(conversation.Block{ID: tu, Type: conversation.BlockToolUse, ToolName: "Task", ToolUseID: tu, Input: task, Status: conversation.StatusPending})))
	s.emit(id, ss, r(conversation.NewEvent(conversation.SubagentSpawned{ToolUseID: tu, Prompt: "List the Go files", SubagentType: "explorer", Description: "Explore the repo"})))
	s.emit(id, ss, r(conversation.Upsert(conversation.Block{ID: q + "-sub-0", Type: conversation.BlockAssistantText, Content: "Found **2** Go files.", Status: conversation.StatusComplete}).In(tu)))
	s.emit(id, ss, r(conversation.NewEvent(conversation.SubagentCompleted{ToolUseID: tu, Status: conversation.StatusComplete, Output: "main.go, util.go", DurationMs: 1200})))
	s.emit(id, ss, r(conversation.Upsert(conversation.Block{ID: tu, Type: conversation.BlockToolUse, Status: conversation.StatusComplete})))
	s.emit(id, ss, r(conversation.Upsert(conversation.Block{ID: q + "-err", Type: conversation.BlockError, Message: "rate limited, retrying", Code: "RATE_LIMIT"})))
	in, out, cost := int64(1200), int64(340), 0.0123
	s.emit(id, ss, r(conversation.NewEvent(conversation.MetadataUpdate{Usage: &conversation.Usage{InputTokens: in, OutputTokens: out}, CostUSD: &cost, Model: "demo-model"})))
	s.finish(id, ss, q)
}

// ask asks permission to run command, then runs it (allow) or reports the denial.
func (s *server) ask(ctx context.Context, id string, ss *session, q, command string) {
	rid := q + "-perm"
	ch := make(chan string, 1)
	ss.mu.Lock()
	if ss.perms == nil {
		ss.perms = map[string]chan string{}
	}
	ss.perms[rid] = ch
	ss.mu.Unlock()
	input, _ := json.Marshal(map[string]string{"command": command})
	s.emit(id, ss, conversation.NewEvent(conversation.PermissionRequested{RequestID: rid, ToolName: "Bash", Input: input, ExpiresAt: time.Now().Add(45 * time.Second)}))
	var behavior string
	by := conversation.ByUser
	select {
	case behavior = <-ch:
	case <-time.After(45 * time.Second):
		behavior, by = "deny", conversation.ByTimeout
	case <-ctx.Done():
		behavior, by = "deny", conversation.ByInterrupt
	}
	ss.mu.Lock()
	delete(ss.perms, rid)
	ss.mu.Unlock()
	s.emit(id, ss, conversation.NewEvent(conversation.PermissionResolved{RequestID: rid, Behavior: conversation.PermissionBehavior(behavior), By: by}))
	if behavior == "allow" {
		ss.mu.Lock()
		ss.cancel = nil
		ss.mu.Unlock()
		// run takes over the turn (and its end events).
		ctx2, cancel := context.WithCancel(context.Background())
		ss.mu.Lock()
		ss.cancel = cancel
		ss.mu.Unlock()
		s.run(ctx2, id, ss, q, command)
		return
	}
	s.emit(id, ss, conversation.Upsert(conversation.Block{ID: q + "-denied", Type: conversation.BlockAssistantText, Content: "Permission denied; not running it.", Status: conversation.StatusComplete}).From(conversation.SourceRunner))
	s.finish(id, ss, q)
}

func (s *server) answer(w http.ResponseWriter, r *http.Request) {
	ss := s.get(w, r)
	if ss == nil {
		return
	}
	var req struct {
		Behavior string `json:"behavior"`
	}
	if json.NewDecoder(r.Body).Decode(&req) != nil || (req.Behavior != "allow" && req.Behavior != "deny") {
		fail(w, 400, "BAD_REQUEST", "behavior must be allow or deny")
		return
	}
	ss.mu.Lock()
	ch := ss.perms[r.PathValue("rid")]
	ss.mu.Unlock()
	if ch == nil {
		fail(w, 404, "PERMISSION_NOT_FOUND", "no such pending request")
		return
	}
	select {
	case ch <- req.Behavior:
		writeJSON(w, 200, map[string]bool{"success": true})
	default:
		fail(w, 409, "PERMISSION_ALREADY_RESOLVED", "already answered")
	}
}

func (s *server) run(ctx context.Context, id string, ss *session, q, command string) {
	start := time.Now()
	tu := q + "-cmd"
	input, _ := json.Marshal(map[string]string{"command": command})
	s.emit(id, ss, conversation.Upsert(conversation.Block{ID: tu, Type: conversation.BlockToolUse, ToolName: "Bash", ToolUseID: tu, Input: input, Status: conversation.StatusPending}).From(conversation.SourceRunner))
	rid := conversation.ToolResultID(tu)
	s.emit(id, ss, conversation.Upsert(conversation.Block{ID: rid, Type: conversation.BlockToolResult, ToolUseID: tu, Status: conversation.StatusPending}).From(conversation.SourceRunner))
	cmd := exec.CommandContext(ctx, "sh", "-c", command)
	cmd.Dir = ss.workdir
	pr, pw := io.Pipe()
	cmd.Stdout, cmd.Stderr = pw, pw
	err := cmd.Start()
	done := make(chan struct{})
	go func() {
		defer close(done)
		buf := make([]byte, 4096)
		for {
			n, rerr := pr.Read(buf)
			if n > 0 {
				s.emit(id, ss, conversation.Delta(rid, string(buf[:n])).From(conversation.SourceRunner))
			}
			if rerr != nil {
				return
			}
		}
	}()
	if err == nil {
		err = cmd.Wait()
	}
	pw.Close()
	<-done
	isErr := err != nil
	s.emit(id, ss, conversation.Upsert(conversation.Block{ID: rid, Type: conversation.BlockToolResult, Status: conversation.StatusComplete, IsError: isErr, DurationMs: time.Since(start).Milliseconds()}).From(conversation.SourceRunner))
	s.emit(id, ss, conversation.Upsert(conversation.Block{ID: tu, Type: conversation.BlockToolUse, Status: conversation.StatusComplete}).From(conversation.SourceRunner))
	ss.mu.Lock()
	ss.cancel = nil
	ss.mu.Unlock()
	if ctx.Err() != nil {
		s.emit(id, ss, conversation.NewEvent(conversation.QueryCompleted{QueryID: q, Interrupted: true}))
	} else {
		s.emit(id, ss, conversation.NewEvent(conversation.QueryCompleted{QueryID: q, DurationMs: time.Since(start).Milliseconds()}))
	}
	s.emit(id, ss, conversation.NewEvent(conversation.StatusChange{Status: conversation.SessionIdle, Runtime: conversation.Runtime{Status: conversation.SessionIdle, Architecture: "shell"}}))
	s.emit(id, ss, conversation.NewEvent(conversation.SessionIdleEvent{}))
}

type frame struct {
	Op        string `json:"op"`
	ID        string `json:"id,omitempty"`
	SessionID string `json:"sessionId,omitempty"`
	After     int64  `json:"after,omitempty"`
}

func (s *server) ws(w http.ResponseWriter, r *http.Request) {
	c, err := websocket.Accept(w, r, &websocket.AcceptOptions{InsecureSkipVerify: true})
	if err != nil {
		return
	}
	defer c.CloseNow()
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	out := make(chan any, 8192)
	var wmu sync.Mutex
	send := func(v any) bool {
		select {
		case out <- v:
			return true
		default:
			c.Close(4008, "slow consumer")
			cancel()
			return false
		}
	}
	go func() {
		for {
			select {
			case <-ctx.Done():
				return
			case v := <-out:
				b, _ := json.Marshal(v)
				wmu.Lock()
				err := c.Write(ctx, websocket.MessageText, b)
				wmu.Unlock()
				if err != nil {
					cancel()
					return
				}
			}
		}
	}()
	joined := map[string]func(){}
	defer func() {
		for _, leave := range joined {
			leave()
		}
	}()
	for {
		_, data, err := c.Read(ctx)
		if err != nil {
			return
		}
		var f frame
		if json.Unmarshal(data, &f) != nil {
			send(map[string]any{"op": "error", "error": map[string]string{"code": "BAD_REQUEST", "error": "not JSON"}})
			continue
		}
		switch f.Op {
		case "ping":
			send(map[string]any{"op": "pong", "id": f.ID})
		case "leave":
			if l := joined[f.SessionID]; l != nil {
				l()
				delete(joined, f.SessionID)
			}
			send(map[string]any{"op": "ack", "id": f.ID, "ok": true})
		case "join":
			if f.SessionID == "*" {
				ch := make(chan map[string]any, 256)
				s.mu.Lock()
				if s.listSubs == nil {
					s.listSubs = map[chan map[string]any]struct{}{}
				}
				s.listSubs[ch] = struct{}{}
				s.mu.Unlock()
				joined["*"] = func() { s.mu.Lock(); delete(s.listSubs, ch); s.mu.Unlock() }
				send(map[string]any{"op": "ack", "id": f.ID, "ok": true})
				go func() {
					for {
						select {
						case <-ctx.Done():
							return
						case sum := <-ch:
							send(map[string]any{"op": "sessions", "session": sum})
						}
					}
				}()
				continue
			}
			s.mu.Lock()
			ss := s.sessions[f.SessionID]
			s.mu.Unlock()
			if ss == nil {
				send(map[string]any{"op": "ack", "id": f.ID, "ok": false, "error": map[string]string{"code": "SESSION_NOT_FOUND", "error": "no such session"}})
				continue
			}
			ch := make(chan conversation.Event, 4096)
			ss.mu.Lock()
			backlog := append([]conversation.Event{}, ss.events[min(int(f.After), len(ss.events)):]...)
			ss.subs[ch] = struct{}{}
			ss.mu.Unlock()
			joined[f.SessionID] = func() { ss.mu.Lock(); delete(ss.subs, ch); ss.mu.Unlock() }
			send(map[string]any{"op": "ack", "id": f.ID, "ok": true})
			go func() {
				for _, e := range backlog {
					if !send(map[string]any{"op": "event", "event": e}) {
						return
					}
				}
				for {
					select {
					case <-ctx.Done():
						return
					case e, ok := <-ch:
						if !ok {
							c.Close(4008, "slow consumer")
							cancel()
							return
						}
						if !send(map[string]any{"op": "event", "event": e}) {
							return
						}
					}
				}
			}()
		default:
			send(map[string]any{"op": "error", "error": map[string]string{"code": "BAD_REQUEST", "error": "unknown op"}})
		}
	}
}

func (s *server) pty(w http.ResponseWriter, r *http.Request) {
	ss := s.get(w, r)
	if ss == nil {
		return
	}
	c, err := websocket.Accept(w, r, &websocket.AcceptOptions{InsecureSkipVerify: true})
	if err != nil {
		return
	}
	defer c.CloseNow()
	var rows, cols uint16 = 24, 80
	fmt.Sscan(r.URL.Query().Get("rows"), &rows)
	fmt.Sscan(r.URL.Query().Get("cols"), &cols)
	cmd := exec.Command("sh")
	cmd.Dir = ss.workdir
	cmd.Env = append(os.Environ(), "TERM=xterm-256color")
	f, err := pty.StartWithSize(cmd, &pty.Winsize{Rows: rows, Cols: cols})
	if err != nil {
		c.Close(websocket.StatusInternalError, err.Error())
		return
	}
	defer f.Close()
	ctx := r.Context()
	go func() {
		for {
			typ, data, err := c.Read(ctx)
			if err != nil {
				_ = cmd.Process.Kill()
				return
			}
			if typ == websocket.MessageBinary {
				_, _ = f.Write(data)
				continue
			}
			var m struct {
				Type       string
				Rows, Cols uint16
			}
			if json.Unmarshal(data, &m) == nil && m.Type == "resize" {
				_ = pty.Setsize(f, &pty.Winsize{Rows: m.Rows, Cols: m.Cols})
			}
		}
	}()
	buf := make([]byte, 8192)
	for {
		n, err := f.Read(buf)
		if n > 0 {
			if c.Write(ctx, websocket.MessageBinary, buf[:n]) != nil {
				break
			}
		}
		if err != nil {
			break
		}
	}
	code := 0
	if werr := cmd.Wait(); werr != nil {
		var ee *exec.ExitError
		if errors.As(werr, &ee) {
			code = ee.ExitCode()
		}
	}
	b, _ := json.Marshal(map[string]any{"type": "exit", "code": code})
	_ = c.Write(ctx, websocket.MessageText, b)
	c.Close(websocket.StatusNormalClosure, "")
}
