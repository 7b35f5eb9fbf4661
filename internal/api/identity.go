package api

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"time"

	"github.com/agentd/agentd/internal/auth"
	"github.com/agentd/agentd/internal/session"
	"github.com/agentd/agentd/store"
)

// Who a request is from, and what it may do with a session (auth.Access):
// requireAuth authenticates and rate-limits every route that needs auth;
// authorize checks the credential's scope and, for routes of one session,
// the caller's access to it. A session the caller may not know exists
// answers 404 SESSION_NOT_FOUND, exactly like a missing one; one it may
// read but not control answers 403 FORBIDDEN.

type principalKey struct{}
type credentialKey struct{}

// Principal returns the caller's user id ("local" when auth is off): the
// actor of everything the request does.
func Principal(ctx context.Context) string { return PrincipalOf(ctx).UserID }

// PrincipalOf returns the authenticated caller (auth.Local when auth is
// off or the request was not authenticated).
func PrincipalOf(ctx context.Context) auth.Principal {
	if p, ok := ctx.Value(principalKey{}).(auth.Principal); ok {
		return p
	}
	return auth.Local()
}

func credentialOf(ctx context.Context) string {
	c, _ := ctx.Value(credentialKey{}).(string)
	return c
}

// bearer returns the request's credential: Authorization: Bearer, or the
// access_token query parameter (browser WebSocket and EventSource APIs
// cannot set headers).
func bearer(r *http.Request) string {
	if h := r.Header.Get("Authorization"); len(h) > 7 && strings.EqualFold(h[:7], "Bearer ") {
		return strings.TrimSpace(h[7:])
	}
	return r.URL.Query().Get("access_token")
}

func (s *Server) requireAuth(next http.HandlerFunc) http.HandlerFunc {
	svc := s.cfg.Auth
	return func(w http.ResponseWriter, r *http.Request) {
		cred := bearer(r)
		p, err := svc.Authenticate(r.Context(), cred)
		if err != nil {
			s.authFailed(w, r, err)
			return
		}
		if err := svc.Allow(p); err != nil {
			s.fail(w, r, err)
			return
		}
		ctx := context.WithValue(context.WithValue(r.Context(), principalKey{}, p), credentialKey{}, cred)
		next(w, r.WithContext(ctx))
	}
}

// authFailed answers a failed authentication: 401 with a challenge (or
// 403 for an identity that exists but may not sign in as asked).
func (s *Server) authFailed(w http.ResponseWriter, r *http.Request, err error) {
	if errors.Is(err, auth.ErrUnauthenticated) {
		s.cfg.Auth.Refused("unauthenticated")
		w.Header().Set("WWW-Authenticate", `Bearer realm="agentd"`)
		writeError(w, http.StatusUnauthorized, CodeUnauthorized, err.Error())
		return
	}
	s.fail(w, r, err)
}

// sessionAccess is what each route of one session needs: the level of
// access, and whether it may start the session's environment (quotas).
type sessionAccess struct {
	level auth.Level
	start bool
}

// sessionRoutes lists every route with a session {id}: TestEveryRouteHasAnAccessLevel
// checks none is missing, so a new route cannot skip the check.
var sessionRoutes = map[string]sessionAccess{
	"GET /api/sessions/{id}":                          {level: auth.LevelRead},
	"DELETE /api/sessions/{id}":                       {level: auth.LevelOwner},
	"POST /api/sessions/{id}/messages":                {level: auth.LevelControl, start: true},
	"POST /api/sessions/{id}/interrupt":               {level: auth.LevelControl},
	"POST /api/sessions/{id}/permissions/{requestId}": {level: auth.LevelControl},
	"GET /api/sessions/{id}/files":                    {level: auth.LevelRead},
	"GET /api/sessions/{id}/files/{path...}":          {level: auth.LevelRead},
	"PUT /api/sessions/{id}/files/{path...}":          {level: auth.LevelControl},
	"GET /api/sessions/{id}/events":                   {level: auth.LevelRead},
	"GET /api/sessions/{id}/audit":                    {level: auth.LevelRead},
	"GET /api/sessions/{id}/pty":                      {level: auth.LevelControl, start: true},
	"PATCH /api/sessions/{id}":                        {level: auth.LevelOwner},
	"PATCH /api/sessions/{id}/options":                {level: auth.LevelControl},
	"POST /api/sessions/{id}/sync":                    {level: auth.LevelControl},
	"POST /api/sessions/{id}/environment/terminate":   {level: auth.LevelControl},
	"GET /api/sessions/{id}/queue":                    {level: auth.LevelRead},
	"DELETE /api/sessions/{id}/queue/{messageId}":     {level: auth.LevelControl},
	"GET /api/sessions/{id}/changes":                  {level: auth.LevelRead},
	"GET /api/sessions/{id}/changes/content/{sha256}": {level: auth.LevelRead},
	"GET /api/sessions/{id}/archive":                  {level: auth.LevelRead},
	"GET /api/sessions/{id}/artifacts/{sha256}":       {level: auth.LevelRead},
	"GET /api/sessions/{id}/shares":                   {level: auth.LevelOwner},
	"PUT /api/sessions/{id}/shares/{userId}":          {level: auth.LevelOwner},
	"DELETE /api/sessions/{id}/shares/{userId}":       {level: auth.LevelOwner},
	"GET /sessions/{id}":                              {level: auth.LevelRead},
	"POST /sessions/{id}/message":                     {level: auth.LevelControl, start: true},
	"DELETE /sessions/{id}":                           {level: auth.LevelOwner},
}

