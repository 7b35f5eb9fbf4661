package eventlog

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"go.uber.org/goleak"

	"github.com/agentd/agentd/conversation"
	"github.com/agentd/agentd/store"
	"github.com/agentd/agentd/store/memstore"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func logEvent(msg string) conversation.Event {
	return conversation.NewEvent(conversation.LogEvent{Level: conversation.LevelInfo, Message: msg})
}

func msgOf(t *testing.T, e conversation.Event) string {
	t.Helper()
	p, err := e.Decode()
	if err != nil {
		t.Fatal(err)
	}
	return p.(*conversation.LogEvent).Message
}

func TestAppendAssignsContiguousSeqs(t *testing.T) {
	st := memstore.New()
	l := New(st, Options{})
	defer l.Close()
	ctx := context.Background()
	got, err := l.Append(ctx, "s1", logEvent("a"), logEvent("b"))
	if err != nil {
		t.Fatal(err)
	}
	if got[0].Seq != 1 || got[1].Seq != 2 {
		t.Fatalf("seqs %d %d, want 1 2", got[0].Seq, got[1].Seq)
	}
	if got[0].Context.SessionID != "s1" || got[0].Context.ConversationID != "main" || got[0].Context.Source != conversation.SourceServer || got[0].Context.Timestamp.IsZero() {
		t.Fatalf("context defaults not filled: %+v", got[0].Context)
	}
	got, err = l.Append(ctx, "s2", logEvent("x"))
	if err != nil || got[0].Seq != 1 {
		t.Fatalf("other session seq = %v, %v; want 1", got, err)
	}
	got, _ = l.Append(ctx, "s1", logEvent("c"))
	if got[0].Seq != 3 {
		t.Fatalf("seq %d want 3", got[0].Seq)
	}
	stored, _ := st.ReadEvents(ctx, "s1", 0, 0)
	if len(stored) != 3 {
		t.Fatalf("stored %d events, want 3", len(stored))
	}
}

func TestAppendRejectsUnknownType(t *testing.T) {
	l := New(memstore.New(), Options{})
	defer l.Close()
	_, err := l.Append(context.Background(), "s", conversation.Event{Type: "bogus"})
	if err == nil {
		t.Fatal("want error for unknown type")
	}
}

func TestSeqContinuesAfterRestart(t *testing.T) {
	st := memstore.New()
	ctx := context.Background()
	l := New(st, Options{})
	l.Append(ctx, "s", logEvent("1"), logEvent("2"))
	l.Close()
	l2 := New(st, Options{})
	defer l2.Close()
	got, err := l2.Append(ctx, "s", logEvent("3"))
	if err != nil || got[0].Seq != 3 {
		t.Fatalf("after restart seq %v err %v, want 3", got, err)
	}
	// A subscriber after a restart replays history, then goes live.
	sub, _ := l2.Subscribe(ctx, "s", 0)
	defer sub.Close()
	for want := int64(1); want <= 3; want++ {
		r, err := sub.Next(ctx)
		if err != nil || r.Event.Seq != want {
			t.Fatalf("replay got %v err %v, want seq %d", r.Event.Seq, err, want)
		}
	}
	go l2.Append(ctx, "s", logEvent("4"))
	r, err := sub.Next(ctx)
	if err != nil || r.Event.Seq != 4 {
		t.Fatalf("live got %d err %v, want 4", r.Event.Seq, err)
	}
}

// failingStore fails AppendEvents while fail is set.
type failingStore struct {
	store.EventStore
	fail atomic.Bool
}

func (f *failingStore) AppendEvents(ctx context.Context, ev []conversation.Event, fence ...store.Fence) error {
	if f.fail.Load() {
		return errors.New("disk on fire")
	}
	return f.EventStore.AppendEvents(ctx, ev, fence...)
}

func TestFailedCommitGivesSeqsBack(t *testing.T) {
	fs := &failingStore{EventStore: memstore.New()}
	l := New(fs, Options{})
	defer l.Close()
	ctx := context.Background()
	sub, _ := l.Subscribe(ctx, "s", 0)
	defer sub.Close()
	l.Append(ctx, "s", logEvent("1"))
	fs.fail.Store(true)
	if _, err := l.Append(ctx, "s", logEvent("lost")); err == nil {
		t.Fatal("want error from failing store")
	}
	fs.fail.Store(false)
	got, err := l.Append(ctx, "s", logEvent("2"))
	if err != nil || got[0].Seq != 2 {
		t.Fatalf("after failure seq %v err %v, want 2 (no gap)", got, err)
	}
	for _, want := range []string{"1", "2"} {
		r, err := sub.Next(ctx)
		if err != nil || msgOf(t, r.Event) != want {
			t.Fatalf("subscriber got %v err %v, want %q (failed event never published)", r.Event, err, want)
		}
	}
}

