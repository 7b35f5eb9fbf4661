package eventlog

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentd/agentd/conversation"
	"github.com/agentd/agentd/internal/bus"
	"github.com/agentd/agentd/internal/bus/natstest"
	"github.com/agentd/agentd/store"
	"github.com/agentd/agentd/store/memstore"
)

// fleetLogs returns n logs over one store, each with a bus of its own to
// one real NATS server (a fleet of n servers).
func fleetLogs(t *testing.T, st store.EventStore, n int, opts Options, wrap func(i int, p Peers) Peers) []*Log {
	t.Helper()
	url := natstest.URL(t)
	prefix := natstest.Prefix(t)
	logs := make([]*Log, n)
	for i := range n {
		b, err := bus.Open(context.Background(), bus.Options{URL: url, Prefix: prefix, Name: fmt.Sprint("node", i), Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
		if err != nil {
			t.Fatal(err)
		}
		o := opts
		o.Peers = b
		if wrap != nil {
			o.Peers = wrap(i, b)
		}
		logs[i] = New(st, o)
		t.Cleanup(func() {
			logs[i].Close()
			b.Close()
		})
	}
	return logs
}

// follow reads sub until it has seq last, checking that seqs follow each
// other from after+1, and returns the events.
func follow(t *testing.T, sub *Subscription, after, last int64) []Record {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var out []Record
	want := after + 1
	for want <= last {
		r, err := sub.Next(ctx)
		if err != nil {
			t.Fatalf("after seq %d: %v", want-1, err)
		}
		if r.Event.Seq != want {
			t.Fatalf("got seq %d, want %d (a gap or a repeat)", r.Event.Seq, want)
		}
		out = append(out, r)
		want++
	}
	return out
}

// Subscribers on every server of a fleet get every event of a session,
// whichever server appended it (here the writer moves from one server to
// another halfway, as after a take-over), joining at any point: replay,
// then live, no gap, no duplicate. With events on the bus and with
// seq-range notices read from the store.
func TestPeersDeliverAcrossServers(t *testing.T) {
	for _, notices := range []bool{false, true} {
		t.Run(fmt.Sprintf("notices=%v", notices), func(t *testing.T) {
			st := memstore.New()
			logs := fleetLogs(t, st, 3, Options{PeerNotices: notices}, nil)
			ctx := context.Background()
			const total = 600
			// Subscribers join on every server, at every tenth of the log.
			type joined struct {
				sub   *Subscription
				after int64
			}
			var mu sync.Mutex
			var subs []joined
			var wg sync.WaitGroup
			appended := make(chan int64, total)
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := range total {
					writer := logs[0]
					if i >= total/2 {
						writer = logs[1]
					}
					evs, err := writer.Append(ctx, "s", logEvent(fmt.Sprint(i)))
					if err != nil {
						t.Error(err)
						return
					}
					appended <- evs[0].Seq
				}
			}()
			for seq := range appended {
				if seq%60 == 1 {
					for _, l := range logs {
						sub, err := l.Subscribe(ctx, "s", seq-1)
						if err != nil {
							t.Fatal(err)
						}
						mu.Lock()
						subs = append(subs, joined{sub, seq - 1})
						mu.Unlock()
					}
				}
				if seq == total {
					break
				}
			}
			wg.Wait()
			stored, _ := st.ReadEvents(ctx, "s", 0, 0)
			if len(stored) != total {
				t.Fatalf("stored %d events", len(stored))
			}
			for _, j := range subs {
				recs := follow(t, j.sub, j.after, total)
				for _, r := range recs {
					want, _ := Encode(stored[r.Event.Seq-1])
					if !bytes.Equal(r.JSON, want) {
						t.Fatalf("seq %d delivered as %s, stored as %s", r.Event.Seq, r.JSON, want)
					}
				}
				j.sub.Close()
			}
		})
	}
}

// dropping loses some of a server's messages to the others, and can tell
// followers that messages were lost.
type dropping struct {
	Peers
	n     atomic.Int64
	every int64

	mu    sync.Mutex
	lost  []func([]byte)
	drops atomic.Int64
}

func (d *dropping) Publish(session string, msg []byte) error {
	if d.every > 0 && d.n.Add(1)%d.every == 0 {
		d.drops.Add(1)
		return nil
	}
	return d.Peers.Publish(session, msg)
}

func (d *dropping) Follow(session string, deliver func([]byte)) (func(), error) {
	d.mu.Lock()
	d.lost = append(d.lost, deliver)
	d.mu.Unlock()
	return d.Peers.Follow(session, deliver)
}

func (d *dropping) reportLoss() {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, f := range d.lost {
		f(nil)
	}
}

// Messages lost between servers are made up from the store: a gap seen
// at the next message is filled, and a loss reported by the bus (a
// reconnect) brings subscribers to the store's tail even when no message
// follows.
func TestPeersGapsFilledFromStore(t *testing.T) {
	st := memstore.New()
	var a, b *dropping
	logs := fleetLogs(t, st, 2, Options{}, func(i int, p Peers) Peers {
		d := &dropping{Peers: p}
		if i == 0 {
			d.every, a = 3, d
		} else {
			b = d
		}
		return d
	})
	ctx := context.Background()
	sub, err := logs[1].Subscribe(ctx, "s", 0)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	// Live before anything is appended: what it gets comes through the bus.
	if _, ok, err := sub.TryNext(ctx); ok || err != nil {
		t.Fatal(ok, err)
	}
	for i := range 98 {
		if _, err := logs[0].Append(ctx, "s", logEvent(fmt.Sprint(i))); err != nil {
			t.Fatal(err)
		}
	}
	follow(t, sub, 0, 98)
	// The 99th message is dropped, and nothing follows it: seq 99 is only
	// in the store until the bus reports a loss.
	if _, err := logs[0].Append(ctx, "s", logEvent("99")); err != nil {
		t.Fatal(err)
	}
	if a.drops.Load() != 33 {
		t.Fatalf("only %d messages dropped", a.drops.Load())
	}
	got := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		r, err := sub.Next(ctx)
		if err == nil && r.Event.Seq != 99 {
			err = fmt.Errorf("seq %d after 98", r.Event.Seq)
		}
		got <- err
	}()
	select {
	case err := <-got:
		t.Fatalf("seq 99 arrived before any message or loss report: %v", err)
	case <-time.After(100 * time.Millisecond):
	}
	b.reportLoss()
	if err := <-got; err != nil {
		t.Fatal(err)
	}
	if _, err := logs[0].Append(ctx, "s", logEvent("last")); err != nil {
		t.Fatal(err)
	}
	follow(t, sub, 99, 100)
}

