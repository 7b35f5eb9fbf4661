package wiring

import (
	"context"
	"io"
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/agentd/agentd/store/s3blobs"
	"github.com/agentd/agentd/store/s3blobs/s3test"
	"github.com/agentd/agentd/store/sqlite"
)

// tcpProxy forwards connections from a loopback port to target until
// stopped; stop also cuts the connections it forwards.
type tcpProxy struct {
	l     net.Listener
	wg    sync.WaitGroup
	mu    sync.Mutex
	conns []net.Conn
}

func startProxy(t *testing.T, target string) *tcpProxy {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &tcpProxy{l: l}
	p.wg.Go(func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			u, err := net.Dial("tcp", target)
			if err != nil {
				c.Close()
				continue
			}
			p.mu.Lock()
			p.conns = append(p.conns, c, u)
			p.mu.Unlock()
			p.wg.Go(func() { _, _ = io.Copy(u, c); u.Close() })
			p.wg.Go(func() { _, _ = io.Copy(c, u); c.Close() })
		}
	})
	t.Cleanup(p.stop)
	return p
}

func (p *tcpProxy) stop() {
	p.l.Close()
	p.mu.Lock()
	for _, c := range p.conns {
		c.Close()
	}
	p.mu.Unlock()
	p.wg.Wait()
}

// GET /health names the object store of --artifacts and is degraded while
// it does not answer (here: the proxy to it stopped).
func TestHealthReportsTheArtifactsObjectStore(t *testing.T) {
	cfg, err := s3blobs.ParseURL(s3test.URL(t))
	if err != nil {
		t.Fatal(err)
	}
	proxy := startProxy(t, cfg.Endpoint)
	cfg.Endpoint = proxy.l.Addr().String()
	ctx := context.Background()
	srv, err := New(ctx, Config{DataDir: t.TempDir(), Sandbox: "local", Registerer: prometheus.NewRegistry(),
		DisableUI: true, DisableModelProxy: true, Env: map[string]string{}, LeaseTTL: 15 * time.Second,
		Logger: slog.New(slog.DiscardHandler), ArtifactsURL: cfg.String()})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close(ctx)
	h := srv.health(ctx)
	if h.Status != "ok" || h.Artifacts == nil || h.Artifacts.Kind != "s3" || h.Artifacts.Status != "ok" || h.Artifacts.URL != cfg.String() {
		t.Fatalf("health %+v, artifacts %+v", h, h.Artifacts)
	}
	proxy.stop()
	h = srv.health(ctx)
	if h.Status != "degraded" || h.Artifacts.Status != "error" || !strings.Contains(h.Artifacts.Error, cfg.Endpoint) {
		t.Fatalf("health with the object store gone: %+v, artifacts %+v", h, h.Artifacts)
	}
}

// Without --artifacts the content is the store's; ArtifactsURL with a
// store given in code is refused (the store is not opened here).
func TestArtifactsURLNeedsAStoreOpenedByURL(t *testing.T) {
	ctx := context.Background()
	quiet := slog.New(slog.DiscardHandler)
	st, err := sqlite.Open(ctx, t.TempDir()+"/agentd.db", sqlite.WithLogger(quiet))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	config := func(artifacts string) Config {
		return Config{DataDir: t.TempDir(), Store: st, Sandbox: "local", Registerer: prometheus.NewRegistry(),
			DisableUI: true, DisableModelProxy: true, Env: map[string]string{}, LeaseTTL: 15 * time.Second,
			Logger: quiet, ArtifactsURL: artifacts}
	}
	if srv, err := New(ctx, config("s3://bucket?endpoint=http://127.0.0.1:1")); err == nil || !strings.Contains(err.Error(), "only for a store opened by URL") {
		if err == nil {
			srv.Close(ctx)
		}
		t.Fatalf("New with a store and an artifacts URL: %v", err)
	}
	srv, err := New(ctx, config(""))
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close(ctx)
	if h := srv.health(ctx); h.Artifacts == nil || h.Artifacts.Kind != "store" || h.Artifacts.Status != "ok" {
		t.Fatalf("artifacts health %+v", h.Artifacts)
	}
}
