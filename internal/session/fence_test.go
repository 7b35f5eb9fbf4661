package session_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentd/agentd/agent"
	"github.com/agentd/agentd/conversation"
	"github.com/agentd/agentd/internal/eventlog"
	"github.com/agentd/agentd/internal/session"
	"github.com/agentd/agentd/store/memstore"
)

// streamArch's turns emit a block delta every few milliseconds until
// their context ends (quiet: they emit nothing and wait), and report
// that end.
type streamArch struct {
	quiet bool
	ended chan struct{} // closed when a turn's context ended
	once  sync.Once
}

func (a *streamArch) Name() string { return "stream" }
func (a *streamArch) Start(ctx context.Context, h agent.Host) (agent.Runner, error) {
	return &streamRunner{a: a, h: h}, nil
}

type streamRunner struct {
	a *streamArch
	h agent.Host
}

func (r *streamRunner) Turn(ctx context.Context, t agent.Turn) (agent.TurnResult, error) {
	defer r.a.once.Do(func() { close(r.a.ended) })
	for i := 0; ; i++ {
		if !r.a.quiet {
			// Errors (fenced ones included) are the runner's to ignore:
			// the session stops it.
			_ = r.h.Emit(ctx, conversation.Upsert(conversation.Block{ID: t.QueryID + "-a", Type: conversation.BlockAssistantText, Content: fmt.Sprint("tick ", i)}))
		}
		select {
		case <-ctx.Done():
			return agent.TurnResult{}, ctx.Err()
		case <-time.After(3 * time.Millisecond):
		}
	}
}
func (r *streamRunner) Interrupt(context.Context) error { return nil }
func (r *streamRunner) Close(context.Context) error     { return nil }

// partitioned is a store one server's lease renewals cannot reach, while
// its other writes still arrive: cut, they fail (a network partition
// between that server and the database); stalled, they hang (a long
// pause of that server, which then goes on writing as if nothing had
// happened). The fence must stop those writes.
type partitioned struct {
	*memstore.Store
	holder string
	cut    atomic.Bool
	stall  atomic.Bool
}

func (p *partitioned) AcquireLease(ctx context.Context, id, holder string, ttl time.Duration) (int64, error) {
	if holder == p.holder && p.stall.Load() {
		<-ctx.Done()
		return 0, ctx.Err()
	}
	if holder == p.holder && p.cut.Load() {
		return 0, errors.New("database unreachable")
	}
	return p.Store.AcquireLease(ctx, id, holder, ttl)
}

// server is one session manager ("a server") of a test fleet sharing a
// store, with its own event log.
type server struct {
	m   *session.Manager
	log *eventlog.Log
	out *syncBuffer
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func newServer(t *testing.T, cfg session.Config, holder string, ttl time.Duration, arch agent.Architecture, dataDir string) *server {
	t.Helper()
	out := &syncBuffer{}
	cfg.DataDir, cfg.Holder, cfg.LeaseTTL = dataDir, holder, ttl
	cfg.Logger = slog.New(slog.NewTextHandler(out, nil))
	m, lg := startManager(t, cfg, arch)
	return &server{m: m, log: lg, out: out}
}

func waitClosed(t *testing.T, what string, ch <-chan struct{}) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(15 * time.Second):
		t.Fatalf("timed out waiting until %s", what)
	}
}

