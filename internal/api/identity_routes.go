package api

import (
	"net/http"
	"strconv"

	"github.com/agentd/agentd/internal/auth"
	"github.com/agentd/agentd/restapi"
	"github.com/agentd/agentd/store"
)

// The identity routes: who am I, users, API tokens, shares, provider keys,
// budgets, the access log and the OIDC code exchange (docs/api.md, Auth).

var (
	pUser     = param{name: "userId", in: "path", desc: "User id", typ: "string", required: true}
	pToken    = param{name: "tokenId", in: "path", desc: "API token id", typ: "string", required: true}
	pScope    = param{name: "scope", in: "path", desc: "user or tenant", typ: "string", required: true}
	pOwner    = param{name: "owner", in: "path", desc: "User id or tenant", typ: "string", required: true}
	pProvider = param{name: "provider", in: "path", desc: "anthropic, openai or gemini", typ: "string", required: true}
)

func (s *Server) identityRoutes() []route {
	return []route{
		{method: "GET", pattern: "/api/me", summary: "The authenticated user, its credential and budgets", handler: s.handleMe, auth: true, scope: scopeNone, resp: Me{}, status: 200},
		{method: "GET", pattern: "/api/users", summary: "List users (admins)", handler: s.handleUsers, auth: true, scope: auth.ScopeAdmin, resp: UserList{}, status: 200},
		{method: "POST", pattern: "/api/users", summary: "Create a user (admins)", handler: s.handleCreateUser, auth: true, body: true, scope: auth.ScopeAdmin, req: auth.NewUser{}, resp: store.User{}, status: 201},
		{method: "GET", pattern: "/api/users/{userId}", summary: "A user (yourself, or any for admins)", handler: s.handleUser, auth: true, scope: scopeNone, resp: store.User{}, status: 200, params: []param{pUser}},
		{method: "PATCH", pattern: "/api/users/{userId}", summary: "Change a user's name, tenant, role or disabled flag (admins); disabling cuts off its connections", handler: s.handleUpdateUser, auth: true, body: true, scope: auth.ScopeAdmin, req: auth.UserUpdate{}, resp: store.User{}, status: 200, params: []param{pUser}},
		{method: "GET", pattern: "/api/tokens", summary: "List API tokens (yours; admins: ?user=ID or ?user=*)", handler: s.handleTokens, auth: true, scope: scopeNone, resp: TokenList{}, status: 200, params: []param{{name: "user", in: "query", typ: "string", desc: "Whose tokens (admins)"}}},
		{method: "POST", pattern: "/api/tokens", summary: "Create an API token; the secret is in this answer only", handler: s.handleCreateToken, auth: true, body: true, scope: scopeNone, req: auth.NewToken{}, resp: auth.CreatedToken{}, status: 201},
		{method: "DELETE", pattern: "/api/tokens/{tokenId}", summary: "Revoke an API token; its open connections are closed", handler: s.handleRevokeToken, auth: true, scope: scopeNone, resp: store.APIToken{}, status: 200, params: []param{pToken}},
		{method: "GET", pattern: "/api/sessions/{id}/shares", summary: "Who a session is shared with (owner, admins)", handler: s.handleShares, auth: true, resp: ShareList{}, status: 200, params: []param{pID}},
		{method: "PUT", pattern: "/api/sessions/{id}/shares/{userId}", summary: "Share a session: read or control (owner, admins)", handler: s.handlePutShare, auth: true, body: true, req: ShareRequest{}, resp: store.Share{}, status: 200, params: []param{pID, pUser}},
		{method: "DELETE", pattern: "/api/sessions/{id}/shares/{userId}", summary: "Stop sharing a session with a user", handler: s.handleDeleteShare, auth: true, resp: restapi.Success{}, status: 200, params: []param{pID, pUser}},
		{method: "GET", pattern: "/api/keys/{scope}/{owner}", summary: "Provider keys of a user or tenant (never the keys themselves)", handler: s.handleKeys, auth: true, scope: scopeNone, resp: KeyList{}, status: 200, params: []param{pScope, pOwner}},
		{method: "PUT", pattern: "/api/keys/{scope}/{owner}/{provider}", summary: "Store a provider key, sealed with the server key", handler: s.handlePutKey, auth: true, body: true, scope: scopeNone, req: KeyRequest{}, resp: store.ProviderKey{}, status: 200, params: []param{pScope, pOwner, pProvider}},
		{method: "DELETE", pattern: "/api/keys/{scope}/{owner}/{provider}", summary: "Remove a provider key", handler: s.handleDeleteKey, auth: true, scope: scopeNone, resp: restapi.Success{}, status: 200, params: []param{pScope, pOwner, pProvider}},
		{method: "GET", pattern: "/api/budgets", summary: "Budgets set for users and tenants (admins)", handler: s.handleBudgets, auth: true, scope: auth.ScopeAdmin, resp: BudgetList{}, status: 200},
		{method: "GET", pattern: "/api/budgets/{scope}/{owner}", summary: "A user's or tenant's budget and usage today and this month", handler: s.handleBudget, auth: true, scope: scopeNone, resp: auth.BudgetReport{}, status: 200, params: []param{pScope, pOwner}},
		{method: "PUT", pattern: "/api/budgets/{scope}/{owner}", summary: "Set a user's or tenant's budget (admins)", handler: s.handlePutBudget, auth: true, body: true, scope: auth.ScopeAdmin, req: store.Budget{}, resp: store.Budget{}, status: 200, params: []param{pScope, pOwner}},
		{method: "DELETE", pattern: "/api/budgets/{scope}/{owner}", summary: "Remove a budget: the server's default applies again (admins)", handler: s.handleDeleteBudget, auth: true, scope: auth.ScopeAdmin, resp: restapi.Success{}, status: 200, params: []param{pScope, pOwner}},
		{method: "GET", pattern: "/api/access-log", summary: "Access records: refusals and identity changes (admins)", handler: s.handleAccessLog, auth: true, scope: auth.ScopeAdmin, resp: AccessPage{}, status: 200, params: []param{{name: "after", in: "query", typ: "integer", desc: "Records with id > after"}, {name: "limit", in: "query", typ: "integer", desc: "At most this many (default 1000)"}}},
		{method: "POST", pattern: "/api/auth/oidc/token", summary: "Exchange an OIDC authorization code (PKCE) for a bearer token (the web UI's sign-in)", handler: s.handleOIDCToken, body: true, req: CodeExchange{}, resp: auth.SignIn{}, status: 200},
		{method: "POST", pattern: "/api/auth/oidc/refresh", summary: "Trade an OIDC refresh token for a new bearer token", handler: s.handleOIDCRefresh, body: true, req: RefreshRequest{}, resp: auth.SignIn{}, status: 200},
	}
}

