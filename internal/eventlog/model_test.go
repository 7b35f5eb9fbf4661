package eventlog

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/agentd/agentd/conversation"
	"github.com/agentd/agentd/internal/bus"
	"github.com/agentd/agentd/internal/bus/natstest"
	"github.com/agentd/agentd/store/memstore"
)

// The event log against a model: per session, the list of its events.
// Random appends (several sessions, batch sizes, concurrent appenders
// sharing a group commit), subscriptions at random cursors, consumers that
// read only now and then (a small QueueSize, so they are cut off), closing
// subscriptions, and restarts (the log closed and a new one opened on the
// same store). Checked: every subscriber reads exactly the model's events
// after its cursor, seqs contiguous, no repeat; one is cut off with
// ErrSlowConsumer exactly when more than QueueSize events were published to
// it since it last read, after reading the QueueSize it had queued; a
// subscriber cut off, or ended by a restart, resumes from its last seq and
// misses nothing.
func TestLogModel(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		m := &logModel{
			st:     memstore.New(),
			events: make(map[string][]string),
			opts: Options{
				QueueSize:   rapid.IntRange(1, 6).Draw(t, "queueSize"),
				ReplayPage:  rapid.IntRange(1, 5).Draw(t, "replayPage"),
				MaxBatch:    rapid.IntRange(1, 8).Draw(t, "maxBatch"),
				CommitDepth: rapid.SampledFrom([]int{1, 3}).Draw(t, "commitDepth"),
			},
		}
		m.l = New(m.st, m.opts)
		defer m.close()
		t.Repeat(map[string]func(*rapid.T){
			"append":  m.append,
			"appends": m.appendConcurrently,
			"subscribe": func(t *rapid.T) {
				id := rapid.SampledFrom(modelSessions).Draw(t, "session")
				after := rapid.Int64Range(0, int64(len(m.events[id]))).Draw(t, "after")
				m.subscribe(t, id, after)
			},
			"read": func(t *rapid.T) {
				if len(m.subs) == 0 {
					t.Skip("no subscriber")
				}
				m.read(t, rapid.SampledFrom(m.subs).Draw(t, "sub"))
			},
			"unsubscribe": func(t *rapid.T) {
				if len(m.subs) == 0 {
					t.Skip("no subscriber")
				}
				i := rapid.IntRange(0, len(m.subs)-1).Draw(t, "sub")
				m.subs[i].sub.Close()
				m.subs = append(m.subs[:i], m.subs[i+1:]...)
			},
			"restart": m.restart,
		})
		// In the end every subscriber reads up to its session's tail.
		for _, ms := range m.subs {
			for m.read(t, ms) {
			}
			if got, want := ms.sub.Last(), int64(len(m.events[ms.id])); got != want {
				t.Fatalf("subscriber of %s at seq %d, the session has %d", ms.id, got, want)
			}
		}
	})
}

var modelSessions = []string{"a", "b", "c"}

type logModel struct {
	st     *memstore.Store
	opts   Options
	l      *Log
	events map[string][]string // per session, the message of seq i+1 at i
	subs   []*modelSub
	n      int // messages made
}

type modelSub struct {
	id  string
	sub *Subscription
	// live: the last read found nothing more, so the subscription is
	// registered for live events; queued counts what was published to it
	// since (its queue).
	live   bool
	queued int
}

func (m *logModel) close() {
	for _, ms := range m.subs {
		ms.sub.Close()
	}
	m.l.Close()
}

func (m *logModel) batch(t *rapid.T) []conversation.Event {
	n := rapid.IntRange(1, 5).Draw(t, "batch")
	evs := make([]conversation.Event, n)
	for i := range evs {
		m.n++
		evs[i] = logEvent(fmt.Sprint("m", m.n))
	}
	return evs
}

// stored records what an append returned in the model.
func (m *logModel) stored(t *rapid.T, id string, evs []conversation.Event) {
	for _, e := range evs {
		if e.Seq != int64(len(m.events[id])+1) {
			t.Fatalf("%s: appended seq %d after %d", id, e.Seq, len(m.events[id]))
		}
		m.events[id] = append(m.events[id], modelMsg(t, e))
	}
	for _, ms := range m.subs {
		if ms.id == id && ms.live {
			ms.queued += len(evs)
		}
	}
}

