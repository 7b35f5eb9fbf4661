package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/coder/websocket"

	"github.com/agentd/agentd/conversation"
	"github.com/agentd/agentd/restapi"
)

// ConnState is a Stream's connection state.
type ConnState string

const (
	Connecting   ConnState = "connecting"
	Connected    ConnState = "connected"
	Reconnecting ConnState = "reconnecting"
	Closed       ConnState = "closed"
)

// Stream follows one session's events over the WebSocket. It reconnects by
// itself (backoff from 100 ms to 5 s) and re-joins after the last seq it
// delivered, so Next returns every event exactly once, in order. Next is
// not safe for concurrent use; State and Close are.
type Stream struct {
	c       *Client
	session string
	last    int64

	mu    sync.Mutex
	state ConnState
	conn  *websocket.Conn
	// Reconnects counts connections after the first.
	reconnects int
	onState    func(ConnState)
	closed     bool

	ctx    context.Context
	cancel context.CancelFunc
}

// StreamOption configures a Stream.
type StreamOption func(*Stream)

// OnState is called on every connection state change.
func OnState(f func(ConnState)) StreamOption { return func(s *Stream) { s.onState = f } }

// Stream opens a stream of session id's events with seq > after.
func (c *Client) Stream(ctx context.Context, id string, after int64, opts ...StreamOption) *Stream {
	sctx, cancel := context.WithCancel(ctx)
	s := &Stream{c: c, session: id, last: after, state: Connecting, ctx: sctx, cancel: cancel}
	for _, o := range opts {
		o(s)
	}
	return s
}

// Last is the seq of the last event Next returned.
func (s *Stream) Last() int64 { return s.last }

// State returns the connection state.
func (s *Stream) State() ConnState {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.state
}

// Reconnects returns how many times the stream reconnected.
func (s *Stream) Reconnects() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.reconnects
}

func (s *Stream) setState(st ConnState) {
	s.mu.Lock()
	changed := s.state != st
	s.state = st
	cb := s.onState
	s.mu.Unlock()
	if changed && cb != nil {
		cb(st)
	}
}

// Close ends the stream.
func (s *Stream) Close() {
	s.mu.Lock()
	s.closed = true
	conn := s.conn
	s.mu.Unlock()
	s.cancel()
	if conn != nil {
		conn.CloseNow()
	}
	s.setState(Closed)
}

// Drop closes the current connection as if the network failed (for tests of
// the resume path); the stream reconnects.
func (s *Stream) Drop() {
	s.mu.Lock()
	conn := s.conn
	s.mu.Unlock()
	if conn != nil {
		conn.CloseNow()
	}
}

// ErrStreamClosed is returned by Next after Close.
var ErrStreamClosed = errors.New("client: stream closed")

// Next returns the next event, reconnecting as needed. It fails only when
// ctx ends, the stream is closed, or the server rejects the join (e.g. the
// session does not exist).
func (s *Stream) Next(ctx context.Context) (conversation.Event, error) {
	backoff := 100 * time.Millisecond
	for {
		s.mu.Lock()
		conn, closed := s.conn, s.closed
		s.mu.Unlock()
		if closed {
			return conversation.Event{}, ErrStreamClosed
		}
		if conn == nil {
			c, err := s.connect(ctx)
			if err != nil {
				var perm *Error
				if errors.As(err, &perm) && perm.Code != "UNAVAILABLE" {
					return conversation.Event{}, err
				}
				if ctx.Err() != nil {
					return conversation.Event{}, ctx.Err()
				}
				if s.ctx.Err() != nil {
					return conversation.Event{}, ErrStreamClosed
				}
				s.setState(Reconnecting)
				select {
				case <-time.After(backoff):
				case <-ctx.Done():
					return conversation.Event{}, ctx.Err()
				case <-s.ctx.Done():
					return conversation.Event{}, ErrStreamClosed
				}
				backoff = min(backoff*2, 5*time.Second)
				continue
			}
			backoff = 100 * time.Millisecond
			conn = c
		}
		_, data, err := conn.Read(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return conversation.Event{}, ctx.Err()
			}
			s.mu.Lock()
			if s.conn == conn {
				s.conn = nil
			}
			s.mu.Unlock()
			conn.CloseNow()
			s.setState(Reconnecting)
			continue
		}
		var f restapi.ServerFrame
		if json.Unmarshal(data, &f) != nil {
			continue
		}
		if f.Op != "event" || f.Event == nil {
			continue
		}
		if f.Event.Seq <= s.last {
			continue // never deliver twice
		}
		s.last = f.Event.Seq
		return *f.Event, nil
	}
}

// connect dials, joins after s.last and waits for the ack.
func (s *Stream) connect(ctx context.Context) (*websocket.Conn, error) {
	u := *s.c.base
	u.Scheme = strings.Replace(u.Scheme, "http", "ws", 1)
	u.Path = s.c.base.Path + "/api/ws"
	h := http.Header{}
	s.c.auth(h)
	dctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	conn, resp, err := websocket.Dial(dctx, u.String(), &websocket.DialOptions{HTTPHeader: h, HTTPClient: s.c.http})
	if err != nil {
		if resp != nil && resp.StatusCode == http.StatusUnauthorized {
			return nil, &Error{Status: 401, Code: "UNAUTHORIZED", Message: "unauthorized"}
		}
		return nil, err
	}
	conn.SetReadLimit(64 << 20)
	after := s.last
	join, _ := json.Marshal(restapi.ClientFrame{Op: "join", SessionID: s.session, After: &after, ID: json.RawMessage(`"join"`)})
	if err := conn.Write(dctx, websocket.MessageText, join); err != nil {
		conn.CloseNow()
		return nil, err
	}
	for {
		_, data, err := conn.Read(dctx)
		if err != nil {
			conn.CloseNow()
			return nil, err
		}
		var f restapi.ServerFrame
		if json.Unmarshal(data, &f) != nil || f.Op != "ack" {
			continue
		}
		if !f.OK {
			conn.CloseNow()
			if f.Error != nil {
				return nil, &Error{Status: 0, Code: f.Error.Code, Message: f.Error.Error}
			}
			return nil, fmt.Errorf("client: join refused")
		}
		break
	}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		conn.CloseNow()
		return nil, ErrStreamClosed
	}
	first := s.state == Connecting
	s.conn = conn
	if !first {
		s.reconnects++
	}
	s.mu.Unlock()
	s.setState(Connected)
	return conn, nil
}
