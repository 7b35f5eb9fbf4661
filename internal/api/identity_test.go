package api_test

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/agentd/agentd/agent"
	"github.com/agentd/agentd/conversation"
	"github.com/agentd/agentd/internal/agent/shell"
	"github.com/agentd/agentd/internal/api"
	"github.com/agentd/agentd/internal/auth"
	"github.com/agentd/agentd/internal/eventlog"
	"github.com/agentd/agentd/internal/sandbox/local"
	"github.com/agentd/agentd/internal/session"
	"github.com/agentd/agentd/store"
	"github.com/agentd/agentd/store/memstore"
)

// identEnv is a multi-user server: alice and bob (members, tenant t1),
// carol (member, tenant t2) and root (the bootstrap admin key), each with
// a token.
type identEnv struct {
	t      *testing.T
	srv    *httptest.Server
	svc    *auth.Service
	st     *memstore.Store
	tokens map[string]string // user → token
	ids    map[string]string // user → token id
	reg    *prometheus.Registry
}

const rootKey = "root-bootstrap-key"

func newIdentEnv(t *testing.T, limits auth.Limits) *identEnv {
	t.Helper()
	st := memstore.New()
	lg := eventlog.New(st, eventlog.Options{QueueSize: 256})
	archs := agent.NewRegistry()
	archs.Register(shell.Architecture{})
	mgr, err := session.New(session.Config{Store: st, Log: lg, Sandbox: local.New(local.Options{}), Architectures: archs, DataDir: t.TempDir(), Artifacts: st})
	if err != nil {
		t.Fatal(err)
	}
	if err := mgr.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	svc, err := auth.New(auth.Config{Identity: st, Sessions: st, BootstrapKey: rootKey, Limits: limits})
	if err != nil {
		t.Fatal(err)
	}
	if err := svc.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	svc.Register(reg)
	a, err := api.New(api.Config{Sessions: mgr, Log: lg, Profiles: session.NewProfiles(st, nil), Architectures: archs,
		Auth: svc, MaxBody: 4096, Gatherer: reg})
	if err != nil {
		t.Fatal(err)
	}
	e := &identEnv{t: t, srv: httptest.NewServer(a), svc: svc, st: st, tokens: map[string]string{rootUser: rootKey}, ids: map[string]string{}, reg: reg}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		mgr.Close(ctx)
		lg.Close()
		a.Shutdown(ctx)
		e.srv.Close()
		svc.Close(ctx)
	})
	admin := auth.Principal{UserID: rootUser, Role: store.RoleAdmin, Method: auth.MethodAPIKey}
	for _, u := range []auth.NewUser{{ID: "alice", Tenant: "t1"}, {ID: "bob", Tenant: "t1"}, {ID: "carol", Tenant: "t2"}} {
		if _, err := svc.CreateUser(context.Background(), admin, u); err != nil {
			t.Fatal(err)
		}
		tok, err := svc.CreateToken(context.Background(), admin, auth.NewToken{UserID: u.ID, Name: "test"})
		if err != nil {
			t.Fatal(err)
		}
		e.tokens[u.ID], e.ids[u.ID] = tok.Token, tok.ID
	}
	return e
}

const rootUser = "admin"

