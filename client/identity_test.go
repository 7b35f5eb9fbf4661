package client_test

import (
	"bytes"
	"context"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/agentd/agentd"
	"github.com/agentd/agentd/client"
	"github.com/agentd/agentd/conversation"
	"github.com/agentd/agentd/internal/agentdtest"
	"github.com/agentd/agentd/internal/auth/oidctest"
	"github.com/agentd/agentd/restapi"
	"github.com/agentd/agentd/store"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		goleak.IgnoreTopFunction("net/http.(*persistConn).readLoop"),
		goleak.IgnoreTopFunction("net/http.(*persistConn).writeLoop"),
		goleak.IgnoreAnyFunction("github.com/zishang520/socket.io/v3/pkg/queue.(*Queue).run"),
	)
}

func newClient(t *testing.T, base, key string) *client.Client {
	t.Helper()
	c, err := client.New(base, client.WithAPIKey(key))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func must[T any](t *testing.T, what string) func(T, error) T {
	return func(v T, err error) T {
		t.Helper()
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		return v
	}
}

// TestIdentityRoutes drives every identity route of the Go client against
// a real server, as its admin (the --api-key) and as a member with a
// token of its own.
func TestIdentityRoutes(t *testing.T) {
	ctx := context.Background()
	srv := agentdtest.Start(t, agentd.Config{APIKey: "root-key", ServerKey: bytes.Repeat([]byte{9}, 32)})
	admin := newClient(t, srv.URL, "root-key")

	info := must[restapi.AuthInfo](t, "auth")(newClient(t, srv.URL, "").Auth(ctx))
	if !info.Required || !info.MultiUser || !slices.Contains(info.Methods, "token") || info.OIDC != nil {
		t.Fatalf("auth info: %+v", info)
	}
	if me := must[restapi.Me](t, "admin me")(admin.Me(ctx)); !me.Admin || me.Method != "api-key" {
		t.Fatalf("admin me: %+v", me)
	}

	alice := must[store.User](t, "create alice")(admin.CreateUser(ctx, restapi.NewUser{ID: "alice", Name: "Alice", Tenant: "team-a"}))
	if alice.ID != "alice" || alice.Tenant != "team-a" || alice.Role != store.RoleMember {
		t.Fatalf("alice: %+v", alice)
	}
	must[store.User](t, "create bob")(admin.CreateUser(ctx, restapi.NewUser{ID: "bob", Tenant: "team-a"}))
	name := "Alice A."
	if u := must[store.User](t, "update")(admin.UpdateUser(ctx, "alice", restapi.UserUpdate{Name: &name})); u.Name != name {
		t.Fatalf("updated: %+v", u)
	}
	if u := must[store.User](t, "get")(admin.User(ctx, "alice")); u.Name != name {
		t.Fatalf("got: %+v", u)
	}
	var ids []string
	for _, u := range must[[]store.User](t, "users")(admin.Users(ctx)) {
		ids = append(ids, u.ID)
	}
	if !slices.Contains(ids, "alice") || !slices.Contains(ids, "bob") {
		t.Fatalf("users: %v", ids)
	}
	if _, err := admin.CreateUser(ctx, restapi.NewUser{ID: "x", Role: "owner"}); !isStatus(err, 400) {
		t.Fatalf("bad role: %v", err)
	}

	tok := must[restapi.CreatedToken](t, "token")(admin.CreateToken(ctx, restapi.NewToken{UserID: "alice", Name: "laptop", ExpiresIn: 3600}))
	if !strings.HasPrefix(tok.Token, "agd_") || tok.UserID != "alice" || tok.ExpiresAt.IsZero() {
		t.Fatalf("created token: %+v", tok)
	}
	asAlice := newClient(t, srv.URL, tok.Token)
	me := must[restapi.Me](t, "alice me")(asAlice.Me(ctx))
	if me.User.ID != "alice" || me.Method != "token" || me.TokenID != tok.ID || me.Admin || me.ExpiresAt == "" {
		t.Fatalf("alice me: %+v", me)
	}
	if ts := must[[]store.APIToken](t, "alice tokens")(asAlice.Tokens(ctx, "")); len(ts) != 1 || ts[0].ID != tok.ID {
		t.Fatalf("alice's tokens: %+v", ts)
	}
	if ts := must[[]store.APIToken](t, "all tokens")(admin.Tokens(ctx, "*")); len(ts) != 1 {
		t.Fatalf("all tokens: %+v", ts)
	}
	if _, err := asAlice.Users(ctx); !isStatus(err, 403) {
		t.Fatalf("member lists users: %v", err)
	}

	// Shares of alice's session; the event of its creation names her.
	sess := must[restapi.CreateSessionResponse](t, "session")(asAlice.CreateSession(ctx, restapi.CreateSessionRequest{Architecture: "shell"}))
	if sh := must[store.Share](t, "share")(asAlice.PutShare(ctx, sess.SessionID, "bob", store.ShareControl)); sh.UserID != "bob" || sh.Access != store.ShareControl {
		t.Fatalf("share: %+v", sh)
	}
	if sh := must[[]store.Share](t, "shares")(asAlice.Shares(ctx, sess.SessionID)); len(sh) != 1 || sh[0].UserID != "bob" {
		t.Fatalf("shares: %+v", sh)
	}
	if err := asAlice.DeleteShare(ctx, sess.SessionID, "bob"); err != nil {
		t.Fatal(err)
	}
	if sh := must[[]store.Share](t, "shares")(asAlice.Shares(ctx, sess.SessionID)); len(sh) != 0 {
		t.Fatalf("shares after delete: %+v", sh)
	}
	if _, err := asAlice.PutShare(ctx, sess.SessionID, "bob", "write"); !isStatus(err, 400) {
		t.Fatalf("bad access: %v", err)
	}
	page := must[restapi.EventPage](t, "events")(asAlice.Events(ctx, sess.SessionID, 0, 100))
	if len(page.Events) == 0 || page.Events[0].Context.Actor == nil || *page.Events[0].Context.Actor != "alice" {
		t.Fatalf("first event's actor: %+v", page.Events)
	}

	// Provider keys never come back.
	const secret = "sk-ant-client-test-0123456789"
	if k := must[store.ProviderKey](t, "put key")(asAlice.PutProviderKey(ctx, store.ScopeUser, "alice", "anthropic", secret)); k.Provider != "anthropic" {
		t.Fatalf("key: %+v", k)
	}
	keys := must[[]store.ProviderKey](t, "keys")(asAlice.ProviderKeys(ctx, store.ScopeUser, "alice"))
	if len(keys) != 1 || strings.Contains(keys[0].Hint, secret) {
		t.Fatalf("keys: %+v", keys)
	}
	if _, err := newClient(t, srv.URL, tok.Token).ProviderKeys(ctx, store.ScopeUser, "bob"); !isStatus(err, 403) {
		t.Fatalf("alice lists bob's keys: %v", err)
	}
	if err := asAlice.DeleteProviderKey(ctx, store.ScopeUser, "alice", "anthropic"); err != nil {
		t.Fatal(err)
	}
	if keys := must[[]store.ProviderKey](t, "keys")(asAlice.ProviderKeys(ctx, store.ScopeUser, "alice")); len(keys) != 0 {
		t.Fatalf("keys after delete: %+v", keys)
	}

	// Budgets.
	b := must[store.Budget](t, "put budget")(admin.PutBudget(ctx, store.Budget{Scope: store.ScopeTenant, Owner: "team-a", TokensPerDay: 500}))
	if b.TokensPerDay != 500 || b.Owner != "team-a" {
		t.Fatalf("budget: %+v", b)
	}
	if bs := must[[]store.Budget](t, "budgets")(admin.Budgets(ctx)); len(bs) != 1 || bs[0].TokensPerDay != 500 {
		t.Fatalf("budgets: %+v", bs)
	}
	if rep := must[restapi.BudgetReport](t, "report")(asAlice.Budget(ctx, store.ScopeTenant, "team-a")); rep.Budget.TokensPerDay != 500 || rep.Day.Tokens != 0 {
		t.Fatalf("report: %+v", rep)
	}
	if _, err := asAlice.PutBudget(ctx, store.Budget{Scope: store.ScopeUser, Owner: "alice", TokensPerDay: 1 << 40}); !isStatus(err, 403) {
		t.Fatalf("member sets a budget: %v", err)
	}
	if err := admin.DeleteBudget(ctx, store.ScopeTenant, "team-a"); err != nil {
		t.Fatal(err)
	}
	if bs := must[[]store.Budget](t, "budgets")(admin.Budgets(ctx)); len(bs) != 0 {
		t.Fatalf("budgets after delete: %+v", bs)
	}

	// Revoked: refused at once.
	if r := must[store.APIToken](t, "revoke")(admin.RevokeToken(ctx, tok.ID)); r.RevokedAt.IsZero() {
		t.Fatalf("revoked: %+v", r)
	}
	if _, err := asAlice.Me(ctx); !isStatus(err, 401) {
		t.Fatalf("revoked token: %v", err)
	}

	// The access log pages.
	log := must[restapi.AccessPage](t, "access log")(admin.AccessLog(ctx, 0, 0))
	var kinds []store.AccessKind
	for _, r := range log.Records {
		kinds = append(kinds, r.Kind)
	}
	if !slices.Contains(kinds, store.AccessUserCreated) || len(log.Records) < 2 || log.Last != log.Records[len(log.Records)-1].ID {
		t.Fatalf("access log: %+v", log)
	}
	next := must[restapi.AccessPage](t, "access log page")(admin.AccessLog(ctx, log.Records[0].ID, 1))
	if len(next.Records) != 1 || next.Records[0].ID != log.Records[1].ID {
		t.Fatalf("second page: %+v", next)
	}
	if _, err := asAlice.AccessLog(ctx, 0, 0); err == nil {
		t.Fatal("a revoked member read the access log")
	}
}

// TestOIDCSignIn signs in at a real OpenID Connect provider (the code flow
// with PKCE, as the web UI does), exchanges the code through the client,
// and acts as the user it made.
func TestOIDCSignIn(t *testing.T) {
	ctx := context.Background()
	prov, err := oidctest.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { prov.Close() })
	prov.AddUser(oidctest.User{Subject: "sub-erin", Username: "erin", Password: "pw-erin", Name: "Erin Example"})
	const redirect = "http://127.0.0.1:1/auth/callback"
	prov.AddClient("agentd-ui", time.Hour, redirect)
	srv := agentdtest.Start(t, agentd.Config{OIDC: &agentd.OIDCConfig{Issuer: prov.URL, ClientID: "agentd-ui"}})
	anon := newClient(t, srv.URL, "")

	info := must[restapi.AuthInfo](t, "auth")(anon.Auth(ctx))
	if info.OIDC == nil || info.OIDC.AuthorizationEndpoint == "" || !slices.Contains(info.Methods, "oidc") {
		t.Fatalf("auth info: %+v", info)
	}
	verifier, challenge := oidctest.PKCE()
	q := url.Values{"client_id": {"agentd-ui"}, "redirect_uri": {redirect}, "response_type": {"code"}, "scope": {"openid profile"},
		"state": {"st-1"}, "code_challenge": {challenge}, "code_challenge_method": {"S256"}}
	back, err := oidctest.Login(ctx, info.OIDC.AuthorizationEndpoint+"?"+q.Encode(), "erin", "pw-erin")
	if err != nil {
		t.Fatal(err)
	}
	code := back.Query().Get("code")
	if _, err := anon.OIDCToken(ctx, restapi.CodeExchange{Code: code, CodeVerifier: "wrong-verifier-0123456789-0123456789-0123", RedirectURI: redirect}); err == nil {
		t.Fatal("a code exchanged with the wrong verifier")
	}
	// The code was spent by the failed try at some providers: sign in again.
	back, err = oidctest.Login(ctx, info.OIDC.AuthorizationEndpoint+"?"+q.Encode(), "erin", "pw-erin")
	if err != nil {
		t.Fatal(err)
	}
	in := must[restapi.SignIn](t, "exchange")(anon.OIDCToken(ctx, restapi.CodeExchange{Code: back.Query().Get("code"), CodeVerifier: verifier, RedirectURI: redirect}))
	if in.Token == "" || in.User.Name != "Erin Example" || time.Until(in.ExpiresAt) <= 0 {
		t.Fatalf("sign-in: %+v", in)
	}
	erin := newClient(t, srv.URL, in.Token)
	me := must[restapi.Me](t, "me")(erin.Me(ctx))
	if me.Method != "oidc" || me.User.ID != in.User.ID || me.ExpiresAt == "" {
		t.Fatalf("me: %+v", me)
	}
	sess := must[restapi.CreateSessionResponse](t, "session")(erin.CreateSession(ctx, restapi.CreateSessionRequest{Architecture: "shell"}))
	page := must[restapi.EventPage](t, "events")(erin.Events(ctx, sess.SessionID, 0, 100))
	for _, e := range page.Events {
		if e.Context.Source == conversation.SourceServer && (e.Context.Actor == nil || *e.Context.Actor != in.User.ID) {
			t.Fatalf("event %d (%s) actor %v, want %s", e.Seq, e.Type, e.Context.Actor, in.User.ID)
		}
	}
	if len(page.Events) == 0 {
		t.Fatal("no events")
	}
	if in.RefreshToken != "" {
		again := must[restapi.SignIn](t, "refresh")(anon.OIDCRefresh(ctx, in.RefreshToken))
		if again.Token == "" || again.User.ID != in.User.ID {
			t.Fatalf("refresh: %+v", again)
		}
	}
	if _, err := anon.OIDCRefresh(ctx, "not-a-refresh-token"); err == nil {
		t.Fatal("a made-up refresh token was accepted")
	}
}

func isStatus(err error, status int) bool {
	e, ok := err.(*client.Error)
	return ok && e.Status == status
}
