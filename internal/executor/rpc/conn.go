package rpc

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"runtime/debug"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/agentd/agentd/sandbox"
)

// ErrClosed is returned by calls on a connection that has closed.
var ErrClosed = errors.New("executor: connection closed")

// Handler serves what a peer sends on a Conn.
type Handler interface {
	// HandleCall answers a request. Each call runs on its own goroutine
	// (at most ConnOptions.MaxInflight at once); ctx ends when the
	// connection closes. Return an *Error to answer with a specific code;
	// any other error answers CodeInternal.
	HandleCall(ctx context.Context, c *Conn, req *Request) (any, error)
	// HandleNotify handles a notification on the connection's reader
	// goroutine, in arrival order. It must not block or call c.Close.
	HandleNotify(c *Conn, method string, params json.RawMessage)
}

// OutputHandler is an optional Handler ability: exec.output notifications
// in their canonical shape are handed over decoded, skipping the generic
// JSON pass. Same rules as HandleNotify; p.Data is owned by the callee.
type OutputHandler interface {
	HandleOutput(c *Conn, p ExecOutputParams)
}

// Request is an incoming request.
type Request struct {
	Method string
	Params json.RawMessage
	after  []func()
}

// Decode unmarshals the params into v; failures are CodeInvalidParams.
func (r *Request) Decode(v any) error {
	if len(r.Params) == 0 || firstByte(r.Params) != '{' {
		return Errorf(CodeInvalidParams, "%s: params must be an object", r.Method)
	}
	if err := json.Unmarshal(r.Params, v); err != nil {
		return Errorf(CodeInvalidParams, "%s: %v", r.Method, err)
	}
	return nil
}

// AfterReply registers f to run once the reply has been queued for
// writing (or could not be, the connection closing), so that what f sends
// follows the reply on the wire.
func (r *Request) AfterReply(f func()) { r.after = append(r.after, f) }

// ConnOptions tune a Conn. Zero values pick the defaults.
type ConnOptions struct {
	// MaxLine bounds one incoming message; longer lines are discarded and
	// answered with CodeTooLarge. Default DefaultMaxLine.
	MaxLine int
	// MaxInflight bounds the requests handled at once; the reader waits
	// for a free slot (backpressure). Default 64.
	MaxInflight int
	Logger      *slog.Logger
	// OnCall, when set, is called after each outgoing Call returns.
	OnCall func(method string, paramsSize int, err error, dur time.Duration)
	// AcceptBinary makes the reader take binary output frames (see
	// MethodConnOptions). Only the server side, which asked for them,
	// sets it. A frame over MaxLine ends the connection (it cannot be
	// skipped safely).
	AcceptBinary bool
}

// Conn is one end of a symmetric JSON-RPC 2.0 connection, one message per
// line: either end may send requests and notifications. All methods are
// safe for concurrent use. Writes go through one writer goroutine, so no
// caller writes to the network itself and messages leave in the order
// they were queued.
type Conn struct {
	rw   io.ReadWriteCloser
	h    Handler
	opts ConnOptions
	log  *slog.Logger

	sendq   chan outLine
	closing chan struct{} // closed when the connection starts closing
	done    chan struct{} // closed when reader and writer have stopped
	ctx     context.Context
	cancel  context.CancelFunc
	sem     chan struct{}

	closeOnce sync.Once
	nextID    atomic.Int64
	binaryOut atomic.Bool
	handlers  sync.WaitGroup

	mu      sync.Mutex
	pending map[int64]chan message
	err     error
}

type outLine struct {
	b    []byte
	pool *[]byte // returned to linePool once written
}

var linePool sync.Pool

// NewConn starts serving rw with h. The connection runs until Close, a
// read or write error, or the peer closing.
func NewConn(rw io.ReadWriteCloser, h Handler, opts ConnOptions) *Conn {
	if opts.MaxLine <= 0 {
		opts.MaxLine = DefaultMaxLine
	}
	if opts.MaxInflight <= 0 {
		opts.MaxInflight = 64
	}
	log := opts.Logger
	if log == nil {
		log = slog.Default()
	}
	ctx, cancel := context.WithCancel(context.Background())
	c := &Conn{
		rw: rw, h: h, opts: opts, log: log,
		sendq:   make(chan outLine, 64),
		closing: make(chan struct{}),
		done:    make(chan struct{}),
		ctx:     ctx, cancel: cancel,
		sem:     make(chan struct{}, opts.MaxInflight),
		pending: map[int64]chan message{},
	}
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); c.readLoop() }()
	go func() { defer wg.Done(); c.writeLoop() }()
	go func() { wg.Wait(); close(c.done) }()
	return c
}

// Done is closed once the connection has stopped reading and writing.
func (c *Conn) Done() <-chan struct{} { return c.done }

// Context returns a context that ends when the connection starts closing
// (the one HandleCall gets), before Done.
func (c *Conn) Context() context.Context { return c.ctx }

// MaxLine is the largest message, in bytes, this end accepts
// (ConnOptions.MaxLine or its default).
func (c *Conn) MaxLine() int { return c.opts.MaxLine }

