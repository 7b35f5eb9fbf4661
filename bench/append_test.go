package bench

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/agentd/agentd/conversation"
	"github.com/agentd/agentd/internal/eventlog"
	"github.com/agentd/agentd/store"
	"github.com/agentd/agentd/store/postgres"
	"github.com/agentd/agentd/store/postgres/pgtest"
	"github.com/agentd/agentd/store/sqlite"
)

// appendRun is one run of the append scenario: appenders goroutines, each
// the runner of its own session, calling eventlog.Log.Append with perAppend
// events at a time, total appends in all.
type appendRun struct {
	appenders, perAppend, appends int
	sync                          sqlite.Synchronous
	// store is "sqlite" (the default), "postgres" (the test server of
	// store/postgres/pgtest, a schema of its own; synchronous_commit on, as
	// PostgreSQL ships) or "postgres-async" (synchronous_commit=off).
	store string
	// depth is the event log's group commits in flight (0: the store's
	// choice, as a server makes it).
	depth int
	// conns sizes PostgreSQL's connection pool (0: the store's default).
	conns int32
}

type appendResult struct {
	events  int
	elapsed time.Duration
	cpu     time.Duration
	// runqWait is how long the process's threads waited for a CPU.
	runqWait time.Duration
	commits  uint64 // store transactions (group commits)
	stored   uint64 // events in them, from the log's own metrics
	// From the timing wrapper around the store: the duration of each
	// AppendEvents call, the events in each, and their total time (the
	// single writer goroutine's time in the store).
	commit    Summary
	batch     intSummary
	storeBusy time.Duration
	// pgCPU is the PostgreSQL server's CPU time (all its processes), 0
	// for SQLite.
	pgCPU time.Duration
}

func (r appendResult) eventsPerSec() float64 { return float64(r.events) / r.elapsed.Seconds() }
func (r appendResult) batchMean() float64 {
	if r.commits == 0 {
		return 0
	}
	return float64(r.stored) / float64(r.commits)
}

// setupAppend opens a SQLite store in a temporary folder with one session
// per appender and an event log over it. start runs the appends and
// returns what they did; the store and log close when tb ends.
func setupAppend(tb testing.TB, cfg appendRun) (start func() appendResult) {
	tb.Helper()
	ctx := context.Background()
	st, dsn := openAppendStore(tb, cfg)
	pgCPU := func() cpuByPID { return nil }
	if dsn != "" {
		pgCPU = serverCPU(tb, dsn)
	}
	reg := prometheus.NewRegistry()
	ts := &timedStore{EventStore: st}
	lg := eventlog.New(ts, eventlog.Options{Registerer: reg, Logger: quietLogger(), CommitDepth: cfg.depth})
	tb.Cleanup(func() {
		lg.Close()
		st.Close()
	})
	ids := make([]string, cfg.appenders)
	now := time.Now().UTC()
	for i := range ids {
		ids[i] = fmt.Sprintf("append-%d", i)
		rec := store.Session{ID: ids[i], Architecture: "shell", Status: conversation.SessionCreated,
			Runtime: conversation.Runtime{Status: conversation.SessionCreated, Architecture: "shell"}, CreatedAt: now, LastActivity: now}
		if err := st.CreateSession(ctx, rec); err != nil {
			tb.Fatal(err)
		}
	}
	// A realistic streamed-output event: a delta of about 70 characters.
	proto := conversation.Delta("shell-q1-result", "The quick brown fox jumps over the lazy dog; the lazy dog sleeps on.\n")
	return func() appendResult {
		before := commitStats(tb, reg)
		ts.reset()
		cpu0, wait0, pg0 := processCPU(), runqueueWait(), pgCPU()
		t0 := time.Now()
		var wg sync.WaitGroup
		errs := make(chan error, cfg.appenders)
		for a := range cfg.appenders {
			n := cfg.appends / cfg.appenders
			if a < cfg.appends%cfg.appenders {
				n++
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				evs := make([]conversation.Event, cfg.perAppend)
				for range n {
					for i := range evs {
						evs[i] = proto // Append fills seq and context in place
					}
					if _, err := lg.Append(ctx, ids[a], evs...); err != nil {
						errs <- err
						return
					}
				}
			}()
		}
		wg.Wait()
		elapsed := time.Since(t0)
		cpu := processCPU() - cpu0
		wait := runqueueWait() - wait0
		pg := pgCPU().cpuSince(pg0)
		close(errs)
		for err := range errs {
			tb.Fatalf("append: %v", err)
		}
		after := commitStats(tb, reg)
		commitTimes, batches, busy := ts.take()
		return appendResult{
			events: cfg.appends * cfg.perAppend, elapsed: elapsed, cpu: cpu, runqWait: wait,
			commits: after.count - before.count, stored: uint64(after.sum - before.sum),
			commit: Summarize(commitTimes), batch: summarizeInts(batches), storeBusy: busy, pgCPU: pg,
		}
	}
}

