package api

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"sync"
	"time"

	"github.com/coder/websocket"

	"github.com/agentd/agentd/internal/auth"
	"github.com/agentd/agentd/internal/eventlog"
	"github.com/agentd/agentd/restapi"
)

// CloseSlowConsumer is the WebSocket close code for a client that cannot
// keep up; it should reconnect and join with its last seq.
const CloseSlowConsumer websocket.StatusCode = 4008

const wsReadLimit = 64 << 10

// wsConn is one /api/ws connection. Writes may come from any goroutine
// (the websocket library serialises them); joins is guarded by mu.
//
// A client that falls behind (a subscription's queue bound) or stops
// reading (a socket write blocked for WriteTimeout) is cut off by the
// handler's goroutine: pumps stop, then close code 4008 within
// CloseTimeout (cutOff).
type wsConn struct {
	s      *Server
	c      *websocket.Conn
	bc     *batchConn // under c: bursts of frames share one write
	ctx    context.Context
	cancel context.CancelFunc
	// pumps is the pumps' parent context, ended first when the client is
	// cut off (ctx, which the reader uses, lives on for the close
	// handshake).
	pumps     context.Context
	stopPumps context.CancelFunc

	mu    sync.Mutex
	joins map[string]wsJoin
	wg    sync.WaitGroup

	slowOnce sync.Once
	slow     chan struct{} // closed when the client is to be cut off
	slowWhy  string        // written before slow is closed

	who  auth.Principal // the authenticated caller
	live *liveConn      // the connection's credential check (nil without auth), for renew
}

// wsJoin is one joined stream: a session's events (sub) or the session list.
type wsJoin struct {
	cancel context.CancelFunc
	sub    *eventlog.Subscription // nil for "*"
}

type clientFrame struct {
	Op        string          `json:"op"`
	SessionID string          `json:"sessionId"`
	After     json.RawMessage `json:"after"`
	ID        json.RawMessage `json:"id,omitempty"`
	Token     string          `json:"token,omitempty"` // "auth": the refreshed credential (reauth.go)
}

type ackFrame struct {
	Op    string          `json:"op"`
	ID    json.RawMessage `json:"id,omitempty"`
	OK    bool            `json:"ok"`
	Error *apiError       `json:"error,omitempty"`
	// LastSeq is the session's last seq at join time (informational).
	LastSeq *int64 `json:"lastSeq,omitempty"`
	// ExpiresAt is the new credential's expiry ("auth", when it has one).
	ExpiresAt *time.Time `json:"expiresAt,omitempty"`
}

type errorFrame struct {
	Op    string          `json:"op"`
	ID    json.RawMessage `json:"id,omitempty"`
	Error apiError        `json:"error"`
}

func (s *Server) handleWS(w http.ResponseWriter, r *http.Request) {
	if !checkOrigin(w, r) {
		return
	}
	bw := &batchingWriter{ResponseWriter: w, writeTimeout: s.cfg.WriteTimeout, closeTimeout: s.cfg.CloseTimeout}
	c, err := websocket.Accept(bw, r, nil)
	if err != nil {
		return // Accept wrote the HTTP error
	}
	c.SetReadLimit(wsReadLimit)
	ctx, cancel := context.WithCancel(context.Background())
	pumps, stopPumps := context.WithCancel(ctx)
	conn := &wsConn{s: s, c: c, bc: bw.conn, ctx: ctx, cancel: cancel, pumps: pumps, stopPumps: stopPumps,
		joins: make(map[string]wsJoin), slow: make(chan struct{}), who: PrincipalOf(r.Context())}
	bw.conn.guard.notify(func() { conn.cutOffLater("stopped reading", countStuck) })
	s.mu.Lock()
	if s.closing {
		s.mu.Unlock()
		cancel()
		c.Close(websocket.StatusGoingAway, "server shutting down")
		return
	}
	s.conns[conn] = struct{}{}
	s.connWG.Add(1)
	s.mu.Unlock()
	s.wsGauge.Inc()
	live, untrack := s.live.trackConn(r.Context(), func() {
		c.Close(CloseUnauthorized, "credential no longer valid")
		cancel()
	})
	defer untrack()
	conn.live = live
	defer func() {
		s.mu.Lock()
		delete(s.conns, conn)
		s.mu.Unlock()
		s.wsGauge.Dec()
		s.connWG.Done()
	}()
	read := make(chan struct{})
	go func() {
		defer close(read)
		conn.readLoop(Principal(r.Context()))
	}()
	select {
	case <-read:
	case <-conn.slow:
		conn.cutOff()
		<-read
	}
	cancel()
	conn.wg.Wait()
	c.CloseNow()
}

// How a slow consumer is counted in agentd_event_slow_consumers_total.
type slowCount int

const (
	countedByLog slowCount = iota // its subscription's queue bound cut it off
	countStuck                    // its socket write blocked: end its subscriptions as slow
	countOnce                     // a watcher without a subscription fell behind
)