// Err reports why the connection ended (nil while it runs, io.EOF when the
// peer closed it).
func (c *Conn) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

// Close closes the connection after writing what is already queued (for
// at most two seconds), and waits for the reader and writer to stop. It
// does not wait for running handlers (see Wait). Not to be called from
// HandleNotify.
func (c *Conn) Close() error {
	c.shutdown(ErrClosed)
	<-c.done
	return nil
}

// Wait waits until the connection ended and every handler returned.
func (c *Conn) Wait() {
	<-c.done
	c.handlers.Wait()
}

func (c *Conn) shutdown(err error) {
	c.closeOnce.Do(func() {
		c.mu.Lock()
		c.err = err
		c.mu.Unlock()
		close(c.closing)
		c.cancel()
	})
}

// Call sends a request and waits for its answer, decoding the result into
// result (when not nil). An error answer is returned as *Error.
func (c *Conn) Call(ctx context.Context, method string, params, result any) (err error) {
	start := time.Now()
	id := c.nextID.Add(1)
	line, err := appendRequest(nil, strconv.AppendInt(nil, id, 10), method, params)
	if err != nil {
		return fmt.Errorf("encode %s: %w", method, err)
	}
	if c.opts.OnCall != nil {
		defer func() { c.opts.OnCall(method, len(line), err, time.Since(start)) }()
	}
	ch := make(chan message, 1)
	c.mu.Lock()
	c.pending[id] = ch
	c.mu.Unlock()
	defer func() {
		c.mu.Lock()
		delete(c.pending, id)
		c.mu.Unlock()
	}()
	if err := c.send(outLine{b: line}); err != nil {
		return err
	}
	select {
	case m := <-ch:
		if m.err != nil {
			return m.err
		}
		if result != nil {
			if err := json.Unmarshal(m.result, result); err != nil {
				return fmt.Errorf("decode %s result: %w", method, err)
			}
		}
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-c.closing:
		return c.closedErr()
	}
}

// Notify sends a notification.
func (c *Conn) Notify(method string, params any) error {
	line, err := appendRequest(nil, nil, method, params)
	if err != nil {
		return fmt.Errorf("encode %s: %w", method, err)
	}
	return c.send(outLine{b: line})
}

// SetBinaryOutput switches NotifyOutput to binary frames (for a peer that
// asked for them) or back to JSON lines.
func (c *Conn) SetBinaryOutput(on bool) { c.binaryOut.Store(on) }

// NotifyOutput sends an exec.output notification in the canonical shape
// (a JSON line, or a binary frame after SetBinaryOutput). data is copied;
// the caller may reuse it.
func (c *Conn) NotifyOutput(tag string, stream sandbox.Stream, offset int64, data []byte) error {
	bp, _ := linePool.Get().(*[]byte)
	if bp == nil {
		bp = new([]byte)
	}
	if c.binaryOut.Load() {
		*bp = appendOutputFrame((*bp)[:0], tag, stream, offset, data)
	} else {
		*bp = appendOutput((*bp)[:0], tag, stream, offset, data)
	}
	return c.send(outLine{b: *bp, pool: bp})
}

func (c *Conn) closedErr() error {
	if err := c.Err(); err != nil && !errors.Is(err, ErrClosed) {
		return fmt.Errorf("%w: %v", ErrClosed, err)
	}
	return ErrClosed
}

func (c *Conn) send(l outLine) error {
	select {
	case <-c.closing:
		return c.closedErr()
	default:
	}
	select {
	case c.sendq <- l:
		return nil
	case <-c.closing:
		return c.closedErr()
	}
}

func (c *Conn) writeLoop() {
	bw := bufio.NewWriterSize(c.rw, 64<<10)
	write := func(l outLine) error {
		_, err := bw.Write(l.b)
		if l.pool != nil && cap(l.b) <= 1<<20 {
			*l.pool = l.b
			linePool.Put(l.pool)
		}
		return err
	}
	defer c.rw.Close()
	for {
		select {
		case l := <-c.sendq:
			err := write(l)
			if err == nil && len(c.sendq) == 0 {
				err = bw.Flush()
			}
			if err != nil {
				c.shutdown(fmt.Errorf("write: %w", err))
				return
			}
		case <-c.closing:
			// Write what was queued before closing (e.g. the reply to
			// shutdown), bounded in time when the peer stops reading.
			if d, ok := c.rw.(interface{ SetWriteDeadline(time.Time) error }); ok {
				_ = d.SetWriteDeadline(time.Now().Add(2 * time.Second))
			}
			for {
				select {
				case l := <-c.sendq:
					if write(l) != nil {
						return
					}
				default:
					_ = bw.Flush()
					return
				}
			}
		}
	}
}

