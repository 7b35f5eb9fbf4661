package warmpool

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// fake is a backend whose items are numbers; it records what was started
// and stopped, and can be made to fail or to block.
type fake struct {
	mu      sync.Mutex
	next    int
	stopped []string
	fail    error
	gate    chan struct{} // when set, Start waits for a receive (or ctx)
	changed chan struct{}
}

func newFake() *fake { return &fake{changed: make(chan struct{}, 1000)} }

func (f *fake) start(ctx context.Context, key string) (string, error) {
	f.mu.Lock()
	gate, fail := f.gate, f.fail
	f.mu.Unlock()
	if gate != nil {
		select {
		case <-gate:
		case <-ctx.Done():
			return "", ctx.Err()
		}
	}
	defer func() { f.changed <- struct{}{} }()
	if fail != nil {
		return "", fail
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.next++
	return fmt.Sprintf("%s-%d", key, f.next), nil
}

func (f *fake) stop(ctx context.Context, key, item string) {
	f.mu.Lock()
	f.stopped = append(f.stopped, item)
	f.mu.Unlock()
	f.changed <- struct{}{}
}

func (f *fake) stoppedItems() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	s := slices.Clone(f.stopped)
	slices.Sort(s)
	return s
}

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

func newPool(t *testing.T, f *fake, size, maxKeys int) *Pool[string, string] {
	t.Helper()
	p, err := New(Options[string, string]{
		Size: size, MaxKeys: maxKeys, Start: f.start, Stop: f.stop,
		MinBackoff: 10 * time.Millisecond, MaxBackoff: 40 * time.Millisecond, Logger: quiet(),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close(context.Background()) })
	return p
}

// waitStats waits until key's stats satisfy ok.
func waitStats(t *testing.T, p *Pool[string, string], key string, ok func(Stats) bool) Stats {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		for _, s := range p.Stats() {
			if s.Key == key && ok(s) {
				return s
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("stats of %q never satisfied the condition: %+v", key, p.Stats())
		}
		time.Sleep(2 * time.Millisecond)
	}
}

func full(s Stats) bool { return s.Ready == s.Size && !s.Starting }

func TestFillTakeRefill(t *testing.T) {
	f := newFake()
	p := newPool(t, f, 3, 0)
	if _, ok := p.Take("a"); ok {
		t.Fatal("an empty pool handed out an item")
	}
	s := waitStats(t, p, "a", full)
	if s.Misses != 1 || s.Started != 3 || s.Takes != 0 {
		t.Fatalf("after the fill: %+v", s)
	}
	var got []string
	for range 3 {
		it, ok := p.Take("a")
		if !ok {
			t.Fatal("a full pool missed")
		}
		got = append(got, it)
	}
	// Items come out in the order they were made, each once.
	if !slices.Equal(got, []string{"a-1", "a-2", "a-3"}) {
		t.Fatalf("took %v", got)
	}
	s = waitStats(t, p, "a", full)
	if s.Takes != 3 || s.Started != 6 {
		t.Fatalf("after the refill: %+v", s)
	}
	if err := p.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	// What was taken is the caller's: only the refilled three are discarded.
	if st := f.stoppedItems(); !slices.Equal(st, []string{"a-4", "a-5", "a-6"}) {
		t.Fatalf("stopped %v", st)
	}
	if _, ok := p.Take("a"); ok {
		t.Fatal("a closed pool handed out an item")
	}
	if err := p.Warm("a"); !errors.Is(err, ErrClosed) {
		t.Fatalf("Warm after Close: %v", err)
	}
}

func TestWarmFillsAhead(t *testing.T) {
	f := newFake()
	p := newPool(t, f, 2, 0)
	if err := p.Warm("d"); err != nil {
		t.Fatal(err)
	}
	s := waitStats(t, p, "d", full)
	if s.Misses != 0 || s.Ready != 2 {
		t.Fatalf("%+v", s)
	}
	if it, ok := p.Take("d"); !ok || it != "d-1" {
		t.Fatalf("take %q %v", it, ok)
	}
}

func TestSizeZeroCountsMisses(t *testing.T) {
	f := newFake()
	p := newPool(t, f, 0, 0)
	for range 3 {
		if _, ok := p.Take("x"); ok {
			t.Fatal("size 0 handed out an item")
		}
	}
	s := waitStats(t, p, "x", func(Stats) bool { return true })
	if s.Misses != 3 || s.Started != 0 || s.Starting {
		t.Fatalf("%+v", s)
	}
}