func (m *logModel) append(t *rapid.T) {
	id := rapid.SampledFrom(modelSessions).Draw(t, "session")
	evs, err := m.l.Append(context.Background(), id, m.batch(t)...)
	if err != nil {
		t.Fatal(err)
	}
	m.stored(t, id, evs)
}

// appendConcurrently appends to distinct sessions from several goroutines
// at once, so that their requests may share a commit.
func (m *logModel) appendConcurrently(t *rapid.T) {
	ids := rapid.SliceOfNDistinct(rapid.SampledFrom(modelSessions), 2, 3, rapid.ID[string]).Draw(t, "sessions")
	batches := make([][]conversation.Event, len(ids))
	for i := range ids {
		batches[i] = m.batch(t)
	}
	errs := make([]error, len(ids))
	var wg sync.WaitGroup
	for i, id := range ids {
		wg.Go(func() { batches[i], errs[i] = m.l.Append(context.Background(), id, batches[i]...) })
	}
	wg.Wait()
	for i, id := range ids {
		if errs[i] != nil {
			t.Fatal(errs[i])
		}
		m.stored(t, id, batches[i])
	}
}

func (m *logModel) subscribe(t *rapid.T, id string, after int64) {
	sub, err := m.l.Subscribe(context.Background(), id, after)
	if err != nil {
		t.Fatal(err)
	}
	m.subs = append(m.subs, &modelSub{id: id, sub: sub})
}

// read reads what is ready for ms without waiting, checking it against the
// model. A subscriber cut off is replaced by one resuming at its last seq
// (resumed reports it).
func (m *logModel) read(t *rapid.T, ms *modelSub) (resumed bool) {
	ctx := context.Background()
	want := ms.sub.Last() + 1
	n := 0
	for {
		r, ok, err := ms.sub.TryNext(ctx)
		if err != nil {
			if !errors.Is(err, ErrSlowConsumer) {
				t.Fatalf("%s: read after seq %d: %v", ms.id, ms.sub.Last(), err)
			}
			if !ms.live || ms.queued <= m.opts.QueueSize {
				t.Fatalf("%s: cut off with %d queued (bound %d, live %v)", ms.id, ms.queued, m.opts.QueueSize, ms.live)
			}
			if n != m.opts.QueueSize {
				t.Fatalf("%s: cut off after reading %d of its queue, want %d", ms.id, n, m.opts.QueueSize)
			}
			m.resume(t, ms)
			return true
		}
		if !ok {
			break
		}
		m.check(t, ms.id, r, want)
		want++
		n++
	}
	if ms.live && ms.queued > m.opts.QueueSize {
		t.Fatalf("%s: %d published to a live subscriber with a queue of %d, not cut off", ms.id, ms.queued, m.opts.QueueSize)
	}
	if ms.live && n != ms.queued {
		t.Fatalf("%s: read %d live events, %d were published", ms.id, n, ms.queued)
	}
	if got := ms.sub.Last(); got != int64(len(m.events[ms.id])) {
		t.Fatalf("%s: caught up at seq %d, the session has %d", ms.id, got, len(m.events[ms.id]))
	}
	ms.live, ms.queued = true, 0
	return false
}

func (m *logModel) check(t *rapid.T, id string, r Record, want int64) {
	if r.Event.Seq != want {
		t.Fatalf("%s: got seq %d, want %d (a gap or a repeat)", id, r.Event.Seq, want)
	}
	if int(want) > len(m.events[id]) {
		t.Fatalf("%s: got seq %d, only %d appended", id, want, len(m.events[id]))
	}
	if got := modelMsg(t, r.Event); got != m.events[id][want-1] {
		t.Fatalf("%s: seq %d is %q, want %q", id, want, got, m.events[id][want-1])
	}
	if r.Event.Context.SessionID != id {
		t.Fatalf("%s: seq %d of session %q", id, want, r.Event.Context.SessionID)
	}
}

// resume replaces ms's subscription by one from its last seq.
func (m *logModel) resume(t *rapid.T, ms *modelSub) {
	ms.sub.Close()
	sub, err := m.l.Subscribe(context.Background(), ms.id, ms.sub.Last())
	if err != nil {
		t.Fatal(err)
	}
	ms.sub, ms.live, ms.queued = sub, false, 0
}