// cutOffLater marks the client as a slow consumer, counts it once, and
// stops its pumps; the handler's goroutine then cuts it off. It never
// blocks (it runs on the stall guard's timer too).
func (w *wsConn) cutOffLater(why string, count slowCount) {
	w.slowOnce.Do(func() {
		var subs []*eventlog.Subscription
		if count == countStuck {
			w.mu.Lock()
			for _, j := range w.joins {
				if j.sub != nil {
					subs = append(subs, j.sub)
				}
			}
			w.mu.Unlock()
			for _, sub := range subs {
				sub.FellBehind()
			}
		}
		if count == countOnce || (count == countStuck && len(subs) == 0) {
			w.s.cfg.Log.CountSlowConsumer()
		}
		w.slowWhy = why
		w.stopPumps()
		close(w.slow)
	})
}

// cutOff ends a slow consumer's connection: the frame in flight and close
// code 4008 get CloseTimeout (best effort: a client that reads nothing
// gets nothing), then the connection closes.
func (w *wsConn) cutOff() {
	w.bc.goodbye()
	w.c.Close(CloseSlowConsumer, "slow consumer ("+w.slowWhy+"): reconnect and join with your last seq")
}

func (w *wsConn) readLoop(actor string) {
	for {
		typ, data, err := w.c.Read(w.ctx)
		if err != nil {
			return
		}
		if typ != websocket.MessageText {
			w.sendError(nil, CodeBadRequest, "frames must be JSON text")
			continue
		}
		var f clientFrame
		if err := json.Unmarshal(data, &f); err != nil {
			w.sendError(nil, CodeBadRequest, "frame is not valid JSON: "+err.Error())
			continue
		}
		switch f.Op {
		case "join":
			w.join(f)
		case "leave":
			w.leave(f)
		case "ping":
			w.send(map[string]any{"op": "pong", "id": f.ID})
		case "auth":
			w.renew(f)
		default:
			w.sendError(f.ID, CodeUnknownOp, "unknown op "+strconvQuote(f.Op)+" (join, leave, ping, auth)")
		}
	}
}

// renew answers {"op":"auth","token"}: from now on the connection is
// checked against the new token (reauth.go), its joins going on.
func (w *wsConn) renew(f clientFrame) {
	ok, exp, e := w.s.renewConn(w.ctx, w.who, w.live, f.Token, "", auth.ScopeSessionsRead, auth.LevelRead)
	if !ok {
		w.ack(f.ID, e, nil)
		return
	}
	_ = w.send(ackFrame{Op: "ack", ID: f.ID, OK: true, ExpiresAt: exp})
}

func (w *wsConn) join(f clientFrame) {
	if f.SessionID == "" {
		w.ack(f.ID, &apiError{Code: CodeBadRequest, Error: "join needs a sessionId"}, nil)
		return
	}
	var after int64
	if len(f.After) > 0 && string(f.After) != "null" {
		if err := json.Unmarshal(f.After, &after); err != nil || after < 0 {
			w.ack(f.ID, &apiError{Code: CodeInvalidCursor, Error: "after must be a non-negative integer"}, nil)
			return
		}
	}
	if f.SessionID == "*" {
		// Ack first, as for a session: a client that waits for the ack
		// must not have skipped the list's first frames meanwhile.
		w.ack(f.ID, nil, nil)
		w.startPump("*", nil, func(ctx context.Context) { w.pumpSessions(ctx) })
		return
	}
	if _, err := w.s.checkSession(w.ctx, w.who, f.SessionID, auth.LevelRead); err != nil {
		_, e := w.s.describe(err, "op", "ws join", "session", f.SessionID)
		w.ack(f.ID, &e, nil)
		return
	}
	sub, err := w.s.cfg.Log.Subscribe(w.ctx, f.SessionID, after)
	if err != nil {
		_, e := w.s.describe(err, "op", "ws join", "session", f.SessionID)
		w.ack(f.ID, &e, nil)
		return
	}
	last, _ := w.s.cfg.Log.LastSeq(w.ctx, f.SessionID)
	// Ack before the pump starts: the client sees the ack before any event.
	w.ack(f.ID, nil, &last)
	w.startPump(f.SessionID, sub, func(ctx context.Context) { w.pumpEvents(ctx, sub) })
}

func (w *wsConn) startPump(key string, sub *eventlog.Subscription, run func(context.Context)) {
	ctx, cancel := context.WithCancel(w.pumps)
	w.mu.Lock()
	if old, ok := w.joins[key]; ok {
		old.cancel() // a re-join replaces the previous one
	}
	w.joins[key] = wsJoin{cancel: cancel, sub: sub}
	w.mu.Unlock()
	w.wg.Add(1)
	go func() {
		defer w.wg.Done()
		run(ctx)
	}()
}

func (w *wsConn) leave(f clientFrame) {
	w.mu.Lock()
	j, ok := w.joins[f.SessionID]
	delete(w.joins, f.SessionID)
	w.mu.Unlock()
	if !ok {
		w.ack(f.ID, &apiError{Code: CodeBadRequest, Error: "not joined to " + strconvQuote(f.SessionID)}, nil)
		return
	}
	j.cancel()
	w.ack(f.ID, nil, nil)
}

var eventPrefix = []byte(`{"op":"event","event":`)

