package eventlog

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/agentd/agentd/conversation"
	"github.com/agentd/agentd/store/memstore"
)

// unencodable are events json.Marshal fails on: before Append checked for
// them, the writer goroutine panicked publishing one (after storing it), and
// took the server down.
func unencodable() map[string]conversation.Event {
	return map[string]conversation.Event{
		"payload that is not JSON": {Type: conversation.TypeLog, Payload: json.RawMessage(`{"level":`)},
		"timestamp in year 10000":  logEvent("x").At(time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC)),
		"timestamp 24h off UTC":    logEvent("x").At(time.Date(2026, 1, 1, 0, 0, 0, 0, time.FixedZone("far", 24*3600))),
	}
}

// A bad event is refused with an error to its appender, alone or with good
// events in the same call; it is never stored nor published, and appenders
// whose events share the writer's batches with it lose nothing.
func TestAppendRefusesUnencodableEvents(t *testing.T) {
	st := memstore.New()
	l := New(st, Options{})
	defer l.Close()
	ctx := context.Background()
	sub, _ := l.Subscribe(ctx, "s", 0)
	defer sub.Close()
	// Live before the appends: the writer encodes each event it publishes.
	if _, ok, err := sub.TryNext(ctx); ok || err != nil {
		t.Fatalf("empty log: %v %v", ok, err)
	}

	const appenders, each = 8, 40
	var wg sync.WaitGroup
	errs := make(chan error, appenders*each+len(unencodable())*each*2)
	for i := range appenders {
		wg.Go(func() {
			for j := range each {
				if _, err := l.Append(ctx, "s", logEvent(fmt.Sprintf("good %d-%d", i, j))); err != nil {
					errs <- fmt.Errorf("good append refused: %w", err)
				}
			}
		})
	}
	for name, bad := range unencodable() {
		wg.Go(func() {
			for range each {
				if _, err := l.Append(ctx, "s", bad); err == nil {
					errs <- fmt.Errorf("%s: accepted", name)
				}
				if _, err := l.Append(ctx, "s", logEvent("beside a bad one"), bad); err == nil {
					errs <- fmt.Errorf("%s beside a good event: accepted", name)
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}

	stored, err := st.ReadEvents(ctx, "s", 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(stored) != appenders*each {
		t.Fatalf("stored %d events, want the %d good ones", len(stored), appenders*each)
	}
	for i, e := range stored {
		if e.Seq != int64(i+1) {
			t.Fatalf("stored event %d has seq %d: a refused event took a seq", i, e.Seq)
		}
		if m := msgOf(t, e); m == "beside a bad one" || m == "x" {
			t.Fatalf("stored %q from a refused append", m)
		}
	}
	for i := range stored {
		r, err := sub.Next(ctx)
		if err != nil {
			t.Fatalf("subscriber after %d events: %v", i, err)
		}
		if r.Event.Seq != int64(i+1) || !json.Valid(r.JSON) {
			t.Fatalf("subscriber got seq %d (%s), want %d", r.Event.Seq, r.JSON, i+1)
		}
	}
	// The log goes on.
	if got, err := l.Append(ctx, "s", logEvent("after")); err != nil || got[0].Seq != int64(len(stored)+1) {
		t.Fatalf("append after the refusals: %v %v", got, err)
	}
}

// An event the store holds but JSON cannot carry (written by an older
// server, which stored it and then crashed publishing it) is skipped on
// replay instead of panicking the subscriber's goroutine: the events around
// it are delivered.
func TestReplaySkipsUnencodableStoredEvent(t *testing.T) {
	st := memstore.New()
	ctx := context.Background()
	var evs []conversation.Event
	for i, e := range []conversation.Event{logEvent("before"), unencodable()["timestamp in year 10000"], logEvent("after")} {
		e.Seq = int64(i + 1)
		e.Context.SessionID = "s"
		if e.Context.Timestamp.IsZero() {
			e.Context.Timestamp = time.Now()
		}
		evs = append(evs, e)
	}
	if err := st.AppendEvents(ctx, evs); err != nil {
		t.Fatal(err)
	}
	l := New(st, Options{})
	defer l.Close()
	sub, _ := l.Subscribe(ctx, "s", 0)
	defer sub.Close()
	for _, want := range []int64{1, 3} {
		r, err := sub.Next(ctx)
		if err != nil || r.Event.Seq != want {
			t.Fatalf("got seq %d (%v), want %d", r.Event.Seq, err, want)
		}
	}
}

// FuzzAppendCheck: whatever Append accepts, the writer can encode. The
// check is the guard that keeps the writer from panicking; it must not let
// through anything json.Marshal refuses.
func FuzzAppendCheck(f *testing.F) {
	f.Add([]byte(`{"a":1}`), int64(0), 0)
	f.Add([]byte(`{"level":`), int64(253402300800000), 3600)
	f.Add([]byte("\"\xff\""), int64(-62167219200001), 86400)
	f.Add([]byte(nil), int64(1), -86399)
	f.Fuzz(func(t *testing.T, payload []byte, ms int64, offset int) {
		e := conversation.Event{Type: conversation.TypeLog, Payload: payload}
		e.Context.Timestamp = time.UnixMilli(ms).In(time.FixedZone("z", offset%(48*3600)))
		if checkEncodable(e) != nil {
			return
		}
		if len(e.Payload) == 0 {
			e.Payload = json.RawMessage("{}") // as the writer does
		}
		if _, err := json.Marshal(e); err != nil {
			t.Fatalf("accepted an event json.Marshal refuses: %v", err)
		}
	})
}