// call makes a request as user ("" for none) and returns the status and
// the decoded JSON body.
func (e *identEnv) call(user, method, path, body string) (int, map[string]any, http.Header) {
	e.t.Helper()
	req, _ := http.NewRequest(method, e.srv.URL+path, strings.NewReader(body))
	if user != "" {
		req.Header.Set("Authorization", "Bearer "+e.tokens[user])
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	defer resp.Body.Close()
	var m map[string]any
	data, _ := io.ReadAll(resp.Body)
	_ = json.Unmarshal(data, &m)
	return resp.StatusCode, m, resp.Header
}

func (e *identEnv) expect(user, method, path, body string, status int, code string) map[string]any {
	e.t.Helper()
	got, m, _ := e.call(user, method, path, body)
	if got != status || (code != "" && m["code"] != code) {
		e.t.Fatalf("%s %s %s as %s: %d %v, want %d %s", method, path, body, user, got, m, status, code)
	}
	return m
}

func (e *identEnv) create(user string) string {
	e.t.Helper()
	m := e.expect(user, "POST", "/api/sessions", `{"architecture":"shell"}`, 201, "")
	return m["sessionId"].(string)
}

func (e *identEnv) listed(user string) []string {
	e.t.Helper()
	req, _ := http.NewRequest("GET", e.srv.URL+"/api/sessions", nil)
	req.Header.Set("Authorization", "Bearer "+e.tokens[user])
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	defer resp.Body.Close()
	var l struct {
		Sessions []struct{ SessionID, Owner string }
	}
	if err := json.NewDecoder(resp.Body).Decode(&l); err != nil {
		e.t.Fatal(err)
	}
	var out []string
	for _, s := range l.Sessions {
		out = append(out, s.SessionID)
	}
	return out
}

// waitIdle waits for a session's turn q to end and returns its events.
func (e *identEnv) waitTurn(user, id, q string) []conversation.Event {
	e.t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		req, _ := http.NewRequest("GET", e.srv.URL+"/api/sessions/"+id+"/events", nil)
		req.Header.Set("Authorization", "Bearer "+e.tokens[user])
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			e.t.Fatal(err)
		}
		var page struct{ Events []conversation.Event }
		_ = json.NewDecoder(resp.Body).Decode(&page)
		resp.Body.Close()
		for _, ev := range page.Events {
			if ev.Type == conversation.TypeSessionIdle {
				return page.Events
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	e.t.Fatalf("turn %s of %s did not end", q, id)
	return nil
}

func (e *identEnv) ws(user string) *websocket.Conn {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, _, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(e.srv.URL, "http")+"/api/ws?access_token="+e.tokens[user], nil)
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { c.CloseNow() })
	return c
}

func wsSendJSON(t *testing.T, c *websocket.Conn, v any) {
	t.Helper()
	b, _ := json.Marshal(v)
	if err := c.Write(context.Background(), websocket.MessageText, b); err != nil {
		t.Fatal(err)
	}
}

// wsNext reads frames until one matches ok.
func wsNext(t *testing.T, c *websocket.Conn, ok func(map[string]any) bool) map[string]any {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for {
		_, b, err := c.Read(ctx)
		if err != nil {
			t.Fatalf("websocket read: %v", err)
		}
		var m map[string]any
		_ = json.Unmarshal(b, &m)
		if ok(m) {
			return m
		}
	}
}

func ackOf(id string) func(map[string]any) bool {
	return func(m map[string]any) bool { return m["op"] == "ack" && m["id"] == id }
}

func errCode(m map[string]any) any {
	if e, ok := m["error"].(map[string]any); ok {
		return e["code"]
	}
	return nil
}