// maxBurst bounds the events written in one burst (one flush).
const maxBurst = 256

func (w *wsConn) pumpEvents(ctx context.Context, sub *eventlog.Subscription) {
	defer sub.Close()
	buf := make([]byte, 0, 1024)
	var pacer pacer
	defer pacer.stop()
	for {
		rec, err := sub.Next(ctx)
		if err != nil {
			w.subscriptionEnded(err)
			return
		}
		// Write what is ready as one burst: one flush for all of it, not
		// one per event.
		w.bc.begin()
		var werr error
		for n := 0; ; n++ {
			buf = append(append(append(buf[:0], eventPrefix...), rec.JSON...), '}')
			// No per-write context: the connection's stall guard bounds writes.
			if werr = w.c.Write(context.Background(), websocket.MessageText, buf); werr != nil || n+1 >= maxBurst || ctx.Err() != nil {
				break
			}
			var ok bool
			rec, ok, err = sub.TryNext(ctx)
			if err != nil || !ok {
				break
			}
		}
		if ferr := w.bc.end(); werr == nil {
			werr = ferr
		}
		if werr != nil {
			w.cancel()
			return
		}
		if err != nil {
			w.subscriptionEnded(err)
			return
		}
		if ctx.Err() != nil {
			return // left, re-joined or cut off
		}
		// What comes during the pause goes out with the next write.
		if !pacer.pause(ctx, w.s.flushInterval) {
			return
		}
	}
}

func (w *wsConn) subscriptionEnded(err error) {
	switch {
	case errors.Is(err, eventlog.ErrSlowConsumer):
		// The queue bound (counted by the log) or FellBehind (counted).
		w.cutOffLater("fell behind", countedByLog)
	case errors.Is(err, eventlog.ErrSessionDeleted):
		w.sendError(nil, CodeSessionNotFound, "session deleted")
	case errors.Is(err, eventlog.ErrClosed):
		w.closeGoingAway()
	}
}

func (w *wsConn) pumpSessions(ctx context.Context) {
	// Only sessions the caller may see; shares are looked up again at most
	// every few seconds, so a new share shows with the session's next change.
	vis := newVisibility(w.s, w.who)
	// Watch before listing: a session created between the two would
	// otherwise never be sent. A change made meanwhile may then come again
	// after the listing, but every change after the watch starts follows
	// in order, so a session's last frame is its current state.
	ch := w.s.cfg.Sessions.WatchSessions(ctx)
	for _, sum := range w.s.cfg.Sessions.List(ctx) {
		if !vis.sees(ctx, sum.Owner, sum.SessionID) {
			continue
		}
		if w.send(sessionFrame{Op: "sessions", Session: sum}) != nil {
			return
		}
	}
	for sum := range ch {
		if !vis.sees(ctx, sum.Owner, sum.SessionID) {
			continue
		}
		if w.send(sessionFrame{Op: "sessions", Session: sum}) != nil {
			return
		}
	}
	if ctx.Err() == nil {
		// The watcher fell behind: the client re-lists after a reconnect.
		w.cutOffLater("session list fell behind", countOnce)
	}
}

type sessionFrame struct {
	Op      string                 `json:"op"`
	Session restapi.SessionSummary `json:"session"`
}

// write sends one frame; the connection's stall guard bounds it.
func (w *wsConn) write(b []byte) error {
	return w.c.Write(w.ctx, websocket.MessageText, b)
}

func (w *wsConn) send(v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return w.write(b)
}

func (w *wsConn) ack(id json.RawMessage, e *apiError, last *int64) {
	_ = w.send(ackFrame{Op: "ack", ID: id, OK: e == nil, Error: e, LastSeq: last})
}

func (w *wsConn) sendError(id json.RawMessage, code, msg string) {
	_ = w.send(errorFrame{Op: "error", ID: id, Error: apiError{Code: code, Error: msg}})
}

func (w *wsConn) closeGoingAway() {
	w.c.Close(websocket.StatusGoingAway, "server shutting down")
	w.cancel()
}

func strconvQuote(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

// pacer spaces a stream's writes at least an interval apart: after a
// write the stream pauses, and events that come meanwhile share the next
// write. A write (and the client's read) costs a system call each,
// whatever it carries: 200 subscribers of a session printing 1,000 lines
// a second made 200,000 of each a second on two cores. An event that
// comes after a pause goes out at once. The pause is one timer wake-up
// per write, in place of the wake-up per event that writing each at once
// costs.
type pacer struct {
	timer *time.Timer
}

// pause sleeps for interval (not at all when it is <= 0). It reports
// false if ctx ended meanwhile.
func (p *pacer) pause(ctx context.Context, interval time.Duration) bool {
	if interval <= 0 {
		return ctx.Err() == nil
	}
	if p.timer == nil {
		p.timer = time.NewTimer(interval)
	} else {
		p.timer.Reset(interval)
	}
	select {
	case <-p.timer.C:
		return true
	case <-ctx.Done():
		return false
	}
}

func (p *pacer) stop() {
	if p.timer != nil {
		p.timer.Stop()
	}
}