// restart closes the log and opens a new one on the same store; each
// subscriber reads what it had queued (then ErrClosed) and resumes on the
// new log from its last seq.
func (m *logModel) restart(t *rapid.T) {
	if err := m.l.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := m.l.Append(context.Background(), "a", logEvent("late")); !errors.Is(err, ErrClosed) {
		t.Fatalf("append after Close: %v", err)
	}
	ctx := context.Background()
	for _, ms := range m.subs {
		want := ms.sub.Last() + 1
		n := 0
		for {
			r, ok, err := ms.sub.TryNext(ctx)
			if err != nil {
				slow := ms.live && ms.queued > m.opts.QueueSize
				if slow && !errors.Is(err, ErrSlowConsumer) || !slow && !errors.Is(err, ErrClosed) {
					t.Fatalf("%s: ended with %v (queued %d, bound %d, live %v)", ms.id, err, ms.queued, m.opts.QueueSize, ms.live)
				}
				break
			}
			if !ok {
				t.Fatalf("%s: subscription still open after Close", ms.id)
			}
			m.check(t, ms.id, r, want)
			want++
			n++
		}
		if ms.live && n != min(ms.queued, m.opts.QueueSize) {
			t.Fatalf("%s: read %d queued events at Close, %d were queued", ms.id, n, min(ms.queued, m.opts.QueueSize))
		}
		ms.sub.Close()
	}
	m.l = New(m.st, m.opts)
	for _, ms := range m.subs {
		sub, err := m.l.Subscribe(ctx, ms.id, ms.sub.Last())
		if err != nil {
			t.Fatal(err)
		}
		ms.sub, ms.live, ms.queued = sub, false, 0
	}
}

func modelMsg(t *rapid.T, e conversation.Event) string {
	p, err := e.Decode()
	if err != nil {
		t.Fatal(err)
	}
	return p.(*conversation.LogEvent).Message
}

// The event log in a fleet against the same model: two servers (logs with
// a bus each to one NATS server) over one store; each session is written
// by one server, subscribers sit on either; random appends, subscribes,
// reads, slow consumers and restarts of either server. Delivery to the
// other server is asynchronous, so a read is checked as a prefix (the
// model's events after the cursor, contiguous, no repeat) and, at the end,
// every subscriber must reach its session's tail.
func TestLogModelFleet(t *testing.T) {
	url := natstest.URL(t)
	prefix := natstest.Prefix(t)
	checks := 0
	rapid.Check(t, func(rt *rapid.T) {
		checks++
		opts := Options{
			QueueSize:   rapid.IntRange(2, 8).Draw(rt, "queueSize"),
			ReplayPage:  rapid.IntRange(1, 5).Draw(rt, "replayPage"),
			CommitDepth: rapid.SampledFrom([]int{1, 3}).Draw(rt, "commitDepth"),
		}
		st := memstore.New()
		f := &fleetModel{st: st, opts: opts, events: make(map[string][]string)}
		for i := range f.nodes {
			b, err := bus.Open(context.Background(), bus.Options{URL: url, Prefix: fmt.Sprint(prefix, "c", checks), Name: fmt.Sprint("node", i),
				Logger: slog.New(slog.DiscardHandler)})
			if err != nil {
				rt.Fatal(err)
			}
			f.buses[i] = b
			o := opts
			o.Peers = b
			f.nodes[i] = New(st, o)
		}
		defer f.close()
		rt.Repeat(map[string]func(*rapid.T){
			"append": func(rt *rapid.T) {
				id := rapid.SampledFrom(modelSessions).Draw(rt, "session")
				n := rapid.IntRange(1, 5).Draw(rt, "batch")
				evs := make([]conversation.Event, n)
				for i := range evs {
					f.n++
					evs[i] = logEvent(fmt.Sprint("m", f.n))
				}
				got, err := f.nodes[fleetWriter[id]].Append(context.Background(), id, evs...)
				if err != nil {
					rt.Fatal(err)
				}
				for _, e := range got {
					if e.Seq != int64(len(f.events[id])+1) {
						rt.Fatalf("%s: appended seq %d after %d", id, e.Seq, len(f.events[id]))
					}
					f.events[id] = append(f.events[id], modelMsg(rt, e))
				}
			},
			"subscribe": func(rt *rapid.T) {
				node := rapid.IntRange(0, 1).Draw(rt, "node")
				id := rapid.SampledFrom(modelSessions).Draw(rt, "session")
				after := rapid.Int64Range(0, int64(len(f.events[id]))).Draw(rt, "after")
				sub, err := f.nodes[node].Subscribe(context.Background(), id, after)
				if err != nil {
					rt.Fatal(err)
				}
				f.subs = append(f.subs, &fleetSub{node: node, id: id, sub: sub})
			},
			"read": func(rt *rapid.T) {
				if len(f.subs) == 0 {
					rt.Skip("no subscriber")
				}
				f.read(rt, rapid.SampledFrom(f.subs).Draw(rt, "sub"), false)
			},
			"restart": func(rt *rapid.T) {
				node := rapid.IntRange(0, 1).Draw(rt, "node")
				f.nodes[node].Close()
				f.nodes[node] = nil
				for _, fs := range f.subs {
					if fs.node == node {
						f.read(rt, fs, false) // what was queued, then ErrClosed: resumed on the new log
					}
				}
				o := opts
				o.Peers = f.buses[node]
				f.nodes[node] = New(st, o)
				for _, fs := range f.subs {
					if fs.node == node {
						f.resume(rt, fs)
					}
				}
			},
		})
		for _, fs := range f.subs {
			f.read(rt, fs, true)
		}
	})
}

