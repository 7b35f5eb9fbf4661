package auth

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/coreos/go-oidc/v3/oidc"
	"golang.org/x/oauth2"

	"github.com/agentd/agentd/restapi"
	"github.com/agentd/agentd/store"
)

// OIDCConfig is an OpenID Connect provider's settings. The claim names
// follow the Kubernetes API server's --oidc-* flags.
type OIDCConfig struct {
	Issuer   string
	ClientID string
	// ClientSecret, for a confidential client (the web UI's code exchange
	// goes through the server); empty for a public client using PKCE.
	ClientSecret string
	// Audiences are accepted besides ClientID (e.g. JWT access tokens of an
	// API resource).
	Audiences []string
	// UsernameClaim is the user id (default "sub"); UsernamePrefix is put
	// before it.
	UsernameClaim  string
	UsernamePrefix string
	// NameClaim is the display name (default "name").
	NameClaim string
	// TenantClaim, when set, is the user's tenant (else DefaultTenant).
	TenantClaim   string
	DefaultTenant string
	// GroupsClaim (default "groups") and AdminGroups: a user in one of
	// them is an admin, else a member (checked at every sign-in when
	// AdminGroups is set).
	GroupsClaim string
	AdminGroups []string
	// Scopes the web UI asks for (default openid, profile, email).
	Scopes []string
	Logger *slog.Logger
}

// OIDC verifies bearer JWTs of one provider (discovery, and its JWKS,
// refetched when a token names a key it does not know: key rotation) and
// makes each new user on first sight.
type OIDC struct {
	cfg   OIDCConfig
	log   *slog.Logger
	users *Service

	mu       sync.Mutex
	provider *oidc.Provider
	verifier *oidc.IDTokenVerifier
	lastTry  time.Time
	lastErr  error
}