func (c *Conn) readLoop() {
	lr := newLineReader(c.rw, c.opts.MaxLine)
	for {
		line, err := lr.next()
		switch {
		case errors.Is(err, errLineTooLong):
			c.log.Warn("executor rpc: message over the limit discarded", "limit", c.opts.MaxLine)
			c.replyError(nullID, Errorf(CodeTooLarge, "message too large (limit %d bytes)", c.opts.MaxLine))
			continue
		case err != nil:
			if errors.Is(err, io.EOF) {
				c.shutdown(io.EOF)
			} else {
				c.shutdown(fmt.Errorf("read: %w", err))
			}
			return
		}
		if len(line) == 0 || len(line) == 1 && line[0] == '\r' {
			continue // blank lines are keep-alives
		}
		if c.opts.AcceptBinary && bytes.HasPrefix(line, []byte(outputPrefix)) {
			if p, size, ok := parseOutputFrame(line); ok {
				if size > int64(c.opts.MaxLine) {
					c.shutdown(fmt.Errorf("binary output frame of %d bytes over the limit %d", size, c.opts.MaxLine))
					return
				}
				data, err := lr.readN(int(size))
				if err != nil {
					c.shutdown(fmt.Errorf("read output frame: %w", err))
					return
				}
				p.Data = data
				c.deliverOutput(p)
				continue
			}
		}
		if !c.handleLine(line) {
			return
		}
	}
}

// handleLine dispatches one line; false means the connection is closing.
func (c *Conn) handleLine(line []byte) bool {
	if _, ok := c.h.(OutputHandler); ok && bytes.HasPrefix(line, []byte(outputPrefix)) {
		if p, ok := parseOutput(line); ok {
			c.deliverOutput(p)
			return true
		}
	}
	m, id, perr := decodeMessage(line)
	if perr != nil {
		if m.kind == kindResponse {
			c.log.Warn("executor rpc: invalid response dropped", "err", perr.Message)
			return true
		}
		c.replyError(id, perr)
		return true
	}
	switch m.kind {
	case kindResponse:
		c.deliver(m)
	case kindNotification:
		c.safely(m.method, func() { c.h.HandleNotify(c, m.method, m.params) })
	case kindRequest:
		select {
		case c.sem <- struct{}{}:
		case <-c.closing:
			return false
		}
		c.handlers.Add(1)
		go c.serve(m)
	}
	return true
}

// deliverOutput hands decoded output to the handler.
func (c *Conn) deliverOutput(p ExecOutputParams) {
	if oh, ok := c.h.(OutputHandler); ok {
		c.safely(MethodExecOutput, func() { oh.HandleOutput(c, p) })
		return
	}
	params, err := json.Marshal(p)
	if err != nil {
		return
	}
	c.safely(MethodExecOutput, func() { c.h.HandleNotify(c, MethodExecOutput, params) })
}

// safely runs a notification handler, turning a panic into a log line.
func (c *Conn) safely(method string, f func()) {
	defer func() {
		if r := recover(); r != nil {
			c.log.Error("executor rpc: notification handler panicked", "method", method, "panic", r, "stack", string(debug.Stack()))
		}
	}()
	f()
}

func (c *Conn) serve(m message) {
	defer func() {
		<-c.sem
		c.handlers.Done()
	}()
	req := &Request{Method: m.method, Params: m.params}
	res, err := c.callHandler(req)
	var line []byte
	if err == nil {
		var b []byte
		if b, err = json.Marshal(res); err == nil {
			if len(b)+len(m.id)+40 > c.opts.MaxLine {
				err = Errorf(CodeTooLarge, "%s: result of %d bytes over the message limit", m.method, len(b))
			} else {
				line = appendResult(nil, m.id, b)
			}
		}
	}
	if err != nil {
		var pe *Error
		if !errors.As(err, &pe) {
			pe = &Error{Code: CodeInternal, Message: err.Error()}
		}
		line = appendError(nil, m.id, pe)
	}
	_ = c.send(outLine{b: line}) // fails only when closing
	for _, f := range req.after {
		f()
	}
}

func (c *Conn) callHandler(req *Request) (res any, err error) {
	defer func() {
		if r := recover(); r != nil {
			c.log.Error("executor rpc: handler panicked", "method", req.Method, "panic", r, "stack", string(debug.Stack()))
			res, err = nil, Errorf(CodeInternal, "%s: internal error", req.Method)
		}
	}()
	return c.h.HandleCall(c.ctx, c, req)
}

func (c *Conn) replyError(id json.RawMessage, e *Error) {
	_ = c.send(outLine{b: appendError(nil, id, e)})
}

func (c *Conn) deliver(m message) {
	id, err := strconv.ParseInt(string(m.id), 10, 64)
	if err != nil {
		if m.err != nil {
			c.log.Warn("executor rpc: peer reported an error", "code", m.err.Code, "err", m.err.Message)
		} else {
			c.log.Warn("executor rpc: response with an unknown id dropped", "id", string(m.id))
		}
		return
	}
	c.mu.Lock()
	ch, ok := c.pending[id]
	delete(c.pending, id)
	c.mu.Unlock()
	if !ok {
		c.log.Warn("executor rpc: response with an unknown id dropped", "id", id)
		return
	}
	ch <- m
}
