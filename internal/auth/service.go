package auth

import (
	"context"
	"crypto/subtle"
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"sync"
	"time"

	"github.com/agentd/agentd/store"
)

// Config configures a Service.
type Config struct {
	// Identity keeps users, tokens, shares, keys and budgets; nil makes a
	// single-user server (the bootstrap key, or no auth at all).
	Identity store.IdentityStore
	// Sessions is read for quotas (every server's sessions, in a fleet).
	Sessions store.SessionStore
	// BootstrapKey, when set, is accepted as the admin BootstrapUser.
	BootstrapKey string
	// BootstrapUser is the user id of the bootstrap key (default "admin").
	BootstrapUser string
	// DefaultTenant is the tenant of users made without one (default
	// "default").
	DefaultTenant string
	// Required makes every request authenticate even without a bootstrap
	// key or OIDC (tokens only). It is implied by BootstrapKey and OIDC.
	Required bool
	// OIDC verifies bearer JWTs of an OpenID Connect provider when set.
	OIDC *OIDC
	// Keyring seals provider keys; nil: users cannot store keys.
	Keyring *Keyring
	// Limits are the rate limits, quotas and default budgets.
	Limits Limits
	// Prices turn token counts into costs for cost budgets.
	Prices Prices
	Logger *slog.Logger
	// Now is the clock (tests).
	Now func() time.Time
}

// Service authenticates callers and decides what they may do. It is safe
// for concurrent use; Close stops its background writer.
type Service struct {
	cfg     Config
	log     *slog.Logger
	id      store.IdentityStore
	limiter *limiter
	access  *accessLog
	metrics *Metrics

	touchMu sync.Mutex
	touched map[string]time.Time // token id → last use written

	watchMu  sync.Mutex
	watchers []func()
}

// touchEvery is how often a token's last use is written to the store.
const touchEvery = time.Minute

// New returns a Service.
func New(cfg Config) (*Service, error) {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.BootstrapUser == "" {
		cfg.BootstrapUser = "admin"
	}
	if cfg.DefaultTenant == "" {
		cfg.DefaultTenant = "default"
	}
	if cfg.Identity == nil && (cfg.OIDC != nil || cfg.Required) {
		return nil, errors.New("auth: OIDC and token-only auth need a store that keeps users (store.IdentityStore)")
	}
	if err := cfg.Limits.validate(); err != nil {
		return nil, err
	}
	s := &Service{
		cfg: cfg, log: cfg.Logger.With("component", "auth"), id: cfg.Identity,
		limiter: newLimiter(cfg.Limits.RequestsPerSecond, cfg.Limits.Burst, cfg.Now),
		touched: map[string]time.Time{},
	}
	s.access = newAccessLog(cfg.Identity, s.log)
	if cfg.OIDC != nil {
		cfg.OIDC.users = s
	}
	return s, nil
}

// Start makes sure the bootstrap key's user exists (an admin).
func (s *Service) Start(ctx context.Context) error {
	if s.id == nil || s.cfg.BootstrapKey == "" {
		return nil
	}
	err := s.id.CreateUser(ctx, store.User{ID: s.cfg.BootstrapUser, Name: "bootstrap admin (--api-key)", Tenant: s.cfg.DefaultTenant,
		Role: store.RoleAdmin, CreatedAt: s.cfg.Now().UTC()})
	if err != nil && !errors.Is(err, store.ErrExists) {
		return fmt.Errorf("auth: create the bootstrap user: %w", err)
	}
	return nil
}

// Close flushes the access log.
func (s *Service) Close(ctx context.Context) error { return s.access.close(ctx) }

// Required reports whether requests must authenticate.
func (s *Service) Required() bool {
	return s.cfg.BootstrapKey != "" || s.cfg.OIDC != nil || s.cfg.Required
}

// MultiUser reports whether the server keeps users (tokens, ownership).
func (s *Service) MultiUser() bool { return s.id != nil }

// OIDC returns the OpenID Connect verifier, nil when not configured.
func (s *Service) OIDC() *OIDC { return s.cfg.OIDC }

// Limits returns the configured limits.
func (s *Service) Limits() Limits { return s.cfg.Limits }

// Local is the principal of a server without auth.
func Local() Principal {
	return Principal{UserID: LocalUser, Name: "local", Tenant: "default", Role: store.RoleAdmin, Method: MethodNone}
}

