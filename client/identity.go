package client

import (
	"context"
	"net/url"
	"strconv"

	"github.com/agentd/agentd/restapi"
	"github.com/agentd/agentd/store"
)

// The identity routes (docs/api.md, Auth): who am I, users, API tokens,
// shares, provider keys, budgets and the access log. Routes marked
// "admins" answer 403 FORBIDDEN to members.

// Auth says whether and how to authenticate (tokens, the OIDC provider).
// It needs no credential.
func (c *Client) Auth(ctx context.Context) (restapi.AuthInfo, error) {
	var out restapi.AuthInfo
	return out, c.do(ctx, "GET", "/api/auth", nil, nil, &out)
}

// Me returns the authenticated user, its credential and budgets.
func (c *Client) Me(ctx context.Context) (restapi.Me, error) {
	var out restapi.Me
	return out, c.do(ctx, "GET", "/api/me", nil, nil, &out)
}

// Users lists every user (admins).
func (c *Client) Users(ctx context.Context) ([]store.User, error) {
	var out restapi.UserList
	return out.Users, c.do(ctx, "GET", "/api/users", nil, nil, &out)
}

// CreateUser makes a user (admins).
func (c *Client) CreateUser(ctx context.Context, u restapi.NewUser) (store.User, error) {
	var out store.User
	return out, c.do(ctx, "POST", "/api/users", nil, u, &out)
}

// User returns a user: yourself, or anyone for admins.
func (c *Client) User(ctx context.Context, id string) (store.User, error) {
	var out store.User
	return out, c.do(ctx, "GET", "/api/users/"+url.PathEscape(id), nil, nil, &out)
}

// UpdateUser changes the fields set in up (admins). Disabling a user
// closes its open connections.
func (c *Client) UpdateUser(ctx context.Context, id string, up restapi.UserUpdate) (store.User, error) {
	var out store.User
	return out, c.do(ctx, "PATCH", "/api/users/"+url.PathEscape(id), nil, up, &out)
}

// CreateToken makes an API token; the answer's Token is the only copy of
// the secret.
func (c *Client) CreateToken(ctx context.Context, req restapi.NewToken) (restapi.CreatedToken, error) {
	var out restapi.CreatedToken
	return out, c.do(ctx, "POST", "/api/tokens", nil, req, &out)
}

// Tokens lists the caller's API tokens; admins pass a user id for that
// user's, or "*" for all ("" is the caller's).
func (c *Client) Tokens(ctx context.Context, user string) ([]store.APIToken, error) {
	var q url.Values
	if user != "" {
		q = url.Values{"user": {user}}
	}
	var out restapi.TokenList
	return out.Tokens, c.do(ctx, "GET", "/api/tokens", q, nil, &out)
}

// RevokeToken revokes a token: it stops working at once, its open
// connections too.
func (c *Client) RevokeToken(ctx context.Context, id string) (store.APIToken, error) {
	var out store.APIToken
	return out, c.do(ctx, "DELETE", "/api/tokens/"+url.PathEscape(id), nil, nil, &out)
}

// Shares lists who a session is shared with (its owner, admins).
func (c *Client) Shares(ctx context.Context, sessionID string) ([]store.Share, error) {
	var out restapi.ShareList
	return out.Shares, c.do(ctx, "GET", "/api/sessions/"+url.PathEscape(sessionID)+"/shares", nil, nil, &out)
}

// PutShare shares a session with a user, to read or to control.
func (c *Client) PutShare(ctx context.Context, sessionID, userID string, access store.ShareAccess) (store.Share, error) {
	var out store.Share
	return out, c.do(ctx, "PUT", "/api/sessions/"+url.PathEscape(sessionID)+"/shares/"+url.PathEscape(userID), nil, restapi.ShareRequest{Access: access}, &out)
}

// DeleteShare stops sharing a session with a user.
func (c *Client) DeleteShare(ctx context.Context, sessionID, userID string) error {
	return c.do(ctx, "DELETE", "/api/sessions/"+url.PathEscape(sessionID)+"/shares/"+url.PathEscape(userID), nil, nil, nil)
}