// A server whose lease renewal stalls (it paused) while its runner keeps
// emitting loses the session to another server once the lease expires:
// the other takes it over (the turn fails SERVER_LOST), the store refuses
// every later write of the first (the renewal that would have told it
// still hangs), and the first stops its runner at once and says why in
// its log. The log has no event of the first server's after the
// take-over, and no gap.
func TestLostLeaseStopsTheRunner(t *testing.T) {
	st := &partitioned{Store: memstore.New(), holder: "A"}
	dir := t.TempDir()
	arch := &streamArch{ended: make(chan struct{})}
	const ttl = 600 * time.Millisecond
	a := newServer(t, session.Config{Store: st}, "A", ttl, arch, dir)
	ctx := context.Background()
	rec, err := a.m.Create(ctx, session.CreateRequest{Architecture: "stream"}, "alice")
	if err != nil {
		t.Fatal(err)
	}
	s, _ := a.m.Get(rec.ID)
	if _, err := s.Send(ctx, "go", "alice"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the runner emits", func() bool { n, _ := st.LastSeq(ctx, rec.ID); return n > 20 })

	st.stall.Store(true)
	// Another server, whose sweep takes the session over once A's lease
	// has expired.
	b := newServer(t, session.Config{Store: st}, "B", ttl, &streamArch{ended: make(chan struct{})}, dir)
	waitClosed(t, "A's runner stops", arch.ended)
	waitFor(t, "A says why in its log", func() bool {
		return strings.Contains(a.out.String(), "session lease lost") && strings.Contains(a.out.String(), "the store refused a write")
	})

	// B settles the session: its last word is the status terminated.
	waitFor(t, "B settles the session", func() bool {
		evs, _ := st.ReadEvents(ctx, rec.ID, 0, 0)
		last := evs[len(evs)-1]
		return last.Type == conversation.TypeStatus && strings.Contains(string(last.Payload), `"terminated"`)
	})
	// What A had in flight is refused too: closing A's event log answers
	// every append A queued (stored or refused) and takes no more.
	a.log.Close()
	evs, err := st.ReadEvents(ctx, rec.ID, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	failed := -1
	for i, e := range evs {
		if e.Seq != int64(i+1) {
			t.Fatalf("event %d has seq %d: a gap or a repeat", i, e.Seq)
		}
		if e.Type == conversation.TypeQueryFailed {
			var p conversation.QueryFailed
			_ = json.Unmarshal(e.Payload, &p)
			if p.Code != agent.CodeServerLost || failed >= 0 {
				t.Fatalf("query:failed %s", e.Payload)
			}
			failed = i
		}
	}
	if failed < 0 {
		t.Fatalf("B did not settle the turn; B's log:\n%s", b.out.String())
	}
	for _, e := range evs[failed+1:] {
		if e.Context.Source == conversation.SourceRunner {
			t.Fatalf("seq %d, written by A's runner after B took the session over: %s", e.Seq, e.Payload)
		}
	}
	if last := evs[len(evs)-1]; last.Type != conversation.TypeStatus || !strings.Contains(string(last.Payload), `"terminated"`) {
		t.Fatalf("the log ends with %s %s", last.Type, last.Payload)
	}
	if !strings.Contains(b.out.String(), "taking a session over") {
		t.Fatalf("B's log:\n%s", b.out.String())
	}
	// The session is B's now: its next message runs there.
	sb, err := b.m.Get(rec.ID)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sb.Send(ctx, "again", "bob"); err != nil {
		t.Fatal(err)
	}
}

// A lease renewal that finds another holder stops the runner even when
// the runner writes nothing (nothing would have been fenced).
func TestRenewalFindingAnotherHolderStopsTheRunner(t *testing.T) {
	st := &partitioned{Store: memstore.New(), holder: "A"}
	dir := t.TempDir()
	arch := &streamArch{quiet: true, ended: make(chan struct{})}
	const ttl = 600 * time.Millisecond
	a := newServer(t, session.Config{Store: st}, "A", ttl, arch, dir)
	ctx := context.Background()
	rec, _ := a.m.Create(ctx, session.CreateRequest{Architecture: "stream"}, "")
	s, _ := a.m.Get(rec.ID)
	if _, err := s.Send(ctx, "go", ""); err != nil {
		t.Fatal(err)
	}
	// The turn's start is written first (a write refused later would
	// stop A by its fence instead, not by its renewal).
	waitFor(t, "the turn runs", func() bool { return s.Record().Status == conversation.SessionRunning })
	// The store drops A's lease behind A's back (as when A's renewals
	// came late past the ttl while A still thought it held it) and B
	// takes it at once. Cutting A off for a ttl instead raced A's own
	// give-up ("could not be renewed") under load.
	if err := st.Store.ReleaseLease(ctx, rec.ID, "A"); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Store.AcquireLease(ctx, rec.ID, "B", time.Hour); err != nil {
		t.Fatalf("B takes the lease: %v", err)
	}
	waitClosed(t, "A's runner stops", arch.ended)
	waitFor(t, "A says why", func() bool { return strings.Contains(a.out.String(), "another server holds the lease") })
}

// With no other server at all, a lease that cannot be renewed for a whole
// ttl is given up: it has expired, and another server could take it.
func TestUnrenewableLeaseStopsTheRunner(t *testing.T) {
	st := &partitioned{Store: memstore.New(), holder: "A"}
	arch := &streamArch{quiet: true, ended: make(chan struct{})}
	a := newServer(t, session.Config{Store: st}, "A", 600*time.Millisecond, arch, t.TempDir())
	ctx := context.Background()
	rec, _ := a.m.Create(ctx, session.CreateRequest{Architecture: "stream"}, "")
	s, _ := a.m.Get(rec.ID)
	if _, err := s.Send(ctx, "go", ""); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	st.cut.Store(true)
	waitClosed(t, "A's runner stops", arch.ended)
	if d := time.Since(start); d < 400*time.Millisecond {
		t.Fatalf("stopped after %v: before the lease could expire", d)
	}
	waitFor(t, "A says why", func() bool { return strings.Contains(a.out.String(), "could not be renewed") })
}

// waitFor polls cond for up to 15 s (generous: the machine may be loaded).
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(15 * time.Second); !cond(); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting until %s", what)
		}
	}
}
