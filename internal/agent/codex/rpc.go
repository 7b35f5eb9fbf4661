package codex

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"

	"github.com/agentd/agentd/internal/agent/agentproc"
)

// wireMessage is one JSON-RPC message of the app-server protocol, which
// omits the "jsonrpc" member: a request has method and id, a notification
// method only, a response id with result or error.
type wireMessage struct {
	ID     json.RawMessage `json:"id,omitempty"`
	Method string          `json:"method,omitempty"`
	Params json.RawMessage `json:"params,omitempty"`
	Result json.RawMessage `json:"result,omitempty"`
	Error  *wireError      `json:"error,omitempty"`
}

type wireError struct {
	Code    int             `json:"code"`
	Message string          `json:"message"`
	Data    json.RawMessage `json:"data,omitempty"`
}

func (e *wireError) Error() string { return fmt.Sprintf("%s (code %d)", e.Message, e.Code) }

// msgKind classifies a message.
type msgKind int

const (
	kindInvalid msgKind = iota
	kindRequest
	kindNotification
	kindResponse
)

func (m *wireMessage) hasID() bool {
	id := bytes.TrimSpace(m.ID)
	return len(id) > 0 && !bytes.Equal(id, []byte("null"))
}

// ParseMessage decodes one line of app-server output and says what it is.
// A line that is not a JSON object, or is neither request, notification
// nor response, is an error.
func parseMessage(line []byte) (wireMessage, msgKind, error) {
	var m wireMessage
	if err := json.Unmarshal(line, &m); err != nil {
		return m, kindInvalid, fmt.Errorf("codex app-server: not a JSON-RPC message: %w", err)
	}
	switch {
	case m.Method != "" && m.hasID():
		return m, kindRequest, nil
	case m.Method != "":
		return m, kindNotification, nil
	case m.hasID() && (m.Result != nil || m.Error != nil):
		return m, kindResponse, nil
	}
	return m, kindInvalid, errors.New("codex app-server: message is neither request, notification nor response")
}

// rpcHandler receives what the peer sends. The client calls it from its
// read loop, one message at a time; a handler that blocks holds up the
// reading of later lines (back-pressure), so it must not wait for a
// response from the peer.
type rpcHandler interface {
	notification(line []byte, m *wireMessage)
	request(line []byte, m *wireMessage)
	invalid(line []byte, err error)
}

// rpcClient is a JSON-RPC client over an agent process's stdio. Call,
// Notify and Respond are safe for concurrent use.
type rpcClient struct {
	proc    *agentproc.Proc
	handler rpcHandler
	next    atomic.Int64

	mu      sync.Mutex // guards pending and closed
	pending map[string]chan wireMessage
	closed  bool

	done chan struct{} // closed when the read loop ended (process output over)
}

// errClosed: the process ended before answering.
var errClosed = errors.New("codex app-server: process ended")

func newRPCClient(proc *agentproc.Proc, h rpcHandler) *rpcClient {
	c := &rpcClient{proc: proc, handler: h, pending: map[string]chan wireMessage{}, done: make(chan struct{})}
	go c.readLoop()
	return c
}

func (c *rpcClient) readLoop() {
	defer close(c.done)
	defer func() {
		c.mu.Lock()
		c.closed = true
		for id, ch := range c.pending {
			close(ch)
			delete(c.pending, id)
		}
		c.mu.Unlock()
	}()
	for l := range c.proc.Lines() {
		line := l.Data
		if l.Truncated {
			c.handler.invalid(line, fmt.Errorf("codex app-server: line longer than %d bytes", agentproc.MaxLine))
			continue
		}
		if len(bytes.TrimSpace(line)) == 0 {
			continue
		}
		m, kind, err := parseMessage(line)
		switch kind {
		case kindInvalid:
			c.handler.invalid(line, err)
		case kindRequest:
			c.handler.request(line, &m)
		case kindNotification:
			c.handler.notification(line, &m)
		case kindResponse:
			key := string(bytes.TrimSpace(m.ID))
			c.mu.Lock()
			ch := c.pending[key]
			delete(c.pending, key)
			c.mu.Unlock()
			if ch != nil {
				ch <- m
			}
		}
	}
}

// Done is closed when the process's output ended.
func (c *rpcClient) Done() <-chan struct{} { return c.done }

// Call sends a request and decodes the result into out (when non-nil). It
// returns errClosed when the process ends first, a *wireError for an error
// response, or ctx's error.
func (c *rpcClient) Call(ctx context.Context, method string, params, out any) error {
	id := c.next.Add(1)
	key := strconv.FormatInt(id, 10)
	ch := make(chan wireMessage, 1)
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return errClosed
	}
	c.pending[key] = ch
	c.mu.Unlock()
	if err := c.proc.WriteJSON(map[string]any{"id": id, "method": method, "params": params}); err != nil {
		c.forget(key)
		return fmt.Errorf("codex app-server: send %s: %w", method, err)
	}
	select {
	case m, ok := <-ch:
		if !ok {
			return errClosed
		}
		if m.Error != nil {
			return fmt.Errorf("codex app-server: %s: %w", method, m.Error)
		}
		if out != nil && len(m.Result) > 0 {
			if err := json.Unmarshal(m.Result, out); err != nil {
				return fmt.Errorf("codex app-server: %s result: %w", method, err)
			}
		}
		return nil
	case <-ctx.Done():
		c.forget(key)
		return ctx.Err()
	}
}

func (c *rpcClient) forget(key string) {
	c.mu.Lock()
	delete(c.pending, key)
	c.mu.Unlock()
}

// Notify sends a notification.
func (c *rpcClient) Notify(method string, params any) error {
	m := map[string]any{"method": method}
	if params != nil {
		m["params"] = params
	}
	return c.proc.WriteJSON(m)
}

// Respond answers a request of the peer with a result, or with err (a
// *wireError keeps its code; others become -32000).
func (c *rpcClient) Respond(id json.RawMessage, result any, err error) error {
	m := map[string]any{"id": id}
	if err != nil {
		var we *wireError
		if !errors.As(err, &we) {
			we = &wireError{Code: -32000, Message: err.Error()}
		}
		m["error"] = we
	} else {
		m["result"] = result
	}
	return c.proc.WriteJSON(m)
}