// A subscriber on another server that falls behind is cut off like a
// local one, and resumes from its last seq.
func TestPeersSlowConsumer(t *testing.T) {
	st := memstore.New()
	logs := fleetLogs(t, st, 2, Options{QueueSize: 16}, nil)
	ctx := context.Background()
	sub, err := logs[1].Subscribe(ctx, "s", 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok, err := sub.TryNext(ctx); ok || err != nil { // live from here
		t.Fatal(ok, err)
	}
	for i := range 200 {
		if _, err := logs[0].Append(ctx, "s", logEvent(fmt.Sprint(i))); err != nil {
			t.Fatal(err)
		}
	}
	// Everything reached the other server before its subscriber reads.
	sl := logs[1].session("s")
	waitUntil(t, "the other server has every event", func() bool {
		sl.mu.Lock()
		defer sl.mu.Unlock()
		return sl.published == 200
	})
	var last int64
	for last < 200 {
		r, err := sub.Next(ctx)
		if errors.Is(err, ErrSlowConsumer) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if r.Event.Seq != last+1 {
			t.Fatalf("seq %d after %d", r.Event.Seq, last)
		}
		last = r.Event.Seq
	}
	sub.Close()
	if last >= 200 {
		t.Fatalf("never cut off (read %d)", last)
	}
	sub, err = logs[1].Subscribe(ctx, "s", last)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	follow(t, sub, last, 200)
}

// A session followed on a server stops being followed (its NATS
// subscription ends) when its last subscription closes, and LastSeq
// there asks the store, which another server may have written since.
func TestPeersFollowRefCount(t *testing.T) {
	st := memstore.New()
	logs := fleetLogs(t, st, 2, Options{}, nil)
	ctx := context.Background()
	s1, _ := logs[1].Subscribe(ctx, "s", 0)
	s2, _ := logs[1].Subscribe(ctx, "s", 0)
	sl := logs[1].session("s")
	count := func() int {
		sl.dmu.Lock()
		defer sl.dmu.Unlock()
		return sl.follows
	}
	if n := count(); n != 2 {
		t.Fatalf("%d follows", n)
	}
	s1.Close()
	s1.Close()
	if n := count(); n != 1 {
		t.Fatalf("%d follows after one close", n)
	}
	s2.Close()
	if n := count(); n != 0 || sl.stopFollow != nil {
		t.Fatalf("%d follows after both closed", n)
	}
	if _, err := logs[0].Append(ctx, "s", logEvent("x"), logEvent("y")); err != nil {
		t.Fatal(err)
	}
	if last, err := logs[1].LastSeq(ctx, "s"); err != nil || last != 2 {
		t.Fatalf("LastSeq on the other server = %d, %v", last, err)
	}
}

func TestPeerMessages(t *testing.T) {
	recs := []*Record{}
	for i := int64(3); i <= 5; i++ {
		e := stamped("s", i)
		b, _ := Encode(e)
		recs = append(recs, &Record{Event: e, JSON: b})
	}
	msg := encodePeerMsg(recs, 3, 5, false, 1<<20)
	got, first, last, err := decodePeerMsg(msg)
	if err != nil || first != 3 || last != 5 || len(got) != 3 {
		t.Fatalf("decode = %d events %d..%d, %v", len(got), first, last, err)
	}
	for i, r := range got {
		if !bytes.Equal(r.JSON, recs[i].JSON) || r.Event.Seq != recs[i].Event.Seq || r.Event.Type != recs[i].Event.Type {
			t.Fatalf("event %d: %s, want %s", i, r.JSON, recs[i].JSON)
		}
	}
	// Too large, or asked for: a notice.
	for _, msg := range [][]byte{encodePeerMsg(recs, 3, 5, false, 10), encodePeerMsg(recs, 3, 5, true, 1<<20)} {
		got, first, last, err := decodePeerMsg(msg)
		if err != nil || got != nil || first != 3 || last != 5 {
			t.Fatalf("notice %q decoded as %v %d..%d, %v", msg, got, first, last, err)
		}
	}
	for _, bad := range []string{"", "E 1\n", "X 1 2\n", "E 2 1\n", "E 0 1\n{}\n{}\n", "E 1 2\n" + string(recs[0].JSON) + "\n",
		"E 3 3\n" + string(recs[1].JSON) + "\n", "E 3 3\n" + string(recs[0].JSON) + "\nextra", "E 1 1000000000\n{}\n", "E 3 3\nnot json\n"} {
		if _, _, _, err := decodePeerMsg([]byte(bad)); !errors.Is(err, errPeerMsg) {
			t.Errorf("decode %q = %v, want errPeerMsg", bad, err)
		}
	}
}

func FuzzPeerMessage(f *testing.F) {
	e := stamped("s", 7)
	b, _ := Encode(e)
	f.Add(encodePeerMsg([]*Record{{Event: e, JSON: b}}, 7, 7, false, 1<<20))
	f.Add([]byte("N 1 9\n"))
	f.Fuzz(func(t *testing.T, msg []byte) {
		recs, first, last, err := decodePeerMsg(msg)
		if err != nil {
			return
		}
		if first <= 0 || last < first {
			t.Fatalf("accepted range %d..%d", first, last)
		}
		if recs != nil && int64(len(recs)) != last-first+1 {
			t.Fatalf("%d events for %d..%d", len(recs), first, last)
		}
		for i, r := range recs {
			if r.Event.Seq != first+int64(i) {
				t.Fatalf("event %d has seq %d", i, r.Event.Seq)
			}
		}
	})
}

// ---- pipelined group commits ----

// concStore records how many AppendEvents calls overlap.
type concStore struct {
	store.EventStore
	delay    time.Duration
	cur, top atomic.Int64
	calls    atomic.Int64
}

func (s *concStore) AppendEvents(ctx context.Context, ev []conversation.Event, fence ...store.Fence) error {
	n := s.cur.Add(1)
	defer s.cur.Add(-1)
	for {
		t := s.top.Load()
		if n <= t || s.top.CompareAndSwap(t, n) {
			break
		}
	}
	s.calls.Add(1)
	// The point of the store: a commit that waits (a WAL flush), so that
	// several overlap.
	time.Sleep(s.delay)
	return s.EventStore.AppendEvents(ctx, ev, fence...)
}

func (s *concStore) AppendConcurrency() int { return 4 }

// With several commits in flight each session's seqs stay gap-free and
// its subscribers get them in order, while commits of different sessions
// overlap (the store asked for four in flight; more than a batch is
// waiting, so more than one goes).
func TestPipelinedCommits(t *testing.T) {
	cs := &concStore{EventStore: memstore.New(), delay: 2 * time.Millisecond}
	l := New(cs, Options{MaxBatch: 64})
	defer l.Close()
	if l.depth != 4 {
		t.Fatalf("depth %d, want the store's 4", l.depth)
	}
	ctx := context.Background()
	const sessions, writers, each = 64, 128, 10
	subs := make([]*Subscription, sessions)
	for i := range subs {
		subs[i], _ = l.Subscribe(ctx, fmt.Sprint("s", i), 0)
		defer subs[i].Close()
	}
	var wg sync.WaitGroup
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				if _, err := l.Append(ctx, fmt.Sprint("s", w%sessions), logEvent(fmt.Sprint(w, "-", i)), logEvent("second")); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	perSession := int64(writers / sessions * each * 2)
	for i, sub := range subs {
		follow(t, sub, 0, perSession)
		evs, _ := cs.ReadEvents(ctx, fmt.Sprint("s", i), 0, 0)
		for j, e := range evs {
			if e.Seq != int64(j+1) {
				t.Fatalf("s%d: event %d has seq %d", i, j, e.Seq)
			}
		}
		if int64(len(evs)) != perSession {
			t.Fatalf("s%d stored %d events", i, len(evs))
		}
	}
	if cs.top.Load() < 2 {
		t.Fatalf("at most %d commits were in flight", cs.top.Load())
	}
	t.Logf("%d commits, up to %d in flight", cs.calls.Load(), cs.top.Load())
}

// Pipelined, a stale writer's events are refused and the other sessions'
// are stored with no gap, whichever flight carried them.
func TestPipelinedFencing(t *testing.T) {
	ms := memstore.New()
	cs := &concStore{EventStore: ms, delay: time.Millisecond}
	l := New(cs, Options{CommitDepth: 3})
	defer l.Close()
	ctx := context.Background()
	stale, _ := ms.AcquireLease(ctx, "lost", "old", time.Millisecond)
	current := takeOver(t, ms, "lost", "new")
	kept, _ := ms.AcquireLease(ctx, "kept", "old", time.Hour)
	var wg sync.WaitGroup
	var refused, storedStale atomic.Int64
	for w := range 12 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 20 {
				var err error
				switch w % 3 {
				case 0:
					_, err = l.AppendFenced(ctx, "lost", stale, logEvent("stale"))
					if errors.Is(err, store.ErrFenced) {
						refused.Add(1)
						continue
					}
					storedStale.Add(1)
				case 1:
					_, err = l.AppendFenced(ctx, "lost", current, logEvent(fmt.Sprint("current ", i)))
				default:
					_, err = l.AppendFenced(ctx, "kept", kept, logEvent("kept"))
				}
				if err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	if storedStale.Load() != 0 || refused.Load() != 80 {
		t.Fatalf("stale appends: %d stored, %d refused", storedStale.Load(), refused.Load())
	}
	for id, n := range map[string]int{"lost": 80, "kept": 80} {
		evs, _ := ms.ReadEvents(ctx, id, 0, 0)
		if len(evs) != n {
			t.Fatalf("%s: %d events stored, want %d", id, len(evs), n)
		}
		for j, e := range evs {
			if e.Seq != int64(j+1) || (id == "lost" && msgOf(t, e) == "stale") {
				t.Fatalf("%s: event %d seq %d %q", id, j, e.Seq, msgOf(t, e))
			}
		}
	}
}

// Close waits for the commits in flight and those held behind them.
func TestPipelinedCloseDrains(t *testing.T) {
	cs := &concStore{EventStore: memstore.New(), delay: 5 * time.Millisecond}
	l := New(cs, Options{CommitDepth: 2})
	ctx := context.Background()
	var wg sync.WaitGroup
	var stored atomic.Int64
	for w := range 10 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				_, err := l.Append(ctx, fmt.Sprint("s", w%3), logEvent("x"))
				if errors.Is(err, ErrClosed) {
					return
				}
				if err != nil {
					t.Error(err)
					return
				}
				stored.Add(1)
			}
		}()
	}
	// Close while commits are in flight and appends held behind them.
	waitUntil(t, "appends flow", func() bool { return stored.Load() >= 20 && cs.cur.Load() > 0 })
	l.Close()
	wg.Wait()
	var total int64
	for i := range 3 {
		evs, _ := cs.ReadEvents(ctx, fmt.Sprint("s", i), 0, 0)
		total += int64(len(evs))
	}
	if total != stored.Load() {
		t.Fatalf("appenders were told %d events were stored; the store has %d", stored.Load(), total)
	}
}

