package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/zishang520/socket.io/servers/engine/v3/transports"
	sio "github.com/zishang520/socket.io/servers/socket/v3"
	"github.com/zishang520/socket.io/v3/pkg/types"

	"github.com/agentd/agentd/internal/auth"
	"github.com/agentd/agentd/internal/eventlog"
	"github.com/agentd/agentd/internal/seedproto"
)

// socketIO serves Socket.IO v4 at /socket.io/ for existing socket.io-client
// users: `session:join(sessionId[, after], ack)` and
// `session:leave(sessionId, ack)`, acknowledged {ok, success, lastSeq?} or
// {ok:false, success:false, error}; the server emits `session:event` with
// the event envelope, or, for a client that asked for them at the
// handshake (events=per-type, socketio_seed.go), the seed's per-type
// events. Auth (when an API key is set): the handshake's auth.token, the
// access_token query parameter or an Authorization header.
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
	// A handshake asking for events in a form agentd has not is refused
	// (before auth: it says nothing about the key).
	srv.Use(func(c *sio.Socket, next func(*sio.ExtendedError)) {
		if _, err := eventsMode(c.Handshake()); err != nil {
			next(sio.NewExtendedError(err.Error(), map[string]any{"code": CodeBadRequest}))
			return
		}
		next(nil)
	})
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
	x       *socketIO
	c       *sio.Socket
	perType bool // the seed's per-type events instead of session:event
	ctx     context.Context
	cancel  context.CancelFunc
	mu      sync.Mutex
	joins   map[string]context.CancelFunc
	who     auth.Principal
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
	mode, _ := eventsMode(c.Handshake()) // checked by the middleware
	conn := &sioConn{x: x, c: c, perType: mode == eventsPerType, ctx: ctx, cancel: cancel, joins: make(map[string]context.CancelFunc), who: p}
	live, untrack := x.s.live.trackConn(context.WithValue(ctx, credentialKey{}, cred), func() {
		_ = c.Emit("session:error", map[string]any{"code": CodeUnauthorized, "error": "credential no longer valid"})
		c.Disconnect(true)
		cancel()
	})
	c.On("session:join", func(args ...any) { conn.join(args) })
	c.On("session:leave", func(args ...any) { conn.leave(args) })
	c.On("auth", func(args ...any) { conn.renew(live, args) })
	c.On("disconnect", func(...any) { untrack(); cancel() })
}

