package agentd

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/agentd/agentd/agent"
	"github.com/agentd/agentd/conversation"
	"github.com/agentd/agentd/internal/auth"
	"github.com/agentd/agentd/internal/session"
	"github.com/agentd/agentd/store"
)

// OIDCConfig lets users sign in with an OpenID Connect provider: bearer
// JWTs it issues are verified (discovery, JWKS) and their user made on
// first sight; the web UI signs in through it (authorization code with
// PKCE). Claim names follow the Kubernetes API server's --oidc-* flags.
type OIDCConfig struct {
	Issuer       string
	ClientID     string
	ClientSecret string
	// Audiences accepted besides ClientID.
	Audiences []string
	// UsernameClaim (default "sub") names the user id, after
	// UsernamePrefix; NameClaim (default "name") the display name;
	// TenantClaim, when set, the tenant.
	UsernameClaim  string
	UsernamePrefix string
	NameClaim      string
	TenantClaim    string
	// GroupsClaim (default "groups"): users in one of AdminGroups are
	// admins.
	GroupsClaim string
	AdminGroups []string
	// Scopes the web UI asks for (default openid, profile, email).
	Scopes []string
}

// Limits are per-token rate limits, session quotas and default budgets (0:
// none; docs/security.md, Identity).
type Limits struct {
	RequestsPerSecond float64
	Burst             int
	SessionsPerUser   int
	RunningPerUser    int
	RunningPerTenant  int
	// UserBudget and TenantBudget apply to users and tenants without a
	// budget of their own (Scope and Owner are ignored).
	UserBudget   store.Budget
	TenantBudget store.Budget
}

// ModelPrice is a model's price in US dollars per million tokens.
type ModelPrice = auth.Price

// startIdentity builds the auth service: users, tokens and OIDC when the
// store keeps them (store.IdentityStore), else the single-user server of
// the bootstrap key (or no auth).
func (s *Server) startIdentity(ctx context.Context) error {
	cfg := s.cfg
	ident, _ := s.store.(store.IdentityStore)
	if ident == nil && (cfg.OIDC != nil || cfg.RequireAuth || len(cfg.ServerKey) > 0) {
		return errors.New("OIDC, --require-auth and per-user provider keys need a store that keeps users (store.IdentityStore); this store does not")
	}
	var keyring *auth.Keyring
	if len(cfg.ServerKey) > 0 {
		k, err := auth.NewKeyring(cfg.ServerKey)
		if err != nil {
			return err
		}
		keyring = k
	}
	var oidc *auth.OIDC
	if o := cfg.OIDC; o != nil {
		var err error
		oidc, err = auth.NewOIDC(ctx, auth.OIDCConfig{
			Issuer: o.Issuer, ClientID: o.ClientID, ClientSecret: o.ClientSecret, Audiences: o.Audiences,
			UsernameClaim: o.UsernameClaim, UsernamePrefix: o.UsernamePrefix, NameClaim: o.NameClaim,
			TenantClaim: o.TenantClaim, DefaultTenant: cfg.DefaultTenant, GroupsClaim: o.GroupsClaim,
			AdminGroups: o.AdminGroups, Scopes: o.Scopes, Logger: s.log,
		})
		if err != nil {
			return err
		}
	}
	l := cfg.Limits
	svc, err := auth.New(auth.Config{
		Identity: ident, Sessions: s.store, BootstrapKey: cfg.APIKey, DefaultTenant: cfg.DefaultTenant,
		Required: cfg.RequireAuth, OIDC: oidc, Keyring: keyring, Prices: auth.Prices(cfg.ModelPrices), Logger: s.log,
		Limits: auth.Limits{RequestsPerSecond: l.RequestsPerSecond, Burst: l.Burst, SessionsPerUser: l.SessionsPerUser,
			RunningPerUser: l.RunningPerUser, RunningPerTenant: l.RunningPerTenant, UserBudget: l.UserBudget, TenantBudget: l.TenantBudget},
	})
	if err != nil {
		return err
	}
	s.auth = svc // closed by closeIdentity from here on, whatever fails next
	if err := svc.Start(ctx); err != nil {
		return err
	}
	svc.Register(cfg.Registerer)
	s.log.Info("auth", "required", svc.Required(), "multiUser", svc.MultiUser(), "oidc", oidc != nil, "providerKeys", keyring != nil,
		"ratePerToken", l.RequestsPerSecond)
	return nil
}

// LoadServerKey reads a server key file (32 bytes: raw, hex or base64; not
// readable by others) for Config.ServerKey.
func LoadServerKey(path string) ([]byte, error) { return auth.LoadServerKey(path) }

// ParseServerKey parses a server key given as a value (AGENTD_SERVER_KEY).
func ParseServerKey(v string) ([]byte, error) { return auth.ParseServerKey([]byte(v)) }

// LoadModelPrices reads a JSON object of model name prefix → price.
func LoadModelPrices(path string) (map[string]ModelPrice, error) {
	p, err := auth.LoadPrices(path)
	return p, err
}

// owners is the model proxy's view of sessions' owners: the session
// manager knows the owner, the auth service the keys and budgets.
type owners struct{ s *Server }

func (o owners) Owner(sessionID string) (string, string) {
	if m := o.s.manager.Load(); m != nil {
		owner, tenant, _ := m.Owner(sessionID)
		return owner, tenant
	}
	return "", ""
}

func (o owners) ResolveKey(ctx context.Context, owner, tenant, provider string) (string, error) {
	return o.s.auth.ResolveKey(ctx, owner, tenant, provider)
}

func (o owners) CheckBudget(ctx context.Context, owner, tenant string) error {
	return o.s.auth.CheckBudget(ctx, owner, tenant)
}

func (o owners) Charge(ctx context.Context, owner, tenant, model string, u conversation.Usage) error {
	return o.s.auth.Charge(ctx, owner, tenant, model, u)
}

// ownerBudgetExceeded fails the session's running turn with
// BUDGET_EXCEEDED when its owner's or tenant's budget refused a request.
func (s *Server) ownerBudgetExceeded(ctx context.Context, sessionID string, cause error) {
	m := s.manager.Load()
	if m == nil {
		return
	}
	err := m.FailTurn(ctx, sessionID, agent.Fail(agent.CodeBudgetExceeded, "%s", cause.Error()))
	if err != nil && !errors.Is(err, session.ErrNotFound) {
		s.log.Warn("report an exceeded budget", "session", sessionID, "err", err)
	}
	var be *auth.BudgetError
	if errors.As(cause, &be) {
		s.auth.Record(store.AccessRecord{Kind: store.AccessBudget, Actor: be.Owner, Subject: sessionID, Detail: be.Error()})
	}
}

func (s *Server) closeIdentity(ctx context.Context) error {
	if s.auth == nil {
		return nil
	}
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := s.auth.Close(cctx); err != nil {
		return fmt.Errorf("close auth: %w", err)
	}
	return nil
}

// ReadServerKeyEnv returns AGENTD_SERVER_KEY parsed, or nil when unset.
func ReadServerKeyEnv() ([]byte, error) {
	v, ok := os.LookupEnv("AGENTD_SERVER_KEY")
	if !ok || v == "" {
		return nil, nil
	}
	return ParseServerKey(v)
}
