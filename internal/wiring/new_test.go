package wiring

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/goleak"

	"github.com/agentd/agentd/conversation"
	"github.com/agentd/agentd/internal/api"
	"github.com/agentd/agentd/internal/sandbox/local"
	"github.com/agentd/agentd/sandbox"
	"github.com/agentd/agentd/store"
	"github.com/agentd/agentd/store/memstore"
)

// reattacher is a sandbox whose environments "outlive the server": Recover
// hands back a local environment on the same workspace. It keeps what it
// handed out, so the test can end them as the world outside the server
// would.
type reattacher struct {
	*local.Provider
	mu   sync.Mutex
	envs []sandbox.Environment
}

func (r *reattacher) Name() string { return "reattach" }

func (r *reattacher) Recover(ctx context.Context, spec sandbox.Spec, _ json.RawMessage) (sandbox.Environment, error) {
	e, err := r.Provider.Create(ctx, spec)
	if err == nil {
		r.mu.Lock()
		r.envs = append(r.envs, e)
		r.mu.Unlock()
	}
	return e, err
}

func (r *reattacher) terminateAll() {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, e := range r.envs {
		_ = e.Terminate(context.Background())
	}
}

// New must close what it started on every error path. When the API failed
// to build, the session manager had already started (re-attaching the
// sessions that were active, each with an owner goroutine, a workspace
// watcher and lease renewal) and was never closed.
func TestNewClosesWhatItStartedWhenTheAPIFails(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	ctx := context.Background()
	st := memstore.New()
	defer st.Close()
	now := time.Now().UTC().Truncate(time.Millisecond)
	rt := conversation.Runtime{Status: conversation.SessionIdle, Architecture: "shell", Sandbox: "reattach"}
	if err := st.CreateSession(ctx, store.Session{
		ID: "s1", Architecture: "shell", Status: conversation.SessionIdle, Runtime: rt,
		SessionOptions: json.RawMessage("{}"), SandboxState: json.RawMessage(`{"handle":1}`),
		CreatedAt: now, LastActivity: now,
	}); err != nil {
		t.Fatal(err)
	}
	sb := &reattacher{Provider: local.New(local.Options{})}
	defer sb.terminateAll() // after New's cleanup: what outlives a server is not its to stop

	reattached := make(chan struct{})
	newAPI = func(cfg api.Config) (*api.Server, error) {
		// By now Start has handed the session to its owner: wait until the
		// environment is back, so that there is something to close.
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
			if reattachedIn(cfg.Log.Read(ctx, "s1", 0, 0)) {
				close(reattached)
				break
			}
			if time.Now().After(deadline) {
				break
			}
		}
		return nil, errors.New("api: out of order")
	}
	defer func() { newAPI = api.New }()

	srv, err := New(ctx, Config{
		DataDir: t.TempDir(), Store: st, Sandbox: "reattach", Sandboxes: map[string]sandbox.Provider{"reattach": sb},
		DisableUI: true, DisableModelProxy: true, Env: map[string]string{},
		Registerer: prometheus.NewRegistry(), LeaseTTL: 15 * time.Second,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	if err == nil {
		srv.Close(ctx)
		t.Fatal("New succeeded with a failing API")
	}
	select {
	case <-reattached:
	default:
		t.Fatal("the session was never re-attached: the test proves nothing")
	}
	sb.terminateAll()
}

// reattachedIn reports whether the log says the environment is back.
func reattachedIn(evs []conversation.Event, err error) bool {
	for _, e := range evs {
		if p, derr := e.Decode(); derr == nil {
			if sc, ok := p.(*conversation.StatusChange); ok && sc.Status == conversation.SessionIdle && sc.Reason != "" {
				return err == nil
			}
		}
	}
	return false
}

// A panic in New (here: a second server registering its metrics in the
// registry of the first) still closes what New had started, the store it
// opened first of all.
func TestNewClosesWhatItStartedWhenItPanics(t *testing.T) {
	ctx := context.Background()
	reg := prometheus.NewRegistry()
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	config := func() Config {
		return Config{DataDir: t.TempDir(), Sandbox: "local", Registerer: reg, DisableUI: true, Env: map[string]string{},
			LeaseTTL: 15 * time.Second, Logger: quiet}
	}
	first, err := New(ctx, config())
	if err != nil {
		t.Fatal(err)
	}
	defer first.Close(ctx)
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	func() {
		defer func() {
			if recover() == nil {
				t.Error("New with a registry in use did not panic")
			}
		}()
		srv, err := New(ctx, config())
		if err == nil {
			srv.Close(ctx)
		}
	}()
}
