package executor

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"sync"
	"time"
)

// DefaultMaxForwards bounds the connections a Forwarder relays at once.
const DefaultMaxForwards = 256

// Forwarder relays TCP connections accepted on a loopback address to a Unix
// socket: inside a sandbox without network (bubblewrap's own network
// namespace) it is the only way out, to the model proxy whose socket is
// mounted in. Agents are pointed at it with ANTHROPIC_BASE_URL and friends;
// it reads nothing and adds nothing, bytes go through both ways. With
// NewForwarderTo, each connection goes to what a function dials instead
// (a tunnel to the server, in a Kubernetes pod).
//
// Safe for concurrent use; Close stops it and waits for every relay.
type Forwarder struct {
	ln     net.Listener
	dial   func(context.Context) (net.Conn, error)
	what   string          // where connections go, for logs
	ctx    context.Context // ends with Close: cuts dials short
	cancel context.CancelFunc
	log    *slog.Logger
	slots  chan struct{}
	wg     sync.WaitGroup

	mu     sync.Mutex
	conns  map[net.Conn]struct{}
	closed bool
}

// NewForwarder listens on addr (TCP, e.g. "127.0.0.1:0") and will relay to
// the Unix socket at socket once Serve runs. The socket need not exist yet:
// each connection dials it anew, so a proxy that restarts is found again.
func NewForwarder(addr, socket string, maxConns int, log *slog.Logger) (*Forwarder, error) {
	if socket == "" {
		return nil, errors.New("forwarder: no socket to forward to")
	}
	dial := func(ctx context.Context) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", socket)
	}
	return NewForwarderTo(addr, socket, dial, maxConns, log)
}

// NewForwarderTo listens on addr (TCP) and will relay each connection to
// one dial returns, within 10 seconds (else the connection is closed).
// what names the destination in logs.
func NewForwarderTo(addr, what string, dial func(context.Context) (net.Conn, error), maxConns int, log *slog.Logger) (*Forwarder, error) {
	if maxConns <= 0 {
		maxConns = DefaultMaxForwards
	}
	if log == nil {
		log = slog.Default()
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("forwarder: %w", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	return &Forwarder{
		ln: ln, dial: dial, what: what, log: log, ctx: ctx, cancel: cancel,
		slots: make(chan struct{}, maxConns),
		conns: map[net.Conn]struct{}{},
	}, nil
}

// Addr is the TCP address agents connect to.
func (f *Forwarder) Addr() net.Addr { return f.ln.Addr() }

// Serve accepts and relays connections until Close (it then returns nil)
// or the listener fails.
func (f *Forwarder) Serve() error {
	for {
		c, err := f.ln.Accept()
		if err != nil {
			if f.isClosed() || errors.Is(err, net.ErrClosed) {
				return nil
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			return fmt.Errorf("forwarder: accept: %w", err)
		}
		select {
		case f.slots <- struct{}{}:
		default:
			// Too many at once: refuse rather than queue, the client retries.
			f.log.Warn("forwarder: connection refused, too many open", "max", cap(f.slots))
			c.Close()
			continue
		}
		if !f.track(c) {
			<-f.slots
			c.Close()
			return nil
		}
		f.wg.Add(1)
		go f.relay(c)
	}
}

func (f *Forwarder) isClosed() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.closed
}

func (f *Forwarder) track(c net.Conn) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return false
	}
	f.conns[c] = struct{}{}
	return true
}

func (f *Forwarder) untrack(cs ...net.Conn) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, c := range cs {
		delete(f.conns, c)
	}
}

func (f *Forwarder) relay(c net.Conn) {
	defer f.wg.Done()
	defer func() { <-f.slots }()
	defer c.Close()
	defer f.untrack(c)
	ctx, cancel := context.WithTimeout(f.ctx, 10*time.Second)
	up, err := f.dial(ctx)
	cancel()
	if err != nil {
		f.log.Warn("forwarder: model proxy unreachable", "to", f.what, "err", err)
		return
	}
	defer up.Close()
	if !f.track(up) {
		return
	}
	defer f.untrack(up)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		pipe(up, c)
	}()
	pipe(c, up)
	wg.Wait()
}

// pipe copies from src to dst, then half-closes dst's write side so the
// peer sees the end of the request (or response) while the other way goes
// on.
func pipe(dst, src net.Conn) {
	_, _ = io.Copy(dst, src)
	type closeWriter interface{ CloseWrite() error }
	if cw, ok := dst.(closeWriter); ok {
		_ = cw.CloseWrite()
	} else {
		_ = dst.Close()
	}
}

// Close stops accepting, cuts every relayed connection and waits for the
// relays to end.
func (f *Forwarder) Close() error {
	f.mu.Lock()
	f.closed = true
	conns := make([]net.Conn, 0, len(f.conns))
	for c := range f.conns {
		conns = append(conns, c)
	}
	f.mu.Unlock()
	f.cancel()
	err := f.ln.Close()
	for _, c := range conns {
		c.Close()
	}
	f.wg.Wait()
	return err
}

// startForwarder serves f in the background; stop closes it and waits.
func startForwarder(f *Forwarder, log *slog.Logger) (stop func()) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := f.Serve(); err != nil {
			log.Error("forwarder stopped", "err", err)
		}
	}()
	return func() {
		f.Close()
		<-done
	}
}
