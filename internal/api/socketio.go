package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"

	sio "github.com/zishang520/socket.io/servers/socket/v3"

	"github.com/agentd/agentd/internal/auth"
	"github.com/agentd/agentd/internal/eventlog"
)

// socketIO serves Socket.IO v4 at /socket.io/ for existing socket.io-client
// users: `session:join(sessionId[, after], ack)` and
// `session:leave(sessionId, ack)`; the server emits `session:event` with
// the event envelope. Auth (when an API key is set): the handshake's
// auth.token, the access_token query parameter or an Authorization header.
type socketIO struct {
	s       *Server
	srv     *sio.Server
	handler http.Handler
}

func newSocketIO(s *Server) (*socketIO, error) {
	opts := sio.DefaultServerOptions()
	opts.SetServeClient(false)
	srv := sio.NewServer(nil, opts)
	x := &socketIO{s: s, srv: srv}
	x.handler = srv.ServeHandler(opts)
	if s.cfg.Auth.Required() {
		srv.Use(func(c *sio.Socket, next func(*sio.ExtendedError)) {
			if _, _, err := x.authenticate(c.Handshake()); err == nil {
				next(nil)
				return
			}
			s.cfg.Auth.Refused("unauthenticated")
			next(sio.NewExtendedError("unauthorized", map[string]any{"code": CodeUnauthorized}))
		})
	}
	srv.On("connection", func(args ...any) {
		c, ok := args[0].(*sio.Socket)
		if !ok {
			return
		}
		x.serve(c)
	})
	return x, nil
}

func (x *socketIO) ServeHTTP(w http.ResponseWriter, r *http.Request) { x.handler.ServeHTTP(w, r) }

func (x *socketIO) close() { x.srv.Close(nil) }

// authenticate finds the handshake's credential (auth.token, the
// access_token query parameter or an Authorization header) and the
// principal it stands for.
func (x *socketIO) authenticate(h *sio.Handshake) (auth.Principal, string, error) {
	var cands []string
	if h.Auth != nil {
		if t, ok := h.Auth["token"].(string); ok {
			cands = append(cands, t)
		}
	}
	if v, ok := h.Query["access_token"]; ok {
		switch t := v.(type) {
		case string:
			cands = append(cands, t)
		case []string:
			cands = append(cands, t...)
		case []any:
			for _, e := range t {
				if s, ok := e.(string); ok {
					cands = append(cands, s)
				}
			}
		}
	}
	for k, v := range h.Headers {
		if strings.EqualFold(k, "authorization") {
			for _, s := range asStrings(v) {
				cands = append(cands, strings.TrimPrefix(s, "Bearer "))
			}
		}
	}
	if len(cands) == 0 {
		cands = []string{""}
	}
	var err error
	for _, c := range cands {
		ctx, cancel := context.WithTimeout(x.s.closeCtx, 10*time.Second)
		var p auth.Principal
		p, err = x.s.cfg.Auth.Authenticate(ctx, c)
		cancel()
		if err == nil {
			return p, c, nil
		}
	}
	return auth.Principal{}, "", err
}

func asStrings(v any) []string {
	switch t := v.(type) {
	case string:
		return []string{t}
	case []string:
		return t
	}
	return nil
}

// sioConn is one Socket.IO client; joins is guarded by mu.
type sioConn struct {
	x      *socketIO
	c      *sio.Socket
	ctx    context.Context
	cancel context.CancelFunc
	mu     sync.Mutex
	joins  map[string]context.CancelFunc
	who    auth.Principal
}

func (x *socketIO) serve(c *sio.Socket) {
	p, cred, err := x.authenticate(c.Handshake())
	if err != nil {
		// The credential went between the middleware and now.
		_ = c.Emit("session:error", map[string]any{"code": CodeUnauthorized})
		c.Disconnect(true)
		return
	}
	ctx, cancel := context.WithCancel(x.s.closeCtx)
	conn := &sioConn{x: x, c: c, ctx: ctx, cancel: cancel, joins: make(map[string]context.CancelFunc), who: p}
	untrack := x.s.live.track(context.WithValue(ctx, credentialKey{}, cred), func() {
		_ = c.Emit("session:error", map[string]any{"code": CodeUnauthorized, "error": "credential no longer valid"})
		c.Disconnect(true)
		cancel()
	})
	c.On("session:join", func(args ...any) { conn.join(args) })
	c.On("session:leave", func(args ...any) { conn.leave(args) })
	c.On("disconnect", func(...any) { untrack(); cancel() })
}

