package eventlog

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentd/agentd/conversation"
	"github.com/agentd/agentd/store"
	"github.com/agentd/agentd/store/memstore"
)

// gateStore holds its first AppendEvents until open is closed, so that the
// appends made meanwhile pile up into one group commit, and records what
// each call got and returned.
type gateStore struct {
	store.Store
	entered chan struct{} // closed when the first call begins
	open    chan struct{}
	first   atomic.Bool
	mu      sync.Mutex
	calls   []gateCall
}

func newGateStore() (*gateStore, *memstore.Store) {
	ms := memstore.New()
	return &gateStore{Store: ms, entered: make(chan struct{}), open: make(chan struct{})}, ms
}

type gateCall struct {
	sessions map[string]int // events per session
	fences   []store.Fence
	err      error
}

func (g *gateStore) AppendEvents(ctx context.Context, evs []conversation.Event, fence ...store.Fence) error {
	if g.first.CompareAndSwap(false, true) {
		close(g.entered)
		<-g.open
	}
	err := g.Store.AppendEvents(ctx, evs, fence...)
	c := gateCall{sessions: map[string]int{}, fences: fence, err: err}
	for _, e := range evs {
		c.sessions[e.Context.SessionID]++
	}
	g.mu.Lock()
	g.calls = append(g.calls, c)
	g.mu.Unlock()
	return err
}

// A stale writer's events are refused inside a group commit that carries
// other sessions' events too: those are stored (in a second transaction,
// with their seqs assigned again), the stale ones fail with ErrFenced, and
// no session gets a gap.
func TestFencedAppendInGroupCommit(t *testing.T) {
	gs, ms := newGateStore()
	l := New(gs, Options{})
	defer l.Close()
	ctx := context.Background()
	lease := func(id, holder string, ttl time.Duration) int64 {
		t.Helper()
		g, err := ms.AcquireLease(ctx, id, holder, ttl)
		if err != nil {
			t.Fatal(err)
		}
		return g
	}
	stale := lease("lost", "old-node", time.Millisecond)
	current := takeOver(t, ms, "lost", "new-node")
	if current <= stale {
		t.Fatalf("generations %d then %d", stale, current)
	}
	kept := lease("kept", "old-node", time.Hour)
	// "lost" already has events of the new holder.
	if err := ms.AppendEvents(ctx, []conversation.Event{stamped("lost", 1), stamped("lost", 2)}); err != nil {
		t.Fatal(err)
	}

	// The first append holds the writer; the others queue behind it.
	first := make(chan error, 1)
	go func() { _, err := l.Append(ctx, "other", logEvent("first")); first <- err }()
	<-gs.entered
	type result struct {
		name string
		evs  []conversation.Event
		err  error
	}
	results := make(chan result, 4)
	run := func(name string, f func() ([]conversation.Event, error)) {
		go func() { evs, err := f(); results <- result{name, evs, err} }()
	}
	run("stale", func() ([]conversation.Event, error) {
		return l.AppendFenced(ctx, "lost", stale, logEvent("stale 1"), logEvent("stale 2"))
	})
	waitUntil(t, "1 queued", func() bool { return len(l.reqs) == 1 })
	run("unfenced on lost", func() ([]conversation.Event, error) { return l.Append(ctx, "lost", logEvent("api")) })
	waitUntil(t, "2 queued", func() bool { return len(l.reqs) == 2 })
	run("kept", func() ([]conversation.Event, error) { return l.AppendFenced(ctx, "kept", kept, logEvent("kept")) })
	waitUntil(t, "3 queued", func() bool { return len(l.reqs) == 3 })
	run("other", func() ([]conversation.Event, error) { return l.Append(ctx, "other", logEvent("second")) })
	waitUntil(t, "4 queued", func() bool { return len(l.reqs) == 4 })
	close(gs.open)
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	got := map[string]result{}
	for range 4 {
		r := <-results
		got[r.name] = r
	}
	if err := got["stale"].err; !errors.Is(err, store.ErrFenced) {
		t.Fatalf("the stale writer's append: %v, want ErrFenced", err)
	}
	for name, wantSeq := range map[string]int64{"unfenced on lost": 3, "kept": 1, "other": 2} {
		r := got[name]
		if r.err != nil || len(r.evs) != 1 || r.evs[0].Seq != wantSeq {
			t.Fatalf("%s: %v, %v; want stored at seq %d", name, seqsOf(r.evs), r.err, wantSeq)
		}
	}
	for id, want := range map[string][]int64{"lost": {1, 2, 3}, "kept": {1}, "other": {1, 2}} {
		evs, _ := ms.ReadEvents(ctx, id, 0, 0)
		if s := seqsOf(evs); len(s) != len(want) || s[len(s)-1] != want[len(want)-1] {
			t.Fatalf("session %s stored seqs %v, want %v", id, s, want)
		}
	}
	// The group commit was one call refused for "lost" alone, then one
	// without the stale events.
	gs.mu.Lock()
	defer gs.mu.Unlock()
	if len(gs.calls) != 3 {
		t.Fatalf("%d store calls, want 3 (first, refused, again): %+v", len(gs.calls), gs.calls)
	}
	refused, again := gs.calls[1], gs.calls[2]
	var fe *store.FencedError
	if !errors.As(refused.err, &fe) || len(fe.Sessions) != 1 || fe.Sessions[0] != "lost" || refused.sessions["lost"] != 3 || refused.sessions["kept"] != 1 {
		t.Fatalf("the group commit: %+v, want lost's 3 events and kept's refused for lost", refused)
	}
	if again.err != nil || again.sessions["lost"] != 1 || again.sessions["kept"] != 1 || again.sessions["other"] != 1 || len(again.fences) != 1 {
		t.Fatalf("the second try: %+v", again)
	}
}

