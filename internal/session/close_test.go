package session

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentd/agentd/agent"
	"github.com/agentd/agentd/internal/eventlog"
	"github.com/agentd/agentd/internal/sandbox/local"
	"github.com/agentd/agentd/profile"
	"github.com/agentd/agentd/sandbox"
	"github.com/agentd/agentd/store/memstore"
)

// quickArch's turns end at once.
type quickArch struct{}

func (quickArch) Name() string { return "quick" }
func (quickArch) Start(context.Context, agent.Host) (agent.Runner, error) {
	return quickRunner{}, nil
}

type quickRunner struct{}

func (quickRunner) Turn(context.Context, agent.Turn) (agent.TurnResult, error) {
	return agent.TurnResult{Result: "done"}, nil
}
func (quickRunner) Interrupt(context.Context) error { return nil }
func (quickRunner) Close(context.Context) error     { return nil }

// countingProvider counts the environments it made and those terminated,
// and notes any made after the manager's Close returned.
type countingProvider struct {
	sandbox.Provider
	created, terminated atomic.Int64
	closed              atomic.Bool // set once Manager.Close returned
	late                atomic.Int64
}

func (p *countingProvider) Create(ctx context.Context, spec sandbox.Spec) (sandbox.Environment, error) {
	if p.closed.Load() {
		p.late.Add(1)
	}
	e, err := p.Provider.Create(ctx, spec)
	if err != nil {
		return nil, err
	}
	p.created.Add(1)
	return &countedEnv{Environment: e, p: p}, nil
}

type countedEnv struct {
	sandbox.Environment
	p    *countingProvider
	once sync.Once
}

func (e *countedEnv) Terminate(ctx context.Context) error {
	e.once.Do(func() { e.p.terminated.Add(1) })
	return e.Environment.Terminate(ctx)
}

func quietLog() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// Close races every way an owner goroutine can be started or handed work:
// messages, environment starts (terminals, files), file listings, idle
// timers. Once Close has returned nothing may run: no owner goroutine
// (the WaitGroup it waited on may not grow again), no environment left up
// or started. Before the fix, do() checked isClosed before wg.Add(1), so an
// owner could start after Close had waited; and a command queued behind
// the shutdown started a new environment that Close then waited for in
// vain.
func TestCloseRacesWithCommands(t *testing.T) {
	iterations := 150
	if testing.Short() {
		iterations = 30
	}
	for i := range iterations {
		closeRace(t, i)
		if t.Failed() {
			t.Fatalf("failed in iteration %d", i)
		}
	}
}

func closeRace(t *testing.T, iter int) {
	st := memstore.New()
	lg := eventlog.New(st, eventlog.Options{Logger: quietLog()})
	defer lg.Close()
	archs := agent.NewRegistry()
	archs.Register(quickArch{})
	prov := &countingProvider{Provider: local.New(local.Options{Logger: quietLog()})}
	m, err := New(Config{
		Store: st, Log: lg, Sandbox: prov, Files: local.New(local.Options{Logger: quietLog()}),
		Architectures: archs, DataDir: t.TempDir(),
		Profiles:    NewProfiles(st, []profile.Profile{{ID: "p", Name: "p"}}),
		IdleTimeout: time.Millisecond, Logger: quietLog(),
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	var sessions []*Session
	for range 3 {
		rec, err := m.Create(ctx, CreateRequest{Architecture: "quick", AgentProfileRef: "p"}, "a")
		if err != nil {
			t.Fatal(err)
		}
		s, _ := m.Get(rec.ID)
		sessions = append(sessions, s)
	}
	// Workers hammer the sessions until they are told the manager closed.
	var workers sync.WaitGroup
	start := make(chan struct{})
	for _, s := range sessions {
		for w := range 3 {
			workers.Go(func() {
				<-start
				for n := 0; ; n++ {
					var err error
					switch (w + n) % 4 {
					case 0:
						_, err = s.Send(ctx, "hi", "a")
					case 1:
						_, err = s.EnsureEnv(ctx, "a")
					case 2:
						_, err = m.ListFiles(ctx, s.ID())
						if err == nil && m.isClosed() {
							err = ErrClosed
						}
					case 3:
						err = s.Terminate(ctx, "test", "a")
					}
					if errors.Is(err, ErrClosed) {
						return
					}
					if n%8 == 7 {
						runtime.Gosched()
					}
				}
			})
		}
	}
	close(start)
	// Let the workers get going: some owners up, some starting, some idle.
	for deadline := time.Now().Add(time.Second); prov.created.Load() < 2 && time.Now().Before(deadline); {
		runtime.Gosched()
	}
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	err = m.Close(cctx)
	cancel()
	prov.closed.Store(true)
	if err != nil {
		t.Errorf("iteration %d: Close: %v (an owner kept working after the shutdown)", iter, err)
	}
	workers.Wait()
	// Nothing may start now; give a late owner the chance to show itself.
	// A sleep on purpose: an absence can only be watched over a window.
	for range 20 {
		runtime.Gosched()
		time.Sleep(100 * time.Microsecond)
	}
	for _, s := range sessions {
		s.mu.Lock()
		own := s.own
		s.mu.Unlock()
		if own != nil {
			t.Errorf("iteration %d: session %s has an owner goroutine after Close returned", iter, s.ID())
		}
	}
	if n := prov.late.Load(); n > 0 {
		t.Errorf("iteration %d: %d environments created after Close returned", iter, n)
	}
	if c, d := prov.created.Load(), prov.terminated.Load(); c != d {
		t.Errorf("iteration %d: %d environments created, %d terminated", iter, c, d)
	}
	if t.Failed() {
		// Best effort, so that the goroutine check at the end reports the
		// failure above rather than a leak.
		for _, s := range sessions {
			s.mu.Lock()
			o := s.own
			if o != nil {
				o.pending.Add(1)
			}
			s.mu.Unlock()
			if o != nil {
				done := make(chan struct{})
				o.cmds <- func(o *owner) {
					o.terminated = append(o.terminated, done)
					o.terminate("test cleanup", "")
				}
				select {
				case <-done:
				case <-time.After(5 * time.Second):
				}
			}
		}
		t.Logf("iteration %d: owners left behind were terminated", iter)
	}
}
