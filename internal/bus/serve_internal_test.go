package bus

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/agentd/agentd/internal/bus/natstest"
)

// A request the NATS server delivered to a server before it stopped
// serving the session is still answered: stop drains, it does not drop
// (a dropped request leaves its sender waiting out its whole timeout;
// TestFleetKillNode once failed so, after a take-over that released the
// lease as another node's send reached it).
func TestStopAnswersDeliveredRequests(t *testing.T) {
	url, prefix := natstest.URL(t), natstest.Prefix(t)
	openBus := func(name string) *Bus {
		b, err := Open(context.Background(), Options{URL: url, Prefix: prefix, Name: name, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(b.Close)
		return b
	}
	a, b := openBus("a"), openBus("b")
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()

	entered, release := make(chan struct{}), make(chan struct{})
	stop, err := b.Serve("s1", func(_ context.Context, req []byte) []byte {
		if string(req) == "first" {
			close(entered)
			<-release
		}
		return append([]byte("b got "), req...)
	})
	if err != nil {
		t.Fatal(err)
	}
	probeStop, err := b.Serve("probe", func(context.Context, []byte) []byte { return []byte("ok") })
	if err != nil {
		t.Fatal(err)
	}
	defer probeStop()

	type result struct {
		rep string
		err error
	}
	request := func(body string) <-chan result {
		ch := make(chan result, 1)
		go func() {
			rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			defer cancel()
			rep, err := a.Request(rctx, "s1", []byte(body))
			ch <- result{string(rep), err}
		}()
		return ch
	}
	first := request("first")
	<-entered // b handles "first" and blocks: "second" will wait in b's queue
	out := a.nc.Stats().OutMsgs
	second := request("second")
	for a.nc.Stats().OutMsgs == out {
		time.Sleep(time.Millisecond) // until a has published "second"
	}
	// NATS keeps one publisher's messages in order to one subscriber:
	// once b answered the probe, "second" is in b's queue.
	if rep, err := a.Request(ctx, "probe", nil); err != nil || string(rep) != "ok" {
		t.Fatalf("probe = %q, %v", rep, err)
	}
	stop()
	close(release)
	for _, c := range []struct {
		ch   <-chan result
		want string
	}{{first, "b got first"}, {second, "b got second"}} {
		r := <-c.ch
		if r.err != nil || r.rep != c.want {
			t.Fatalf("reply = %q, %v; want %q", r.rep, r.err, c.want)
		}
	}
	// Requests sent after stop get no responder, at once.
	if _, err := a.Request(ctx, "s1", []byte("third")); err != ErrNoResponder {
		t.Fatalf("Request after stop = %v, want ErrNoResponder", err)
	}
}