func TestFailuresBackOffAndRecover(t *testing.T) {
	f := newFake()
	f.fail = errors.New("image missing")
	p := newPool(t, f, 1, 0)
	p.Warm("k")
	s := waitStats(t, p, "k", func(s Stats) bool { return s.Failures >= 3 })
	if s.LastError != "image missing" || s.Ready != 0 || !s.Starting {
		t.Fatalf("while failing: %+v", s)
	}
	f.mu.Lock()
	f.fail = nil
	f.mu.Unlock()
	s = waitStats(t, p, "k", full)
	if s.LastError != "" || s.Started != 1 {
		t.Fatalf("after recovering: %+v", s)
	}
}

func TestEvictionDiscardsLeastRecentlyUsed(t *testing.T) {
	f := newFake()
	p := newPool(t, f, 1, 2)
	p.Warm("a")
	waitStats(t, p, "a", full)
	p.Warm("b")
	waitStats(t, p, "b", full)
	p.Take("a") // a is now the most recently used (and refills)
	waitStats(t, p, "a", full)
	p.Warm("c") // evicts b
	waitStats(t, p, "c", full)
	for _, s := range p.Stats() {
		if s.Key == "b" {
			t.Fatalf("b still kept: %+v", p.Stats())
		}
	}
	deadline := time.Now().Add(5 * time.Second)
	for !slices.Equal(f.stoppedItems(), []string{"b-2"}) {
		if time.Now().After(deadline) {
			t.Fatalf("stopped %v, want b's item", f.stoppedItems())
		}
		time.Sleep(2 * time.Millisecond)
	}
}

func TestCloseCancelsStartsInFlight(t *testing.T) {
	f := newFake()
	f.gate = make(chan struct{})
	p := newPool(t, f, 2, 0)
	p.Warm("g")
	waitStats(t, p, "g", func(s Stats) bool { return s.Starting })
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := p.Close(ctx); err != nil {
		t.Fatalf("close with a start blocked: %v", err)
	}
	if n := len(f.stoppedItems()); n != 0 {
		t.Fatalf("%d items stopped, none was made", n)
	}
}

// An item whose start finishes after Close is discarded, not kept.
func TestItemMadeAfterCloseIsDiscarded(t *testing.T) {
	f := newFake()
	started := make(chan struct{})
	release := make(chan struct{})
	p, err := New(Options[string, string]{
		Size: 1, Logger: quiet(),
		Start: func(ctx context.Context, key string) (string, error) {
			close(started)
			<-release // ignores ctx: a backend that cannot cancel
			return "late", nil
		},
		Stop: f.stop,
	})
	if err != nil {
		t.Fatal(err)
	}
	p.Warm("k")
	<-started
	closed := make(chan error, 1)
	go func() { closed <- p.Close(context.Background()) }()
	// Close waits for the start in flight.
	select {
	case err := <-closed:
		t.Fatalf("Close returned before the start ended: %v", err)
	case <-time.After(50 * time.Millisecond):
	}
	close(release)
	if err := <-closed; err != nil {
		t.Fatal(err)
	}
	if st := f.stoppedItems(); !slices.Equal(st, []string{"late"}) {
		t.Fatalf("stopped %v", st)
	}
}

func TestCloseTimesOut(t *testing.T) {
	release := make(chan struct{})
	started := make(chan struct{})
	var once sync.Once
	p, err := New(Options[string, string]{
		Size: 1, Logger: quiet(),
		Start: func(ctx context.Context, key string) (string, error) {
			once.Do(func() { close(started) })
			<-release
			return "", errors.New("never mind")
		},
		Stop: func(context.Context, string, string) {},
	})
	if err != nil {
		t.Fatal(err)
	}
	p.Warm("k")
	<-started // Close finds a start in progress
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if err := p.Close(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("close: %v", err)
	}
	close(release)
	// The refill goroutine ends by itself once its start returns.
	p.wg.Wait()
}

func TestConcurrentTakes(t *testing.T) {
	f := newFake()
	p := newPool(t, f, 4, 0)
	p.Warm("c")
	waitStats(t, p, "c", full)
	var mu sync.Mutex
	seen := map[string]bool{}
	var wg sync.WaitGroup
	for range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 20 {
				if it, ok := p.Take("c"); ok {
					mu.Lock()
					if seen[it] {
						t.Errorf("%s handed out twice", it)
					}
					seen[it] = true
					mu.Unlock()
				}
			}
		}()
	}
	wg.Wait()
	s := waitStats(t, p, "c", func(Stats) bool { return true })
	if int(s.Takes) != len(seen) || s.Takes+s.Misses != 16*20 {
		t.Fatalf("%+v, %d distinct items", s, len(seen))
	}
}

func TestNewRejectsBadOptions(t *testing.T) {
	if _, err := New(Options[string, string]{Size: 1}); err == nil {
		t.Fatal("no Start/Stop accepted")
	}
	f := newFake()
	if _, err := New(Options[string, string]{Size: -1, Start: f.start, Stop: f.stop}); err == nil {
		t.Fatal("negative size accepted")
	}
}