// gatedPublish holds a server's next Publish until released: its commit
// is then stored but not yet delivered to the server's own subscribers.
type gatedPublish struct {
	Peers
	armed   atomic.Bool
	entered chan struct{}
	release chan struct{}
}

func (g *gatedPublish) Publish(session string, msg []byte) error {
	if g.armed.CompareAndSwap(true, false) {
		close(g.entered)
		<-g.release
	}
	return g.Peers.Publish(session, msg)
}

// A subscriber catching up while a commit is stored but not yet delivered
// must not hide that commit from the subscribers already live. Regression:
// catching up, a subscription set the session's published mark to the
// store's tail, and the delivery that followed was then taken for one
// already made, so the live subscriber never got those events.
func TestPeersCatchUpDuringDelivery(t *testing.T) {
	st := memstore.New()
	g := &gatedPublish{entered: make(chan struct{}), release: make(chan struct{})}
	l := fleetLogs(t, st, 1, Options{}, func(_ int, p Peers) Peers { g.Peers = p; return g })[0]
	ctx := context.Background()
	live, err := l.Subscribe(ctx, "s", 0)
	if err != nil {
		t.Fatal(err)
	}
	defer live.Close()
	if _, ok, err := live.TryNext(ctx); ok || err != nil { // live from here
		t.Fatal(ok, err)
	}
	g.armed.Store(true)
	appended := make(chan error, 1)
	go func() {
		_, err := l.Append(ctx, "s", logEvent("1"), logEvent("2"), logEvent("3"))
		appended <- err
	}()
	<-g.entered // stored, not delivered
	late, err := l.Subscribe(ctx, "s", 0)
	if err != nil {
		t.Fatal(err)
	}
	defer late.Close()
	// Catching up (from the store, or live: either is right here).
	if _, _, err := late.TryNext(ctx); err != nil {
		t.Fatal(err)
	}
	close(g.release)
	if err := <-appended; err != nil {
		t.Fatal(err)
	}
	follow(t, live, 0, 3)
	if late.Last() == 0 {
		follow(t, late, 0, 3)
	} else {
		follow(t, late, 1, 3)
	}
}
