package audit_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/agentd/agentd/conversation"
	"github.com/agentd/agentd/internal/audit"
	"github.com/agentd/agentd/store"
	"github.com/agentd/agentd/store/memstore"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// countingStore records each AppendAudit call's batch.
type countingStore struct {
	mu      sync.Mutex
	batches [][]store.AuditRecord
	fail    error
	block   chan struct{} // when set, AppendAudit waits for it
}

func (c *countingStore) AppendAudit(ctx context.Context, rs []store.AuditRecord) error {
	if c.block != nil {
		<-c.block
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.batches = append(c.batches, append([]store.AuditRecord(nil), rs...))
	return c.fail
}
func (c *countingStore) ReadAudit(context.Context, string, int64, int) ([]store.AuditRecord, error) {
	return nil, nil
}
func (c *countingStore) AuditUsage(context.Context, string) (conversation.Usage, error) {
	return conversation.Usage{}, nil
}

func (c *countingStore) snapshot() [][]store.AuditRecord {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([][]store.AuditRecord(nil), c.batches...)
}

func quiet() *slog.Logger { return slog.New(slog.DiscardHandler) }

func TestBatchesBySize(t *testing.T) {
	st := &countingStore{}
	r := audit.New(audit.Options{Store: st, Batch: 10, Interval: time.Hour, Logger: quiet()})
	for i := range 25 {
		r.ExecutorCall("s1", "fs.read", i, nil, time.Millisecond)
	}
	// Two full batches go out without waiting for the (hour-long) interval.
	deadline := time.Now().Add(10 * time.Second)
	for len(st.snapshot()) < 2 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	if err := r.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	b := st.snapshot()
	if len(b) != 3 || len(b[0]) != 10 || len(b[1]) != 10 || len(b[2]) != 5 {
		t.Fatalf("batches of %v; want 10, 10 and the rest flushed by Close", sizes(b))
	}
	for i, rec := range append(append(b[0], b[1]...), b[2]...) {
		if rec.BytesIn != int64(i) || rec.Kind != store.AuditExecutor || rec.Method != "fs.read" || rec.Outcome != store.AuditOK {
			t.Fatalf("record %d = %+v: order or fields lost", i, rec)
		}
	}
}

func TestBatchesByInterval(t *testing.T) {
	st := &countingStore{}
	r := audit.New(audit.Options{Store: st, Batch: 1000, Interval: 20 * time.Millisecond, Logger: quiet()})
	defer r.Close(context.Background())
	r.ExecutorCall("s1", "ping", 1, nil, 0)
	r.ExecutorCall("s1", "ping", 2, nil, 0)
	deadline := time.Now().Add(10 * time.Second)
	for len(st.snapshot()) == 0 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	if b := st.snapshot(); len(b) != 1 || len(b[0]) != 2 {
		t.Fatalf("batches %v; want the two records in one batch after the interval", sizes(b))
	}
}

func TestFailedBatchIsDroppedNotRetried(t *testing.T) {
	st := &countingStore{fail: errors.New("disk full")}
	r := audit.New(audit.Options{Store: st, Batch: 2, Interval: time.Hour, Logger: quiet()})
	for range 4 {
		r.ExecutorCall("s1", "ping", 0, nil, 0)
	}
	if err := r.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if b := st.snapshot(); len(b) != 2 {
		t.Fatalf("%d store calls for 4 records in batches of 2 with a failing store; want 2 (no retries)", len(b))
	}
}

func TestCloseWaitsForFlushAndThenOnlyLogs(t *testing.T) {
	st := &countingStore{block: make(chan struct{})}
	var logs bytes.Buffer
	var logMu sync.Mutex
	log := slog.New(slog.NewJSONHandler(lockedWriter{&logs, &logMu}, &slog.HandlerOptions{Level: slog.LevelDebug}))
	r := audit.New(audit.Options{Store: st, Batch: 1, Interval: time.Hour, Logger: log})
	r.ExecutorCall("s1", "exec.start", 10, nil, 0)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if err := r.Close(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Close while the store hangs = %v, want the deadline", err)
	}
	close(st.block)
	if err := r.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	r.ExecutorCall("s1", "exec.signal", 0, errors.New("no such process"), 0) // after Close: logged, not stored
	if b := st.snapshot(); len(b) != 1 {
		t.Fatalf("store calls %v; want just the one before Close", sizes(b))
	}
	logMu.Lock()
	out := logs.String()
	logMu.Unlock()
	if !strings.Contains(out, `"method":"exec.signal"`) || !strings.Contains(out, `"err":"no such process"`) || !strings.Contains(out, `"level":"INFO"`) {
		t.Fatalf("a failed call after Close is not in the log at info:\n%s", out)
	}
}

func TestActorAndLogFields(t *testing.T) {
	st := memstore.New()
	if err := st.CreateSession(context.Background(), store.Session{ID: "s1"}); err != nil {
		t.Fatal(err)
	}
	var logs bytes.Buffer
	var logMu sync.Mutex
	log := slog.New(slog.NewJSONHandler(lockedWriter{&logs, &logMu}, nil)) // info: executor successes not logged
	r := audit.New(audit.Options{Store: st, Logger: log, Interval: time.Millisecond,
		Actor: func(id string) string { return "actor-of-" + id }})
	r.ExecutorCall("s1", "fs.list", 5, nil, 3*time.Millisecond)
	r.Record(store.AuditRecord{SessionID: "s1", Kind: store.AuditModel, Method: "POST", Path: "/v1/messages", Provider: "anthropic",
		Actor: "explicit", Outcome: store.AuditOK, Status: 200, Usage: &conversation.Usage{InputTokens: 7, OutputTokens: 3}})
	if err := r.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	recs, err := st.ReadAudit(context.Background(), "s1", 0, 0)
	if err != nil || len(recs) != 2 {
		t.Fatalf("stored %v, %v", recs, err)
	}
	if recs[0].Actor != "actor-of-s1" || recs[1].Actor != "explicit" {
		t.Fatalf("actors %q, %q: want the resolver's for the executor call, the given one kept", recs[0].Actor, recs[1].Actor)
	}
	if recs[0].Time.IsZero() || recs[0].Time.Location() != time.UTC || recs[0].DurationMs != 3 {
		t.Fatalf("executor record %+v", recs[0])
	}
	logMu.Lock()
	lines := strings.Split(strings.TrimSpace(logs.String()), "\n")
	logMu.Unlock()
	if len(lines) != 1 {
		t.Fatalf("log lines at info: %q; want only the model request", lines)
	}
	var entry map[string]any
	if err := json.Unmarshal([]byte(lines[0]), &entry); err != nil {
		t.Fatal(err)
	}
	if entry["msg"] != "audit" || entry["path"] != "/v1/messages" || entry["inputTokens"] != float64(7) || entry["status"] != float64(200) {
		t.Fatalf("log entry %v", entry)
	}
}

func TestNoStoreOnlyLogs(t *testing.T) {
	r := audit.New(audit.Options{Logger: quiet()})
	r.ExecutorCall("s1", "ping", 0, nil, 0)
	if err := r.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
}

func sizes(b [][]store.AuditRecord) []int {
	out := make([]int, len(b))
	for i := range b {
		out[i] = len(b[i])
	}
	return out
}

type lockedWriter struct {
	b  *bytes.Buffer
	mu *sync.Mutex
}

func (w lockedWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.Write(p)
}

// BenchmarkRecord: the cost a caller (the executor's call path) pays per
// record, the writer storing batches in memstore behind it.
func BenchmarkRecord(b *testing.B) {
	st := memstore.New()
	_ = st.CreateSession(context.Background(), store.Session{ID: "s1"})
	r := audit.New(audit.Options{Store: st, Logger: quiet()})
	b.ReportAllocs()
	for b.Loop() {
		r.ExecutorCall("s1", "fs.read", 100, nil, time.Microsecond)
	}
	b.StopTimer()
	_ = r.Close(context.Background())
}