// The identity routes' wire types live in restapi (the Go client's too).
type (
	Me             = restapi.Me
	UserList       = restapi.UserList
	TokenList      = restapi.TokenList
	ShareList      = restapi.ShareList
	KeyList        = restapi.KeyList
	BudgetList     = restapi.BudgetList
	AccessPage     = restapi.AccessPage
	ShareRequest   = restapi.ShareRequest
	KeyRequest     = restapi.KeyRequest
	CodeExchange   = restapi.CodeExchange
	RefreshRequest = restapi.RefreshRequest
)

func (s *Server) handleAuth(w http.ResponseWriter, r *http.Request) {
	a := s.cfg.Auth
	info := restapi.AuthInfo{Required: a.Required(), MultiUser: a.MultiUser()}
	if a.Required() {
		info.Methods = []string{"token"}
	}
	if o := a.OIDC(); o != nil {
		in := o.Info(r.Context())
		info.Methods = append(info.Methods, "oidc")
		info.OIDC = &restapi.OIDCInfo{Issuer: in.Issuer, ClientID: in.ClientID, AuthorizationEndpoint: in.AuthorizationEndpoint, Scopes: in.Scopes}
	}
	writeJSON(w, http.StatusOK, info)
}

func (s *Server) handleMe(w http.ResponseWriter, r *http.Request) {
	p := PrincipalOf(r.Context())
	me := Me{User: store.User{ID: p.UserID, Name: p.Name, Tenant: p.Tenant, Role: p.Role}, Method: string(p.Method), TokenID: p.TokenID, Admin: p.Admin()}
	for _, sc := range auth.AllScopes {
		if p.Has(sc) && (sc != auth.ScopeAdmin || p.Role == store.RoleAdmin) {
			me.Scopes = append(me.Scopes, string(sc))
		}
	}
	if !p.Expires.IsZero() {
		me.ExpiresAt = p.Expires.UTC().Format("2006-01-02T15:04:05Z")
	}
	if s.cfg.Auth.MultiUser() && p.Method != auth.MethodNone {
		if u, err := s.cfg.Auth.User(r.Context(), p, p.UserID); err == nil {
			me.User = u
		}
		if rep, err := s.cfg.Auth.Report(r.Context(), p, store.ScopeUser, p.UserID); err == nil {
			me.Budget = &rep
		}
		if rep, err := s.cfg.Auth.Report(r.Context(), p, store.ScopeTenant, p.Tenant); err == nil {
			me.Tenant = &rep
		}
	}
	writeJSON(w, http.StatusOK, me)
}

