// Package oidctest runs a real OpenID Connect provider for tests: zitadel's
// certified OP (github.com/zitadel/oidc/v3/pkg/op: discovery, JWKS,
// authorization code with PKCE, token endpoint, refresh) over loopback
// HTTP, with an in-memory store of users and public clients, a minimal
// login form, and signing keys that can be rotated. Login drives the code
// flow the way a browser would. It is test support: nothing in the agentd
// binary imports it.
package oidctest

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"html"
	"log/slog"
	"net"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	jose "github.com/go-jose/go-jose/v4"
	"github.com/zitadel/oidc/v3/pkg/oidc"
	"github.com/zitadel/oidc/v3/pkg/op"
	"golang.org/x/text/language"
)

// User is a person who can sign in.
type User struct {
	Subject  string
	Username string
	Password string
	Name     string
	Email    string
	// Claims are added to ID tokens (e.g. "tenant", "groups").
	Claims map[string]any
}

// Provider is a running OP. Its methods are safe for concurrent use.
type Provider struct {
	URL string // the issuer

	srv *http.Server
	ln  net.Listener
	op  *op.Provider
	st  *storage
}

// Start runs a provider on a loopback port.
func Start() (*Provider, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	issuer := "http://" + ln.Addr().String()
	st := newStorage()
	if err := st.rotate(); err != nil {
		ln.Close()
		return nil, err
	}
	var key [32]byte
	_, _ = rand.Read(key[:])
	prov, err := op.NewProvider(&op.Config{
		CryptoKey: key, CodeMethodS256: true, AuthMethodPost: true, GrantTypeRefreshToken: true,
		SupportedUILocales: []language.Tag{language.English},
	}, st, op.StaticIssuer(issuer), op.WithAllowInsecure(), op.WithLogger(opLogger()))
	if err != nil {
		ln.Close()
		return nil, err
	}
	p := &Provider{URL: issuer, ln: ln, op: prov, st: st}
	mux := http.NewServeMux()
	login := op.NewIssuerInterceptor(prov.IssuerFromRequest).HandlerFunc(p.login)
	mux.Handle("/login", login)
	mux.Handle("/", prov)
	p.srv = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = p.srv.Serve(ln) }()
	return p, nil
}

// Close stops the provider.
func (p *Provider) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return p.srv.Shutdown(ctx)
}

// AddUser registers a user.
func (p *Provider) AddUser(u User) { p.st.addUser(u) }

// AddClient registers a public client (PKCE, no secret) that may redirect
// to the given URIs; its ID tokens live idTokenTTL (default an hour).
func (p *Provider) AddClient(id string, idTokenTTL time.Duration, redirectURIs ...string) {
	if idTokenTTL <= 0 {
		idTokenTTL = time.Hour
	}
	c := &client{id: id, redirects: redirectURIs}
	c.ttl.Store(int64(idTokenTTL))
	p.st.addClient(c)
}

// SetIDTokenLifetime changes how long the client's next ID tokens live.
func (p *Provider) SetIDTokenLifetime(clientID string, d time.Duration) {
	p.st.mu.Lock()
	defer p.st.mu.Unlock()
	if c, ok := p.st.clients[clientID]; ok {
		c.ttl.Store(int64(d))
	}
}

// SetRefreshTokenLifetime makes the refresh tokens issued from now on
// expire after d (0, the default: never), as providers bound sessions.
func (p *Provider) SetRefreshTokenLifetime(d time.Duration) {
	p.st.mu.Lock()
	defer p.st.mu.Unlock()
	p.st.refreshTTL = d
}

// RotateKey makes a new signing key current; the old one stays in the
// JWKS (as providers keep it while tokens it signed live).
func (p *Provider) RotateKey() error { return p.st.rotate() }

// SigningKey returns the current private key and its id (tests sign
// tokens the provider did not issue with another key).
func (p *Provider) SigningKey() (*rsa.PrivateKey, string) {
	k := p.st.current()
	return k.key, k.id
}