// Of two fenced appends of one session in one batch, the lower generation
// is stale without asking the store.
func TestLowerFenceInSameBatchRefused(t *testing.T) {
	gs, ms := newGateStore()
	l := New(gs, Options{})
	defer l.Close()
	ctx := context.Background()
	g1, _ := ms.AcquireLease(ctx, "s", "a", time.Millisecond)
	g2 := takeOver(t, ms, "s", "b")
	first := make(chan error, 1)
	go func() { _, err := l.Append(ctx, "x", logEvent("first")); first <- err }()
	<-gs.entered
	old := make(chan error, 1)
	go func() { _, err := l.AppendFenced(ctx, "s", g1, logEvent("old")); old <- err }()
	waitUntil(t, "1 queued", func() bool { return len(l.reqs) == 1 })
	cur := make(chan error, 1)
	go func() { _, err := l.AppendFenced(ctx, "s", g2, logEvent("new")); cur <- err }()
	waitUntil(t, "2 queued", func() bool { return len(l.reqs) == 2 })
	close(gs.open)
	<-first
	if err := <-old; !errors.Is(err, store.ErrFenced) {
		t.Fatalf("lower generation: %v, want ErrFenced", err)
	}
	if err := <-cur; err != nil {
		t.Fatalf("current generation: %v", err)
	}
	if evs, _ := ms.ReadEvents(ctx, "s", 0, 0); len(evs) != 1 || evs[0].Seq != 1 || msgOf(t, evs[0]) != "new" {
		t.Fatalf("stored %v", seqsOf(evs))
	}
	if _, err := l.AppendFenced(ctx, "s", 0, logEvent("x")); err == nil || errors.Is(err, store.ErrFenced) {
		t.Fatalf("AppendFenced with generation 0: %v, want a usage error", err)
	}
}

func stamped(session string, seq int64) conversation.Event {
	e := logEvent("stored")
	e.Seq = seq
	e.Context = conversation.Context{SessionID: session, ConversationID: conversation.MainConversation, Source: conversation.SourceServer, Timestamp: time.Now()}
	return e
}

func seqsOf(evs []conversation.Event) []int64 {
	out := make([]int64, len(evs))
	for i, e := range evs {
		out[i] = e.Seq
	}
	return out
}

// takeOver takes session id's lease for holder (an hour) as soon as the
// current holder's (a short one) has expired, and returns its generation.
func takeOver(t *testing.T, ms *memstore.Store, id, holder string) int64 {
	t.Helper()
	var g int64
	waitUntil(t, "the old lease expires", func() bool {
		var err error
		g, err = ms.AcquireLease(context.Background(), id, holder, time.Hour)
		if err != nil && !errors.Is(err, store.ErrLeaseHeld) {
			t.Fatal(err)
		}
		return err == nil
	})
	return g
}

// waitUntil polls cond (every millisecond) for up to 10 s.
func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !cond(); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting until %s", what)
		}
	}
}
