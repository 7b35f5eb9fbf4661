package api

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"sync"
	"time"

	"github.com/coder/websocket"

	"github.com/agentd/agentd/internal/eventlog"
	"github.com/agentd/agentd/restapi"
)

// CloseSlowConsumer is the WebSocket close code for a client that cannot
// keep up; it should reconnect and join with its last seq.
const CloseSlowConsumer websocket.StatusCode = 4008

const (
	wsWriteTimeout = 10 * time.Second
	wsReadLimit    = 64 << 10
)

// wsConn is one /api/ws connection. Writes may come from any goroutine
// (the websocket library serialises them); joins is guarded by mu.
type wsConn struct {
	s      *Server
	c      *websocket.Conn
	bc     *batchConn // under c: bursts of frames share one write
	ctx    context.Context
	cancel context.CancelFunc

	mu    sync.Mutex
	joins map[string]context.CancelFunc
	wg    sync.WaitGroup
}

type clientFrame struct {
	Op        string          `json:"op"`
	SessionID string          `json:"sessionId"`
	After     json.RawMessage `json:"after"`
	ID        json.RawMessage `json:"id,omitempty"`
}

type ackFrame struct {
	Op    string          `json:"op"`
	ID    json.RawMessage `json:"id,omitempty"`
	OK    bool            `json:"ok"`
	Error *apiError       `json:"error,omitempty"`
	// LastSeq is the session's last seq at join time (informational).
	LastSeq *int64 `json:"lastSeq,omitempty"`
}

type errorFrame struct {
	Op    string          `json:"op"`
	ID    json.RawMessage `json:"id,omitempty"`
	Error apiError        `json:"error"`
}

func (s *Server) handleWS(w http.ResponseWriter, r *http.Request) {
	bw := &batchingWriter{ResponseWriter: w}
	c, err := websocket.Accept(bw, r, nil)
	if err != nil {
		return // Accept wrote the HTTP error
	}
	c.SetReadLimit(wsReadLimit)
	ctx, cancel := context.WithCancel(context.Background())
	conn := &wsConn{s: s, c: c, bc: bw.conn, ctx: ctx, cancel: cancel, joins: make(map[string]context.CancelFunc)}
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
	defer func() {
		s.mu.Lock()
		delete(s.conns, conn)
		s.mu.Unlock()
		s.wsGauge.Dec()
		s.connWG.Done()
	}()
	conn.readLoop(Principal(r.Context()))
	cancel()
	conn.wg.Wait()
	c.CloseNow()
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
		default:
			w.sendError(f.ID, CodeUnknownOp, "unknown op "+strconvQuote(f.Op)+" (join, leave, ping)")
		}
	}
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
		w.startPump("*", func(ctx context.Context) { w.pumpSessions(ctx) })
		w.ack(f.ID, nil, nil)
		return
	}
	if _, err := w.s.cfg.Sessions.Get(f.SessionID); err != nil {
		w.ack(f.ID, &apiError{Code: CodeSessionNotFound, Error: err.Error()}, nil)
		return
	}
	sub, err := w.s.cfg.Log.Subscribe(w.ctx, f.SessionID, after)
	if err != nil {
		status, code := classify(err)
		_ = status
		w.ack(f.ID, &apiError{Code: code, Error: err.Error()}, nil)
		return
	}
	last, _ := w.s.cfg.Log.LastSeq(w.ctx, f.SessionID)
	// Ack before the pump starts: the client sees the ack before any event.
	w.ack(f.ID, nil, &last)
	w.startPump(f.SessionID, func(ctx context.Context) { w.pumpEvents(ctx, sub) })
}

func (w *wsConn) startPump(key string, run func(context.Context)) {
	ctx, cancel := context.WithCancel(w.ctx)
	w.mu.Lock()
	if old, ok := w.joins[key]; ok {
		old() // a re-join replaces the previous one
	}
	w.joins[key] = cancel
	w.mu.Unlock()
	w.wg.Add(1)
	go func() {
		defer w.wg.Done()
		run(ctx)
	}()
}

func (w *wsConn) leave(f clientFrame) {
	w.mu.Lock()
	cancel, ok := w.joins[f.SessionID]
	delete(w.joins, f.SessionID)
	w.mu.Unlock()
	if !ok {
		w.ack(f.ID, &apiError{Code: CodeBadRequest, Error: "not joined to " + strconvQuote(f.SessionID)}, nil)
		return
	}
	cancel()
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
		// Write what is ready as one burst: one flush and one deadline for
		// all of it, not one per event.
		w.bc.begin(wsWriteTimeout)
		var werr error
		for n := 0; ; n++ {
			buf = append(append(append(buf[:0], eventPrefix...), rec.JSON...), '}')
			// No per-write context: the burst's deadline is on the connection.
			if werr = w.c.Write(context.Background(), websocket.MessageText, buf); werr != nil || n+1 >= maxBurst {
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
		// What comes during the pause goes out with the next write.
		if !pacer.pause(ctx, w.s.flushInterval) {
			return
		}
	}
}

func (w *wsConn) subscriptionEnded(err error) {
	switch {
	case errors.Is(err, eventlog.ErrSlowConsumer):
		w.c.Close(CloseSlowConsumer, "slow consumer: reconnect and join with your last seq")
		w.cancel()
	case errors.Is(err, eventlog.ErrSessionDeleted):
		w.sendError(nil, CodeSessionNotFound, "session deleted")
	case errors.Is(err, eventlog.ErrClosed):
		w.closeGoingAway()
	}
}

func (w *wsConn) pumpSessions(ctx context.Context) {
	for _, sum := range w.s.cfg.Sessions.List(ctx) {
		if w.send(sessionFrame{Op: "sessions", Session: restapi.SessionSummary(sum)}) != nil {
			return
		}
	}
	ch := w.s.cfg.Sessions.WatchSessions(ctx)
	for sum := range ch {
		if w.send(sessionFrame{Op: "sessions", Session: restapi.SessionSummary(sum)}) != nil {
			return
		}
	}
	if ctx.Err() == nil {
		// The watcher fell behind: the client re-lists after a reconnect.
		w.c.Close(CloseSlowConsumer, "slow consumer: reconnect and re-list sessions")
		w.cancel()
	}
}

type sessionFrame struct {
	Op      string                 `json:"op"`
	Session restapi.SessionSummary `json:"session"`
}

func (w *wsConn) write(b []byte) error {
	ctx, cancel := context.WithTimeout(w.ctx, wsWriteTimeout)
	defer cancel()
	return w.c.Write(ctx, websocket.MessageText, b)
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
