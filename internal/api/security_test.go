package api_test

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/agentd/agentd/internal/api"
	"github.com/agentd/agentd/internal/eventlog"
)

// sessionCount lists the sessions through the API.
func (e *env) sessionCount() int {
	e.t.Helper()
	code, out := e.do("GET", "/api/sessions", "")
	if code != 200 {
		e.t.Fatalf("list: %d %v", code, out)
	}
	return len(out["sessions"].([]any))
}

// A cross-site page can POST without a CORS preflight only as an HTML form
// or a "simple" fetch: text/plain, application/x-www-form-urlencoded or
// multipart/form-data. None of them may reach a handler.
func TestCrossSiteFormPostIsRefused(t *testing.T) {
	e := newEnv(t, "")
	id := e.create()
	before, evsBefore := e.sessionCount(), len(e.events(id, 0))
	posts := []struct{ path, body string }{
		{"/api/sessions", `{"architecture":"shell"}`},
		{"/sessions/create", `{"architecture":"shell"}`},
		{"/api/sessions/" + id + "/messages", `{"content":"touch pwned"}`},
		{"/sessions/" + id + "/message", `{"content":"touch pwned"}`},
		{"/api/sessions/" + id + "/permissions/perm-1", `{"behavior":"allow"}`},
	}
	for _, p := range posts {
		for _, ct := range []string{"text/plain", "text/plain;charset=UTF-8", "application/x-www-form-urlencoded", "multipart/form-data; boundary=x", ""} {
			expectCode(t, e.request("POST", p.path, p.body, "Content-Type", ct), 415, "UNSUPPORTED_MEDIA_TYPE")
		}
	}
	// A form with no fields posts an empty body, still with its type.
	expectCode(t, e.request("POST", "/api/sessions/"+id+"/interrupt", "", "Content-Type", "application/x-www-form-urlencoded"), 415, "UNSUPPORTED_MEDIA_TYPE")
	if n := e.sessionCount(); n != before {
		t.Fatalf("%d sessions after the refused posts, want %d", n, before)
	}
	if evs := e.events(id, 0); len(evs) != evsBefore {
		t.Fatalf("refused messages left %d events", len(evs)-evsBefore)
	}
	// JSON, with or without parameters, and a body-less POST still work.
	expectCode(t, e.request("POST", "/api/sessions/"+id+"/interrupt", ""), 409, "NO_ACTIVE_TURN")
	resp := e.request("POST", "/api/sessions", `{"architecture":"shell"}`, "Content-Type", "application/json; charset=utf-8")
	resp.Body.Close()
	if resp.StatusCode != 201 {
		t.Fatalf("JSON with charset: %d", resp.StatusCode)
	}
	// A body-less cross-site POST (fetch with mode no-cors) is told apart
	// by the browser's Fetch Metadata or Origin.
	expectCode(t, e.request("POST", "/api/sessions/"+id+"/interrupt", "", "Sec-Fetch-Site", "cross-site"), 403, "CROSS_ORIGIN")
	expectCode(t, e.request("POST", "/api/sessions/"+id+"/interrupt", "", "Origin", "http://evil.example"), 403, "CROSS_ORIGIN")
	expectCode(t, e.request("DELETE", "/api/sessions/"+id, "", "Origin", "http://evil.example"), 403, "CROSS_ORIGIN")
	// The UI's own requests are same-origin.
	expectCode(t, e.request("POST", "/api/sessions/"+id+"/interrupt", "", "Sec-Fetch-Site", "same-origin", "Origin", e.srv.URL), 409, "NO_ACTIVE_TURN")
}

// A DNS-rebinding page (evil.example re-resolved to 127.0.0.1) talks to the
// server with its own name as Host and a matching Origin: same-origin as
// far as the browser knows. Only the Host tells it apart.
func TestDNSRebindingIsRefused(t *testing.T) {
	e := newEnv(t, "")
	id := e.create()
	evsBefore := len(e.events(id, 0))
	port := e.srv.URL[strings.LastIndex(e.srv.URL, ":")+1:]
	evil := "evil.example:" + port
	origin := "http://" + evil
	expectCode(t, e.request("GET", "/api/sessions", "", "Host", evil, "Origin", origin), 403, "HOST_NOT_ALLOWED")
	expectCode(t, e.request("POST", "/api/sessions", `{"architecture":"shell"}`, "Host", evil, "Origin", origin, "Sec-Fetch-Site", "same-origin"), 403, "HOST_NOT_ALLOWED")
	expectCode(t, e.request("POST", "/api/sessions/"+id+"/messages", `{"content":"id"}`, "Host", evil, "Origin", origin, "Sec-Fetch-Site", "same-origin"), 403, "HOST_NOT_ALLOWED")
	expectCode(t, e.request("GET", "/api/openapi.json", "", "Host", evil), 403, "HOST_NOT_ALLOWED")
	expectCode(t, e.request("GET", "/socket.io/?EIO=4&transport=polling", "", "Host", evil, "Origin", origin), 403, "HOST_NOT_ALLOWED")
	expectCode(t, e.request("GET", "/api/ws", "", "Host", evil, "Origin", origin, "Connection", "Upgrade", "Upgrade", "websocket",
		"Sec-WebSocket-Version", "13", "Sec-WebSocket-Key", "dGhlIHNhbXBsZSBub25jZQ=="), 403, "HOST_NOT_ALLOWED")
	// An IP address the server is not bound to is no better.
	expectCode(t, e.request("GET", "/api/sessions", "", "Host", "10.9.8.7:"+port), 403, "HOST_NOT_ALLOWED")
	if evs := e.events(id, 0); len(evs) != evsBefore {
		t.Fatalf("the rebound message left %d events", len(evs)-evsBefore)
	}
	if n := e.sessionCount(); n != 1 {
		t.Fatalf("%d sessions, want 1", n)
	}
	// Loopback names, with any port or none, are the server's own.
	for _, h := range []string{"localhost", "localhost:" + port, "LOCALHOST:1", "127.0.0.1:" + port, "127.0.0.1", "[::1]:" + port, "[::1]", "localhost.:" + port} {
		resp := e.request("GET", "/api/sessions", "", "Host", h)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Errorf("Host %q: %d, want 200", h, resp.StatusCode)
		}
	}
}

