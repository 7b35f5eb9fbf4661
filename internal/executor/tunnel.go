package executor

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"time"

	"github.com/agentd/agentd/internal/executor/rpc"
)

// ErrTunnelsClosed: the pool was closed.
var ErrTunnelsClosed = errors.New("executor: tunnel pool closed")

// TunnelPool holds connections the server opens to the executor ahead of
// need, so that connections made inside the sandbox can reach the server
// where nothing inside can dial it: in a Kubernetes pod, the server reaches
// the executor only through the API server's port-forward streams, which
// go one way. Each idle tunnel carries one relayed connection: Take hands
// one out (the executor writes rpc.TunnelHeader on it, and the server,
// which waits for that byte, then dials the model proxy and relays both
// ways). The server opens a new tunnel for each one used.
//
// Only connections whose peer runs as the uid given to NewTunnelPool
// (checked as the RPC listener does) are kept. An idle tunnel that ends
// or sends anything before it is taken is dropped. Safe for concurrent
// use.
type TunnelPool struct {
	ln      net.Listener
	peerUID int
	log     *slog.Logger
	ready   chan struct{} // capacity 1: a tunnel became idle

	mu     sync.Mutex
	idle   []*idleTunnel
	closed bool
	wg     sync.WaitGroup
}

type idleTunnel struct {
	c     net.Conn
	taken bool       // guarded by TunnelPool.mu
	done  chan error // the idle watcher's read: nil once it was cut short by Take
}

// maxIdleTunnels bounds the idle tunnels kept: the server keeps a few.
const maxIdleTunnels = 64

// NewTunnelPool listens on addr (TCP, loopback).
func NewTunnelPool(addr string, peerUID int, log *slog.Logger) (*TunnelPool, error) {
	if log == nil {
		log = slog.Default()
	}
	ln, err := listenLoopback(addr)
	if err != nil {
		return nil, fmt.Errorf("tunnels: %w", err)
	}
	return &TunnelPool{ln: ln, peerUID: peerUID, log: log, ready: make(chan struct{}, 1)}, nil
}

// listenLoopback listens on a TCP address of the loopback interface only.
func listenLoopback(addr string) (net.Listener, error) {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, err
	}
	if ip := net.ParseIP(host); ip == nil || !ip.IsLoopback() {
		return nil, fmt.Errorf("listen %s: not a loopback address", addr)
	}
	return net.Listen("tcp", addr)
}

// Addr is the address tunnels are opened to.
func (p *TunnelPool) Addr() net.Addr { return p.ln.Addr() }

// Serve accepts tunnels until Close (then it returns nil) or the listener
// fails.
func (p *TunnelPool) Serve() error {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			if p.isClosed() || errors.Is(err, net.ErrClosed) {
				return nil
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			return fmt.Errorf("tunnels: accept: %w", err)
		}
		if err := checkPeer(c, p.peerUID); err != nil {
			p.log.Warn("tunnel refused", "err", err)
			refuse(c, err)
			continue
		}
		p.add(c)
	}
}

func (p *TunnelPool) isClosed() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.closed
}

func (p *TunnelPool) add(c net.Conn) {
	t := &idleTunnel{c: c, done: make(chan error, 1)}
	p.mu.Lock()
	if p.closed || len(p.idle) >= maxIdleTunnels {
		p.mu.Unlock()
		c.Close()
		return
	}
	p.idle = append(p.idle, t)
	p.wg.Add(1)
	p.mu.Unlock()
	go p.watch(t)
	select {
	case p.ready <- struct{}{}:
	default:
	}
}

// watch reads from an idle tunnel: the server sends nothing before the
// header, so anything read means the tunnel is broken (ended, reset, or
// not the server's). Take cuts the read short with a deadline.
func (p *TunnelPool) watch(t *idleTunnel) {
	defer p.wg.Done()
	var b [1]byte
	_, err := t.c.Read(b[:])
	p.mu.Lock()
	taken := t.taken
	if !taken {
		p.removeLocked(t)
	}
	p.mu.Unlock()
	if !taken {
		t.c.Close()
		t.done <- errors.New("tunnel ended while idle")
		return
	}
	var ne net.Error
	if err != nil && errors.As(err, &ne) && ne.Timeout() {
		t.done <- nil
		return
	}
	if err == nil {
		err = errors.New("tunnel sent data before it was used")
	}
	t.done <- err
}

func (p *TunnelPool) removeLocked(t *idleTunnel) {
	for i, x := range p.idle {
		if x == t {
			p.idle = append(p.idle[:i], p.idle[i+1:]...)
			return
		}
	}
}

// Take hands out an idle tunnel, waiting for one until ctx ends. The
// tunnel's header is written: the server relays from then on.
func (p *TunnelPool) Take(ctx context.Context) (net.Conn, error) {
	for {
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			return nil, ErrTunnelsClosed
		}
		var t *idleTunnel
		if n := len(p.idle); n > 0 {
			// The newest: the oldest are likeliest to have been cut.
			t = p.idle[n-1]
			p.idle = p.idle[:n-1]
			t.taken = true
		}
		more := len(p.idle) > 0
		p.mu.Unlock()
		if t == nil {
			select {
			case <-p.ready:
				continue
			case <-ctx.Done():
				return nil, fmt.Errorf("no tunnel to the server: %w", ctx.Err())
			}
		}
		if more {
			select { // wake another Take
			case p.ready <- struct{}{}:
			default:
			}
		}
		_ = t.c.SetReadDeadline(time.Unix(1, 0))
		if err := <-t.done; err != nil {
			t.c.Close()
			p.log.Debug("idle tunnel unusable", "err", err)
			continue
		}
		_ = t.c.SetReadDeadline(time.Time{})
		_ = t.c.SetWriteDeadline(time.Now().Add(10 * time.Second))
		if _, err := t.c.Write([]byte(rpc.TunnelHeader)); err != nil {
			t.c.Close()
			p.log.Debug("idle tunnel unusable", "err", err)
			continue
		}
		_ = t.c.SetWriteDeadline(time.Time{})
		return t.c, nil
	}
}

// Idle is how many tunnels wait.
func (p *TunnelPool) Idle() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.idle)
}

// Close stops accepting and closes the idle tunnels (those handed out are
// their taker's).
func (p *TunnelPool) Close() error {
	p.mu.Lock()
	p.closed = true
	idle := p.idle
	p.idle = nil
	p.mu.Unlock()
	err := p.ln.Close()
	for _, t := range idle {
		t.c.Close()
	}
	p.wg.Wait()
	return err
}