// TestTwoUsersEveryTransport: alice and bob each see and control only
// their own sessions, over REST, SSE, WebSocket, Socket.IO and the PTY;
// the admin sees and controls both; shares give read or control.
func TestTwoUsersEveryTransport(t *testing.T) {
	e := newIdentEnv(t, auth.Limits{})
	a := e.create("alice")
	b := e.create("bob")

	// REST lists.
	if got := e.listed("alice"); len(got) != 1 || got[0] != a {
		t.Fatalf("alice lists %v, want only %s", got, a)
	}
	if got := e.listed("bob"); len(got) != 1 || got[0] != b {
		t.Fatalf("bob lists %v, want only %s", got, b)
	}
	if got := e.listed(rootUser); len(got) != 2 {
		t.Fatalf("the admin lists %v, want both", got)
	}
	// Every route of bob's session answers alice exactly as for a missing
	// session.
	for _, r := range []struct{ method, path, body string }{
		{"GET", "/api/sessions/" + b, ""},
		{"GET", "/api/sessions/" + b + "/events", ""},
		{"GET", "/api/sessions/" + b + "/files", ""},
		{"GET", "/api/sessions/" + b + "/files/x.txt", ""},
		{"PUT", "/api/sessions/" + b + "/files/x.txt", "overwritten"},
		{"GET", "/api/sessions/" + b + "/audit", ""},
		{"POST", "/api/sessions/" + b + "/messages", `{"content":"echo pwned > /tmp/x"}`},
		{"POST", "/api/sessions/" + b + "/interrupt", `{}`},
		{"POST", "/api/sessions/" + b + "/permissions/p1", `{"behavior":"allow"}`},
		{"DELETE", "/api/sessions/" + b, ""},
		{"GET", "/api/sessions/" + b + "/shares", ""},
		{"PUT", "/api/sessions/" + b + "/shares/alice", `{"access":"control"}`},
		{"GET", "/sessions/" + b, ""},
		{"POST", "/sessions/" + b + "/message", `{"content":"true"}`},
	} {
		e.expect("alice", r.method, r.path, r.body, 404, "SESSION_NOT_FOUND")
	}
	// SSE too (refused before the stream starts).
	req, _ := http.NewRequest("GET", e.srv.URL+"/api/sessions/"+b+"/events", nil)
	req.Header.Set("Accept", "text/event-stream")
	req.Header.Set("Authorization", "Bearer "+e.tokens["alice"])
	if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != 404 {
		t.Fatalf("alice's SSE on bob's session: %v %v", resp.StatusCode, err)
	} else {
		resp.Body.Close()
	}
	// The PTY: refused before the upgrade.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ptyURL := "ws" + strings.TrimPrefix(e.srv.URL, "http") + "/api/sessions/" + b + "/pty?access_token="
	if _, resp, err := websocket.Dial(ctx, ptyURL+e.tokens["alice"], nil); err == nil || resp == nil || resp.StatusCode != 404 {
		t.Fatalf("alice's PTY on bob's session: %v", err)
	}

	// WebSocket: joining bob's session fails as for a missing one; "*"
	// lists only alice's, live too.
	wa := e.ws("alice")
	wsSendJSON(t, wa, map[string]any{"op": "join", "sessionId": b, "id": "j1"})
	if m := wsNext(t, wa, ackOf("j1")); m["ok"] != false || errCode(m) != "SESSION_NOT_FOUND" {
		t.Fatalf("alice joins bob's session: %v", m)
	}
	wsSendJSON(t, wa, map[string]any{"op": "join", "sessionId": "*", "id": "j2"})
	wsNext(t, wa, ackOf("j2"))
	first := wsNext(t, wa, func(m map[string]any) bool { return m["op"] == "sessions" })
	if s := first["session"].(map[string]any); s["sessionId"] != a || s["owner"] != "alice" {
		t.Fatalf("alice's * list starts with %v", first)
	}
	bob2 := e.create("bob")
	a2 := e.create("alice")
	for {
		m := wsNext(t, wa, func(m map[string]any) bool { return m["op"] == "sessions" })
		id := m["session"].(map[string]any)["sessionId"]
		if id == b || id == bob2 {
			t.Fatalf("alice's * list shows bob's session %v", id)
		}
		if id == a2 {
			break
		}
	}
	wsSendJSON(t, wa, map[string]any{"op": "join", "sessionId": a, "id": "j3"})
	if m := wsNext(t, wa, ackOf("j3")); m["ok"] != true {
		t.Fatalf("alice joins her own session: %v", m)
	}

	// Socket.IO.
	sa, refused := dialSIO(t, e.srv.URL, e.tokens["alice"])
	if refused != "" {
		t.Fatalf("socket.io refused alice: %s", refused)
	}
	defer sa.close()
	if ack := sa.call(1, "session:join", b); ack["ok"] == true || errCode(ack) != "SESSION_NOT_FOUND" {
		t.Fatalf("alice joins bob's session over socket.io: %v", ack)
	}
	if ack := sa.call(2, "session:join", a); ack["ok"] != true {
		t.Fatalf("alice joins her session over socket.io: %v", ack)
	}
	if _, refused := dialSIO(t, e.srv.URL, "agd_not-a-real-token-at-all-xxxxxxxxxxxxx"); refused == "" {
		t.Fatal("socket.io accepted an unknown token")
	}

	// The admin reads, joins, messages and opens the terminal of bob's
	// session; events carry the admin's id as actor, bob's carry bob's.
	e.expect(rootUser, "GET", "/api/sessions/"+b, "", 200, "")
	e.expect("bob", "POST", "/api/sessions/"+b+"/messages", `{"content":"echo from bob"}`, 202, "")
	evs := e.waitTurn("bob", b, "q1")
	checkActor(t, evs, "q1", "bob")
	e.expect(rootUser, "POST", "/api/sessions/"+b+"/messages", `{"content":"echo from admin"}`, 202, "")
	evs = e.waitTurn(rootUser, b, "q2")
	checkActor(t, evs, "q2", rootUser)
	wr := e.ws(rootUser)
	wsSendJSON(t, wr, map[string]any{"op": "join", "sessionId": b, "id": "r1"})
	if m := wsNext(t, wr, ackOf("r1")); m["ok"] != true {
		t.Fatalf("the admin joins bob's session: %v", m)
	}
	pc, _, err := websocket.Dial(ctx, ptyURL+rootKey, nil)
	if err != nil {
		t.Fatalf("the admin's PTY on bob's session: %v", err)
	}
	pc.Close(websocket.StatusNormalClosure, "")
	sr, _ := dialSIO(t, e.srv.URL, rootKey)
	if ack := sr.call(1, "session:join", b); ack["ok"] != true {
		t.Fatalf("the admin joins bob's session over socket.io: %v", ack)
	}
	sr.close()

	// Shares: read lets alice read and join, not control (403: she may
	// know the session); control lets her send messages.
	e.expect("bob", "PUT", "/api/sessions/"+b+"/shares/alice", `{"access":"read"}`, 200, "")
	e.expect("alice", "GET", "/api/sessions/"+b, "", 200, "")
	if got := e.listed("alice"); len(got) != 3 {
		t.Fatalf("alice lists %v after bob shared one", got)
	}
	for _, r := range []struct{ method, path, body string }{
		{"POST", "/api/sessions/" + b + "/messages", `{"content":"true"}`},
		{"POST", "/api/sessions/" + b + "/interrupt", `{}`},
		{"POST", "/api/sessions/" + b + "/permissions/p1", `{"behavior":"allow"}`},
		{"DELETE", "/api/sessions/" + b, ""},
		{"PUT", "/api/sessions/" + b + "/shares/carol", `{"access":"read"}`},
	} {
		e.expect("alice", r.method, r.path, r.body, 403, "FORBIDDEN")
	}
	if _, resp, err := websocket.Dial(ctx, ptyURL+e.tokens["alice"], nil); err == nil || resp == nil || resp.StatusCode != 403 {
		t.Fatalf("alice's PTY on a read-only share: %v", err)
	}
	if ack := sa.call(3, "session:join", b); ack["ok"] != true {
		t.Fatalf("alice joins a session shared with her: %v", ack)
	}
	e.expect("carol", "GET", "/api/sessions/"+b, "", 404, "SESSION_NOT_FOUND")
	e.expect("bob", "PUT", "/api/sessions/"+b+"/shares/alice", `{"access":"control"}`, 200, "")
	e.expect("alice", "POST", "/api/sessions/"+b+"/messages", `{"content":"echo from alice"}`, 202, "")
	checkActor(t, e.waitTurn("alice", b, "q3"), "q3", "alice")
	e.expect("bob", "DELETE", "/api/sessions/"+b+"/shares/alice", "", 200, "")
	e.expect("alice", "GET", "/api/sessions/"+b, "", 404, "SESSION_NOT_FOUND")
}

