package api

import (
	"context"
	"encoding/json"
	"errors"
	"time"

	"github.com/agentd/agentd/internal/auth"
)

// A long-lived connection (the terminal, the event WebSocket, Socket.IO)
// outlives the token it was opened with when that token expires: the
// client refreshes it and sends the new one over the connection
// ({"type":"auth","token"} on the terminal, {"op":"auth","token"} on
// /api/ws, the auth event on Socket.IO), and from then on the connection
// is checked against the new one. Without it the connection
// closes 4001 at the old token's expiry: an event stream then reconnects
// and resumes (a replay), a terminal cannot resume at all.

// errOtherUser: a credential sent to renew a connection names another user.
var errOtherUser = forbidden("the token belongs to another user than the one this connection was opened by")

// reauthenticate checks token, sent over a connection opened by was to
// replace its credential: it must be valid, name the same user, and carry
// scope and, for a connection about session id (not ""), the access level
// need to it.
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
	if id != "" {
		if _, err := s.checkSession(ctx, p, id, need); err != nil {
			return auth.Principal{}, err
		}
	}
	return p, nil
}

// authReply is the terminal's answer to {"type":"auth"}: ok, with the
// new credential's expiry, or the error as a request would get it.
type authReply struct {
	Type      string     `json:"type"` // "auth"
	OK        bool       `json:"ok"`
	ExpiresAt *time.Time `json:"expiresAt,omitempty"`
	Code      string     `json:"code,omitempty"`
	Error     string     `json:"error,omitempty"`
}

// ptyAuthReply encodes renewConn's outcome as the terminal's reply frame.
func ptyAuthReply(ok bool, exp *time.Time, e *apiError) []byte {
	r := authReply{Type: "auth", OK: ok, ExpiresAt: exp}
	if e != nil {
		r.Code, r.Error = e.Code, e.Error
	}
	b, _ := json.Marshal(r)
	return b
}

// renewConn handles a token sent over connection c (nil: auth is off,
// nothing to renew), opened by was, to replace its credential; id is the
// session the connection is about ("": none). It
// returns whether the token was taken, with its expiry, or the error. A
// refused token changes nothing: the connection goes on with its
// credential until that one fails.
func (s *Server) renewConn(ctx context.Context, was auth.Principal, c *liveConn, token, id string, scope auth.Scope, need auth.Level) (bool, *time.Time, *apiError) {
	if c == nil {
		return true, nil, nil
	}
	if token == "" {
		return false, nil, &apiError{Code: CodeBadRequest, Error: "auth needs a token"}
	}
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	p, err := s.reauthenticate(cctx, was, token, id, scope, need)
	cancel()
	if err != nil {
		if errors.Is(err, auth.ErrUnauthenticated) {
			s.cfg.Auth.Refused("unauthenticated")
		}
		_, e := s.describe(err, "op", "renew a connection's credential", "session", id)
		return false, nil, &e
	}
	s.live.renew(c, token)
	if p.Expires.IsZero() {
		return true, nil, nil
	}
	t := p.Expires.UTC()
	return true, &t, nil
}
