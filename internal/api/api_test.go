package api_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
	"go.uber.org/goleak"

	"github.com/agentd/agentd/agent"
	"github.com/agentd/agentd/conversation"
	"github.com/agentd/agentd/internal/agent/shell"
	"github.com/agentd/agentd/internal/api"
	"github.com/agentd/agentd/internal/eventlog"
	"github.com/agentd/agentd/internal/sandbox/local"
	"github.com/agentd/agentd/internal/session"
	"github.com/agentd/agentd/store"
	"github.com/agentd/agentd/store/memstore"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		// The Socket.IO library keeps package-level timers and pools.
		goleak.IgnoreAnyFunction("github.com/zishang520/socket.io/v3/pkg/queue.(*Queue).run"),
		// Its timers (a closed connection's ping timeout) each run a
		// goroutine until they fire, which the library does not always
		// clear at close: seen once in 12 -race runs of the revocation
		// tests.
		goleak.IgnoreTopFunction("github.com/zishang520/socket.io/v3/pkg/utils.SetTimeout.func1"),
		// Idle keep-alive connections of http.DefaultClient wind down after
		// the test servers close.
		goleak.IgnoreTopFunction("net/http.(*persistConn).readLoop"),
		goleak.IgnoreTopFunction("net/http.(*persistConn).writeLoop"),
	)
}

type env struct {
	t   *testing.T
	srv *httptest.Server
	api *api.Server
	mgr *session.Manager
	log *eventlog.Log
	key string
	// dataDir is the session manager's data folder (workspaces live in it).
	dataDir string
	cfg     api.Config
}

func newEnv(t *testing.T, key string) *env {
	t.Helper()
	return newEnvWith(t, eventlog.Options{QueueSize: 64}, func(c *api.Config) { c.APIKey = key })
}

// newEnvWith builds an env whose event log and API are configured by opts
// and tune.
func newEnvWith(t *testing.T, opts eventlog.Options, tune func(*api.Config)) *env {
	t.Helper()
	return newEnvOn(t, memstore.New(), opts, tune)
}

// newEnvOn is newEnvWith on the store st.
func newEnvOn(t *testing.T, st store.Store, opts eventlog.Options, tune func(*api.Config)) *env {
	t.Helper()
	lg := eventlog.New(st, opts)
	archs := agent.NewRegistry()
	archs.Register(shell.Architecture{})
	dataDir := t.TempDir()
	// The store's artifacts, as the wiring passes them (nil: none).
	arts, _ := st.(store.ArtifactStore)
	mgr, err := session.New(session.Config{Store: st, Log: lg, Sandbox: local.New(local.Options{}), Architectures: archs, DataDir: dataDir, Artifacts: arts})
	if err != nil {
		t.Fatal(err)
	}
	if err := mgr.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	cfg := api.Config{Sessions: mgr, Log: lg, Profiles: session.NewProfiles(st, nil), Architectures: archs, MaxBody: 4096, DataDir: dataDir}
	if tune != nil {
		tune(&cfg)
	}
	a, err := api.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	e := &env{t: t, srv: httptest.NewServer(a), api: a, mgr: mgr, log: lg, key: cfg.APIKey, dataDir: dataDir, cfg: cfg}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		mgr.Close(ctx)
		lg.Close()
		a.Shutdown(ctx)
		e.srv.Close()
	})
	return e
}

