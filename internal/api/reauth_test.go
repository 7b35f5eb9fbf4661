package api_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/agentd/agentd/conversation"
	"github.com/agentd/agentd/internal/api"
	"github.com/agentd/agentd/internal/auth"
	"github.com/agentd/agentd/store"
)

// ptyControlReply reads c until a text frame (a control reply; terminal
// bytes are binary) and decodes it.
func ptyControlReply(ctx context.Context, t *testing.T, c *websocket.Conn) map[string]any {
	t.Helper()
	for {
		typ, data, err := c.Read(ctx)
		if err != nil {
			t.Fatalf("terminal: %v", err)
		}
		if typ != websocket.MessageText {
			continue
		}
		var m map[string]any
		if err := json.Unmarshal(data, &m); err != nil {
			t.Fatalf("control frame %q: %v", data, err)
		}
		return m
	}
}

// ptyUntil reads c's terminal bytes until they contain want.
func ptyUntil(ctx context.Context, t *testing.T, c *websocket.Conn, want string) {
	t.Helper()
	var got strings.Builder
	for !strings.Contains(got.String(), want) {
		typ, data, err := c.Read(ctx)
		if err != nil {
			t.Fatalf("terminal before %q (got %q): %v", want, got.String(), err)
		}
		if typ == websocket.MessageBinary {
			got.Write(data)
		}
	}
}

// waitUnauthorized reads c until it is closed, which must be with 4001.
func waitUnauthorized(ctx context.Context, t *testing.T, c *websocket.Conn, what string) {
	t.Helper()
	for {
		if _, _, err := c.Read(ctx); err != nil {
			if websocket.CloseStatus(err) != api.CloseUnauthorized {
				t.Fatalf("%s ended with %v, want close %d", what, err, api.CloseUnauthorized)
			}
			return
		}
	}
}

// checkRenewedExpiry: a renewal's answer m gives the new token's expiry,
// an hour from now (renewEnv's fresh token).
func checkRenewedExpiry(t *testing.T, m map[string]any) {
	t.Helper()
	s, _ := m["expiresAt"].(string)
	if exp, err := time.Parse(time.RFC3339, s); err != nil || time.Until(exp) < 59*time.Minute || time.Until(exp) > time.Hour {
		t.Fatalf("expiresAt %v, want the new token's (in an hour)", m["expiresAt"])
	}
}

// renewEnv is the renewal tests' server: alice's session a, and a second
// token of alice's (fresh, expiring in an hour) and one with only scope.
func renewEnv(t *testing.T, scope auth.Scope) (e *identEnv, a string, fresh, limited auth.CreatedToken) {
	t.Helper()
	e = newIdentEnv(t, auth.Limits{})
	a = e.create("alice")
	admin := auth.Principal{UserID: rootUser, Role: store.RoleAdmin, Method: auth.MethodAPIKey}
	var err error
	if fresh, err = e.svc.CreateToken(context.Background(), admin, auth.NewToken{UserID: "alice", Name: "refreshed", ExpiresIn: 3600}); err != nil {
		t.Fatal(err)
	}
	if limited, err = e.svc.CreateToken(context.Background(), admin, auth.NewToken{UserID: "alice", Name: "limited", Scopes: []string{string(scope)}}); err != nil {
		t.Fatal(err)
	}
	return e, a, fresh, limited
}

// TestPTYRenewsItsCredential: a terminal whose token is replaced over the
// connection ({"type":"auth"}) outlives the revocation of the token it was
// opened with, and closes 4001 when the new one goes. Tokens of another
// user, without the write scope, unknown or missing are refused with the
// codes a request would get, and change nothing.
func TestPTYRenewsItsCredential(t *testing.T) {
	e, a, fresh, readOnly := renewEnv(t, auth.ScopeSessionsRead)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ptyURL := "ws" + strings.TrimPrefix(e.srv.URL, "http") + "/api/sessions/" + a + "/pty?access_token="
	dial := func(token string) *websocket.Conn {
		c, _, err := websocket.Dial(ctx, ptyURL+token, nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.CloseNow() })
		return c
	}
	renewed, canary := dial(e.tokens["alice"]), dial(e.tokens["alice"])
	send := func(c *websocket.Conn, v any) {
		t.Helper()
		b, _ := json.Marshal(v)
		if err := c.Write(ctx, websocket.MessageText, b); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range []struct {
		name, token, code string
	}{
		{"no token", "", "BAD_REQUEST"},
		{"unknown token", "agd_not-a-real-token-at-all-xxxxxxxxxxxxx", "UNAUTHORIZED"},
		{"another user's", e.tokens["bob"], "FORBIDDEN"},
		{"without sessions:write", readOnly.Token, "FORBIDDEN"},
	} {
		send(renewed, map[string]any{"type": "auth", "token": c.token})
		if m := ptyControlReply(ctx, t, renewed); m["type"] != "auth" || m["ok"] != false || m["code"] != c.code || m["error"] == "" {
			t.Fatalf("%s: %v, want ok false, code %s", c.name, m, c.code)
		}
	}
	send(renewed, map[string]any{"type": "auth", "token": fresh.Token})
	m := ptyControlReply(ctx, t, renewed)
	if m["type"] != "auth" || m["ok"] != true {
		t.Fatalf("renewed with alice's new token: %v", m)
	}
	checkRenewedExpiry(t, m)

	// The first token goes: the canary, never renewed, closes 4001 (so the
	// check has run); the renewed terminal still runs commands.
	e.expect(rootUser, "DELETE", "/api/tokens/"+e.ids["alice"], "", 200, "")
	waitUnauthorized(ctx, t, canary, "the canary terminal")
	if err := renewed.Write(ctx, websocket.MessageBinary, []byte("echo renewed-$((40+2))\n")); err != nil {
		t.Fatalf("the renewed terminal after the first token's revocation: %v", err)
	}
	ptyUntil(ctx, t, renewed, "renewed-42")

	// The new token goes too: now the renewed terminal closes 4001.
	e.expect(rootUser, "DELETE", "/api/tokens/"+fresh.ID, "", 200, "")
	waitUnauthorized(ctx, t, renewed, "the renewed terminal")
}