// checkActor: every event of turn q carrying an actor names user.
func checkActor(t *testing.T, evs []conversation.Event, q, user string) {
	t.Helper()
	n := 0
	for _, ev := range evs {
		if ev.Type == conversation.TypeQueryStarted {
			var p conversation.QueryStarted
			_ = json.Unmarshal(ev.Payload, &p)
			if p.QueryID != q {
				continue
			}
			if ev.Context.Actor == nil || *ev.Context.Actor != user {
				t.Fatalf("query:started of %s has actor %v, want %s", q, ev.Context.Actor, user)
			}
			n++
		}
	}
	if n != 1 {
		t.Fatalf("no query:started of %s", q)
	}
}

// TestRevokedTokenClosesConnections: revoking a token refuses it at once
// and closes its open WebSocket, SSE, Socket.IO and terminal connections.
func TestRevokedTokenClosesConnections(t *testing.T) {
	e := newIdentEnv(t, auth.Limits{})
	a := e.create("alice")
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()

	ws := e.ws("alice")
	wsSendJSON(t, ws, map[string]any{"op": "join", "sessionId": a, "id": "j"})
	wsNext(t, ws, ackOf("j"))

	req, _ := http.NewRequestWithContext(ctx, "GET", e.srv.URL+"/api/sessions/"+a+"/events", nil)
	req.Header.Set("Accept", "text/event-stream")
	req.Header.Set("Authorization", "Bearer "+e.tokens["alice"])
	sse, err := http.DefaultClient.Do(req)
	if err != nil || sse.StatusCode != 200 {
		t.Fatalf("SSE: %v %v", err, sse.StatusCode)
	}
	defer sse.Body.Close()

	sio, refused := dialSIO(t, e.srv.URL, e.tokens["alice"])
	if refused != "" {
		t.Fatal(refused)
	}
	if ack := sio.call(1, "session:join", a); ack["ok"] != true {
		t.Fatal(ack)
	}

	pty, _, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(e.srv.URL, "http")+"/api/sessions/"+a+"/pty?access_token="+e.tokens["alice"], nil)
	if err != nil {
		t.Fatal(err)
	}
	defer pty.CloseNow()

	// Bob cannot revoke alice's token (it is not his to know).
	e.expect("bob", "DELETE", "/api/tokens/"+e.ids["alice"], "", 404, "NOT_FOUND")
	// The admin can.
	m := e.expect(rootUser, "DELETE", "/api/tokens/"+e.ids["alice"], "", 200, "")
	if m["revokedAt"] == nil {
		t.Fatalf("revoked token: %v", m)
	}
	e.expect("alice", "GET", "/api/sessions", "", 401, "UNAUTHORIZED")

	t0 := time.Now()
	defer func() { t.Logf("connections closed within %v", time.Since(t0)) }()
	// WebSocket: closed with 4001.
	waitUnauthorized(ctx, t, ws, "websocket")
	// Terminal: closed with 4001.
	waitUnauthorized(ctx, t, pty, "terminal")
	// SSE: an error event saying UNAUTHORIZED, then the end.
	sc := bufio.NewScanner(sse.Body)
	sawError := false
	for sc.Scan() {
		if strings.Contains(sc.Text(), `"code":"UNAUTHORIZED"`) {
			sawError = true
		}
	}
	if !sawError {
		t.Fatal("the SSE stream ended without an UNAUTHORIZED error event")
	}
	t.Logf("ws, pty, sse closed after %v", time.Since(t0))
	// Socket.IO: disconnected.
	sio.waitGone()
}