// openAppendStore opens the store a run appends to; dsn is PostgreSQL's
// ("" for SQLite).
func openAppendStore(tb testing.TB, cfg appendRun) (st store.Store, dsn string) {
	tb.Helper()
	ctx := context.Background()
	var err error
	switch cfg.store {
	case "", "sqlite":
		st, err = sqlite.Open(ctx, tb.TempDir()+"/agentd.db", sqlite.WithSynchronous(cfg.sync), sqlite.WithLogger(quietLogger()))
	case "postgres", "postgres-async":
		dsn = pgtest.Schema(tb)
		if cfg.store == "postgres-async" {
			if dsn, err = pgtest.WithParam(dsn, "synchronous_commit", "off"); err != nil {
				tb.Fatal(err)
			}
		}
		opts := []postgres.Option{postgres.WithLogger(quietLogger())}
		if cfg.conns > 0 {
			opts = append(opts, postgres.WithMaxConns(cfg.conns))
		}
		st, err = postgres.Open(ctx, dsn, opts...)
	default:
		tb.Fatalf("unknown store %q", cfg.store)
	}
	if err != nil {
		tb.Fatal(err)
	}
	return st, dsn
}

// commitTimer records every AppendEvents call of the event log's writer
// goroutine: its duration and its number of events.
type commitTimer struct {
	mu      sync.Mutex
	times   []time.Duration
	batches []int
	busy    time.Duration
}

func (t *commitTimer) time(events []conversation.Event, store func([]conversation.Event) error) error {
	t0 := time.Now()
	err := store(events)
	d := time.Since(t0)
	t.mu.Lock()
	t.times = append(t.times, d)
	t.batches = append(t.batches, len(events))
	t.busy += d
	t.mu.Unlock()
	return err
}

func (t *commitTimer) reset() {
	t.mu.Lock()
	t.times, t.batches, t.busy = nil, nil, 0
	t.mu.Unlock()
}

func (t *commitTimer) take() ([]time.Duration, []int, time.Duration) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.times, t.batches, t.busy
}

// timedStore is an event store whose appends are timed.
type timedStore struct {
	store.EventStore
	commitTimer
}

func (s *timedStore) AppendEvents(ctx context.Context, events []conversation.Event, fence ...store.Fence) error {
	return s.time(events, func(evs []conversation.Event) error { return s.EventStore.AppendEvents(ctx, evs, fence...) })
}

// AppendConcurrency passes the store's choice of commits in flight on.
func (s *timedStore) AppendConcurrency() int {
	if c, ok := s.EventStore.(interface{ AppendConcurrency() int }); ok {
		return c.AppendConcurrency()
	}
	return 1
}

// timedServerStore is a whole store whose event appends are timed, given
// to agentd.New as Config.Store.
type timedServerStore struct {
	store.Store
	commitTimer
}

func (s *timedServerStore) AppendEvents(ctx context.Context, events []conversation.Event, fence ...store.Fence) error {
	return s.time(events, func(evs []conversation.Event) error { return s.Store.AppendEvents(ctx, evs, fence...) })
}

type intSummary struct{ p50, max int }

func summarizeInts(v []int) intSummary {
	if len(v) == 0 {
		return intSummary{}
	}
	slices.Sort(v)
	return intSummary{p50: v[(len(v)-1)/2], max: v[len(v)-1]}
}

type histo struct {
	count uint64
	sum   float64
}

// commitStats reads the log's group-commit histogram (events per store
// transaction) from its registry.
func commitStats(tb testing.TB, reg *prometheus.Registry) histo {
	tb.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		tb.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == "agentd_event_commit_batch_size" {
			h := mf.GetMetric()[0].GetHistogram()
			return histo{count: h.GetSampleCount(), sum: h.GetSampleSum()}
		}
	}
	tb.Fatal("agentd_event_commit_batch_size not registered")
	return histo{}
}

// BenchmarkEventAppend: events/s through eventlog.Log.Append into SQLite
// (WAL, the server's default synchronous=NORMAL, and FULL for reference)
// with group commit. One op is one Append call; events/s counts events
// durably stored and published, events/commit is the mean group-commit
// batch, cpu-µs/event the process CPU per event.
//
// Target (issue 2): >= 50,000 events/s sustained on the 2-core machine.
func BenchmarkEventAppend(b *testing.B) {
	for _, sync := range []sqlite.Synchronous{sqlite.SyncNormal, sqlite.SyncFull} {
		for _, appenders := range []int{1, 8, 64} {
			for _, per := range []int{1, 16} {
				name := fmt.Sprintf("sync=%s/appenders=%d/events=%d", sync, appenders, per)
				b.Run(name, func(b *testing.B) {
					start := setupAppend(b, appendRun{appenders: appenders, perAppend: per, appends: b.N, sync: sync})
					b.ResetTimer()
					r := start()
					b.StopTimer()
					b.ReportMetric(r.eventsPerSec(), "events/s")
					b.ReportMetric(r.batchMean(), "events/commit")
					b.ReportMetric(float64(r.cpu.Microseconds())/float64(r.events), "cpu-µs/event")
					b.ReportMetric(float64(r.batch.p50), "batch-p50")
					b.ReportMetric(float64(r.batch.max), "batch-max")
					b.ReportMetric(float64(r.commit.P50.Microseconds()), "commit-p50-µs")
					b.ReportMetric(float64(r.commit.P99.Microseconds()), "commit-p99-µs")
					b.ReportMetric(100*r.storeBusy.Seconds()/r.elapsed.Seconds(), "store-busy-%")
					b.ReportMetric(float64(r.runqWait.Milliseconds())/r.elapsed.Seconds(), "runq-wait-ms/s")
					b.ReportMetric(load1(), "load1")
				})
			}
		}
	}
}