// renew answers auth(token) or auth({token}): from then on the connection
// is checked against the new token (reauth.go). Acknowledged {ok,
// success, expiresAt?} or {ok: false, success: false, error}.
func (conn *sioConn) renew(live *liveConn, args []any) {
	args, reply := splitAck(args)
	var token string
	if len(args) > 0 {
		switch v := args[0].(type) {
		case string:
			token = v
		case map[string]any:
			token, _ = v["token"].(string)
		}
	}
	ok, exp, e := conn.x.s.renewConn(conn.ctx, conn.who, live, token, "", auth.ScopeSessionsRead, auth.LevelRead)
	type authAck struct {
		sioAck
		ExpiresAt *time.Time `json:"expiresAt,omitempty"`
	}
	reply(authAck{sioAck: sioAck{OK: ok, Success: ok, Error: e}, ExpiresAt: exp})
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

// sioAck answers session:join and session:leave: agentd's ok (and
// lastSeq) beside the seed's success. Error is agentd's {code, error}; a
// per-type client gets the seed's error string instead (seedAck).
type sioAck struct {
	OK      bool      `json:"ok"`
	Success bool      `json:"success"`
	Error   *apiError `json:"error,omitempty"`
	LastSeq *int64    `json:"lastSeq,omitempty"`
}

// seedAck is sioAck for a per-type client: error is the message, as the
// seed's clients read it (new Error(response.error)); code beside it.
type seedAck struct {
	OK      bool   `json:"ok"`
	Success bool   `json:"success"`
	Error   string `json:"error,omitempty"`
	Code    string `json:"code,omitempty"`
	LastSeq *int64 `json:"lastSeq,omitempty"`
}

// ack answers a join or leave in the client's form.
func (conn *sioConn) ack(reply func(any), lastSeq *int64, e *apiError) {
	if conn.perType {
		a := seedAck{OK: e == nil, Success: e == nil, LastSeq: lastSeq}
		if e != nil {
			a.Error, a.Code = e.Error, e.Code
		}
		reply(a)
		return
	}
	reply(sioAck{OK: e == nil, Success: e == nil, Error: e, LastSeq: lastSeq})
}

// joinArgs accepts (sessionId), (sessionId, after) or ({sessionId,
// after}); hasAfter says whether after was given.
func joinArgs(args []any) (id string, after int64, hasAfter bool, err error) {
	id, after, err = joinArgsOf(args)
	if err != nil {
		return "", 0, false, err
	}
	switch {
	case len(args) > 1 && args[1] != nil:
		hasAfter = true
	case len(args) > 0:
		if m, ok := args[0].(map[string]any); ok && m["after"] != nil {
			hasAfter = true
		}
	}
	return id, after, hasAfter, nil
}

func joinArgsOf(args []any) (string, int64, error) {
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
	args, reply := splitAck(args)
	id, after, hasAfter, err := joinArgs(args)
	if err != nil {
		conn.ack(reply, nil, &apiError{Code: CodeBadRequest, Error: err.Error()})
		return
	}
	s := conn.x.s
	fail := func(err error) {
		_, e := s.describe(err, "op", "socket.io join", "session", id)
		conn.ack(reply, nil, &e)
	}
	if _, err := s.checkSession(conn.ctx, conn.who, id, auth.LevelRead); err != nil {
		fail(err)
		return
	}
	last, _ := s.cfg.Log.LastSeq(conn.ctx, id)
	var m *seedproto.Mapper
	if conn.perType {
		// The seed's clients load the session, then join for what comes
		// next: without after, the events from now on.
		if !hasAfter {
			after = last
		}
		if m, err = conn.primedMapper(id, after); err != nil {
			fail(err)
			return
		}
	}
	sub, err := s.cfg.Log.Subscribe(conn.ctx, id, after)
	if err != nil {
		fail(err)
		return
	}
	ctx, cancel := context.WithCancel(conn.ctx)
	conn.mu.Lock()
	if old, ok := conn.joins[id]; ok {
		old()
	}
	conn.joins[id] = cancel
	conn.mu.Unlock()
	conn.ack(reply, &last, nil)
	go conn.pump(ctx, sub, id, m)
}

func (conn *sioConn) leave(args []any) {
	args, reply := splitAck(args)
	id, _ := firstString(args)
	conn.mu.Lock()
	cancel, ok := conn.joins[id]
	delete(conn.joins, id)
	conn.mu.Unlock()
	if ok {
		cancel()
	} else if !conn.perType {
		// The seed's leave succeeds whatever was joined; agentd's says.
		conn.ack(reply, nil, &apiError{Code: CodeBadRequest, Error: "not joined to " + strconvQuote(id)})
		return
	}
	conn.ack(reply, nil, nil)
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

// sioInflight bounds the bytes handed to Socket.IO and not yet written to
// the client's transport. The library buffers what is emitted without
// bound; without this a client that stops reading would hold every event
// in memory, and its subscription's queue (always empty) would never show
// it falling behind.
const sioInflight = 1 << 20

// pump forwards the subscription's events: as session:event, or mapped
// by m to the seed's per-type events (socketio_seed.go). Each packet is
// written to the Engine.IO socket with a callback for when the transport
// has written it; past sioInflight bytes in flight the pump waits, and a
// client whose transport writes nothing for WriteTimeout is a slow
// consumer (as is one whose subscription's queue bound cut it off).
func (conn *sioConn) pump(ctx context.Context, sub *eventlog.Subscription, id string, m *seedproto.Mapper) {
	defer sub.Close()
	w := conn.newWriter(ctx, sub, id)
	defer w.stall.Stop()
	for {
		rec, ok, err := sub.TryNext(ctx)
		if err == nil && !ok {
			// Caught up: what the per-type client lacks goes now.
			if m != nil {
				for _, msg := range m.Flush(false) {
					if !w.send(msg.Event, conn.seedData(ctx, id, msg, rec.JSON)) {
						return
					}
				}
			}
			rec, err = sub.Next(ctx)
		}
		if err != nil {
			if errors.Is(err, eventlog.ErrSlowConsumer) {
				conn.cutOff(ctx, id)
			}
			return
		}
		if m == nil {
			if !w.send("session:event", rec.JSON) {
				return
			}
			continue
		}
		for _, msg := range m.Map(rec.Event) {
			if !w.send(msg.Event, conn.seedData(ctx, id, msg, rec.JSON)) {
				return
			}
		}
	}
}

// sioWriter writes a pump's packets, bounding what is in flight.
type sioWriter struct {
	conn     *sioConn
	ctx      context.Context
	sub      *eventlog.Subscription
	id       string
	prefix   string
	inflight atomic.Int64
	drained  chan struct{}
	stall    *time.Timer
}

func (conn *sioConn) newWriter(ctx context.Context, sub *eventlog.Subscription, id string) *sioWriter {
	w := &sioWriter{conn: conn, ctx: ctx, sub: sub, id: id, prefix: conn.packetPrefix(), drained: make(chan struct{}, 1), stall: time.NewTimer(time.Hour)}
	w.stall.Stop()
	return w
}

// send writes event name with data (JSON) as its argument. It returns
// false when the pump must end: ctx ended, or the client was cut off.
func (w *sioWriter) send(name string, data []byte) bool {
	n := int64(len(data))
	w.inflight.Add(n)
	// The argument is JSON already: the Socket.IO packet is built around
	// it instead of re-encoding it through Emit.
	w.conn.c.Conn().Write(types.NewStringBufferString(w.prefix+strconvQuote(name)+","+string(data)+"]"), nil, func(transports.Transport) {
		w.inflight.Add(-n)
		select {
		case w.drained <- struct{}{}:
		default:
		}
	})
	if w.inflight.Load() <= sioInflight {
		return true
	}
	w.stall.Reset(w.conn.x.s.cfg.WriteTimeout)
	defer w.stall.Stop()
	for w.inflight.Load() > sioInflight {
		select {
		case <-w.ctx.Done():
			return false
		case <-w.drained:
			w.stall.Reset(w.conn.x.s.cfg.WriteTimeout) // progress
		case <-w.stall.C:
			w.sub.FellBehind() // counts it
			w.conn.cutOff(w.ctx, w.id)
			return false
		}
	}
	return true
}

// packetPrefix starts a Socket.IO EVENT packet of this socket's namespace.
func (conn *sioConn) packetPrefix() string {
	if nsp := conn.c.Nsp().Name(); nsp != "/" {
		return "2" + nsp + ",["
	}
	return "2["
}

// cutOff tells a slow consumer why it is cut off (session:error, and the
// connection-level error {message, code, sessionId} the seed's clients
// listen to; they get CloseTimeout to reach its transport: best effort, as
// the WebSocket's close code 4008) and disconnects it; it reconnects and
// joins with its last seq.
func (conn *sioConn) cutOff(ctx context.Context, id string) {
	s := conn.x.s
	const msg = "subscriber fell behind; reconnect and join with your last seq"
	body, _ := json.Marshal(map[string]string{"code": CodeSlowConsumer, "sessionId": id, "error": msg})
	errBody, _ := json.Marshal(seedproto.Error{Message: msg, Code: CodeSlowConsumer, SessionID: id})
	written := make(chan struct{})
	var once sync.Once
	conn.c.Conn().Write(types.NewStringBufferString(conn.packetPrefix()+`"session:error",`+string(body)+"]"), nil, nil)
	conn.c.Conn().Write(types.NewStringBufferString(conn.packetPrefix()+`"error",`+string(errBody)+"]"), nil,
		func(transports.Transport) { once.Do(func() { close(written) }) })
	t := time.NewTimer(s.cfg.CloseTimeout)
	defer t.Stop()
	select {
	case <-written:
	case <-t.C:
	case <-ctx.Done():
	}
	conn.c.Disconnect(true)
}