// TestRateLimitAndQuotas: a token over its rate gets 429 with Retry-After
// while another token goes on; quotas refuse sessions with 429; both show
// in /metrics and the access log.
func TestRateLimitAndQuotas(t *testing.T) {
	e := newIdentEnv(t, auth.Limits{RequestsPerSecond: 0.5, Burst: 3, SessionsPerUser: 1, RunningPerUser: 1})
	var limited http.Header
	for i := 0; i < 10; i++ {
		st, m, h := e.call("alice", "GET", "/api/sessions", "")
		if st == 429 {
			if m["code"] != "RATE_LIMITED" {
				t.Fatalf("429 with %v", m)
			}
			limited = h
			break
		}
	}
	if limited == nil {
		t.Fatal("alice was never rate limited")
	}
	ra, err := strconv.Atoi(limited.Get("Retry-After"))
	if err != nil || ra < 1 || ra > 3 {
		t.Fatalf("Retry-After %q, want 1–3 seconds (0.5/s)", limited.Get("Retry-After"))
	}
	// Bob's token has its own bucket.
	e.expect("bob", "GET", "/api/sessions", "", 200, "")
	// Quotas: one session per user.
	e.create("bob")
	e.expect("bob", "POST", "/api/sessions", `{"architecture":"shell"}`, 429, "QUOTA_EXCEEDED")
	// Metrics and the access log show them.
	mfs, err := e.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]float64{}
	for _, mf := range mfs {
		for _, m := range mf.Metric {
			for _, l := range m.Label {
				if mf.GetName() == "agentd_auth_refusals_total" {
					seen["refusals/"+l.GetValue()] = m.GetCounter().GetValue()
				}
				if mf.GetName() == "agentd_limit" {
					seen["limit/"+l.GetValue()] = m.GetGauge().GetValue()
				}
			}
		}
	}
	if seen["refusals/rate_limited"] < 1 || seen["refusals/quota"] != 1 || seen["limit/sessions_per_user"] != 1 || seen["limit/requests_per_second"] != 0.5 {
		t.Fatalf("metrics %v", seen)
	}
	var kinds []string
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		recs, err := e.st.ReadAccess(context.Background(), 0, 0)
		if err != nil {
			t.Fatal(err)
		}
		kinds = kinds[:0]
		for _, r := range recs {
			kinds = append(kinds, string(r.Kind)+":"+r.Actor)
		}
		if strings.Contains(strings.Join(kinds, " "), "rate_limited:alice") && strings.Contains(strings.Join(kinds, " "), "quota:bob") {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("access log %v: want rate_limited:alice and quota:bob", kinds)
}

