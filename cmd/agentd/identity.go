package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/agentd/agentd"
	"github.com/agentd/agentd/internal/auth"
	"github.com/agentd/agentd/store"
)

// identityFlags are serve's flags for users, SSO, keys, limits and budgets
// (docs/security.md, Identity).
type identityFlags struct {
	RequireAuth   bool   `help:"Require authentication even without --api-key or --oidc-issuer (API tokens only)." env:"AGENTD_REQUIRE_AUTH"`
	DefaultTenant string `help:"Tenant of users made without one." default:"default" env:"AGENTD_DEFAULT_TENANT"`

	OIDCIssuer         string   `name:"oidc-issuer" help:"OpenID Connect issuer URL: bearer JWTs it signs are accepted, and the web UI signs in through it." env:"AGENTD_OIDC_ISSUER"`
	OIDCClientID       string   `name:"oidc-client-id" help:"OIDC client id (the audience tokens must carry)." env:"AGENTD_OIDC_CLIENT_ID"`
	OIDCClientSecret   string   `name:"oidc-client-secret" help:"OIDC client secret, for a confidential client (the web UI's code exchange goes through the server)." env:"AGENTD_OIDC_CLIENT_SECRET"`
	OIDCAudience       []string `name:"oidc-audience" help:"More accepted audiences." env:"AGENTD_OIDC_AUDIENCE"`
	OIDCUsernameClaim  string   `name:"oidc-username-claim" help:"Claim naming the user id." default:"sub" env:"AGENTD_OIDC_USERNAME_CLAIM"`
	OIDCUsernamePrefix string   `name:"oidc-username-prefix" help:"Prefix of user ids made from tokens." env:"AGENTD_OIDC_USERNAME_PREFIX"`
	OIDCNameClaim      string   `name:"oidc-name-claim" help:"Claim naming the display name." default:"name" env:"AGENTD_OIDC_NAME_CLAIM"`
	OIDCTenantClaim    string   `name:"oidc-tenant-claim" help:"Claim naming the tenant (default: --default-tenant)." env:"AGENTD_OIDC_TENANT_CLAIM"`
	OIDCGroupsClaim    string   `name:"oidc-groups-claim" help:"Claim listing the user's groups." default:"groups" env:"AGENTD_OIDC_GROUPS_CLAIM"`
	OIDCAdminGroups    []string `name:"oidc-admin-groups" help:"Members of these groups are admins." env:"AGENTD_OIDC_ADMIN_GROUPS"`
	OIDCScopes         []string `name:"oidc-scopes" help:"Scopes the web UI asks for." default:"openid,profile,email" env:"AGENTD_OIDC_SCOPES"`

	ServerKeyFile string `help:"File holding the 32-byte server key that seals users' provider keys (raw, hex or base64; mode 600). AGENTD_SERVER_KEY may hold the key itself." env:"AGENTD_SERVER_KEY_FILE" type:"path"`

	RateLimit           float64 `help:"Requests per second each token (or OIDC user) may make; 0 for no limit." default:"0" env:"AGENTD_RATE_LIMIT"`
	RateBurst           int     `help:"Requests a token may make at once above its rate (default: the rate, at least 1)." default:"0" env:"AGENTD_RATE_BURST"`
	MaxSessionsPerUser  int     `help:"Sessions a user may own; 0 for no limit." default:"0" env:"AGENTD_MAX_SESSIONS_PER_USER"`
	MaxRunningPerUser   int     `help:"Sessions with a running environment a user may have; 0 for no limit." default:"0" env:"AGENTD_MAX_RUNNING_PER_USER"`
	MaxRunningPerTenant int     `help:"Sessions with a running environment a tenant may have; 0 for no limit." default:"0" env:"AGENTD_MAX_RUNNING_PER_TENANT"`

	UserTokensPerDay     int64   `help:"Default model tokens a user may use per UTC day (0: no limit)." default:"0" env:"AGENTD_USER_TOKENS_PER_DAY"`
	UserTokensPerMonth   int64   `help:"Default model tokens a user may use per UTC month." default:"0" env:"AGENTD_USER_TOKENS_PER_MONTH"`
	TenantTokensPerDay   int64   `help:"Default model tokens a tenant may use per UTC day." default:"0" env:"AGENTD_TENANT_TOKENS_PER_DAY"`
	TenantTokensPerMonth int64   `help:"Default model tokens a tenant may use per UTC month." default:"0" env:"AGENTD_TENANT_TOKENS_PER_MONTH"`
	UserCostPerDay       float64 `help:"Default US dollars a user may spend per UTC day (needs --model-prices)." default:"0" env:"AGENTD_USER_COST_PER_DAY"`
	UserCostPerMonth     float64 `help:"Default US dollars a user may spend per UTC month." default:"0" env:"AGENTD_USER_COST_PER_MONTH"`
	TenantCostPerDay     float64 `help:"Default US dollars a tenant may spend per UTC day." default:"0" env:"AGENTD_TENANT_COST_PER_DAY"`
	TenantCostPerMonth   float64 `help:"Default US dollars a tenant may spend per UTC month." default:"0" env:"AGENTD_TENANT_COST_PER_MONTH"`
	ModelPrices          string  `help:"JSON file of model name prefix → {input, output, cacheRead, cacheWrite} in USD per million tokens, for cost budgets." env:"AGENTD_MODEL_PRICES" type:"existingfile"`
}