// Login drives the authorization code flow with PKCE as a browser would:
// it opens authURL (which must carry client_id, redirect_uri, state,
// code_challenge…), signs in with the user's name and password at the
// login form, and returns the URL the provider redirects to (the
// client's redirect URI with code and state), without following it.
func Login(ctx context.Context, authURL, username, password string) (*url.URL, error) {
	jar, _ := cookiejar.New(nil)
	var final *url.URL
	hc := &http.Client{Jar: jar, CheckRedirect: func(req *http.Request, via []*http.Request) error {
		if req.URL.Query().Get("code") != "" || req.URL.Query().Get("error") != "" {
			final = req.URL
			return http.ErrUseLastResponse
		}
		return nil
	}}
	get, err := http.NewRequestWithContext(ctx, "GET", authURL, nil)
	if err != nil {
		return nil, err
	}
	resp, err := hc.Do(get)
	if err != nil {
		return nil, err
	}
	resp.Body.Close()
	if final != nil {
		return final, nil
	}
	if resp.Request.URL.Path != "/login" {
		return nil, fmt.Errorf("the authorization request led to %s (%s), not the login form", resp.Request.URL, resp.Status)
	}
	id := resp.Request.URL.Query().Get("authRequestID")
	form := url.Values{"authRequestID": {id}, "username": {username}, "password": {password}}
	post, err := http.NewRequestWithContext(ctx, "POST", resp.Request.URL.Scheme+"://"+resp.Request.URL.Host+"/login", strings.NewReader(form.Encode()))
	if err != nil {
		return nil, err
	}
	post.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	resp, err = hc.Do(post)
	if err != nil {
		return nil, err
	}
	resp.Body.Close()
	if final == nil {
		return nil, fmt.Errorf("sign-in did not redirect to the client (%s)", resp.Status)
	}
	return final, nil
}

// login serves the login form and checks it.
func (p *Provider) login(w http.ResponseWriter, r *http.Request) {
	if r.Method == http.MethodGet {
		id := r.URL.Query().Get("authRequestID")
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		fmt.Fprintf(w, `<!doctype html><title>Sign in</title><form method="post" action="/login">
<input type="hidden" name="authRequestID" value="%s">
<label>Username <input name="username" id="username"></label>
<label>Password <input name="password" id="password" type="password"></label>
<button type="submit" id="submit">Sign in</button></form>`, html.EscapeString(id))
		return
	}
	if err := r.ParseForm(); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	id := r.FormValue("authRequestID")
	if err := p.st.signIn(id, r.FormValue("username"), r.FormValue("password")); err != nil {
		http.Error(w, err.Error(), http.StatusForbidden)
		return
	}
	http.Redirect(w, r, op.AuthCallbackURL(p.op)(r.Context(), id), http.StatusFound)
}

// PKCE returns a code verifier and its S256 challenge.
func PKCE() (verifier, challenge string) {
	verifier = oauthRandom()
	return verifier, oidc.NewSHACodeChallenge(verifier)
}

func oauthRandom() string {
	var b [32]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// ---- storage ---------------------------------------------------------------

type signingKey struct {
	id  string
	key *rsa.PrivateKey
}

func (k *signingKey) SignatureAlgorithm() jose.SignatureAlgorithm { return jose.RS256 }
func (k *signingKey) Key() any                                    { return k.key }
func (k *signingKey) ID() string                                  { return k.id }

type publicKey struct{ k *signingKey }

func (k publicKey) ID() string                         { return k.k.id }
func (k publicKey) Algorithm() jose.SignatureAlgorithm { return jose.RS256 }
func (k publicKey) Use() string                        { return "sig" }
func (k publicKey) Key() any                           { return &k.k.key.PublicKey }

type storage struct {
	mu       sync.Mutex
	users    map[string]*User // by subject
	clients  map[string]*client
	requests map[string]*authRequest // by id
	codes    map[string]string       // code → request id
	refresh  map[string]*refreshToken
	keys     []*signingKey // last is current
	// refreshTTL bounds refresh tokens' lives (0: they never expire).
	refreshTTL time.Duration
}

type refreshToken struct {
	subject, clientID string
	scopes, audience  []string
	authTime          time.Time
	expires           time.Time // zero: never
}

func newStorage() *storage {
	return &storage{users: map[string]*User{}, clients: map[string]*client{}, requests: map[string]*authRequest{},
		codes: map[string]string{}, refresh: map[string]*refreshToken{}}
}

func (s *storage) rotate() error {
	k, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return err
	}
	sum := sha256.Sum256(k.PublicKey.N.Bytes())
	s.mu.Lock()
	s.keys = append(s.keys, &signingKey{id: hex.EncodeToString(sum[:8]), key: k})
	s.mu.Unlock()
	return nil
}

func (s *storage) current() *signingKey {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.keys[len(s.keys)-1]
}

func (s *storage) addUser(u User) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.users[u.Subject] = &u
}

func (s *storage) addClient(c *client) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.clients[c.id] = c
}

func (s *storage) signIn(id, username, password string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	req, ok := s.requests[id]
	if !ok {
		return errors.New("unknown authorization request")
	}
	for _, u := range s.users {
		if u.Username == username && u.Password == password {
			req.subject, req.done, req.authTime = u.Subject, true, time.Now()
			return nil
		}
	}
	return errors.New("wrong username or password")
}

type notFound struct{ what string }