func TestAllowedHosts(t *testing.T) {
	e := newEnvWith(t, eventlog.Options{}, func(c *api.Config) {
		c.AllowedHosts = []string{"agentd.example", "*.corp.example", "[fd00::5]"}
	})
	cases := map[string]int{
		"agentd.example":          200,
		"Agentd.Example:8443":     200,
		"ci.corp.example:80":      200,
		"a.b.corp.example":        200,
		"corp.example":            403,
		"evilcorp.example":        403,
		"agentd.example.evil.com": 403,
		"[fd00::5]:8080":          200,
		"[fd00::6]:8080":          403,
		"192.168.1.20:8080":       403,
		"localhost:1":             200,
	}
	for h, want := range cases {
		req, _ := http.NewRequest("GET", e.srv.URL+"/api/sessions", nil)
		req.Host = h
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Errorf("Host %q: %d, want %d", h, resp.StatusCode, want)
		}
	}

	// A server bound to all interfaces is reached by address too: any IP
	// address is fine (a rebinding page always comes with a name).
	ip := newEnvWith(t, eventlog.Options{}, func(c *api.Config) { c.AllowIPHosts = true })
	for h, want := range map[string]int{"192.168.1.20:8080": 200, "[2001:db8::1]": 200, "10.0.0.1": 200, "evil.example": 403, "localhost": 200} {
		resp := ip.request("GET", "/api/sessions", "", "Host", h)
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Errorf("AllowIPHosts, Host %q: %d, want %d", h, resp.StatusCode, want)
		}
	}
	// "*" turns the check off (a proxy in front checks names).
	any := newEnvWith(t, eventlog.Options{}, func(c *api.Config) { c.AllowedHosts = []string{"*"} })
	resp := any.request("GET", "/api/sessions", "", "Host", "whatever.example")
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Errorf(`AllowedHosts ["*"]: %d`, resp.StatusCode)
	}
	// Entries are names or addresses, without ports.
	for _, bad := range []string{"agentd.example:8080", "127.0.0.1:80", "http://agentd.example", "", "a b", "*.", "x.*.example"} {
		cfg := e.cfg
		cfg.AllowedHosts = []string{bad}
		if _, err := api.New(cfg); err == nil {
			t.Errorf("AllowedHosts [%q] accepted", bad)
		}
	}
}

// WebSocket handshakes are not subject to the same-origin policy: every
// WebSocket endpoint checks Origin itself, so a page elsewhere cannot read
// the event stream or drive a terminal with the user's access.
func TestWebSocketOriginIsChecked(t *testing.T) {
	e := newEnv(t, "")
	id := e.create()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ws := "ws" + strings.TrimPrefix(e.srv.URL, "http")
	foreign := &websocket.DialOptions{HTTPHeader: http.Header{"Origin": {"http://evil.example"}}}
	own := &websocket.DialOptions{HTTPHeader: http.Header{"Origin": {e.srv.URL}}}
	for _, path := range []string{"/api/ws", "/api/sessions/" + id + "/pty", "/socket.io/?EIO=4&transport=websocket"} {
		_, resp, err := websocket.Dial(ctx, ws+path, foreign)
		if err == nil || resp == nil || resp.StatusCode != 403 {
			status := 0
			if resp != nil {
				status = resp.StatusCode
			}
			t.Errorf("%s with a foreign Origin: %d %v, want 403", path, status, err)
		}
		if strings.HasPrefix(path, "/socket.io/") {
			continue // below
		}
		// The same origin is fine.
		c, _, err := websocket.Dial(ctx, ws+path, own)
		if err != nil {
			t.Errorf("%s with its own Origin: %v", path, err)
			continue
		}
		c.Close(websocket.StatusNormalClosure, "")
	}
	// A Socket.IO client from the same origin connects (it is closed only
	// once connected: the library leaks its ping timer for a connection
	// closed while it opens).
	sc, err := sioConnect(ctx, e.srv.URL, own)
	if err != nil {
		t.Fatalf("socket.io with its own Origin: %v", err)
	}
	sc.c.Close(websocket.StatusNormalClosure, "")
	for range sc.packets {
	}
	// Socket.IO's polling transport too.
	expectCode(t, e.request("GET", "/socket.io/?EIO=4&transport=polling", "", "Origin", "http://evil.example"), 403, "CROSS_ORIGIN")
	resp := e.request("GET", "/socket.io/?EIO=4&transport=polling", "", "Origin", e.srv.URL)
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Errorf("socket.io polling from its own origin: %d", resp.StatusCode)
	}
}
