package session

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/agentd/agentd/store"
)

// leaseCounter is a store that only counts lease renewals.
type leaseCounter struct {
	store.Store // nil: any other call panics
	mu          sync.Mutex
	renewals    map[string]int
	fail        error
}

func (l *leaseCounter) AcquireLease(ctx context.Context, id, holder string, ttl time.Duration) (int64, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if holder != "h" || ttl != 300*time.Millisecond {
		panic("lease renewed with the wrong holder or ttl")
	}
	l.renewals[id]++
	return 1, l.fail
}

func (l *leaseCounter) count(id string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.renewals[id]
}

func leaseManager(st *leaseCounter) *Manager {
	return &Manager{
		cfg: Config{Store: st, Holder: "h", LeaseTTL: 300 * time.Millisecond},
		log: slog.New(slog.NewTextHandler(io.Discard, nil)),
	}
}

// waitFor polls cond for up to 10 s (generous: the machine may be loaded).
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !cond(); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting until %s", what)
		}
	}
}

func renewerRunning() bool {
	leases.mu.Lock()
	defer leases.mu.Unlock()
	return leases.running
}

// Leases are renewed while the environment's context lives and no longer
// after; the one renewer goroutine exits with the last lease.
func TestLeaseRenewal(t *testing.T) {
	st := &leaseCounter{renewals: map[string]int{}}
	m := leaseManager(st)
	ctxA, cancelA := context.WithCancel(t.Context())
	ctxB, cancelB := context.WithCancel(t.Context())
	defer cancelB()
	m.renewLease(ctxA, "a", 1, nil)
	m.renewLease(ctxB, "b", 1, nil)
	waitFor(t, "both leases are renewed twice", func() bool { return st.count("a") >= 2 && st.count("b") >= 2 })

	cancelA()
	waitFor(t, "a is dropped", func() bool {
		leases.mu.Lock()
		defer leases.mu.Unlock()
		return len(leases.entries) == 1
	})
	a, b := st.count("a"), st.count("b")
	waitFor(t, "b is renewed again", func() bool { return st.count("b") >= b+2 })
	if st.count("a") != a {
		t.Fatalf("a renewed after its environment ended: %d → %d", a, st.count("a"))
	}

	cancelB()
	waitFor(t, "the renewer exits", func() bool { return !renewerRunning() })
	// And comes back for the next environment.
	ctxC, cancelC := context.WithCancel(t.Context())
	m.renewLease(ctxC, "c", 1, nil)
	waitFor(t, "c is renewed", func() bool { return st.count("c") >= 1 })
	cancelC()
	waitFor(t, "the renewer exits again", func() bool { return !renewerRunning() })
}

// A failing renewal is logged and retried at the next period; it does not
// stop the renewal of that session or of others.
func TestLeaseRenewalErrors(t *testing.T) {
	st := &leaseCounter{renewals: map[string]int{}, fail: errors.New("disk on fire")}
	m := leaseManager(st)
	ctx, cancel := context.WithCancel(t.Context())
	defer func() {
		cancel()
		waitFor(t, "the renewer exits", func() bool { return !renewerRunning() })
	}()
	m.renewLease(ctx, "x", 1, nil)
	m.renewLease(ctx, "y", 1, nil)
	waitFor(t, "failing renewals are retried", func() bool { return st.count("x") >= 3 && st.count("y") >= 3 })
}

// An environment whose context has already ended is never renewed.
func TestLeaseRenewalEndedContext(t *testing.T) {
	st := &leaseCounter{renewals: map[string]int{}}
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	leaseManager(st).renewLease(ctx, "gone", 1, nil)
	waitFor(t, "the renewer exits", func() bool { return !renewerRunning() })
	if n := st.count("gone"); n != 0 {
		t.Fatalf("renewed %d times", n)
	}
}

// Many sessions cost one goroutine, not one each.
func TestLeaseRenewalOneGoroutine(t *testing.T) {
	st := &leaseCounter{renewals: map[string]int{}}
	m := leaseManager(st)
	before := runtime.NumGoroutine()
	ctx, cancel := context.WithCancel(t.Context())
	for i := range 200 {
		m.renewLease(ctx, string(rune('a'+i%26))+string(rune('0'+i/26)), 1, nil)
	}
	if n := runtime.NumGoroutine() - before; n > 1 {
		t.Errorf("200 leases kept by %d goroutines", n)
	}
	cancel()
	waitFor(t, "the renewer exits", func() bool { return !renewerRunning() })
}