func (e notFound) Error() string { return e.what + " not found" }
func (notFound) IsNotFound()     {}

func (s *storage) CreateAuthRequest(_ context.Context, r *oidc.AuthRequest, userID string) (op.AuthRequest, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	req := &authRequest{id: oauthRandom(), r: *r, subject: userID}
	s.requests[req.id] = req
	return req, nil
}

func (s *storage) AuthRequestByID(_ context.Context, id string) (op.AuthRequest, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if r, ok := s.requests[id]; ok {
		return r, nil
	}
	return nil, notFound{"auth request"}
}

func (s *storage) AuthRequestByCode(_ context.Context, code string) (op.AuthRequest, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if r, ok := s.requests[s.codes[code]]; ok {
		return r, nil
	}
	return nil, notFound{"code"}
}

func (s *storage) SaveAuthCode(_ context.Context, id, code string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.codes[code] = id
	return nil
}

func (s *storage) DeleteAuthRequest(_ context.Context, id string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.requests, id)
	for c, rid := range s.codes {
		if rid == id {
			delete(s.codes, c)
		}
	}
	return nil
}

func (s *storage) CreateAccessToken(context.Context, op.TokenRequest) (string, time.Time, error) {
	return oauthRandom(), time.Now().Add(5 * time.Minute), nil
}

func (s *storage) CreateAccessAndRefreshTokens(_ context.Context, req op.TokenRequest, _ string) (string, string, time.Time, error) {
	rt := &refreshToken{subject: req.GetSubject(), scopes: req.GetScopes(), audience: req.GetAudience(), authTime: time.Now()}
	if ar, ok := req.(*authRequest); ok {
		rt.clientID = ar.r.ClientID
	}
	if old, ok := req.(*refreshRequest); ok {
		rt.clientID = old.clientID
	}
	tok := oauthRandom()
	s.mu.Lock()
	if s.refreshTTL > 0 {
		rt.expires = time.Now().Add(s.refreshTTL)
	}
	s.refresh[tok] = rt
	s.mu.Unlock()
	return oauthRandom(), tok, time.Now().Add(5 * time.Minute), nil
}

func (s *storage) TokenRequestByRefreshToken(_ context.Context, tok string) (op.RefreshTokenRequest, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	rt, ok := s.refresh[tok]
	if !ok || (!rt.expires.IsZero() && time.Now().After(rt.expires)) {
		return nil, op.ErrInvalidRefreshToken
	}
	return &refreshRequest{refreshToken: *rt}, nil
}

func (s *storage) TerminateSession(context.Context, string, string) error { return nil }
func (s *storage) RevokeToken(context.Context, string, string, string) *oidc.Error {
	return nil
}
func (s *storage) GetRefreshTokenInfo(_ context.Context, _ string, tok string) (string, string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if rt, ok := s.refresh[tok]; ok {
		return rt.subject, tok, nil
	}
	return "", "", op.ErrInvalidRefreshToken
}

func (s *storage) SigningKey(context.Context) (op.SigningKey, error) { return s.current(), nil }
func (s *storage) SignatureAlgorithms(context.Context) ([]jose.SignatureAlgorithm, error) {
	return []jose.SignatureAlgorithm{jose.RS256}, nil
}

func (s *storage) KeySet(context.Context) ([]op.Key, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]op.Key, len(s.keys))
	for i, k := range s.keys {
		out[i] = publicKey{k}
	}
	return out, nil
}

func (s *storage) GetClientByClientID(_ context.Context, id string) (op.Client, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if c, ok := s.clients[id]; ok {
		return c, nil
	}
	return nil, notFound{"client"}
}

func (s *storage) AuthorizeClientIDSecret(context.Context, string, string) error {
	return errors.New("only public clients")
}

func (s *storage) SetUserinfoFromScopes(context.Context, *oidc.UserInfo, string, string, []string) error {
	return nil
}

// SetUserinfoFromRequest fills the ID token's claims.
func (s *storage) SetUserinfoFromRequest(_ context.Context, ui *oidc.UserInfo, req op.IDTokenRequest, _ []string) error {
	return s.userinfo(ui, req.GetSubject())
}

func (s *storage) SetUserinfoFromToken(_ context.Context, ui *oidc.UserInfo, _, subject, _ string) error {
	return s.userinfo(ui, subject)
}

func (s *storage) userinfo(ui *oidc.UserInfo, subject string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	u, ok := s.users[subject]
	if !ok {
		return notFound{"user"}
	}
	ui.Subject, ui.Name, ui.PreferredUsername, ui.Email, ui.EmailVerified = u.Subject, u.Name, u.Username, u.Email, true
	for k, v := range u.Claims {
		ui.AppendClaims(k, v)
	}
	return nil
}