// TestEveryRouteHasAnAccessLevel: a route of one session that the access
// table does not name would skip the ownership check.
func TestEveryRouteHasAnAccessLevel(t *testing.T) {
	for _, r := range api.RoutePatterns() {
		if strings.Contains(r, "{id}") && strings.Contains(r, "sessions") && !api.HasSessionAccess(r) {
			t.Errorf("route %s has no entry in sessionRoutes", r)
		}
	}
}

// TestTokensAndUsersREST covers the admin and self-service routes.
func TestTokensAndUsersREST(t *testing.T) {
	e := newIdentEnv(t, auth.Limits{})
	// A member makes a token of its own, with fewer scopes; it cannot
	// create sessions with a read-only token.
	m := e.expect("alice", "POST", "/api/tokens", `{"name":"ro","scopes":["sessions:read"]}`, 201, "")
	ro := m["token"].(string)
	if !strings.HasPrefix(ro, "agd_") || m["hash"] != nil {
		t.Fatalf("created token %v", m)
	}
	e.tokens["alice-ro"] = ro
	e.expect("alice-ro", "GET", "/api/sessions", "", 200, "")
	e.expect("alice-ro", "POST", "/api/sessions", `{"architecture":"shell"}`, 403, "FORBIDDEN")
	e.expect("alice-ro", "POST", "/api/tokens", `{}`, 403, "FORBIDDEN")
	e.expect("alice", "POST", "/api/tokens", `{"scopes":["admin"]}`, 400, "BAD_REQUEST")
	e.expect("alice", "POST", "/api/tokens", `{"userId":"bob"}`, 403, "FORBIDDEN")
	// Members cannot manage users; admins can, and disabling cuts off.
	e.expect("alice", "GET", "/api/users", "", 403, "FORBIDDEN")
	e.expect(rootUser, "POST", "/api/users", `{"id":"dave","role":"member"}`, 201, "")
	e.expect(rootUser, "POST", "/api/users", `{"id":"dave"}`, 409, "CONFLICT")
	e.expect(rootUser, "POST", "/api/users", `{"id":"bad id"}`, 400, "BAD_REQUEST")
	e.expect(rootUser, "PATCH", "/api/users/bob", `{"disabled":true}`, 200, "")
	e.expect("bob", "GET", "/api/sessions", "", 401, "UNAUTHORIZED")
	m = e.expect("alice", "GET", "/api/me", "", 200, "")
	if m["user"].(map[string]any)["id"] != "alice" || m["admin"] != false {
		t.Fatalf("me %v", m)
	}
	e.expect("", "GET", "/api/sessions", "", 401, "UNAUTHORIZED")
	m = e.expect("", "GET", "/api/auth", "", 200, "")
	if m["required"] != true || m["multiUser"] != true {
		t.Fatalf("auth info %v", m)
	}
	// Token lists: one's own; admins anyone's.
	m = e.expect("alice", "GET", "/api/tokens", "", 200, "")
	if n := len(m["tokens"].([]any)); n != 2 {
		t.Fatalf("alice has %d tokens, want 2", n)
	}
	e.expect("alice", "GET", "/api/tokens?user=bob", "", 403, "FORBIDDEN")
	m = e.expect(rootUser, "GET", "/api/tokens?user=*", "", 200, "")
	if n := len(m["tokens"].([]any)); n != 4 {
		t.Fatalf("all tokens: %d, want 4", n)
	}
}
