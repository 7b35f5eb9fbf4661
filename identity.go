package agentd

import (
	"os"

	"github.com/agentd/agentd/internal/auth"
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

// ReadServerKeyEnv returns AGENTD_SERVER_KEY parsed, or nil when unset.
func ReadServerKeyEnv() ([]byte, error) {
	v, ok := os.LookupEnv("AGENTD_SERVER_KEY")
	if !ok || v == "" {
		return nil, nil
	}
	return ParseServerKey(v)
}

// oidc is the auth package's form of c (the server adds the default
// tenant and the logger).
func (c *OIDCConfig) oidc() *auth.OIDCConfig {
	if c == nil {
		return nil
	}
	return &auth.OIDCConfig{
		Issuer: c.Issuer, ClientID: c.ClientID, ClientSecret: c.ClientSecret, Audiences: c.Audiences,
		UsernameClaim: c.UsernameClaim, UsernamePrefix: c.UsernamePrefix, NameClaim: c.NameClaim,
		TenantClaim: c.TenantClaim, GroupsClaim: c.GroupsClaim, AdminGroups: c.AdminGroups, Scopes: c.Scopes,
	}
}

// limits is the auth package's form of l.
func (l Limits) limits() auth.Limits {
	return auth.Limits{RequestsPerSecond: l.RequestsPerSecond, Burst: l.Burst, SessionsPerUser: l.SessionsPerUser,
		RunningPerUser: l.RunningPerUser, RunningPerTenant: l.RunningPerTenant, UserBudget: l.UserBudget, TenantBudget: l.TenantBudget}
}