// NewOIDC prepares the verifier; the provider's discovery document is
// fetched now and, if that fails, again when a token needs it.
func NewOIDC(ctx context.Context, cfg OIDCConfig) (*OIDC, error) {
	if cfg.Issuer == "" || cfg.ClientID == "" {
		return nil, errors.New("oidc: an issuer and a client id are required")
	}
	if cfg.UsernameClaim == "" {
		cfg.UsernameClaim = "sub"
	}
	if cfg.NameClaim == "" {
		cfg.NameClaim = "name"
	}
	if cfg.GroupsClaim == "" {
		cfg.GroupsClaim = "groups"
	}
	if cfg.DefaultTenant == "" {
		cfg.DefaultTenant = "default"
	}
	if len(cfg.Scopes) == 0 {
		cfg.Scopes = []string{oidc.ScopeOpenID, "profile", "email"}
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	o := &OIDC{cfg: cfg, log: cfg.Logger.With("component", "oidc", "issuer", cfg.Issuer)}
	if _, _, err := o.discover(ctx); err != nil {
		o.log.Warn("OpenID Connect discovery failed; retried when a token arrives", "err", err)
	}
	return o, nil
}

// discover returns the provider and verifier, fetching the discovery
// document if not done yet (at most every 5 s after a failure).
func (o *OIDC) discover(ctx context.Context) (*oidc.Provider, *oidc.IDTokenVerifier, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.provider != nil {
		return o.provider, o.verifier, nil
	}
	if o.lastErr != nil && time.Since(o.lastTry) < 5*time.Second {
		return nil, nil, o.lastErr
	}
	o.lastTry = time.Now()
	// The provider keeps this context for its JWKS fetches: not a request's.
	p, err := oidc.NewProvider(context.WithoutCancel(ctx), o.cfg.Issuer)
	if err != nil {
		o.lastErr = fmt.Errorf("oidc discovery of %s: %w", o.cfg.Issuer, err)
		return nil, nil, o.lastErr
	}
	o.provider, o.lastErr = p, nil
	o.verifier = p.Verifier(&oidc.Config{ClientID: o.cfg.ClientID, SkipClientIDCheck: true})
	return o.provider, o.verifier, nil
}

// Info is what the web UI needs to sign in through the provider.
type Info struct {
	Issuer                string   `json:"issuer"`
	ClientID              string   `json:"clientId"`
	AuthorizationEndpoint string   `json:"authorizationEndpoint,omitempty"`
	Scopes                []string `json:"scopes"`
}

// Info describes the provider for the UI.
func (o *OIDC) Info(ctx context.Context) Info {
	in := Info{Issuer: o.cfg.Issuer, ClientID: o.cfg.ClientID, Scopes: o.cfg.Scopes}
	if p, _, err := o.discover(ctx); err == nil {
		in.AuthorizationEndpoint = p.Endpoint().AuthURL
	}
	return in
}

// claims is what agentd reads of a token besides the standard ones.
type claims map[string]any

func (c claims) str(name string) string {
	if name == "" {
		return ""
	}
	v, _ := c[name].(string)
	return v
}

func (c claims) list(name string) []string {
	switch v := c[name].(type) {
	case string:
		return []string{v}
	case []any:
		var out []string
		for _, e := range v {
			if s, ok := e.(string); ok {
				out = append(out, s)
			}
		}
		return out
	}
	return nil
}

// verify checks a JWT (signature by a key of the provider's JWKS, issuer,
// expiry, audience) and returns its claims.
func (o *OIDC) verify(ctx context.Context, raw string) (*oidc.IDToken, claims, error) {
	_, v, err := o.discover(ctx)
	if err != nil {
		return nil, nil, err
	}
	tok, err := v.Verify(ctx, raw)
	if err != nil {
		return nil, nil, err
	}
	ok := slices.Contains(tok.Audience, o.cfg.ClientID)
	for _, a := range o.cfg.Audiences {
		ok = ok || slices.Contains(tok.Audience, a)
	}
	if !ok {
		return nil, nil, fmt.Errorf("audience %v is not %s", tok.Audience, strings.Join(append([]string{o.cfg.ClientID}, o.cfg.Audiences...), " or "))
	}
	var c claims
	if err := tok.Claims(&c); err != nil {
		return nil, nil, fmt.Errorf("claims: %w", err)
	}
	return tok, c, nil
}

func (o *OIDC) authenticate(ctx context.Context, raw string) (Principal, error) {
	tok, c, err := o.verify(ctx, raw)
	if err != nil {
		return Principal{}, fmt.Errorf("%w: OIDC token: %v", ErrUnauthenticated, err)
	}
	u, err := o.user(ctx, tok, c)
	if err != nil {
		return Principal{}, err
	}
	return Principal{UserID: u.ID, Name: u.Name, Tenant: u.Tenant, Role: u.Role, Method: MethodOIDC, Expires: tok.Expiry}, nil
}

// user finds the token's user by (issuer, subject), making it on first
// sight from the configured claims.
func (o *OIDC) user(ctx context.Context, tok *oidc.IDToken, c claims) (store.User, error) {
	id := o.users.id
	name := c.str(o.cfg.NameClaim)
	tenant := o.cfg.DefaultTenant
	if t := c.str(o.cfg.TenantClaim); t != "" {
		tenant = t
	}
	role := store.RoleMember
	if len(o.cfg.AdminGroups) > 0 {
		for _, g := range c.list(o.cfg.GroupsClaim) {
			if slices.Contains(o.cfg.AdminGroups, g) {
				role = store.RoleAdmin
			}
		}
	}
	u, err := id.LoadUserBySubject(ctx, tok.Issuer, tok.Subject)
	switch {
	case err == nil:
		if u.Disabled {
			return store.User{}, fmt.Errorf("%w: user %q is disabled", ErrUnauthenticated, u.ID)
		}
		// Claims the provider owns are kept in step with it.
		changed := false
		if len(o.cfg.AdminGroups) > 0 && u.Role != role {
			u.Role, changed = role, true
		}
		if o.cfg.TenantClaim != "" && u.Tenant != tenant {
			u.Tenant, changed = tenant, true
		}
		if name != "" && u.Name != name {
			u.Name, changed = name, true
		}
		if changed {
			if err := id.UpdateUser(ctx, u); err != nil {
				return store.User{}, fmt.Errorf("update user %q from its token: %w", u.ID, err)
			}
		}
		return u, nil
	case !errors.Is(err, store.ErrNotFound):
		return store.User{}, fmt.Errorf("look up user: %w", err)
	}
	uid := c.str(o.cfg.UsernameClaim)
	if uid == "" {
		return store.User{}, fmt.Errorf("%w: the token has no %q claim to name its user", ErrUnauthenticated, o.cfg.UsernameClaim)
	}
	uid = o.cfg.UsernamePrefix + uid
	if err := ValidID("user id", uid); err != nil {
		return store.User{}, fmt.Errorf("%w: claim %q: %v", ErrUnauthenticated, o.cfg.UsernameClaim, err)
	}
	if err := ValidID("tenant", tenant); err != nil {
		return store.User{}, fmt.Errorf("%w: claim %q: %v", ErrUnauthenticated, o.cfg.TenantClaim, err)
	}
	u = store.User{ID: uid, Name: name, Tenant: tenant, Role: role, Issuer: tok.Issuer, Subject: tok.Subject, CreatedAt: time.Now().UTC().Truncate(time.Millisecond)}
	if err := id.CreateUser(ctx, u); err != nil {
		if errors.Is(err, store.ErrExists) {
			// Another sign-in made it at the same moment, or the id is
			// another user's: never merge identities silently.
			if again, err2 := id.LoadUserBySubject(ctx, tok.Issuer, tok.Subject); err2 == nil {
				return again, nil
			}
			return store.User{}, fmt.Errorf("%w: user id %q is taken by another identity; an admin must resolve it (or set --oidc-username-prefix)", ErrForbidden, uid)
		}
		return store.User{}, fmt.Errorf("create user %q: %w", uid, err)
	}
	o.users.access.record(store.AccessRecord{Kind: store.AccessUserCreated, Actor: uid, Subject: uid, Detail: "first OIDC sign-in, role " + string(role) + ", tenant " + tenant})
	o.log.Info("user created on first sign-in", "user", uid, "tenant", tenant, "role", role)
	return u, nil
}

// Exchange is the web UI's code exchange, done by the server (so the
// provider's token endpoint needs no CORS, and a confidential client's
// secret stays here): the authorization code and PKCE verifier for the
// provider's tokens. It returns the ID token, which the UI then presents as
// its bearer credential, and the refresh token when the provider gave one.
func (o *OIDC) Exchange(ctx context.Context, code, verifier, redirectURI string) (SignIn, error) {
	p, _, err := o.discover(ctx)
	if err != nil {
		return SignIn{}, err
	}
	conf := o.oauth2(p, redirectURI)
	tok, err := conf.Exchange(ctx, code, oauth2.VerifierOption(verifier))
	if err != nil {
		return SignIn{}, fmt.Errorf("%w: code exchange: %v", ErrUnauthenticated, describe(err))
	}
	return o.signIn(ctx, tok)
}

// Refresh trades a refresh token for a new ID token.
func (o *OIDC) Refresh(ctx context.Context, refresh string) (SignIn, error) {
	p, _, err := o.discover(ctx)
	if err != nil {
		return SignIn{}, err
	}
	tok, err := o.oauth2(p, "").TokenSource(ctx, &oauth2.Token{RefreshToken: refresh}).Token()
	if err != nil {
		return SignIn{}, fmt.Errorf("%w: refresh: %v", ErrUnauthenticated, describe(err))
	}
	return o.signIn(ctx, tok)
}

func (o *OIDC) oauth2(p *oidc.Provider, redirectURI string) *oauth2.Config {
	ep := p.Endpoint()
	if o.cfg.ClientSecret == "" {
		// A public client sends its id in the form (none of HTTP Basic's
		// guessing, which would spend the one-time code on a failed try).
		ep.AuthStyle = oauth2.AuthStyleInParams
	}
	return &oauth2.Config{ClientID: o.cfg.ClientID, ClientSecret: o.cfg.ClientSecret, Endpoint: ep, RedirectURL: redirectURI, Scopes: o.cfg.Scopes}
}

// SignIn is the result of a code exchange or refresh.
type SignIn = restapi.SignIn

func (o *OIDC) signIn(ctx context.Context, tok *oauth2.Token) (SignIn, error) {
	raw, _ := tok.Extra("id_token").(string)
	if raw == "" {
		return SignIn{}, fmt.Errorf("%w: the provider returned no id_token (is the openid scope asked for?)", ErrUnauthenticated)
	}
	p, err := o.authenticate(ctx, raw)
	if err != nil {
		return SignIn{}, err
	}
	u, err := o.users.id.LoadUser(ctx, p.UserID)
	if err != nil {
		return SignIn{}, err
	}
	return SignIn{Token: raw, ExpiresAt: p.Expires, RefreshToken: tok.RefreshToken, User: u}, nil
}

// describe adds the provider's error description to a token endpoint
// error.
func describe(err error) error {
	var re *oauth2.RetrieveError
	if errors.As(err, &re) && re.ErrorDescription != "" {
		return fmt.Errorf("%s: %s", re.ErrorCode, re.ErrorDescription)
	}
	return err
}