// authorize wraps an authenticated route with its scope and session
// checks.
func (s *Server) authorize(rt route, next http.HandlerFunc) http.HandlerFunc {
	acc, perSession := sessionRoutes[rt.method+" "+rt.pattern]
	scope := auth.ScopeSessionsRead
	if rt.method != http.MethodGet && rt.method != http.MethodHead || acc.level >= auth.LevelControl {
		scope = auth.ScopeSessionsWrite
	}
	if rt.scope != "" {
		scope = rt.scope
	}
	return func(w http.ResponseWriter, r *http.Request) {
		p := PrincipalOf(r.Context())
		if scope != scopeNone && !p.Has(scope) && !p.Admin() {
			s.fail(w, r, forbidden("this credential lacks the "+string(scope)+" scope"))
			return
		}
		if perSession {
			rec, err := s.checkSession(r.Context(), p, r.PathValue("id"), acc.level)
			if err != nil {
				s.fail(w, r, err)
				return
			}
			if acc.start && !rec.Status.Active() {
				if err := s.cfg.Auth.CheckStart(r.Context(), rec.ID, rec.Owner, rec.Tenant); err != nil {
					s.fail(w, r, err)
					return
				}
			}
		}
		next(w, r)
	}
}

// scopeNone marks routes any authenticated caller may use.
const scopeNone auth.Scope = "-"

func forbidden(msg string) error { return &forbiddenError{msg} }

type forbiddenError struct{ msg string }

func (e *forbiddenError) Error() string        { return e.msg }
func (e *forbiddenError) Is(target error) bool { return target == auth.ErrForbidden }

// checkSession returns the session's record if p has at least need on it:
// ErrNotFound when p may not know the session exists (no access, or no
// such session), 403 when p may read it but needs more.
func (s *Server) checkSession(ctx context.Context, p auth.Principal, id string, need auth.Level) (store.Session, error) {
	sess, err := s.cfg.Sessions.Get(id)
	if err != nil {
		return store.Session{}, err
	}
	rec := sess.Record()
	have, err := s.level(ctx, p, rec)
	if err != nil {
		return store.Session{}, err
	}
	switch {
	case have == auth.LevelNone:
		s.cfg.Auth.Refused("forbidden")
		return store.Session{}, session.NotFound(id)
	case have < need:
		s.cfg.Auth.Refused("forbidden")
		return store.Session{}, forbidden("your access to session " + id + " is " + have.String() + "; this needs " + need.String())
	}
	return rec, nil
}

// level is p's access to a session.
func (s *Server) level(ctx context.Context, p auth.Principal, rec store.Session) (auth.Level, error) {
	if lv := auth.Access(p, rec.Owner, ""); lv == auth.LevelOwner {
		return lv, nil
	}
	share, err := s.cfg.Auth.ShareOf(ctx, p, rec.ID)
	if err != nil {
		return auth.LevelNone, err
	}
	return auth.Access(p, rec.Owner, share), nil
}

// visibleFilter returns a test of whether p may see a listed session.
func (s *Server) visibleFilter(ctx context.Context, p auth.Principal) (func(owner, id string) bool, error) {
	if p.Admin() {
		return func(string, string) bool { return true }, nil
	}
	shared, err := s.cfg.Auth.SharedWith(ctx, p)
	if err != nil {
		return nil, err
	}
	return func(owner, id string) bool {
		_, ok := shared[id]
		return ok || (owner != "" && owner == p.UserID)
	}, nil
}

// visibility answers whether a principal may see sessions of a live list
// (the WebSocket's "*" join), refreshing the principal's shares at most
// every visibilityTTL.
type visibility struct {
	s      *Server
	p      auth.Principal
	loaded time.Time
	shared map[string]store.ShareAccess
}

const visibilityTTL = 2 * time.Second

func newVisibility(s *Server, p auth.Principal) *visibility { return &visibility{s: s, p: p} }

func (v *visibility) sees(ctx context.Context, owner, id string) bool {
	if v.p.Admin() || (owner != "" && owner == v.p.UserID) {
		return true
	}
	if v.shared == nil || time.Since(v.loaded) > visibilityTTL {
		sh, err := v.s.cfg.Auth.SharedWith(ctx, v.p)
		if err != nil {
			v.s.log.Warn("load shares", "user", v.p.UserID, "err", err)
			return false
		}
		v.shared, v.loaded = sh, time.Now()
	}
	_, ok := v.shared[id]
	return ok
}