// splitAck separates the trailing ack callback from event arguments.
func splitAck(args []any) ([]any, func(any)) {
	if n := len(args); n > 0 {
		if ack, ok := args[n-1].(sio.Ack); ok {
			return args[:n-1], func(v any) { ack([]any{v}, nil) }
		}
		if ack, ok := args[n-1].(func([]any, error)); ok {
			return args[:n-1], func(v any) { ack([]any{v}, nil) }
		}
	}
	return args, func(any) {}
}

type sioAck struct {
	OK      bool      `json:"ok"`
	Error   *apiError `json:"error,omitempty"`
	LastSeq *int64    `json:"lastSeq,omitempty"`
}

// joinArgs accepts (sessionId), (sessionId, after) or ({sessionId, after}).
func joinArgs(args []any) (string, int64, error) {
	if len(args) == 0 {
		return "", 0, errors.New("session:join needs a session id")
	}
	var id string
	var after any
	switch a := args[0].(type) {
	case string:
		id = a
		if len(args) > 1 {
			after = args[1]
		}
	case map[string]any:
		id, _ = a["sessionId"].(string)
		after = a["after"]
	}
	if id == "" {
		return "", 0, errors.New("session:join needs a session id")
	}
	var n int64
	switch v := after.(type) {
	case nil:
	case float64:
		n = int64(v)
		if v < 0 || float64(n) != v {
			return "", 0, fmt.Errorf("after must be a non-negative integer")
		}
	case int64:
		n = v
	case int:
		n = int64(v)
	default:
		return "", 0, fmt.Errorf("after must be a non-negative integer")
	}
	if n < 0 {
		return "", 0, fmt.Errorf("after must be a non-negative integer")
	}
	return id, n, nil
}

func (conn *sioConn) join(args []any) {
	args, ack := splitAck(args)
	id, after, err := joinArgs(args)
	if err != nil {
		ack(sioAck{Error: &apiError{Code: CodeBadRequest, Error: err.Error()}})
		return
	}
	s := conn.x.s
	if _, err := s.checkSession(conn.ctx, conn.who, id, auth.LevelRead); err != nil {
		_, code := classify(err)
		ack(sioAck{Error: &apiError{Code: code, Error: err.Error()}})
		return
	}
	sub, err := s.cfg.Log.Subscribe(conn.ctx, id, after)
	if err != nil {
		_, code := classify(err)
		ack(sioAck{Error: &apiError{Code: code, Error: err.Error()}})
		return
	}
	last, _ := s.cfg.Log.LastSeq(conn.ctx, id)
	ctx, cancel := context.WithCancel(conn.ctx)
	conn.mu.Lock()
	if old, ok := conn.joins[id]; ok {
		old()
	}
	conn.joins[id] = cancel
	conn.mu.Unlock()
	ack(sioAck{OK: true, LastSeq: &last})
	go conn.pump(ctx, sub)
}

func (conn *sioConn) leave(args []any) {
	args, ack := splitAck(args)
	id, _ := firstString(args)
	conn.mu.Lock()
	cancel, ok := conn.joins[id]
	delete(conn.joins, id)
	conn.mu.Unlock()
	if !ok {
		ack(sioAck{Error: &apiError{Code: CodeBadRequest, Error: "not joined to " + strconvQuote(id)}})
		return
	}
	cancel()
	ack(sioAck{OK: true})
}

func firstString(args []any) (string, bool) {
	if len(args) == 0 {
		return "", false
	}
	switch a := args[0].(type) {
	case string:
		return a, true
	case map[string]any:
		s, ok := a["sessionId"].(string)
		return s, ok
	}
	return "", false
}

func (conn *sioConn) pump(ctx context.Context, sub *eventlog.Subscription) {
	defer sub.Close()
	for {
		rec, err := sub.Next(ctx)
		if err != nil {
			if errors.Is(err, eventlog.ErrSlowConsumer) {
				_ = conn.c.Emit("session:error", map[string]any{"code": CodeSlowConsumer, "sessionId": rec.Event.Context.SessionID})
				conn.c.Disconnect(true)
			}
			return
		}
		if err := conn.c.Emit("session:event", json.RawMessage(rec.JSON)); err != nil {
			return
		}
	}
}
