package eventlog

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/agentd/agentd/store/memstore"
)

// One event may be tens of MiB (an agent's output line), so a record count
// alone bounds nothing: the queue is bounded in bytes too. The bound is
// exact like the record bound, and a record into an empty queue always
// fits, however large.
func TestQueueByteBound(t *testing.T) {
	reg := prometheus.NewRegistry()
	msg := strings.Repeat("x", 1000)
	// Every event below has about this size (the timestamp's length varies
	// by a few bytes): three fit in the bound, a fourth does not.
	enc, err := Encode(logEvent(msg))
	if err != nil {
		t.Fatal(err)
	}
	size := int64(len(enc))
	bound := 3*size + size/2
	l := New(memstore.New(), Options{QueueSize: 1000, QueueBytes: bound, Registerer: reg})
	defer l.Close()
	ctx := context.Background()
	sub, _ := l.Subscribe(ctx, "s", 0)
	defer sub.Close()
	sub.TryNext(ctx) // registers
	for i := 0; i < 3; i++ {
		if _, err := l.Append(ctx, "s", logEvent(msg)); err != nil {
			t.Fatal(err)
		}
	}
	if n := subscribers(l, "s"); n != 1 {
		t.Fatalf("cut off with 3 records (~%d bytes) queued, bound %d bytes", 3*size, bound)
	}
	l.Append(ctx, "s", logEvent(msg))
	if n := subscribers(l, "s"); n != 0 {
		t.Fatalf("still subscribed with ~%d bytes queued, bound %d", 4*size, bound)
	}
	if got := slowCount(l); got != 1 {
		t.Fatalf("agentd_event_slow_consumers_total = %v, want 1", got)
	}
	for want := int64(1); want <= 3; want++ {
		if r, err := sub.Next(ctx); err != nil || r.Event.Seq != want {
			t.Fatalf("got %d %v, want %d", r.Event.Seq, err, want)
		}
	}
	if _, err := sub.Next(ctx); !errors.Is(err, ErrSlowConsumer) {
		t.Fatalf("after the queue: %v, want ErrSlowConsumer", err)
	}

	// A record larger than the whole bound still reaches a subscriber that
	// keeps up; the bytes count again from zero once it took the queue.
	big, _ := l.Subscribe(ctx, "b", 0)
	defer big.Close()
	big.TryNext(ctx)
	for i := 1; i <= 3; i++ {
		l.Append(ctx, "b", logEvent(strings.Repeat("y", int(10*size))))
		if r, err := big.Next(ctx); err != nil || r.Event.Seq != int64(i) {
			t.Fatalf("large record %d: got %d %v", i, r.Event.Seq, err)
		}
	}
	if n := subscribers(l, "b"); n != 1 {
		t.Fatal("a subscriber keeping up with large records was cut off")
	}
}

// A transport that finds its client stuck (a socket write blocked past its
// deadline) ends the subscription as a slow consumer: it is counted once,
// also when the queue bound had cut it off already.
func TestFellBehind(t *testing.T) {
	reg := prometheus.NewRegistry()
	l := New(memstore.New(), Options{QueueSize: 2, Registerer: reg})
	defer l.Close()
	ctx := context.Background()
	sub, _ := l.Subscribe(ctx, "s", 0)
	defer sub.Close()
	sub.TryNext(ctx)
	l.Append(ctx, "s", logEvent("1"))
	sub.FellBehind()
	sub.FellBehind()
	if got := slowCount(l); got != 1 {
		t.Fatalf("after FellBehind twice: %v slow consumers, want 1", got)
	}
	if n := subscribers(l, "s"); n != 0 {
		t.Fatal("still subscribed after FellBehind")
	}
	if r, err := sub.Next(ctx); err != nil || r.Event.Seq != 1 {
		t.Fatalf("queued record: %d %v", r.Event.Seq, err)
	}
	if _, err := sub.Next(ctx); !errors.Is(err, ErrSlowConsumer) {
		t.Fatalf("after FellBehind: %v, want ErrSlowConsumer", err)
	}

	// Cut off by the queue bound, then found stuck by its transport: one.
	over, _ := l.Subscribe(ctx, "t", 0)
	defer over.Close()
	over.TryNext(ctx)
	l.Append(ctx, "t", logEvent("a"), logEvent("b"), logEvent("c"))
	over.FellBehind()
	if got := slowCount(l); got != 2 {
		t.Fatalf("%v slow consumers, want 2", got)
	}
	// A consumer that has no subscription (a session-list watcher).
	l.CountSlowConsumer()
	if got := slowCount(l); got != 3 {
		t.Fatalf("%v slow consumers, want 3", got)
	}
	// Closed before: not a slow consumer.
	done, _ := l.Subscribe(ctx, "u", 0)
	done.Close()
	done.FellBehind()
	if got := slowCount(l); got != 3 {
		t.Fatalf("%v slow consumers after a closed one, want 3", got)
	}
}

func slowCount(l *Log) float64 {
	var m dto.Metric
	if err := l.m.slow.Write(&m); err != nil {
		panic(err)
	}
	return m.GetCounter().GetValue()
}
