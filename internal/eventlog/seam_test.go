package eventlog

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/agentd/agentd/store/memstore"
)

// A subscriber already live when a commit fails never sees the failed
// events: they are published only once stored. Were they handed out before
// the commit, the subscriber would get the phantom event under the seq the
// next, real event then takes, and pass the real one over as a repeat.
func TestLiveSubscriberNeverSeesAFailedCommit(t *testing.T) {
	for _, depth := range []int{1, 3} {
		t.Run(fmt.Sprintf("depth%d", depth), func(t *testing.T) {
			fs := &failingStore{EventStore: memstore.New()}
			l := New(fs, Options{CommitDepth: depth})
			defer l.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			sub, err := l.Subscribe(ctx, "s", 0)
			if err != nil {
				t.Fatal(err)
			}
			defer sub.Close()
			if _, err := l.Append(ctx, "s", logEvent("1")); err != nil {
				t.Fatal(err)
			}
			if r, err := sub.Next(ctx); err != nil || r.Event.Seq != 1 {
				t.Fatalf("first event: %v %v", r.Event, err)
			}
			// Caught up: the subscription is live now.
			if _, ok, err := sub.TryNext(ctx); ok || err != nil {
				t.Fatalf("TryNext after catching up: ok %v err %v", ok, err)
			}
			if !sub.live {
				t.Fatal("the subscription is not live after catching up")
			}
			fs.fail.Store(true)
			if _, err := l.Append(ctx, "s", logEvent("lost"), logEvent("lost too")); err == nil {
				t.Fatal("want an error from the failing store")
			}
			if r, ok, err := sub.TryNext(ctx); ok || err != nil {
				t.Fatalf("after the failed commit the subscriber got %v (ok %v, err %v), want nothing", r.Event, ok, err)
			}
			fs.fail.Store(false)
			for i, msg := range []string{"2", "3"} {
				if _, err := l.Append(ctx, "s", logEvent(msg)); err != nil {
					t.Fatal(err)
				}
				r, err := sub.Next(ctx)
				if err != nil {
					t.Fatal(err)
				}
				if got := msgOf(t, r.Event); r.Event.Seq != int64(i+2) || got != msg {
					t.Fatalf("live subscriber got seq %d %q, want seq %d %q", r.Event.Seq, got, i+2, msg)
				}
			}
		})
	}
}

// A log started over a store that holds events (a restart) has published
// nothing yet: a subscriber resuming at any point replays exactly what it
// misses and then goes live, the replay-to-live seam at the store's tail
// (catchUp reads the tail when nothing was published in this process).
func TestResumeAfterRestartAtEveryCursor(t *testing.T) {
	const n = 5
	pages := []int{2, 100}
	// One session per case, each holding n events, written by an earlier
	// log (process).
	name := func(page int, after int64) string { return fmt.Sprintf("p%d-a%d", page, after) }
	st := memstore.New()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	first := New(st, Options{})
	for _, page := range pages {
		for after := int64(0); after <= n; after++ {
			for i := 1; i <= n; i++ {
				if _, err := first.Append(ctx, name(page, after), logEvent(fmt.Sprint(i))); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	first.Close()
	for _, page := range pages {
		for after := int64(0); after <= n; after++ {
			t.Run(name(page, after), func(t *testing.T) {
				// A new log per case: nothing published in it yet.
				l := New(st, Options{ReplayPage: page})
				defer l.Close()
				id := name(page, after)
				sub, err := l.Subscribe(ctx, id, after)
				if err != nil {
					t.Fatal(err)
				}
				defer sub.Close()
				// TryNext reads stored events without waiting for live
				// ones: each missing event must be there right away.
				for want := after + 1; want <= n; want++ {
					r, ok, err := sub.TryNext(ctx)
					if err != nil || !ok {
						t.Fatalf("at seq %d: ok %v err %v (went live before the store's tail?)", want, ok, err)
					}
					if r.Event.Seq != want || msgOf(t, r.Event) != fmt.Sprint(want) {
						t.Fatalf("got seq %d, want %d", r.Event.Seq, want)
					}
				}
				if r, ok, err := sub.TryNext(ctx); ok || err != nil {
					t.Fatalf("after the tail: %v ok %v err %v, want nothing yet", r.Event, ok, err)
				}
				if _, err := l.Append(ctx, id, logEvent("next")); err != nil {
					t.Fatal(err)
				}
				r, err := sub.Next(ctx)
				if err != nil || r.Event.Seq != n+1 || msgOf(t, r.Event) != "next" {
					t.Fatalf("live event: seq %d err %v, want %d", r.Event.Seq, err, n+1)
				}
			})
		}
	}
}
