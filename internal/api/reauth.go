package api

import (
	"context"
	"encoding/json"
	"errors"
	"time"

	"github.com/agentd/agentd/internal/auth"
)

// A long-lived connection (the terminal) outlives the token it was opened
// with when that token expires: the client refreshes it and sends the new
// one over the connection ({"type":"auth","token"}), and from then on the
// connection is checked against the new one. Without it the connection
// would close 4001 at the old token's expiry, and a terminal, unlike an
// event stream, cannot resume where it was.

// errOtherUser: a credential sent to renew a connection names another user.
var errOtherUser = forbidden("the token belongs to another user than the one this connection was opened by")

// reauthenticate checks token, sent over a connection opened by was to
// replace its credential: it must be valid, name the same user, and carry
// scope and the access level need to session id.
func (s *Server) reauthenticate(ctx context.Context, was auth.Principal, token, id string, scope auth.Scope, need auth.Level) (auth.Principal, error) {
	svc := s.cfg.Auth
	p, err := svc.Authenticate(ctx, token)
	if err != nil {
		return auth.Principal{}, err
	}
	if err := svc.Allow(p); err != nil {
		return auth.Principal{}, err
	}
	if p.UserID != was.UserID || p.Tenant != was.Tenant {
		return auth.Principal{}, errOtherUser
	}
	if !p.Has(scope) && !p.Admin() {
		return auth.Principal{}, forbidden("this credential lacks the " + string(scope) + " scope")
	}
	if _, err := s.checkSession(ctx, p, id, need); err != nil {
		return auth.Principal{}, err
	}
	return p, nil
}

// authReply is the answer to {"type":"auth"}: ok, with the new
// credential's expiry, or the error as a request would get it.
type authReply struct {
	Type      string     `json:"type"` // "auth"
	OK        bool       `json:"ok"`
	ExpiresAt *time.Time `json:"expiresAt,omitempty"`
	Code      string     `json:"code,omitempty"`
	Error     string     `json:"error,omitempty"`
}

// renewConn handles {"type":"auth","token"} on connection c (nil: auth
// is off, nothing to renew) opened by the request of ctx, and returns the
// reply frame. A refused token changes nothing: the connection goes on
// with its credential until that one fails.
func (s *Server) renewConn(ctx context.Context, c *liveConn, token, id string, scope auth.Scope, need auth.Level) []byte {
	r := authReply{Type: "auth"}
	switch {
	case c == nil:
		r.OK = true
	case token == "":
		r.Code, r.Error = CodeBadRequest, "auth: token is required"
	default:
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		p, err := s.reauthenticate(cctx, PrincipalOf(ctx), token, id, scope, need)
		cancel()
		if err != nil {
			_, e := s.describe(err, "op", "renew a connection's credential", "session", id)
			r.Code, r.Error = e.Code, e.Error
			if errors.Is(err, auth.ErrUnauthenticated) {
				s.cfg.Auth.Refused("unauthenticated")
			}
			break
		}
		s.live.renew(c, token)
		r.OK = true
		if !p.Expires.IsZero() {
			t := p.Expires.UTC()
			r.ExpiresAt = &t
		}
	}
	b, _ := json.Marshal(r)
	return b
}