// slowStore delays every commit so that concurrent appends pile up.
type slowStore struct {
	store.EventStore
	mu      sync.Mutex
	batches []int
}

func (s *slowStore) AppendEvents(ctx context.Context, ev []conversation.Event, fence ...store.Fence) error {
	// The point of the store: a commit that takes a while (an fsync), so
	// that appends queue up behind it.
	time.Sleep(2 * time.Millisecond)
	s.mu.Lock()
	s.batches = append(s.batches, len(ev))
	s.mu.Unlock()
	return s.EventStore.AppendEvents(ctx, ev, fence...)
}

func TestGroupCommit(t *testing.T) {
	ss := &slowStore{EventStore: memstore.New()}
	l := New(ss, Options{})
	defer l.Close()
	ctx := context.Background()
	var wg sync.WaitGroup
	const writers, each = 50, 20
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				if _, err := l.Append(ctx, fmt.Sprintf("s%d", w%5), logEvent(fmt.Sprint(i))); err != nil {
					t.Error(err)
				}
			}
		}()
	}
	wg.Wait()
	ss.mu.Lock()
	defer ss.mu.Unlock()
	total, max := 0, 0
	for _, n := range ss.batches {
		total += n
		if n > max {
			max = n
		}
	}
	if total != writers*each {
		t.Fatalf("stored %d events, want %d", total, writers*each)
	}
	if len(ss.batches) >= total/2 || max < 5 {
		t.Fatalf("no group commit: %d transactions for %d events (largest %d)", len(ss.batches), total, max)
	}
	for i := range 5 {
		evs, _ := ss.ReadEvents(ctx, fmt.Sprintf("s%d", i), 0, 0)
		for j, e := range evs {
			if e.Seq != int64(j+1) {
				t.Fatalf("session s%d: event %d has seq %d", i, j, e.Seq)
			}
		}
	}
}

// TestSubscribeSeam races appends against subscribers that join at every
// point of the log: each must see exactly after+1…last, in order.
func TestSubscribeSeam(t *testing.T) {
	st := memstore.New()
	l := New(st, Options{ReplayPage: 7})
	defer l.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	const total = 1500
	appended := make(chan struct{})
	// Subscriber k joins once k*50 events are appended (join[k] closed):
	// the joins are spread over the appends.
	const subs = 24
	join := make([]chan struct{}, subs)
	for k := range join {
		join[k] = make(chan struct{})
	}
	close(join[0])
	go func() {
		defer close(appended)
		for i := 1; i <= total; i++ {
			if _, err := l.Append(ctx, "s", logEvent(fmt.Sprint(i))); err != nil {
				t.Error(err)
				for _, c := range join[min((i+49)/50, subs):] {
					close(c)
				}
				return
			}
			if i%50 == 0 && i/50 < subs {
				close(join[i/50])
			}
		}
	}()
	var wg sync.WaitGroup
	for k := range subs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-join[k]
			after := int64(k * 37 % 500)
			sub, err := l.Subscribe(ctx, "s", after)
			if err != nil {
				t.Error(err)
				return
			}
			defer sub.Close()
			for want := after + 1; want <= total; want++ {
				r, err := sub.Next(ctx)
				if err != nil {
					t.Errorf("sub after %d: at %d: %v", after, want, err)
					return
				}
				if r.Event.Seq != want || msgOf(t, r.Event) != fmt.Sprint(want) {
					t.Errorf("sub after %d: got seq %d (%s), want %d", after, r.Event.Seq, msgOf(t, r.Event), want)
					return
				}
			}
		}()
	}
	wg.Wait()
	<-appended
}