func (s *Server) handleUsers(w http.ResponseWriter, r *http.Request) {
	us, err := s.cfg.Auth.Users(r.Context(), PrincipalOf(r.Context()))
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, UserList{Users: us})
}

func (s *Server) handleCreateUser(w http.ResponseWriter, r *http.Request) {
	var n auth.NewUser
	if err := decode(r, &n, false); err != nil {
		s.fail(w, r, err)
		return
	}
	u, err := s.cfg.Auth.CreateUser(r.Context(), PrincipalOf(r.Context()), n)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusCreated, u)
}

func (s *Server) handleUser(w http.ResponseWriter, r *http.Request) {
	u, err := s.cfg.Auth.User(r.Context(), PrincipalOf(r.Context()), r.PathValue("userId"))
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, u)
}

func (s *Server) handleUpdateUser(w http.ResponseWriter, r *http.Request) {
	var up auth.UserUpdate
	if err := decode(r, &up, false); err != nil {
		s.fail(w, r, err)
		return
	}
	u, err := s.cfg.Auth.UpdateUser(r.Context(), PrincipalOf(r.Context()), r.PathValue("userId"), up)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, u)
}

func (s *Server) handleTokens(w http.ResponseWriter, r *http.Request) {
	ts, err := s.cfg.Auth.Tokens(r.Context(), PrincipalOf(r.Context()), r.URL.Query().Get("user"))
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, TokenList{Tokens: ts})
}

func (s *Server) handleCreateToken(w http.ResponseWriter, r *http.Request) {
	var n auth.NewToken
	if err := decode(r, &n, true); err != nil {
		s.fail(w, r, err)
		return
	}
	t, err := s.cfg.Auth.CreateToken(r.Context(), PrincipalOf(r.Context()), n)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusCreated, t)
}

func (s *Server) handleRevokeToken(w http.ResponseWriter, r *http.Request) {
	t, err := s.cfg.Auth.RevokeToken(r.Context(), PrincipalOf(r.Context()), r.PathValue("tokenId"))
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, t)
}

func (s *Server) handleShares(w http.ResponseWriter, r *http.Request) {
	sh, err := s.cfg.Auth.Shares(r.Context(), r.PathValue("id"))
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, ShareList{Shares: sh})
}

func (s *Server) handlePutShare(w http.ResponseWriter, r *http.Request) {
	var req ShareRequest
	if err := decode(r, &req, false); err != nil {
		s.fail(w, r, err)
		return
	}
	sh, err := s.cfg.Auth.Share(r.Context(), PrincipalOf(r.Context()), r.PathValue("id"), r.PathValue("userId"), req.Access)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, sh)
}

func (s *Server) handleDeleteShare(w http.ResponseWriter, r *http.Request) {
	if err := s.cfg.Auth.Unshare(r.Context(), PrincipalOf(r.Context()), r.PathValue("id"), r.PathValue("userId")); err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, restapi.Success{Success: true})
}

func (s *Server) handleKeys(w http.ResponseWriter, r *http.Request) {
	ks, err := s.cfg.Auth.ProviderKeys(r.Context(), PrincipalOf(r.Context()), store.KeyScope(r.PathValue("scope")), r.PathValue("owner"))
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, KeyList{Keys: ks})
}