func micros(usd float64) int64 { return int64(usd * 1e6) }

// apply fills the identity part of an agentd.Config.
func (f identityFlags) apply(cfg *agentd.Config) error {
	cfg.RequireAuth, cfg.DefaultTenant = f.RequireAuth, f.DefaultTenant
	if f.OIDCIssuer != "" || f.OIDCClientID != "" {
		if f.OIDCIssuer == "" || f.OIDCClientID == "" {
			return errors.New("--oidc-issuer and --oidc-client-id go together")
		}
		cfg.OIDC = &agentd.OIDCConfig{
			Issuer: f.OIDCIssuer, ClientID: f.OIDCClientID, ClientSecret: f.OIDCClientSecret, Audiences: f.OIDCAudience,
			UsernameClaim: f.OIDCUsernameClaim, UsernamePrefix: f.OIDCUsernamePrefix, NameClaim: f.OIDCNameClaim,
			TenantClaim: f.OIDCTenantClaim, GroupsClaim: f.OIDCGroupsClaim, AdminGroups: f.OIDCAdminGroups, Scopes: f.OIDCScopes,
		}
	}
	switch {
	case f.ServerKeyFile != "":
		k, err := agentd.LoadServerKey(f.ServerKeyFile)
		if err != nil {
			return err
		}
		cfg.ServerKey = k
	default:
		k, err := agentd.ReadServerKeyEnv()
		if err != nil {
			return fmt.Errorf("AGENTD_SERVER_KEY: %w", err)
		}
		cfg.ServerKey = k
	}
	cfg.Limits = agentd.Limits{
		RequestsPerSecond: f.RateLimit, Burst: f.RateBurst, SessionsPerUser: f.MaxSessionsPerUser,
		RunningPerUser: f.MaxRunningPerUser, RunningPerTenant: f.MaxRunningPerTenant,
		UserBudget: store.Budget{TokensPerDay: f.UserTokensPerDay, TokensPerMonth: f.UserTokensPerMonth,
			CostPerDayMicros: micros(f.UserCostPerDay), CostPerMonthMicros: micros(f.UserCostPerMonth)},
		TenantBudget: store.Budget{TokensPerDay: f.TenantTokensPerDay, TokensPerMonth: f.TenantTokensPerMonth,
			CostPerDayMicros: micros(f.TenantCostPerDay), CostPerMonthMicros: micros(f.TenantCostPerMonth)},
	}
	if f.ModelPrices != "" {
		p, err := agentd.LoadModelPrices(f.ModelPrices)
		if err != nil {
			return err
		}
		cfg.ModelPrices = p
	}
	return nil
}

// tokenCmd manages API tokens: over REST with an admin credential
// (--server, --api-key), or directly in the store (--store or --data-dir,
// for the first admin token of a server without --api-key).
type tokenCmd struct {
	Server  string `help:"Server URL." default:"http://127.0.0.1:8080" env:"AGENTD_SERVER"`
	APIKey  string `help:"Credential to act with (the --api-key or an admin's token)." env:"AGENTD_API_KEY"`
	Store   string `help:"Act directly on this store URL instead of a server (sqlite://PATH or postgres://…)." env:"AGENTD_STORE"`
	DataDir string `help:"Act directly on <data-dir>/agentd.db instead of a server." type:"path"`

	Create tokenCreateCmd `cmd:"" help:"Create a token; prints it once."`
	List   tokenListCmd   `cmd:"" help:"List tokens."`
	Revoke tokenRevokeCmd `cmd:"" help:"Revoke a token: it stops working at once, open connections too."`
}

