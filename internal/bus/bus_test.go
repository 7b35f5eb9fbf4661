package bus_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/agentd/agentd/internal/bus"
	"github.com/agentd/agentd/internal/bus/natstest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func open(t *testing.T, url, prefix, name string) *bus.Bus {
	t.Helper()
	b, err := bus.Open(context.Background(), bus.Options{URL: url, Prefix: prefix, Name: name, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	return b
}

// collector gathers what a Follow delivers.
type collector struct {
	mu   sync.Mutex
	msgs []string
	lost int
	more chan struct{}
}

func newCollector() *collector { return &collector{more: make(chan struct{}, 1)} }

func (c *collector) deliver(msg []byte) {
	c.mu.Lock()
	if msg == nil {
		c.lost++
	} else {
		c.msgs = append(c.msgs, string(msg))
	}
	c.mu.Unlock()
	select {
	case c.more <- struct{}{}:
	default:
	}
}

func (c *collector) wait(t *testing.T, cond func(msgs []string, lost int) bool) {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for {
		c.mu.Lock()
		ok := cond(c.msgs, c.lost)
		c.mu.Unlock()
		if ok {
			return
		}
		select {
		case <-c.more:
		case <-deadline:
			c.mu.Lock()
			defer c.mu.Unlock()
			t.Fatalf("timed out; got %d messages, %d losses", len(c.msgs), c.lost)
		}
	}
}

// A session's messages reach every other follower in publication order; a
// server does not hear its own, nor another fleet's (prefix), nor
// another session's.
func TestFollowOrderAndScope(t *testing.T) {
	url := natstest.URL(t)
	prefix := natstest.Prefix(t)
	a, b, c := open(t, url, prefix, "a"), open(t, url, prefix, "b"), open(t, url, natstest.Prefix(t), "c")
	onA, onB, onC, other := newCollector(), newCollector(), newCollector(), newCollector()
	for _, f := range []struct {
		b  *bus.Bus
		c  *collector
		id string
	}{{a, onA, "s1"}, {b, onB, "s1"}, {c, onC, "s1"}, {b, other, "s2"}} {
		stop, err := f.b.Follow(f.id, f.c.deliver)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(stop)
	}
	const n = 2000
	for i := range n {
		if err := a.Publish("s1", []byte(strconv.Itoa(i))); err != nil {
			t.Fatal(err)
		}
	}
	onB.wait(t, func(msgs []string, _ int) bool { return len(msgs) >= n })
	for i, m := range onB.msgs {
		if m != strconv.Itoa(i) {
			t.Fatalf("message %d is %q: out of order", i, m)
		}
	}
	// A marker through another fleet's bus and session proves the others
	// had their chance to (wrongly) receive.
	if err := a.Publish("s2", []byte("x")); err != nil {
		t.Fatal(err)
	}
	other.wait(t, func(msgs []string, _ int) bool { return len(msgs) == 1 })
	onA.mu.Lock()
	onC.mu.Lock()
	if len(onA.msgs) != 0 || len(onC.msgs) != 0 {
		t.Errorf("the publisher got %d of its own messages, another fleet %d", len(onA.msgs), len(onC.msgs))
	}
	onC.mu.Unlock()
	onA.mu.Unlock()
}

// Commands reach the server serving the session and come back with its
// answer; with nobody serving it, Request fails ErrNoResponder at once.
func TestRequestServe(t *testing.T) {
	url := natstest.URL(t)
	prefix := natstest.Prefix(t)
	a, b := open(t, url, prefix, "a"), open(t, url, prefix, "b")
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	start := time.Now()
	if _, err := a.Request(ctx, "s1", []byte("hello")); !errors.Is(err, bus.ErrNoResponder) {
		t.Fatalf("Request with nobody serving = %v, want ErrNoResponder", err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Fatalf("no responder took %v to tell", d)
	}
	stop, err := b.Serve("s1", func(ctx context.Context, req []byte) []byte { return append([]byte("b got "), req...) })
	if err != nil {
		t.Fatal(err)
	}
	rep, err := a.Request(ctx, "s1", []byte("hello"))
	if err != nil || string(rep) != "b got hello" {
		t.Fatalf("Request = %q, %v", rep, err)
	}
	stop()
	if _, err := a.Request(ctx, "s1", []byte("again")); !errors.Is(err, bus.ErrNoResponder) {
		t.Fatalf("Request after the server stopped serving = %v, want ErrNoResponder", err)
	}
	// A request ends with its context.
	stop, err = b.Serve("slow", func(ctx context.Context, req []byte) []byte { <-ctx.Done(); return nil })
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	cctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	if _, err := a.Request(cctx, "slow", nil); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Request past its deadline = %v", err)
	}
}

func TestNotices(t *testing.T) {
	url := natstest.URL(t)
	prefix := natstest.Prefix(t)
	a, b := open(t, url, prefix, "a"), open(t, url, prefix, "b")
	got := newCollector()
	stop, err := b.Notices(got.deliver)
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	for i := range 3 {
		if err := a.Announce([]byte(fmt.Sprint("n", i))); err != nil {
			t.Fatal(err)
		}
	}
	got.wait(t, func(msgs []string, _ int) bool { return strings.Join(msgs, ",") == "n0,n1,n2" })
}

// Session ids become subject tokens: anything but letters, digits, '-'
// and '_' is refused before it reaches NATS (no wildcard, no extra
// token).
func TestInvalidSubjects(t *testing.T) {
	b := open(t, natstest.URL(t), natstest.Prefix(t), "a")
	for _, id := range []string{"", "a.b", "*", ">", "a b", "s1.>", strings.Repeat("x", 200)} {
		if err := b.Publish(id, nil); !errors.Is(err, bus.ErrInvalidSubject) {
			t.Errorf("Publish(%q) = %v", id, err)
		}
		if _, err := b.Follow(id, func([]byte) {}); !errors.Is(err, bus.ErrInvalidSubject) {
			t.Errorf("Follow(%q) = %v", id, err)
		}
		if _, err := b.Request(context.Background(), id, nil); !errors.Is(err, bus.ErrInvalidSubject) {
			t.Errorf("Request(%q) = %v", id, err)
		}
		if _, err := b.Serve(id, nil); !errors.Is(err, bus.ErrInvalidSubject) {
			t.Errorf("Serve(%q) = %v", id, err)
		}
	}
	if _, err := bus.Open(context.Background(), bus.Options{URL: "nats://127.0.0.1:1", Prefix: "a.*"}); err == nil {
		t.Error("a wildcard prefix was accepted")
	}
}

// A server that cannot be reached fails Open with the URL (without its
// password) in the error.
func TestOpenUnreachable(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err := bus.Open(ctx, bus.Options{URL: "nats://user:secret@127.0.0.1:1", ConnectTimeout: time.Second, Logger: slog.New(slog.DiscardHandler)})
	if err == nil || strings.Contains(err.Error(), "secret") || !strings.Contains(err.Error(), "127.0.0.1:1") {
		t.Fatalf("Open of an unreachable server = %v", err)
	}
}

// When the connection is re-made, followers are told that messages may
// have been lost, and delivery resumes; Status says what happened.
func TestReconnectReportsLoss(t *testing.T) {
	dir := t.TempDir()
	srv, err := natstest.StartServer(dir)
	if err != nil {
		t.Skip(err)
	}
	defer func() { srv.Stop() }()
	prefix := natstest.Prefix(t)
	a, b := open(t, srv.URL, prefix, "a"), open(t, srv.URL, prefix, "b")
	got := newCollector()
	stop, err := b.Follow("s1", got.deliver)
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	if err := a.Publish("s1", []byte("before")); err != nil {
		t.Fatal(err)
	}
	got.wait(t, func(msgs []string, _ int) bool { return len(msgs) == 1 })

	port := srv.URL[strings.LastIndex(srv.URL, ":")+1:]
	srv.Stop()
	waitStatus(t, b, false)
	srv2, err := natstest.StartServerOn(t.TempDir(), port)
	if err != nil {
		t.Fatal(err)
	}
	defer srv2.Stop()
	got.wait(t, func(_ []string, lost int) bool { return lost >= 1 })
	waitStatus(t, a, true)
	waitStatus(t, b, true)
	// Delivery resumes (a's subscription to nothing, b's re-made).
	for i := 0; ; i++ {
		if err := a.Publish("s1", []byte("after")); err != nil {
			t.Fatal(err)
		}
		got.mu.Lock()
		n := len(got.msgs)
		got.mu.Unlock()
		if n >= 2 {
			break
		}
		if i > 500 {
			t.Fatal("no delivery after the reconnect")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func waitStatus(t *testing.T, b *bus.Bus, connected bool) {
	t.Helper()
	for deadline := time.Now().Add(20 * time.Second); b.Status().Connected != connected; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("bus status %+v, want connected=%v", b.Status(), connected)
		}
	}
	if st := b.Status(); !connected && st.Error == "" {
		t.Errorf("a disconnected bus says no error: %+v", st)
	}
}