func TestSlowConsumerIsCutOffWithoutStallingOthers(t *testing.T) {
	l := New(memstore.New(), Options{QueueSize: 8})
	defer l.Close()
	ctx := context.Background()
	slow, _ := l.Subscribe(ctx, "s", 0)
	defer slow.Close()
	fast, _ := l.Subscribe(ctx, "s", 0)
	defer fast.Close()
	// Both register live on their first Next (the session is empty); prime
	// them with one event.
	var primed sync.WaitGroup
	for _, s := range []*Subscription{slow, fast} {
		primed.Add(1)
		go func() { defer primed.Done(); s.Next(ctx) }()
	}
	waitUntil(t, "both subscribers are live", func() bool { return subscribers(l, "s") == 2 })
	l.Append(ctx, "s", logEvent("0"))
	primed.Wait()
	// The fast subscriber keeps up (the appender waits for it); the slow one
	// never reads.
	for i := 1; i <= 100; i++ {
		if _, err := l.Append(ctx, "s", logEvent(fmt.Sprint(i))); err != nil {
			t.Fatal(err)
		}
		if r, err := fast.Next(ctx); err != nil || r.Event.Seq != int64(i+1) {
			t.Fatalf("fast subscriber: got %d, %v", r.Event.Seq, err)
		}
	}
	var err error
	n := 0
	for err == nil {
		_, err = slow.Next(ctx)
		n++
	}
	if !errors.Is(err, ErrSlowConsumer) {
		t.Fatalf("slow subscriber ended with %v after %d events, want ErrSlowConsumer", err, n)
	}
	// It resumes from its last seq and gets the rest, exactly.
	again, _ := l.Subscribe(ctx, "s", slow.Last())
	defer again.Close()
	for want := slow.Last() + 1; want <= 101; want++ {
		r, err := again.Next(ctx)
		if err != nil || r.Event.Seq != want {
			t.Fatalf("resume got %d err %v, want %d", r.Event.Seq, err, want)
		}
	}
}

func TestCloseDrainsAndEndsSubscribers(t *testing.T) {
	st := memstore.New()
	l := New(st, Options{})
	ctx := context.Background()
	sub, _ := l.Subscribe(ctx, "s", 0)
	l.Append(ctx, "s", logEvent("1"))
	sub.Next(ctx)
	var wg sync.WaitGroup
	for range 20 {
		wg.Add(1)
		go func() { defer wg.Done(); l.Append(ctx, "s", logEvent("x")) }()
	}
	wg.Wait()
	l.Close()
	if _, err := l.Append(ctx, "s", logEvent("late")); !errors.Is(err, ErrClosed) {
		t.Fatalf("append after close: %v", err)
	}
	n := 0
	for {
		_, err := sub.Next(ctx)
		if err != nil {
			if !errors.Is(err, ErrClosed) {
				t.Fatalf("end error %v", err)
			}
			break
		}
		n++
	}
	if last, _ := st.LastSeq(ctx, "s"); last != 21 {
		t.Fatalf("stored last seq %d, want 21", last)
	}
	sub.Close()
}

// Forget wakes a subscriber waiting for live events. synctest: the log
// and its store (memstore) do no I/O, so synctest.Wait returns once Next
// is blocked.
func TestForgetEndsSubscribers(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := New(memstore.New(), Options{})
		defer l.Close()
		ctx := context.Background()
		l.Append(ctx, "s", logEvent("1"))
		sub, _ := l.Subscribe(ctx, "s", 0)
		defer sub.Close()
		sub.Next(ctx)
		got := make(chan error, 1)
		go func() { _, err := sub.Next(ctx); got <- err }()
		synctest.Wait() // Next waits for a live event
		l.Forget("s")
		if err := <-got; !errors.Is(err, ErrSessionDeleted) {
			t.Fatalf("got %v, want ErrSessionDeleted", err)
		}
	})
}

func TestCanceledAppendIsNotStored(t *testing.T) {
	st := memstore.New()
	l := New(st, Options{})
	defer l.Close()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := l.Append(ctx, "s", logEvent("x")); err == nil {
		t.Fatal("want error for canceled context")
	}
	if n, _ := st.LastSeq(context.Background(), "s"); n != 0 {
		t.Fatalf("canceled append stored: last seq %d", n)
	}
}

func subscribers(l *Log, session string) int {
	sl := l.session(session)
	sl.mu.Lock()
	defer sl.mu.Unlock()
	return len(sl.subs)
}