type tokenCreateCmd struct {
	User       string        `help:"Whose token (default: yours)."`
	Name       string        `help:"A name for the token."`
	Scopes     []string      `help:"Scopes: sessions:read, sessions:write, keys, tokens, admin (default: all the user's role allows)."`
	Expires    time.Duration `help:"Lifetime (e.g. 720h); 0 for none." default:"0"`
	CreateUser bool          `help:"Create the user first if it does not exist (store mode, or an admin over REST)."`
	Role       string        `help:"Role of a created user: admin or member." default:"member" enum:"admin,member"`
	Tenant     string        `help:"Tenant of a created user." default:"default"`
	UserName   string        `help:"Display name of a created user."`
}

type tokenListCmd struct {
	User string `help:"Whose tokens (admins; * for everyone's)."`
}

type tokenRevokeCmd struct {
	ID string `arg:"" help:"Token id (tok_…)."`
}

// tokenAdmin is what the token commands need, over REST or on the store.
type tokenAdmin interface {
	createUser(ctx context.Context, id, name, tenant, role string) error
	createToken(ctx context.Context, body map[string]any) (map[string]any, error)
	listTokens(ctx context.Context, user string) ([]map[string]any, error)
	revokeToken(ctx context.Context, id string) (map[string]any, error)
	close()
}

func (c *tokenCmd) admin(ctx context.Context) (tokenAdmin, error) {
	if c.Store != "" || c.DataDir != "" {
		url := c.Store
		if url == "" {
			url = "sqlite://" + filepath.Join(c.DataDir, "agentd.db")
		}
		return openStoreAdmin(ctx, url)
	}
	return &restAdmin{server: strings.TrimSuffix(c.Server, "/"), key: c.APIKey}, nil
}

func (c *tokenCreateCmd) Run(ctx context.Context, parent *tokenCmd) error {
	a, err := parent.admin(ctx)
	if err != nil {
		return err
	}
	defer a.close()
	if c.CreateUser {
		if c.User == "" {
			return errors.New("--create-user needs --user")
		}
		if err := a.createUser(ctx, c.User, c.UserName, c.Tenant, c.Role); err != nil {
			return err
		}
	}
	body := map[string]any{"userId": c.User, "name": c.Name, "expiresIn": int64(c.Expires.Seconds())}
	if len(c.Scopes) > 0 {
		body["scopes"] = c.Scopes
	}
	t, err := a.createToken(ctx, body)
	if err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "token %v for %v (scopes %v); it is shown only now:\n", t["id"], t["userId"], t["scopes"])
	fmt.Println(t["token"])
	return nil
}

func (c *tokenListCmd) Run(ctx context.Context, parent *tokenCmd) error {
	a, err := parent.admin(ctx)
	if err != nil {
		return err
	}
	defer a.close()
	ts, err := a.listTokens(ctx, c.User)
	if err != nil {
		return err
	}
	w := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "ID\tUSER\tNAME\tSCOPES\tCREATED\tEXPIRES\tLAST USED\tREVOKED")
	for _, t := range ts {
		fmt.Fprintf(w, "%v\t%v\t%v\t%v\t%v\t%v\t%v\t%v\n", t["id"], t["userId"], or(t["name"]), t["scopes"], or(t["createdAt"]),
			or(t["expiresAt"]), or(t["lastUsedAt"]), or(t["revokedAt"]))
	}
	return w.Flush()
}

func or(v any) any {
	if v == nil || v == "" {
		return "-"
	}
	return v
}

func (c *tokenRevokeCmd) Run(ctx context.Context, parent *tokenCmd) error {
	a, err := parent.admin(ctx)
	if err != nil {
		return err
	}
	defer a.close()
	t, err := a.revokeToken(ctx, c.ID)
	if err != nil {
		return err
	}
	fmt.Printf("revoked %v (of %v) at %v\n", t["id"], t["userId"], t["revokedAt"])
	return nil
}

// restAdmin manages tokens through a server's REST API.
type restAdmin struct{ server, key string }

func (r *restAdmin) close() {}