func (e *env) request(method, path, body string, hdr ...string) *http.Response {
	e.t.Helper()
	req, _ := http.NewRequest(method, e.srv.URL+path, strings.NewReader(body))
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	if e.key != "" {
		req.Header.Set("Authorization", "Bearer "+e.key)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		if strings.EqualFold(hdr[i], "Host") {
			req.Host = hdr[i+1]
			continue
		}
		if hdr[i+1] == "" {
			req.Header.Del(hdr[i])
			continue
		}
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	return resp
}

func (e *env) do(method, path, body string) (int, map[string]any) {
	e.t.Helper()
	resp := e.request(method, path, body)
	defer resp.Body.Close()
	var out map[string]any
	data, _ := io.ReadAll(resp.Body)
	_ = json.Unmarshal(data, &out)
	return resp.StatusCode, out
}

func (e *env) create() string {
	e.t.Helper()
	code, out := e.do("POST", "/api/sessions", `{"architecture":"shell"}`)
	if code != 201 {
		e.t.Fatalf("create: %d %v", code, out)
	}
	return out["sessionId"].(string)
}

// waitIdle polls until the session's turn ended.
func (e *env) waitTurn(id, query string) []conversation.Event {
	e.t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		// The turn has ended once its query:completed/failed is stored
		// and the status that follows it (idle, error…) too.
		evs := e.events(id, 0)
		ended := false
		for _, ev := range evs {
			if ev.Type == conversation.TypeQueryCompleted || ev.Type == conversation.TypeQueryFailed {
				var p struct{ QueryID string }
				json.Unmarshal(ev.Payload, &p)
				ended = ended || p.QueryID == query
			}
			if ended && ev.Type == conversation.TypeStatus {
				return evs
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	e.t.Fatalf("turn %s did not end", query)
	return nil
}

func (e *env) events(id string, after int64) []conversation.Event {
	e.t.Helper()
	resp := e.request("GET", fmt.Sprintf("/api/sessions/%s/events?after=%d&limit=10000", id, after), "")
	defer resp.Body.Close()
	var page struct {
		Events  []conversation.Event
		LastSeq int64
	}
	if err := json.NewDecoder(resp.Body).Decode(&page); err != nil {
		e.t.Fatal(err)
	}
	return page.Events
}

func expectCode(t *testing.T, resp *http.Response, status int, code string) {
	t.Helper()
	defer resp.Body.Close()
	var body struct{ Error, Code string }
	data, _ := io.ReadAll(resp.Body)
	if err := json.Unmarshal(data, &body); err != nil {
		t.Fatalf("%s %s: body is not a JSON error: %q", resp.Request.Method, resp.Request.URL.Path, data)
	}
	if resp.StatusCode != status || body.Code != code || body.Error == "" {
		t.Fatalf("%s %s: got %d %q (%q), want %d %q", resp.Request.Method, resp.Request.URL.Path, resp.StatusCode, body.Code, body.Error, status, code)
	}
}

// TestShellTurnOverRESTWebSocketAndSSE drives one turn and checks that a
// WebSocket client, a late WebSocket client (after=0), a resuming client
// (after=N) and an SSE client all see exactly the stored events.
func TestShellTurnOverRESTWebSocketAndSSE(t *testing.T) {
	e := newEnv(t, "")
	id := e.create()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	early := dialWS(t, ctx, e, "")
	joinWS(t, ctx, early, id, 0)
	sse := openSSE(t, ctx, e, id, 0, "")

	code, sent := e.do("POST", "/api/sessions/"+id+"/messages", `{"content":"for i in 1 2 3 4 5; do echo line $i; sleep 0.05; done"}`)
	if code != 202 || sent["queryId"] != "q1" {
		t.Fatalf("send: %d %v", code, sent)
	}
	stored := e.waitTurn(id, "q1")
	last := stored[len(stored)-1].Seq
	for i, ev := range stored {
		if ev.Seq != int64(i+1) {
			t.Fatalf("stored events not contiguous at %d: seq %d", i, ev.Seq)
		}
	}
	st, _ := conversation.Reduce(stored)
	var out string
	for _, b := range st.Blocks {
		if b.Type == conversation.BlockToolResult {
			out = b.Output
			if b.IsError || b.Metadata["exitCode"] != float64(0) {
				t.Fatalf("result block %+v", b)
			}
		}
	}
	if out != "line 1\nline 2\nline 3\nline 4\nline 5\n" {
		t.Fatalf("output %q", out)
	}

	got := readWS(t, ctx, early, last)
	assertSame(t, "early ws", stored, got)
	late := dialWS(t, ctx, e, "")
	joinWS(t, ctx, late, id, 0)
	assertSame(t, "late ws", stored, readWS(t, ctx, late, last))
	resume := dialWS(t, ctx, e, "")
	joinWS(t, ctx, resume, id, 7)
	assertSame(t, "resume ws", stored[7:], readWS(t, ctx, resume, last))
	assertSame(t, "sse", stored, readSSE(t, sse, last))
	sse2 := openSSE(t, ctx, e, id, 0, "5")
	assertSame(t, "sse Last-Event-ID", stored[5:], readSSE(t, sse2, last))
	for _, c := range []*websocket.Conn{early, late, resume} {
		c.Close(websocket.StatusNormalClosure, "")
	}

	// The state endpoint reduces the same log.
	code, state := e.do("GET", "/api/sessions/"+id, "")
	if code != 200 || state["lastSeq"].(float64) != float64(last) || state["status"] != "idle" {
		t.Fatalf("state: %d lastSeq=%v status=%v", code, state["lastSeq"], state["status"])
	}
	// A second turn continues the seqs; a busy session answers 409 to a
	// client that asks not to queue.
	e.do("POST", "/api/sessions/"+id+"/messages", `{"content":"sleep 0.3"}`)
	resp := e.request("POST", "/api/sessions/"+id+"/messages", `{"content":"echo no","queue":false}`)
	expectCode(t, resp, 409, "SESSION_BUSY")
	all := e.waitTurn(id, "q2")
	if all[len(stored)].Seq != last+1 {
		t.Fatalf("second turn starts at seq %d, want %d", all[len(stored)].Seq, last+1)
	}
}

func assertSame(t *testing.T, name string, want, got []conversation.Event) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: got %d events, want %d", name, len(got), len(want))
	}
	for i := range want {
		a, _ := json.Marshal(want[i])
		b, _ := json.Marshal(got[i])
		if !bytes.Equal(a, b) {
			t.Fatalf("%s: event %d differs:\n got %s\nwant %s", name, i, b, a)
		}
	}
}

func dialWS(t *testing.T, ctx context.Context, e *env, query string) *websocket.Conn {
	t.Helper()
	u := "ws" + strings.TrimPrefix(e.srv.URL, "http") + "/api/ws" + query
	c, _, err := websocket.Dial(ctx, u, nil)
	if err != nil {
		t.Fatal(err)
	}
	c.SetReadLimit(1 << 20)
	return c
}

func wsSend(t *testing.T, ctx context.Context, c *websocket.Conn, frame string) {
	t.Helper()
	if err := c.Write(ctx, websocket.MessageText, []byte(frame)); err != nil {
		t.Fatal(err)
	}
}

func wsRead(t *testing.T, ctx context.Context, c *websocket.Conn) map[string]any {
	t.Helper()
	_, data, err := c.Read(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(data, &m); err != nil {
		t.Fatalf("frame %q: %v", data, err)
	}
	return m
}

func joinWS(t *testing.T, ctx context.Context, c *websocket.Conn, id string, after int64) {
	t.Helper()
	wsSend(t, ctx, c, fmt.Sprintf(`{"op":"join","sessionId":%q,"after":%d,"id":"j"}`, id, after))
	ack := wsRead(t, ctx, c)
	if ack["op"] != "ack" || ack["ok"] != true || ack["id"] != "j" {
		t.Fatalf("join ack %v", ack)
	}
}

func readWS(t *testing.T, ctx context.Context, c *websocket.Conn, until int64) []conversation.Event {
	t.Helper()
	var out []conversation.Event
	for {
		_, data, err := c.Read(ctx)
		if err != nil {
			t.Fatalf("after %d events: %v", len(out), err)
		}
		var f struct {
			Op    string
			Event conversation.Event
		}
		json.Unmarshal(data, &f)
		if f.Op != "event" {
			t.Fatalf("unexpected frame %s", data)
		}
		out = append(out, f.Event)
		if f.Event.Seq >= until {
			return out
		}
	}
}

type sseStream struct {
	resp *http.Response
	sc   *bufio.Scanner
}

func openSSE(t *testing.T, ctx context.Context, e *env, id string, after int64, lastEventID string) *sseStream {
	t.Helper()
	req, _ := http.NewRequestWithContext(ctx, "GET", fmt.Sprintf("%s/api/sessions/%s/events?after=%d", e.srv.URL, id, after), nil)
	req.Header.Set("Accept", "text/event-stream")
	if lastEventID != "" {
		req.Header.Set("Last-Event-ID", lastEventID)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("sse: %d %s", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	t.Cleanup(func() { resp.Body.Close() })
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	return &sseStream{resp: resp, sc: sc}
}

func readSSE(t *testing.T, s *sseStream, until int64) []conversation.Event {
	t.Helper()
	var out []conversation.Event
	var id, typ string
	for s.sc.Scan() {
		line := s.sc.Text()
		switch {
		case strings.HasPrefix(line, "id: "):
			id = strings.TrimPrefix(line, "id: ")
		case strings.HasPrefix(line, "event: "):
			typ = strings.TrimPrefix(line, "event: ")
		case strings.HasPrefix(line, "data: "):
			var ev conversation.Event
			if err := json.Unmarshal([]byte(strings.TrimPrefix(line, "data: ")), &ev); err != nil {
				t.Fatal(err)
			}
			if strconv.FormatInt(ev.Seq, 10) != id || string(ev.Type) != typ {
				t.Fatalf("sse id %q / event %q do not match envelope seq %d type %s", id, typ, ev.Seq, ev.Type)
			}
			out = append(out, ev)
			if ev.Seq >= until {
				return out
			}
		}
	}
	t.Fatalf("sse ended after %d events: %v", len(out), s.sc.Err())
	return nil
}

func TestBadInput(t *testing.T) {
	e := newEnv(t, "")
	id := e.create()
	cases := []struct {
		method, path, body string
		status             int
		code               string
	}{
		{"POST", "/api/sessions", `{"architecture":`, 400, "BAD_REQUEST"},
		{"POST", "/api/sessions", ``, 400, "BAD_REQUEST"},
		{"POST", "/api/sessions", `[1,2]`, 400, "BAD_REQUEST"},
		{"POST", "/api/sessions", `{"architecture":"no-such-agent"}`, 400, "UNKNOWN_ARCHITECTURE"},
		{"POST", "/api/sessions", `{}`, 400, "BAD_REQUEST"},
		{"POST", "/api/sessions", `{"architecture":"shell","agentProfileRef":"nope"}`, 404, "PROFILE_NOT_FOUND"},
		{"POST", "/api/sessions", `{"architecture":"shell","sessionOptions":[1]}`, 400, "BAD_REQUEST"},
		{"POST", "/api/sessions", `{"architecture":"shell","name":"` + strings.Repeat("x", 5000) + `"}`, 413, "PAYLOAD_TOO_LARGE"},
		{"GET", "/api/sessions/nope", ``, 404, "SESSION_NOT_FOUND"},
		{"GET", "/sessions/nope", ``, 404, "SESSION_NOT_FOUND"},
		{"POST", "/api/sessions/nope/messages", `{"content":"x"}`, 404, "SESSION_NOT_FOUND"},
		{"POST", "/api/sessions/" + id + "/messages", `{"content":""}`, 400, "BAD_REQUEST"},
		{"POST", "/api/sessions/" + id + "/messages", `{"content":`, 400, "BAD_REQUEST"},
		{"POST", "/api/sessions/" + id + "/interrupt", ``, 409, "NO_ACTIVE_TURN"},
		{"POST", "/api/sessions/" + id + "/permissions/perm-x", `{"behavior":"allow"}`, 404, "PERMISSION_NOT_FOUND"},
		{"POST", "/api/sessions/" + id + "/permissions/perm-x", `{"behavior":"maybe"}`, 400, "BAD_REQUEST"},
		{"GET", "/api/sessions/" + id + "/files/../../etc/passwd", ``, 400, "INVALID_PATH"},
		{"GET", "/api/sessions/" + id + "/files/%2e%2e/secret", ``, 400, "INVALID_PATH"},
		{"GET", "/api/sessions/" + id + "/files//etc/passwd", ``, 400, "INVALID_PATH"},
		{"GET", "/api/sessions/" + id + "/files/missing.txt", ``, 404, "FILE_NOT_FOUND"},
		{"GET", "/api/sessions/" + id + "/events?after=abc", ``, 400, "INVALID_CURSOR"},
		{"GET", "/api/sessions/" + id + "/events?after=-1", ``, 400, "INVALID_CURSOR"},
		{"GET", "/api/sessions/" + id + "/events?limit=0", ``, 400, "INVALID_CURSOR"},
		{"DELETE", "/api/sessions/" + id + "?purge=perhaps", ``, 400, "BAD_REQUEST"},
		{"PUT", "/api/sessions", `{}`, 405, "METHOD_NOT_ALLOWED"},
		{"GET", "/api/nothing-here", ``, 404, "NOT_FOUND"},
	}
	for _, c := range cases {
		expectCode(t, e.request(c.method, c.path, c.body), c.status, c.code)
	}
	// SSE with a bad Last-Event-ID.
	expectCode(t, e.request("GET", "/api/sessions/"+id+"/events", "", "Accept", "text/event-stream", "Last-Event-ID", "x1"), 400, "INVALID_CURSOR")

	// WebSocket: non-JSON, unknown op, bad join — the connection stays usable.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c := dialWS(t, ctx, e, "")
	defer c.Close(websocket.StatusNormalClosure, "")
	wsSend(t, ctx, c, `not json`)
	if f := wsRead(t, ctx, c); f["op"] != "error" || f["error"].(map[string]any)["code"] != "BAD_REQUEST" {
		t.Fatalf("non-JSON frame answered %v", f)
	}
	wsSend(t, ctx, c, `{"op":"dance","id":7}`)
	if f := wsRead(t, ctx, c); f["op"] != "error" || f["error"].(map[string]any)["code"] != "UNKNOWN_OP" || f["id"] != float64(7) {
		t.Fatalf("unknown op answered %v", f)
	}
	wsSend(t, ctx, c, `{"op":"join","sessionId":"nope","id":"a"}`)
	if f := wsRead(t, ctx, c); f["ok"] != false || f["error"].(map[string]any)["code"] != "SESSION_NOT_FOUND" {
		t.Fatalf("join unknown answered %v", f)
	}
	wsSend(t, ctx, c, fmt.Sprintf(`{"op":"join","sessionId":%q,"after":-3,"id":"b"}`, id))
	if f := wsRead(t, ctx, c); f["ok"] != false || f["error"].(map[string]any)["code"] != "INVALID_CURSOR" {
		t.Fatalf("join negative after answered %v", f)
	}
	wsSend(t, ctx, c, `{"op":"ping","id":"p"}`)
	if f := wsRead(t, ctx, c); f["op"] != "pong" {
		t.Fatalf("ping answered %v", f)
	}
	// …and the server keeps serving.
	if code, _ := e.do("GET", "/health", ""); code != 200 {
		t.Fatal("health after bad input:", code)
	}
}

func TestAuth(t *testing.T) {
	e := newEnv(t, "s3cret")
	req, _ := http.NewRequest("GET", e.srv.URL+"/api/sessions", nil)
	resp, _ := http.DefaultClient.Do(req)
	expectCode(t, resp, 401, "UNAUTHORIZED")
	req.Header.Set("Authorization", "Bearer wrong")
	resp, _ = http.DefaultClient.Do(req)
	expectCode(t, resp, 401, "UNAUTHORIZED")
	if r, _ := http.Get(e.srv.URL + "/health"); r.StatusCode != 200 {
		t.Fatal("health needs no auth")
	}
	if r, _ := http.Get(e.srv.URL + "/api/sessions?access_token=s3cret"); r.StatusCode != 200 {
		t.Fatal("access_token query should authenticate")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, resp, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(e.srv.URL, "http")+"/api/ws", nil); err == nil || resp.StatusCode != 401 {
		t.Fatalf("websocket without key: %v", err)
	}
	// The actor of events is the authenticated user (the bootstrap key's is "admin"), not a client value.
	id := e.create()
	e.do("POST", "/api/sessions/"+id+"/messages", `{"content":"true"}`)
	for _, ev := range e.waitTurn(id, "q1") {
		if ev.Type == conversation.TypeBlockUpsert && ev.Context.Actor != nil && *ev.Context.Actor != "admin" {
			t.Fatalf("actor %q", *ev.Context.Actor)
		}
	}
}

func TestInterruptKillsProcessGroup(t *testing.T) {
	e := newEnv(t, "")
	id := e.create()
	e.do("POST", "/api/sessions/"+id+"/messages", `{"content":"sleep 30 & echo started; sleep 30; echo never"}`)
	// Interrupt once the background sleep runs: the shell said so.
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		started := false
		for _, ev := range e.events(id, 0) {
			started = started || (ev.Type == conversation.TypeBlockDelta && strings.Contains(string(ev.Payload), "started"))
		}
		if started {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the command did not start")
		}
	}
	if code, out := e.do("POST", "/api/sessions/"+id+"/interrupt", ""); code != 202 {
		t.Fatalf("interrupt: %d %v", code, out)
	}
	evs := e.waitTurn(id, "q1")
	end := evs[len(evs)-1]
	for _, ev := range evs {
		if ev.Type == conversation.TypeQueryCompleted {
			end = ev
		}
	}
	var p conversation.QueryCompleted
	json.Unmarshal(end.Payload, &p)
	if end.Type != conversation.TypeQueryCompleted || !p.Interrupted {
		t.Fatalf("turn end %s %s", end.Type, end.Payload)
	}
	// The session stays usable.
	e.do("POST", "/api/sessions/"+id+"/messages", `{"content":"echo again"}`)
	e.waitTurn(id, "q2")
}

func TestFilesAndDelete(t *testing.T) {
	e := newEnv(t, "")
	id := e.create()
	e.do("POST", "/api/sessions/"+id+"/messages", `{"content":"mkdir -p d && printf hi > d/a.txt && : > empty"}`)
	e.waitTurn(id, "q1")
	code, list := e.do("GET", "/api/sessions/"+id+"/files", "")
	if code != 200 {
		t.Fatal(code)
	}
	paths := map[string]bool{}
	for _, f := range list["files"].([]any) {
		paths[f.(map[string]any)["path"].(string)] = true
	}
	if !paths["d/a.txt"] || !paths["empty"] {
		t.Fatalf("listing %v", paths)
	}
	resp := e.request("GET", "/api/sessions/"+id+"/files/d/a.txt", "")
	data, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if string(data) != "hi" {
		t.Fatalf("file %q", data)
	}
	// File events reach the log (the watcher debounces, so wait a little).
	deadline := time.Now().Add(5 * time.Second)
	for {
		_, st := e.do("GET", "/api/sessions/"+id, "")
		if len(st["workspaceFiles"].([]any)) == 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("workspaceFiles %v", st["workspaceFiles"])
		}
		time.Sleep(50 * time.Millisecond)
	}
	if code, _ := e.do("DELETE", "/api/sessions/"+id, ""); code != 200 {
		t.Fatal("delete", code)
	}
	_, st := e.do("GET", "/api/sessions/"+id, "")
	if st["status"] != "terminated" {
		t.Fatalf("after delete: %v", st["status"])
	}
	// Files are still readable with the environment down.
	resp = e.request("GET", "/api/sessions/"+id+"/files/d/a.txt", "")
	data, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	if string(data) != "hi" {
		t.Fatalf("file after terminate %q", data)
	}
	if code, _ := e.do("DELETE", "/api/sessions/"+id+"?purge=true", ""); code != 200 {
		t.Fatal("purge", code)
	}
	expectCode(t, e.request("GET", "/api/sessions/"+id, ""), 404, "SESSION_NOT_FOUND")
}

func TestOpenAPICoversEveryRoute(t *testing.T) {
	e := newEnv(t, "")
	resp := e.request("GET", "/api/openapi.json", "")
	defer resp.Body.Close()
	var doc struct {
		OpenAPI    string                    `json:"openapi"`
		Paths      map[string]map[string]any `json:"paths"`
		Components struct {
			Schemas map[string]any `json:"schemas"`
		} `json:"components"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&doc); err != nil {
		t.Fatal(err)
	}
	if doc.OpenAPI != "3.1.0" {
		t.Fatalf("openapi %q", doc.OpenAPI)
	}
	for _, r := range api.Routes() {
		p := strings.ReplaceAll(r.Pattern, "...}", "}")
		if _, ok := doc.Paths[p][strings.ToLower(r.Method)]; !ok {
			t.Errorf("route %s %s missing from openapi.json", r.Method, r.Pattern)
		}
	}
	for _, must := range []string{"Event", "Block", "ConversationState", "PermissionRequested", "SessionState", "Error"} {
		if _, ok := doc.Components.Schemas[must]; !ok {
			t.Errorf("schema %s missing", must)
		}
	}
	// Every contract route is registered (docs/api.md's first routes, the
	// seed's, and the legacy aliases).
	contract := []string{
		"GET /health", "GET /api/agent-profiles", "POST /api/sessions", "GET /api/sessions",
		"GET /api/sessions/{id}", "POST /api/sessions/{id}/messages", "POST /api/sessions/{id}/interrupt",
		"POST /api/sessions/{id}/permissions/{requestId}", "GET /api/sessions/{id}/files",
		"GET /api/sessions/{id}/files/{path}", "GET /api/sessions/{id}/events", "DELETE /api/sessions/{id}",
		"GET /metrics", "GET /api/openapi.json", "GET /api/ws", "GET /api/sessions/{id}/pty",
		"POST /sessions/create", "GET /sessions", "GET /sessions/{id}", "POST /sessions/{id}/message", "DELETE /sessions/{id}",
		"POST /sessions", "PATCH /api/sessions/{id}/options", "POST /api/sessions/{id}/sync", "POST /api/sessions/{id}/environment/terminate",
	}
	for _, c := range contract {
		m, p, _ := strings.Cut(c, " ")
		if _, ok := doc.Paths[p][strings.ToLower(m)]; !ok {
			t.Errorf("contract route %s missing", c)
		}
	}
}

var update = flag.Bool("update", false, "rewrite internal/api/openapi.json")

// TestOpenAPIFileIsCurrent keeps the committed openapi.json (which the
// TypeScript client's schema test reads) identical to what the server
// serves. Regenerate with: go test ./internal/api -run OpenAPIFile -update
func TestOpenAPIFileIsCurrent(t *testing.T) {
	e := newEnv(t, "")
	resp := e.request("GET", "/api/openapi.json", "")
	defer resp.Body.Close()
	served, _ := io.ReadAll(resp.Body)
	if *update {
		if err := os.WriteFile("openapi.json", served, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	committed, err := os.ReadFile("openapi.json")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(served, committed) {
		t.Fatal("internal/api/openapi.json is stale: run go test ./internal/api -run OpenAPIFile -update")
	}
}