// An idle live subscriber holds a queue sized by what waits for it, not by
// QueueSize: a channel of 4,096 records per subscriber made 200 idle
// subscribers hold ~100 MiB that every garbage collection scanned.
func TestIdleSubscribersHoldNoQueue(t *testing.T) {
	l := New(memstore.New(), Options{QueueSize: 4096})
	defer l.Close()
	ctx := context.Background()
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	subs := make([]*Subscription, 200)
	for i := range subs {
		subs[i], _ = l.Subscribe(ctx, "s", 0)
		if _, ok, err := subs[i].TryNext(ctx); ok || err != nil {
			t.Fatalf("empty session: ok %v err %v", ok, err)
		}
	}
	if n := subscribers(l, "s"); n != len(subs) {
		t.Fatalf("%d live subscribers, want %d", n, len(subs))
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	if grown := int64(after.HeapAlloc) - int64(before.HeapAlloc); grown > 2<<20 {
		t.Fatalf("200 idle subscribers hold %d KiB", grown>>10)
	}
	// They still get every event, in order.
	for i := 1; i <= 3; i++ {
		l.Append(ctx, "s", logEvent(fmt.Sprint(i)))
	}
	for _, s := range subs {
		for want := int64(1); want <= 3; want++ {
			if r, err := s.Next(ctx); err != nil || r.Event.Seq != want {
				t.Fatalf("got %d %v, want %d", r.Event.Seq, err, want)
			}
		}
		s.Close()
	}
}

// The queue bound is exact: QueueSize records wait, one more cuts the
// subscriber off, and what was queued is still delivered before the error.
func TestQueueBoundAndDeliveryBeforeTheEnd(t *testing.T) {
	l := New(memstore.New(), Options{QueueSize: 8})
	defer l.Close()
	ctx := context.Background()
	sub, _ := l.Subscribe(ctx, "s", 0)
	defer sub.Close()
	sub.TryNext(ctx) // registers
	for i := 1; i <= 8; i++ {
		l.Append(ctx, "s", logEvent(fmt.Sprint(i)))
	}
	if n := subscribers(l, "s"); n != 1 {
		t.Fatalf("cut off with 8 queued (bound 8)")
	}
	l.Append(ctx, "s", logEvent("9"))
	if n := subscribers(l, "s"); n != 0 {
		t.Fatalf("still subscribed with 9 queued (bound 8)")
	}
	for want := int64(1); want <= 8; want++ {
		if r, err := sub.Next(ctx); err != nil || r.Event.Seq != want {
			t.Fatalf("got %d %v, want %d", r.Event.Seq, err, want)
		}
	}
	if _, err := sub.Next(ctx); !errors.Is(err, ErrSlowConsumer) {
		t.Fatalf("after the queue: %v, want ErrSlowConsumer", err)
	}

	// Deletion too ends a subscription only after what was queued.
	sub2, _ := l.Subscribe(ctx, "t", 0)
	defer sub2.Close()
	sub2.TryNext(ctx)
	l.Append(ctx, "t", logEvent("a"), logEvent("b"))
	l.Forget("t")
	for want := int64(1); want <= 2; want++ {
		if r, err := sub2.Next(ctx); err != nil || r.Event.Seq != want {
			t.Fatalf("got %d %v, want %d", r.Event.Seq, err, want)
		}
	}
	if _, err := sub2.Next(ctx); !errors.Is(err, ErrSessionDeleted) {
		t.Fatalf("after the queue: %v, want ErrSessionDeleted", err)
	}
}

// The queue's two arrays are swapped between publisher and consumer, so a
// steady stream allocates nothing to move records through it.
func TestSteadyQueueAllocatesNothing(t *testing.T) {
	l := New(memstore.New(), Options{})
	defer l.Close()
	ctx := context.Background()
	sub, _ := l.Subscribe(ctx, "s", 0)
	defer sub.Close()
	sub.TryNext(ctx) // registers
	recs := make([]*Record, 8)
	for i := range recs {
		recs[i] = &Record{Event: logEvent("x")}
	}
	seq := int64(0)
	round := func() {
		sl := sub.sl
		sl.mu.Lock()
		for _, r := range recs {
			seq++
			r.Event.Seq = seq
			sub.offerLocked(r, 4096)
		}
		sl.mu.Unlock()
		for range recs {
			if _, ok, err := sub.TryNext(ctx); !ok || err != nil {
				t.Fatalf("record missing: %v", err)
			}
		}
	}
	round()
	round()
	if n := testing.AllocsPerRun(100, round); n != 0 {
		t.Fatalf("%.1f allocations per round of 8 records", n)
	}
}
