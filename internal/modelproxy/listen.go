package modelproxy

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// Forwarder is implemented by sandbox providers whose environments have no
// network of their own (bwrap): the server calls ForwardModelProxy once,
// before any environment starts, and the provider makes 127.0.0.1:port
// inside every environment reach socket, a Unix socket on the host serving
// this proxy (bind-mount it; the executor forwards the port to it). The
// URLs Issue hands out name 127.0.0.1:port in every backend.
type Forwarder interface {
	ForwardModelProxy(port int, socket string)
}

// ListenTCP serves the proxy on addr (keep it loopback: sandboxes reach
// it there) and makes it the address Issue hands out.
func (p *Proxy) ListenTCP(addr string) (*net.TCPAddr, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("model proxy: listen: %w", err)
	}
	ta := ln.Addr().(*net.TCPAddr)
	host := ta.IP.String()
	if ta.IP.IsUnspecified() {
		host = "127.0.0.1"
	}
	p.mu.Lock()
	p.baseURL = "http://" + net.JoinHostPort(host, strconv.Itoa(ta.Port))
	p.port = ta.Port
	p.mu.Unlock()
	if err := p.serve(ln); err != nil {
		return nil, err
	}
	p.log.Info("model proxy listening", "addr", ta.String())
	return ta, nil
}

// ListenLoopback serves the proxy on a loopback port that stays the same
// across restarts, so processes that outlive the server (executor
// sandboxes) keep reaching it: the port is kept in stateFile; when it is
// taken, a new one is chosen (and those processes lose the proxy).
func (p *Proxy) ListenLoopback(stateFile string) (*net.TCPAddr, error) {
	if b, err := os.ReadFile(stateFile); err == nil {
		if port, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil && port > 0 && port < 65536 {
			ta, err := p.ListenTCP(net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
			if err == nil {
				return ta, nil
			}
			p.log.Warn("the model proxy's previous port is taken; environments still running from before the restart lose the proxy", "port", port, "err", err)
		}
	}
	ta, err := p.ListenTCP("127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	if err := os.WriteFile(stateFile, []byte(strconv.Itoa(ta.Port)+"\n"), 0o644); err != nil {
		return nil, fmt.Errorf("model proxy: remember port: %w", err)
	}
	return ta, nil
}

// ListenUnix serves the proxy on a Unix socket at path (for Forwarder
// sandboxes). The socket is world-connectable like the loopback port:
// a session token is what grants access.
func (p *Proxy) ListenUnix(path string) error {
	if len(path) > 107 {
		return fmt.Errorf("model proxy: socket path %s is longer than 107 bytes", path)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return fmt.Errorf("model proxy: %w", err)
	}
	_ = os.Remove(path)
	ln, err := net.Listen("unix", path)
	if err != nil {
		return fmt.Errorf("model proxy: listen: %w", err)
	}
	if err := os.Chmod(path, 0o666); err != nil {
		ln.Close()
		return fmt.Errorf("model proxy: %w", err)
	}
	if err := p.serve(ln); err != nil {
		return err
	}
	p.log.Info("model proxy listening", "socket", path)
	return nil
}

// SocketPath is where a server with data folder dataDir puts the proxy's
// Unix socket: in the folder when the path fits a socket address, else in
// the temporary folder under a name derived from it.
func SocketPath(dataDir string) string {
	p := filepath.Join(dataDir, "model-proxy.sock")
	if len(p) <= 107 {
		return p
	}
	return filepath.Join(os.TempDir(), "agentd-model-proxy-"+hashToken(dataDir)[:12]+".sock")
}

// Port is the loopback port Issue's URLs name (0 before ListenTCP).
func (p *Proxy) Port() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.port
}

// BaseURL is the proxy's address as sandboxes are told it ("" before
// ListenTCP).
func (p *Proxy) BaseURL() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.baseURL
}

func (p *Proxy) serve(ln net.Listener) error {
	hs := &http.Server{Handler: p, ReadHeaderTimeout: 30 * time.Second}
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		ln.Close()
		return errors.New("model proxy: closed")
	}
	p.servers = append(p.servers, hs)
	p.serveWG.Add(1)
	p.mu.Unlock()
	go func() {
		defer p.serveWG.Done()
		if err := hs.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			p.log.Error("model proxy stopped serving", "err", err)
		}
	}()
	return nil
}

// Close stops the listeners at once, lets requests in flight finish until
// ctx ends, then cuts every connection. (http.Server.Shutdown alone would
// also wait out connections a client opened ahead and never used, seconds
// in which a surviving environment's agent finds no proxy.)
func (p *Proxy) Close(ctx context.Context) error {
	p.mu.Lock()
	p.closed = true
	servers := p.servers
	p.servers = nil
	p.mu.Unlock()
	stopped, cancel := context.WithCancel(context.Background())
	cancel()
	for _, hs := range servers {
		_ = hs.Shutdown(stopped) // closes the listeners and idle connections, then returns
	}
	var err error
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for p.inflight.Load() > 0 && err == nil {
		select {
		case <-tick.C:
		case <-ctx.Done():
			err = fmt.Errorf("model proxy: close: requests still running: %w", ctx.Err())
		}
	}
	for _, hs := range servers {
		_ = hs.Close()
	}
	p.serveWG.Wait()
	return err
}
