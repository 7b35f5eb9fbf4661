package api_test

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"encoding/json"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	jose "github.com/go-jose/go-jose/v4"

	"github.com/agentd/agentd/agent"
	"github.com/agentd/agentd/internal/agent/shell"
	"github.com/agentd/agentd/internal/api"
	"github.com/agentd/agentd/internal/auth"
	"github.com/agentd/agentd/internal/auth/oidctest"
	"github.com/agentd/agentd/internal/eventlog"
	"github.com/agentd/agentd/internal/sandbox/local"
	"github.com/agentd/agentd/internal/session"
	"github.com/agentd/agentd/store/memstore"
)

// newOIDCEnv is a server whose users sign in at a real OpenID Connect
// provider (zitadel's OP, started here on loopback).
func newOIDCEnv(t *testing.T) (*identEnv, *oidctest.Provider) {
	t.Helper()
	prov, err := oidctest.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { prov.Close() })
	prov.AddUser(oidctest.User{Subject: "sub-erin-1", Username: "erin", Password: "pw-erin", Name: "Erin Example",
		Claims: map[string]any{"tenant": "acme", "groups": []string{"devs"}}})
	prov.AddUser(oidctest.User{Subject: "sub-olga-2", Username: "olga", Password: "pw-olga", Name: "Olga Ops",
		Claims: map[string]any{"tenant": "acme", "groups": []string{"devs", "agentd-admins"}}})
	st := memstore.New()
	lg := eventlog.New(st, eventlog.Options{QueueSize: 256})
	archs := agent.NewRegistry()
	archs.Register(shell.Architecture{})
	mgr, err := session.New(session.Config{Store: st, Log: lg, Sandbox: local.New(local.Options{}), Architectures: archs, DataDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	if err := mgr.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	o, err := auth.NewOIDC(context.Background(), auth.OIDCConfig{Issuer: prov.URL, ClientID: "agentd-ui",
		UsernameClaim: "preferred_username", TenantClaim: "tenant", AdminGroups: []string{"agentd-admins"}})
	if err != nil {
		t.Fatal(err)
	}
	svc, err := auth.New(auth.Config{Identity: st, Sessions: st, OIDC: o})
	if err != nil {
		t.Fatal(err)
	}
	a, err := api.New(api.Config{Sessions: mgr, Log: lg, Profiles: session.NewProfiles(st, nil), Architectures: archs, Auth: svc, MaxBody: 4096})
	if err != nil {
		t.Fatal(err)
	}
	e := &identEnv{t: t, srv: httptest.NewServer(a), svc: svc, st: st, tokens: map[string]string{}, ids: map[string]string{}}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		mgr.Close(ctx)
		lg.Close()
		a.Shutdown(ctx)
		e.srv.Close()
		svc.Close(ctx)
	})
	prov.AddClient("agentd-ui", time.Hour, e.srv.URL+"/auth/callback")
	return e, prov
}

// signIn does what the web UI does: authorization code with PKCE at the
// provider, then the code exchange through POST /api/auth/oidc/token.
func signIn(t *testing.T, e *identEnv, clientID, user, password string) map[string]any {
	t.Helper()
	info := e.expect("", "GET", "/api/auth", "", 200, "")
	oi, _ := info["oidc"].(map[string]any)
	if oi == nil || oi["authorizationEndpoint"] == "" || info["required"] != true {
		t.Fatalf("GET /api/auth = %v", info)
	}
	verifier, challenge := oidctest.PKCE()
	redirect := e.srv.URL + "/auth/callback"
	q := url.Values{"client_id": {clientID}, "redirect_uri": {redirect}, "response_type": {"code"}, "scope": {"openid profile email"},
		"state": {"st-123"}, "code_challenge": {challenge}, "code_challenge_method": {"S256"}}
	back, err := oidctest.Login(context.Background(), oi["authorizationEndpoint"].(string)+"?"+q.Encode(), user, password)
	if err != nil {
		t.Fatal(err)
	}
	if back.Query().Get("state") != "st-123" || back.Query().Get("code") == "" {
		t.Fatalf("redirected to %s", back)
	}
	body, _ := json.Marshal(map[string]string{"code": back.Query().Get("code"), "codeVerifier": verifier, "redirectUri": redirect})
	return e.expect("", "POST", "/api/auth/oidc/token", string(body), 200, "")
}