func (s *Server) handlePutKey(w http.ResponseWriter, r *http.Request) {
	var req KeyRequest
	if err := decode(r, &req, false); err != nil {
		s.fail(w, r, err)
		return
	}
	k, err := s.cfg.Auth.PutProviderKey(r.Context(), PrincipalOf(r.Context()), store.KeyScope(r.PathValue("scope")), r.PathValue("owner"), r.PathValue("provider"), req.Key)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, k)
}

func (s *Server) handleDeleteKey(w http.ResponseWriter, r *http.Request) {
	if err := s.cfg.Auth.DeleteProviderKey(r.Context(), PrincipalOf(r.Context()), store.KeyScope(r.PathValue("scope")), r.PathValue("owner"), r.PathValue("provider")); err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, restapi.Success{Success: true})
}

func (s *Server) handleBudgets(w http.ResponseWriter, r *http.Request) {
	bs, err := s.cfg.Auth.Budgets(r.Context(), PrincipalOf(r.Context()))
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, BudgetList{Budgets: bs})
}

func (s *Server) handleBudget(w http.ResponseWriter, r *http.Request) {
	rep, err := s.cfg.Auth.Report(r.Context(), PrincipalOf(r.Context()), store.KeyScope(r.PathValue("scope")), r.PathValue("owner"))
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, rep)
}

func (s *Server) handlePutBudget(w http.ResponseWriter, r *http.Request) {
	var b store.Budget
	if err := decode(r, &b, false); err != nil {
		s.fail(w, r, err)
		return
	}
	b.Scope, b.Owner = store.KeyScope(r.PathValue("scope")), r.PathValue("owner")
	b, err := s.cfg.Auth.PutBudget(r.Context(), PrincipalOf(r.Context()), b)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, b)
}

func (s *Server) handleDeleteBudget(w http.ResponseWriter, r *http.Request) {
	if err := s.cfg.Auth.DeleteBudget(r.Context(), PrincipalOf(r.Context()), store.KeyScope(r.PathValue("scope")), r.PathValue("owner")); err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, restapi.Success{Success: true})
}

func (s *Server) handleAccessLog(w http.ResponseWriter, r *http.Request) {
	after, err := parseCursor("after", r.URL.Query().Get("after"))
	if err != nil {
		s.fail(w, r, err)
		return
	}
	limit := defaultPage
	if v := r.URL.Query().Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n <= 0 {
			s.fail(w, r, cursorError("limit must be a positive integer"))
			return
		}
		limit = min(n, maxPage)
	}
	recs, err := s.cfg.Auth.AccessLog(r.Context(), PrincipalOf(r.Context()), after, limit)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	page := AccessPage{Records: recs, Last: after}
	if len(recs) > 0 {
		page.Last = recs[len(recs)-1].ID
	}
	writeJSON(w, http.StatusOK, page)
}

func (s *Server) handleOIDCToken(w http.ResponseWriter, r *http.Request) {
	o := s.cfg.Auth.OIDC()
	if o == nil {
		writeError(w, http.StatusNotFound, CodeNotFound, "this server has no OpenID Connect provider")
		return
	}
	var req CodeExchange
	if err := decode(r, &req, false); err != nil {
		s.fail(w, r, err)
		return
	}
	if req.Code == "" || req.CodeVerifier == "" || req.RedirectURI == "" {
		s.fail(w, r, badRequest("code, codeVerifier and redirectUri are required"))
		return
	}
	ctx, cancel := shortCtx(r)
	defer cancel()
	in, err := o.Exchange(ctx, req.Code, req.CodeVerifier, req.RedirectURI)
	if err != nil {
		s.authFailed(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, in)
}

func (s *Server) handleOIDCRefresh(w http.ResponseWriter, r *http.Request) {
	o := s.cfg.Auth.OIDC()
	if o == nil {
		writeError(w, http.StatusNotFound, CodeNotFound, "this server has no OpenID Connect provider")
		return
	}
	var req RefreshRequest
	if err := decode(r, &req, false); err != nil || req.RefreshToken == "" {
		s.fail(w, r, badRequest("refreshToken is required"))
		return
	}
	ctx, cancel := shortCtx(r)
	defer cancel()
	in, err := o.Refresh(ctx, req.RefreshToken)
	if err != nil {
		s.authFailed(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, in)
}