func (r *restAdmin) do(ctx context.Context, method, path string, body any, out any) error {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, r.server+path, rd)
	if err != nil {
		return err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if r.key != "" {
		req.Header.Set("Authorization", "Bearer "+r.key)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	if resp.StatusCode >= 300 {
		var e struct{ Error, Code string }
		if json.Unmarshal(data, &e) == nil && e.Code != "" {
			return fmt.Errorf("%s %s: %d %s: %s", method, path, resp.StatusCode, e.Code, e.Error)
		}
		return fmt.Errorf("%s %s: %s", method, path, resp.Status)
	}
	return json.Unmarshal(data, out)
}

func (r *restAdmin) createUser(ctx context.Context, id, name, tenant, role string) error {
	var out map[string]any
	err := r.do(ctx, "POST", "/api/users", map[string]any{"id": id, "name": name, "tenant": tenant, "role": role}, &out)
	if err != nil && strings.Contains(err.Error(), "CONFLICT") {
		return nil // exists already
	}
	return err
}

func (r *restAdmin) createToken(ctx context.Context, body map[string]any) (map[string]any, error) {
	var out map[string]any
	return out, r.do(ctx, "POST", "/api/tokens", body, &out)
}

func (r *restAdmin) listTokens(ctx context.Context, user string) ([]map[string]any, error) {
	var out struct{ Tokens []map[string]any }
	path := "/api/tokens"
	if user != "" {
		path += "?user=" + url.QueryEscape(user)
	}
	return out.Tokens, r.do(ctx, "GET", path, nil, &out)
}

func (r *restAdmin) revokeToken(ctx context.Context, id string) (map[string]any, error) {
	var out map[string]any
	return out, r.do(ctx, "DELETE", "/api/tokens/"+url.PathEscape(id), nil, &out)
}

// storeAdmin manages tokens directly in a store, as an admin: whoever can
// open the store can read and write everything in it anyway.
type storeAdmin struct {
	st  store.Store
	svc *auth.Service
	as  auth.Principal
}

func openStoreAdmin(ctx context.Context, url string) (*storeAdmin, error) {
	st, err := agentd.OpenStore(ctx, url, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		return nil, err
	}
	id, ok := st.(store.IdentityStore)
	if !ok {
		_ = st.Close()
		return nil, errors.New("this store keeps no users")
	}
	svc, err := auth.New(auth.Config{Identity: id, Sessions: st, Required: true})
	if err != nil {
		_ = st.Close()
		return nil, err
	}
	return &storeAdmin{st: st, svc: svc, as: auth.Principal{UserID: "cli", Role: store.RoleAdmin, Method: auth.MethodToken}}, nil
}

func (s *storeAdmin) close() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_ = s.svc.Close(ctx)
	_ = s.st.Close()
}

func (s *storeAdmin) createUser(ctx context.Context, id, name, tenant, role string) error {
	_, err := s.svc.CreateUser(ctx, s.as, auth.NewUser{ID: id, Name: name, Tenant: tenant, Role: store.Role(role)})
	if errors.Is(err, auth.ErrConflict) {
		return nil
	}
	return err
}

// asMap turns a value into its JSON object, as the REST answers are.
func asMap(v any) map[string]any {
	b, _ := json.Marshal(v)
	var m map[string]any
	_ = json.Unmarshal(b, &m)
	return m
}

func (s *storeAdmin) createToken(ctx context.Context, body map[string]any) (map[string]any, error) {
	var n auth.NewToken
	b, _ := json.Marshal(body)
	if err := json.Unmarshal(b, &n); err != nil {
		return nil, err
	}
	if n.UserID == "" {
		return nil, errors.New("--user is required when acting on the store")
	}
	t, err := s.svc.CreateToken(ctx, s.as, n)
	return asMap(t), err
}

func (s *storeAdmin) listTokens(ctx context.Context, user string) ([]map[string]any, error) {
	if user == "" {
		user = "*"
	}
	ts, err := s.svc.Tokens(ctx, s.as, user)
	out := make([]map[string]any, len(ts))
	for i, t := range ts {
		out[i] = asMap(t)
	}
	return out, err
}

func (s *storeAdmin) revokeToken(ctx context.Context, id string) (map[string]any, error) {
	t, err := s.svc.RevokeToken(ctx, s.as, id)
	return asMap(t), err
}