// Authenticate returns the principal a bearer credential stands for:
// the bootstrap key, an API token or an OIDC JWT. Without auth every
// caller is Local. Errors match ErrUnauthenticated (or ErrForbidden for a
// disabled user).
func (s *Service) Authenticate(ctx context.Context, credential string) (Principal, error) {
	if !s.Required() {
		return Local(), nil
	}
	switch {
	case credential == "":
		return Principal{}, fmt.Errorf("%w: no credential (Authorization: Bearer <token>)", ErrUnauthenticated)
	case s.cfg.BootstrapKey != "" && subtle.ConstantTimeCompare([]byte(credential), []byte(s.cfg.BootstrapKey)) == 1:
		return Principal{UserID: s.cfg.BootstrapUser, Name: "bootstrap admin", Tenant: s.cfg.DefaultTenant, Role: store.RoleAdmin, Method: MethodAPIKey}, nil
	case IsAPIToken(credential) && s.id != nil:
		return s.authenticateToken(ctx, credential)
	case s.cfg.OIDC != nil && looksLikeJWT(credential):
		return s.cfg.OIDC.authenticate(ctx, credential)
	}
	return Principal{}, fmt.Errorf("%w: unknown credential", ErrUnauthenticated)
}

func (s *Service) authenticateToken(ctx context.Context, credential string) (Principal, error) {
	t, err := s.id.LookupToken(ctx, HashToken(credential))
	if errors.Is(err, store.ErrNotFound) {
		return Principal{}, fmt.Errorf("%w: unknown token", ErrUnauthenticated)
	}
	if err != nil {
		return Principal{}, fmt.Errorf("look up token: %w", err)
	}
	now := s.cfg.Now()
	if !t.RevokedAt.IsZero() {
		return Principal{}, fmt.Errorf("%w: token %s was revoked", ErrUnauthenticated, t.ID)
	}
	if !t.ExpiresAt.IsZero() && !now.Before(t.ExpiresAt) {
		return Principal{}, fmt.Errorf("%w: token %s expired at %s", ErrUnauthenticated, t.ID, t.ExpiresAt.Format(time.RFC3339))
	}
	u, err := s.id.LoadUser(ctx, t.UserID)
	if err != nil {
		return Principal{}, fmt.Errorf("%w: the token's user %q: %v", ErrUnauthenticated, t.UserID, err)
	}
	if u.Disabled {
		return Principal{}, fmt.Errorf("%w: user %q is disabled", ErrUnauthenticated, u.ID)
	}
	scopes, err := ParseScopes(t.Scopes)
	if err != nil {
		return Principal{}, fmt.Errorf("%w: token %s: %v", ErrUnauthenticated, t.ID, err)
	}
	s.touch(ctx, t.ID, now)
	return Principal{UserID: u.ID, Name: u.Name, Tenant: u.Tenant, Role: u.Role, Scopes: scopes, Method: MethodToken, TokenID: t.ID, Expires: t.ExpiresAt}, nil
}

// touch records a token's use, at most once per touchEvery per token.
func (s *Service) touch(ctx context.Context, id string, now time.Time) {
	s.touchMu.Lock()
	last, ok := s.touched[id]
	if ok && now.Sub(last) < touchEvery {
		s.touchMu.Unlock()
		return
	}
	s.touched[id] = now
	s.touchMu.Unlock()
	if err := s.id.TouchToken(ctx, id, now.UTC()); err != nil {
		s.log.Warn("record a token's use", "token", id, "err", err)
	}
}

// OnRevoke registers f, called (in its own goroutine) after a token is
// revoked or a user disabled through this Service, so open connections
// can be checked again at once.
func (s *Service) OnRevoke(f func()) {
	s.watchMu.Lock()
	s.watchers = append(s.watchers, f)
	s.watchMu.Unlock()
}

func (s *Service) revoked() {
	s.watchMu.Lock()
	ws := append([]func(){}, s.watchers...)
	s.watchMu.Unlock()
	for _, f := range ws {
		go f()
	}
}

// needIdentity fails for single-user servers.
func (s *Service) needIdentity() error {
	if s.id == nil {
		return fmt.Errorf("%w: the store keeps no users (it does not implement store.IdentityStore)", ErrUnsupported)
	}
	return nil
}

var idPattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._@+-]{0,127}$`)

// ValidID checks a user or tenant id.
func ValidID(what, id string) error {
	if !idPattern.MatchString(id) {
		return fmt.Errorf("%w: %s %q: use 1–128 letters, digits and . _ @ + - (starting with a letter or digit)", ErrInvalid, what, id)
	}
	return nil
}

// storeErr maps store errors to this package's.
func storeErr(err error, what string) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, store.ErrNotFound):
		return fmt.Errorf("%w: %s", ErrNotFound, what)
	case errors.Is(err, store.ErrExists):
		return fmt.Errorf("%w: %s", ErrConflict, what)
	}
	return err
}