func keysPath(scope store.KeyScope, owner string) string {
	return "/api/keys/" + url.PathEscape(string(scope)) + "/" + url.PathEscape(owner)
}

// ProviderKeys lists the provider keys a user or tenant stored (never the
// keys themselves).
func (c *Client) ProviderKeys(ctx context.Context, scope store.KeyScope, owner string) ([]store.ProviderKey, error) {
	var out restapi.KeyList
	return out.Keys, c.do(ctx, "GET", keysPath(scope, owner), nil, nil, &out)
}

// PutProviderKey stores a provider key (anthropic, openai, gemini), sealed
// with the server key; it cannot be read back.
func (c *Client) PutProviderKey(ctx context.Context, scope store.KeyScope, owner, provider, key string) (store.ProviderKey, error) {
	var out store.ProviderKey
	return out, c.do(ctx, "PUT", keysPath(scope, owner)+"/"+url.PathEscape(provider), nil, restapi.KeyRequest{Key: key}, &out)
}

// DeleteProviderKey removes a stored provider key.
func (c *Client) DeleteProviderKey(ctx context.Context, scope store.KeyScope, owner, provider string) error {
	return c.do(ctx, "DELETE", keysPath(scope, owner)+"/"+url.PathEscape(provider), nil, nil, nil)
}

func budgetPath(scope store.KeyScope, owner string) string {
	return "/api/budgets/" + url.PathEscape(string(scope)) + "/" + url.PathEscape(owner)
}

// Budgets lists the budgets set for users and tenants (admins).
func (c *Client) Budgets(ctx context.Context) ([]store.Budget, error) {
	var out restapi.BudgetList
	return out.Budgets, c.do(ctx, "GET", "/api/budgets", nil, nil, &out)
}

// Budget returns a user's or tenant's budget and its use today and this
// month (your own and your tenant's; anyone's for admins).
func (c *Client) Budget(ctx context.Context, scope store.KeyScope, owner string) (restapi.BudgetReport, error) {
	var out restapi.BudgetReport
	return out, c.do(ctx, "GET", budgetPath(scope, owner), nil, nil, &out)
}

// PutBudget sets b.Scope's b.Owner's budget (admins); zero limits are none.
func (c *Client) PutBudget(ctx context.Context, b store.Budget) (store.Budget, error) {
	var out store.Budget
	return out, c.do(ctx, "PUT", budgetPath(b.Scope, b.Owner), nil, b, &out)
}

// DeleteBudget removes a budget: the server's default applies again
// (admins).
func (c *Client) DeleteBudget(ctx context.Context, scope store.KeyScope, owner string) error {
	return c.do(ctx, "DELETE", budgetPath(scope, owner), nil, nil, nil)
}

// AccessLog returns access records (refusals, identity changes) with
// id > after, at most limit (0: the server's default) (admins). Pass the
// page's Last as after for the next page.
func (c *Client) AccessLog(ctx context.Context, after int64, limit int) (restapi.AccessPage, error) {
	q := url.Values{"after": {strconv.FormatInt(after, 10)}}
	if limit > 0 {
		q.Set("limit", strconv.Itoa(limit))
	}
	var out restapi.AccessPage
	return out, c.do(ctx, "GET", "/api/access-log", q, nil, &out)
}

// OIDCToken exchanges an authorization code (PKCE) the provider gave for
// a bearer token, as the web UI's sign-in does. It needs no credential.
func (c *Client) OIDCToken(ctx context.Context, ex restapi.CodeExchange) (restapi.SignIn, error) {
	var out restapi.SignIn
	return out, c.do(ctx, "POST", "/api/auth/oidc/token", nil, ex, &out)
}

// OIDCRefresh trades an OIDC refresh token for a new bearer token.
func (c *Client) OIDCRefresh(ctx context.Context, refreshToken string) (restapi.SignIn, error) {
	var out restapi.SignIn
	return out, c.do(ctx, "POST", "/api/auth/oidc/refresh", nil, restapi.RefreshRequest{RefreshToken: refreshToken}, &out)
}