// fleetWriter is the server writing each session.
var fleetWriter = map[string]int{"a": 0, "b": 1, "c": 0}

type fleetModel struct {
	st     *memstore.Store
	opts   Options
	nodes  [2]*Log
	buses  [2]*bus.Bus
	events map[string][]string
	subs   []*fleetSub
	n      int
}

type fleetSub struct {
	node  int
	id    string
	sub   *Subscription
	ended bool // the log closed under it: resume on the new one
}

func (f *fleetModel) close() {
	for _, fs := range f.subs {
		fs.sub.Close()
	}
	for i := range f.nodes {
		f.nodes[i].Close()
		f.buses[i].Close()
	}
}

// read reads fs: what is ready (all: until its session's tail, waiting),
// checking each event against the model. Cut off, it resumes.
func (f *fleetModel) read(rt *rapid.T, fs *fleetSub, all bool) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for {
		tail := int64(len(f.events[fs.id]))
		if all && fs.sub.Last() >= tail {
			return
		}
		var r Record
		var ok bool
		var err error
		if all {
			r, err = fs.sub.Next(ctx)
			ok = err == nil
		} else {
			r, ok, err = fs.sub.TryNext(ctx)
		}
		switch {
		case errors.Is(err, ErrSlowConsumer) && f.nodes[fs.node] != nil:
			f.resume(rt, fs)
			continue
		case errors.Is(err, ErrSlowConsumer):
			fs.ended = true // the log is closing: resumed on the new one
			return
		case errors.Is(err, ErrClosed) && !all:
			fs.ended = true
			return
		case err != nil:
			rt.Fatalf("%s on node %d after seq %d: %v", fs.id, fs.node, fs.sub.Last(), err)
		case !ok:
			return
		}
		want := fs.sub.Last() // TryNext moved it
		if r.Event.Seq != want || want > tail {
			rt.Fatalf("%s on node %d: got seq %d, cursor %d, %d appended", fs.id, fs.node, r.Event.Seq, want, tail)
		}
		if got := modelMsg(rt, r.Event); got != f.events[fs.id][want-1] {
			rt.Fatalf("%s on node %d: seq %d is %q, want %q", fs.id, fs.node, want, got, f.events[fs.id][want-1])
		}
	}
}

func (f *fleetModel) resume(rt *rapid.T, fs *fleetSub) {
	fs.sub.Close()
	sub, err := f.nodes[fs.node].Subscribe(context.Background(), fs.id, fs.sub.Last())
	if err != nil {
		rt.Fatal(err)
	}
	fs.sub, fs.ended = sub, false
}