func (s *storage) SetIntrospectionFromToken(context.Context, *oidc.IntrospectionResponse, string, string, string) error {
	return errors.New("no introspection")
}
func (s *storage) GetPrivateClaimsFromScopes(context.Context, string, string, []string) (map[string]any, error) {
	return nil, nil
}
func (s *storage) GetKeyByIDAndClientID(context.Context, string, string) (*jose.JSONWebKey, error) {
	return nil, errors.New("no JWT profile")
}
func (s *storage) ValidateJWTProfileScopes(context.Context, string, []string) ([]string, error) {
	return nil, errors.New("no JWT profile")
}
func (s *storage) Health(context.Context) error { return nil }

// authRequest is one authorization request.
type authRequest struct {
	id       string
	r        oidc.AuthRequest
	subject  string
	done     bool
	authTime time.Time
}

func (a *authRequest) GetID() string          { return a.id }
func (a *authRequest) GetACR() string         { return "" }
func (a *authRequest) GetAMR() []string       { return []string{"pwd"} }
func (a *authRequest) GetAudience() []string  { return []string{a.r.ClientID} }
func (a *authRequest) GetAuthTime() time.Time { return a.authTime }
func (a *authRequest) GetClientID() string    { return a.r.ClientID }
func (a *authRequest) GetCodeChallenge() *oidc.CodeChallenge {
	if a.r.CodeChallenge == "" {
		return nil
	}
	return &oidc.CodeChallenge{Challenge: a.r.CodeChallenge, Method: a.r.CodeChallengeMethod}
}
func (a *authRequest) GetNonce() string                   { return a.r.Nonce }
func (a *authRequest) GetRedirectURI() string             { return a.r.RedirectURI }
func (a *authRequest) GetResponseType() oidc.ResponseType { return a.r.ResponseType }
func (a *authRequest) GetResponseMode() oidc.ResponseMode { return a.r.ResponseMode }
func (a *authRequest) GetScopes() []string                { return a.r.Scopes }
func (a *authRequest) GetState() string                   { return a.r.State }
func (a *authRequest) GetSubject() string                 { return a.subject }
func (a *authRequest) Done() bool                         { return a.done }

type refreshRequest struct{ refreshToken }

func (r *refreshRequest) GetAMR() []string             { return []string{"pwd"} }
func (r *refreshRequest) GetAudience() []string        { return r.audience }
func (r *refreshRequest) GetAuthTime() time.Time       { return r.authTime }
func (r *refreshRequest) GetClientID() string          { return r.clientID }
func (r *refreshRequest) GetScopes() []string          { return r.scopes }
func (r *refreshRequest) GetSubject() string           { return r.subject }
func (r *refreshRequest) SetCurrentScopes(sc []string) { r.scopes = sc }

// client is a public client using PKCE.
type client struct {
	id        string
	redirects []string
	ttl       atomic.Int64 // ID token lifetime
}

func (c *client) GetID() string                       { return c.id }
func (c *client) RedirectURIs() []string              { return c.redirects }
func (c *client) PostLogoutRedirectURIs() []string    { return nil }
func (c *client) ApplicationType() op.ApplicationType { return op.ApplicationTypeUserAgent }
func (c *client) AuthMethod() oidc.AuthMethod         { return oidc.AuthMethodNone }
func (c *client) ResponseTypes() []oidc.ResponseType {
	return []oidc.ResponseType{oidc.ResponseTypeCode}
}
func (c *client) GrantTypes() []oidc.GrantType {
	return []oidc.GrantType{oidc.GrantTypeCode, oidc.GrantTypeRefreshToken}
}
func (c *client) LoginURL(id string) string           { return "/login?authRequestID=" + url.QueryEscape(id) }
func (c *client) AccessTokenType() op.AccessTokenType { return op.AccessTokenTypeBearer }
func (c *client) IDTokenLifetime() time.Duration      { return time.Duration(c.ttl.Load()) }
func (c *client) DevMode() bool                       { return true } // http redirect URIs on loopback
func (c *client) RestrictAdditionalIdTokenScopes() func([]string) []string {
	return func(s []string) []string { return s }
}
func (c *client) RestrictAdditionalAccessTokenScopes() func([]string) []string {
	return func(s []string) []string { return s }
}
func (c *client) IsScopeAllowed(string) bool           { return false }
func (c *client) IDTokenUserinfoClaimsAssertion() bool { return true }
func (c *client) ClockSkew() time.Duration             { return 0 }

// opLogger is the provider's log: silent unless OIDCTEST_LOG is set.
func opLogger() *slog.Logger {
	if os.Getenv("OIDCTEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.DiscardHandler)
}