// TestWSRenewsItsCredential: the same on /api/ws ({"op":"auth"}) and
// Socket.IO (the auth event): the renewed connection keeps its joins and
// their events past the revocation of the token it was opened with.
func TestWSRenewsItsCredential(t *testing.T) {
	e, a, fresh, noRead := renewEnv(t, auth.ScopeKeys)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	renewed, canary := e.ws("alice"), e.ws("alice")
	wsSendJSON(t, renewed, map[string]any{"op": "join", "sessionId": a, "id": "j"})
	wsNext(t, renewed, ackOf("j"))
	// Socket.IO: the auth event.
	sio, refused := dialSIO(t, e.srv.URL, e.tokens["alice"])
	if refused != "" {
		t.Fatal(refused)
	}
	defer sio.close()
	if ack := sio.call(1, "auth", map[string]any{"token": e.tokens["bob"]}); ack["ok"] != false || errCode(ack) != "FORBIDDEN" {
		t.Fatalf("socket.io auth with bob's token: %v", ack)
	}
	if ack := sio.call(2, "auth", fresh.Token); ack["ok"] != true || ack["expiresAt"] == nil {
		t.Fatalf("socket.io auth with alice's new token: %v", ack)
	}
	for i, c := range []struct {
		name, token, code string
	}{
		{"no token", "", "BAD_REQUEST"},
		{"unknown token", "agd_not-a-real-token-at-all-xxxxxxxxxxxxx", "UNAUTHORIZED"},
		{"another user's", e.tokens["bob"], "FORBIDDEN"},
		{"without sessions:read", noRead.Token, "FORBIDDEN"},
	} {
		id := "r" + string(rune('0'+i))
		wsSendJSON(t, renewed, map[string]any{"op": "auth", "token": c.token, "id": id})
		if m := wsNext(t, renewed, ackOf(id)); m["ok"] != false || errCode(m) != c.code {
			t.Fatalf("%s: %v, want ok false, code %s", c.name, m, c.code)
		}
	}
	wsSendJSON(t, renewed, map[string]any{"op": "auth", "token": fresh.Token, "id": "ok"})
	m := wsNext(t, renewed, ackOf("ok"))
	if m["ok"] != true {
		t.Fatalf("renewed with alice's new token: %v", m)
	}
	checkRenewedExpiry(t, m)

	e.expect(rootUser, "DELETE", "/api/tokens/"+e.ids["alice"], "", 200, "")
	waitUnauthorized(ctx, t, canary, "the canary")
	// The renewed connections go on: Socket.IO still joins, the WebSocket
	// still streams its session's events.
	if ack := sio.call(3, "session:join", a); ack["ok"] != true {
		t.Fatalf("socket.io join after the first token's revocation: %v", ack)
	}
	e.tokens["alice"] = fresh.Token
	e.expect("alice", "POST", "/api/sessions/"+a+"/messages", `{"content":"echo renewed"}`, 202, "")
	wsNext(t, renewed, func(m map[string]any) bool {
		ev, _ := m["event"].(map[string]any)
		p, _ := json.Marshal(ev["payload"])
		return m["op"] == "event" && ev["type"] == string(conversation.TypeBlockDelta) && strings.Contains(string(p), "renewed")
	})

	e.expect(rootUser, "DELETE", "/api/tokens/"+fresh.ID, "", 200, "")
	waitUnauthorized(ctx, t, renewed, "the renewed connection")
}
