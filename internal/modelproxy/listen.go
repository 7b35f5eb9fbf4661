package modelproxy

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"
)

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
	if _, err := p.listen(ln, p); err != nil {
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

func (p *Proxy) listen(ln net.Listener, h http.Handler) (*http.Server, error) {
	hs := &http.Server{Handler: h, ReadHeaderTimeout: 30 * time.Second}
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		ln.Close()
		return nil, errors.New("model proxy: closed")
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
	return hs, nil
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
