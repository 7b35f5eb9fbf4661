package bench

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/agentd/agentd/agent"
	"github.com/agentd/agentd/internal/agent/shell"
	"github.com/agentd/agentd/internal/api"
	"github.com/agentd/agentd/internal/eventlog"
	"github.com/agentd/agentd/internal/sandbox/local"
	"github.com/agentd/agentd/internal/session"
	"github.com/agentd/agentd/store/sqlite"
)

// wired is a real agentd HTTP server (SQLite store, event log, session
// manager, API handler, local sandbox, shell architecture) on a loopback
// httptest server, wired like agentd.New but keeping hold of the event log,
// so a benchmark can append events at a controlled rate. agentd.Server does
// not expose its log; benchmarks that only drive the public API use
// agentdtest.Start (agentd.New) instead.
type wired struct {
	URL   string
	Log   *eventlog.Log
	Mgr   *session.Manager
	Store *sqlite.Store
}

func startWired(tb testing.TB) *wired {
	tb.Helper()
	ctx := context.Background()
	dir := tb.TempDir()
	log := quietLogger()
	st, err := sqlite.Open(ctx, dir+"/agentd.db", sqlite.WithLogger(log))
	if err != nil {
		tb.Fatal(err)
	}
	lg := eventlog.New(st, eventlog.Options{Logger: log})
	archs := agent.NewRegistry()
	archs.Register(shell.Architecture{})
	profiles := session.NewProfiles(st, nil)
	mgr, err := session.New(session.Config{
		Store: st, Log: lg, Sandbox: local.New(local.Options{Logger: log}), Architectures: archs,
		Profiles: profiles, DataDir: dir, Logger: log,
	})
	if err != nil {
		tb.Fatal(err)
	}
	if err := mgr.Start(ctx); err != nil {
		tb.Fatal(err)
	}
	a, err := api.New(api.Config{Sessions: mgr, Log: lg, Profiles: profiles, Architectures: archs, Logger: log})
	if err != nil {
		tb.Fatal(err)
	}
	hs := httptest.NewUnstartedServer(a)
	hs.Config.ReadHeaderTimeout = 10 * time.Second
	hs.Start()
	tb.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_ = mgr.Close(ctx)
		_ = lg.Close()
		a.Shutdown(ctx)
		hs.Close()
		_ = st.Close()
	})
	return &wired{URL: hs.URL, Log: lg, Mgr: mgr, Store: st}
}

// newHTTPClient returns a client with its own transport, closed when tb
// ends, so no keep-alive connection outlives the benchmark.
func newHTTPClient(tb testing.TB) *http.Client {
	tr := &http.Transport{MaxIdleConnsPerHost: 64, IdleConnTimeout: 30 * time.Second}
	tb.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr, Timeout: 60 * time.Second}
}