// TestOIDCSignIn: a user of a real OpenID Connect provider signs in (code
// flow with PKCE), is created on first sight from its claims, creates a
// session whose events carry its id; wrongly signed and expired tokens
// are refused; a rotated signing key is picked up from the JWKS.
func TestOIDCSignIn(t *testing.T) {
	e, prov := newOIDCEnv(t)
	in := signIn(t, e, "agentd-ui", "erin", "pw-erin")
	tok := in["token"].(string)
	if u := in["user"].(map[string]any); u["id"] != "erin" || u["tenant"] != "acme" || u["role"] != "member" || u["name"] != "Erin Example" {
		t.Fatalf("signed-in user %v", u)
	}
	e.tokens["erin"] = tok
	me := e.expect("erin", "GET", "/api/me", "", 200, "")
	if me["method"] != "oidc" || me["user"].(map[string]any)["id"] != "erin" || me["expiresAt"] == nil {
		t.Fatalf("me %v", me)
	}
	id := e.create("erin")
	e.expect("erin", "POST", "/api/sessions/"+id+"/messages", `{"content":"echo hi from erin"}`, 202, "")
	evs := e.waitTurn("erin", id, "q1")
	checkActor(t, evs, "q1", "erin")
	for _, ev := range evs {
		if ev.Context.Actor != nil && *ev.Context.Actor != "erin" {
			t.Fatalf("event %s has actor %q", ev.Type, *ev.Context.Actor)
		}
	}
	// Group membership makes admins.
	olga := signIn(t, e, "agentd-ui", "olga", "pw-olga")
	if olga["user"].(map[string]any)["role"] != "admin" {
		t.Fatalf("olga %v", olga["user"])
	}
	e.tokens["olga"] = olga["token"].(string)
	e.expect("olga", "GET", "/api/sessions/"+id, "", 200, "")
	e.expect("erin", "GET", "/api/users", "", 403, "FORBIDDEN")

	// Wrongly signed: erin's claims, the provider's key id, another key.
	forged := forge(t, tok, nil)
	e.tokens["forged"] = forged
	e.expect("forged", "GET", "/api/sessions", "", 401, "UNAUTHORIZED")
	// Signed by a key the provider never published.
	other, _ := rsa.GenerateKey(rand.Reader, 2048)
	e.tokens["unknown-key"] = forge(t, tok, &jose.JSONWebKey{Key: other, KeyID: "not-a-provider-key", Algorithm: "RS256"})
	e.expect("unknown-key", "GET", "/api/sessions", "", 401, "UNAUTHORIZED")
	// A bad sign-in is refused too.
	e.expect("", "POST", "/api/auth/oidc/token", `{"code":"made-up","codeVerifier":"x","redirectUri":"`+e.srv.URL+`/auth/callback"}`, 401, "UNAUTHORIZED")

	// Expired: tokens that live 2 s.
	prov.SetIDTokenLifetime("agentd-ui", 2*time.Second)
	short := signIn(t, e, "agentd-ui", "erin", "pw-erin")
	prov.SetIDTokenLifetime("agentd-ui", time.Hour)
	e.tokens["short"] = short["token"].(string)
	e.expect("short", "GET", "/api/sessions", "", 200, "")
	deadline := time.Now().Add(15 * time.Second)
	for {
		st, m, _ := e.call("short", "GET", "/api/sessions", "")
		if st == 401 {
			if !strings.Contains(m["error"].(string), "expired") {
				t.Fatalf("expired token refused with %v", m)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("an expired token is still accepted")
		}
		time.Sleep(100 * time.Millisecond)
	}

	// Key rotation: tokens signed by the new key are accepted (the JWKS is
	// fetched again for the unknown key id); old ones still verify.
	_, oldKID := prov.SigningKey()
	if err := prov.RotateKey(); err != nil {
		t.Fatal(err)
	}
	if _, kid := prov.SigningKey(); kid == oldKID {
		t.Fatal("rotation kept the key")
	}
	again := signIn(t, e, "agentd-ui", "erin", "pw-erin")
	e.tokens["rotated"] = again["token"].(string)
	e.expect("rotated", "GET", "/api/sessions", "", 200, "")
	e.expect("erin", "GET", "/api/sessions", "", 200, "")
	// The same person signing in again is the same user, not a new one.
	users, err := e.st.ListUsers(context.Background())
	if err != nil || len(users) != 2 {
		t.Fatalf("users %v, %v: want erin and olga once each", users, err)
	}
}

// forge re-signs tok's claims with key (nil: a fresh key under the
// provider's key id).
func forge(t *testing.T, tok string, key *jose.JSONWebKey) string {
	t.Helper()
	parsed, err := jose.ParseSignedCompact(tok, []jose.SignatureAlgorithm{jose.RS256})
	if err != nil {
		t.Fatal(err)
	}
	payload := parsed.UnsafePayloadWithoutVerification()
	if key == nil {
		k, _ := rsa.GenerateKey(rand.Reader, 2048)
		key = &jose.JSONWebKey{Key: k, KeyID: parsed.Signatures[0].Header.KeyID, Algorithm: "RS256"}
	}
	signer, err := jose.NewSigner(jose.SigningKey{Algorithm: jose.RS256, Key: key}, (&jose.SignerOptions{}).WithType("JWT"))
	if err != nil {
		t.Fatal(err)
	}
	obj, err := signer.Sign(payload)
	if err != nil {
		t.Fatal(err)
	}
	out, err := obj.CompactSerialize()
	if err != nil {
		t.Fatal(err)
	}
	return out
}