// BenchmarkEventAppendStores runs the append scenario against both stores
// side by side: SQLite (WAL, synchronous=NORMAL, the server's default) and
// PostgreSQL (the pgtest server: $AGENTD_TEST_POSTGRES, or a private one
// started from the installed binaries; synchronous_commit on, and off for
// reference), 8 and 64 appenders of 1 and 16 events per Append. Metrics as
// BenchmarkEventAppend's. depth is the group commits in flight: 0 is what
// a server uses (the store's AppendConcurrency: 1 for SQLite), 1 the
// single commit in flight of before.
//
// Target (issue 12): PostgreSQL >= 50,000 events/s on the 2-core machine.
func BenchmarkEventAppendStores(b *testing.B) {
	for _, st := range []string{"sqlite", "postgres", "postgres-async"} {
		depths := []int{0}
		if st != "sqlite" {
			depths = []int{1, 0}
		}
		for _, depth := range depths {
			for _, appenders := range []int{8, 64} {
				for _, per := range []int{1, 16} {
					name := fmt.Sprintf("store=%s/depth=%d/appenders=%d/events=%d", st, depth, appenders, per)
					b.Run(name, func(b *testing.B) {
						benchAppend(b, appendRun{appenders: appenders, perAppend: per, appends: b.N, store: st, depth: depth})
					})
				}
			}
		}
	}
}

// BenchmarkEventAppendDepth measures PostgreSQL's group commits in flight
// against the connection pool's size (what chose the store's defaults).
func BenchmarkEventAppendDepth(b *testing.B) {
	for _, conns := range []int32{4, 8, 16} {
		for _, depth := range []int{1, 2, 4, 8} {
			if int32(depth) > conns {
				continue
			}
			for _, appenders := range []int{8, 64} {
				for _, per := range []int{1, 16} {
					name := fmt.Sprintf("conns=%d/depth=%d/appenders=%d/events=%d", conns, depth, appenders, per)
					b.Run(name, func(b *testing.B) {
						benchAppend(b, appendRun{appenders: appenders, perAppend: per, appends: b.N, store: "postgres", depth: depth, conns: conns})
					})
				}
			}
		}
	}
}

func benchAppend(b *testing.B, cfg appendRun) {
	b.Helper()
	start := setupAppend(b, cfg)
	b.ResetTimer()
	r := start()
	b.StopTimer()
	b.ReportMetric(r.eventsPerSec(), "events/s")
	b.ReportMetric(r.batchMean(), "events/commit")
	b.ReportMetric(float64(r.cpu.Microseconds())/float64(r.events), "cpu-µs/event")
	b.ReportMetric(float64(r.commit.P50.Microseconds()), "commit-p50-µs")
	b.ReportMetric(float64(r.commit.P99.Microseconds()), "commit-p99-µs")
	b.ReportMetric(100*r.storeBusy.Seconds()/r.elapsed.Seconds(), "store-busy-%")
	if r.pgCPU > 0 {
		b.ReportMetric(float64(r.pgCPU.Microseconds())/float64(r.events), "pg-cpu-µs/event")
		b.ReportMetric(float64(r.pgCPU.Microseconds())/float64(max(r.commits, 1)), "pg-cpu-µs/commit")
	}
	b.ReportMetric(load1(), "load1")
}

func TestAppendSmoke(t *testing.T) {
	start := setupAppend(t, appendRun{appenders: 8, perAppend: 4, appends: 200})
	r := start()
	if r.events != 800 || r.stored != 800 {
		t.Fatalf("events %d, stored %d; want 800", r.events, r.stored)
	}
	if r.commits == 0 || r.commits > 200 {
		t.Fatalf("%d commits for 200 appends", r.commits)
	}
}

func TestAppendSmokePostgres(t *testing.T) {
	start := setupAppend(t, appendRun{appenders: 8, perAppend: 4, appends: 200, store: "postgres"})
	r := start()
	if r.events != 800 || r.stored != 800 {
		t.Fatalf("events %d, stored %d; want 800", r.events, r.stored)
	}
	if r.commits == 0 || r.commits > 200 {
		t.Fatalf("%d commits for 200 appends", r.commits)
	}
}
