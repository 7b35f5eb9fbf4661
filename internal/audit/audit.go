// Package audit records what a session's environment did on the server's
// behalf, executor calls and model requests, in the store (batched: one
// transaction per batch, never one per call) and in the structured log.
package audit

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/agentd/agentd/store"
)

// Defaults for Options left zero.
const (
	DefaultBatch    = 256
	DefaultInterval = 200 * time.Millisecond
	DefaultQueue    = 4096
)

// Options configure a Recorder.
type Options struct {
	// Store receives the records; nil keeps them in the log only.
	Store store.AuditStore
	// Actor names the principal of a session's running turn ("" if none),
	// for records whose source does not know it (executor calls).
	Actor func(sessionID string) string
	// Batch is the most records written in one transaction; Interval the
	// longest a record waits for its batch to fill. Queue bounds the records
	// waiting: Record blocks while it is full.
	Batch    int
	Interval time.Duration
	Queue    int
	// Registerer receives the recorder's metrics when set.
	Registerer prometheus.Registerer
	Logger     *slog.Logger
}

// Recorder batches audit records into the store. Its methods are safe for
// concurrent use; Record never waits for the store (only, when the queue is
// full, for room in it).
type Recorder struct {
	opts Options
	log  *slog.Logger
	in   chan store.AuditRecord
	done chan struct{} // closed when the writer has flushed and stopped

	mu     sync.RWMutex // guards closed against sends on in
	closed bool

	written, failed *prometheus.CounterVec
}

// New starts a Recorder; Close flushes and stops it.
func New(opts Options) *Recorder {
	if opts.Batch <= 0 {
		opts.Batch = DefaultBatch
	}
	if opts.Interval <= 0 {
		opts.Interval = DefaultInterval
	}
	if opts.Queue <= 0 {
		opts.Queue = DefaultQueue
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	r := &Recorder{
		opts: opts, log: opts.Logger.With("component", "audit"),
		in:   make(chan store.AuditRecord, opts.Queue),
		done: make(chan struct{}),
		written: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "agentd_audit_records_total",
			Help: "Audit records stored, by kind."}, []string{"kind"}),
		failed: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "agentd_audit_records_failed_total",
			Help: "Audit records the store refused (they are in the log only), by kind."}, []string{"kind"}),
	}
	if opts.Registerer != nil {
		opts.Registerer.MustRegister(r.written, r.failed)
	}
	go r.run()
	return r
}

// Record logs rec and queues it for the store. After Close it only logs.
func (r *Recorder) Record(rec store.AuditRecord) {
	if rec.Time.IsZero() {
		rec.Time = time.Now()
	}
	rec.Time = rec.Time.UTC()
	if rec.Actor == "" && r.opts.Actor != nil {
		rec.Actor = r.opts.Actor(rec.SessionID)
	}
	r.logRecord(rec)
	if r.opts.Store == nil {
		return
	}
	r.mu.RLock()
	defer r.mu.RUnlock()
	if r.closed {
		return
	}
	r.in <- rec
}

// ExecutorCall records one executor call; its signature is the executor
// backend's Options.OnCall hook. (There is no answer size: the hook does
// not see it.)
func (r *Recorder) ExecutorCall(sessionID, method string, paramsSize int, err error, dur time.Duration) {
	rec := store.AuditRecord{
		SessionID: sessionID, Time: time.Now().Add(-dur), Kind: store.AuditExecutor, Method: method,
		Outcome: store.AuditOK, BytesIn: int64(paramsSize), DurationMs: dur.Milliseconds(),
	}
	if err != nil {
		rec.Outcome, rec.Error = store.AuditError, err.Error()
	}
	r.Record(rec)
}

// logRecord writes rec to the structured log: model requests at info,
// executor calls (many: every file read, every keystroke of a terminal) at
// debug unless they failed.
func (r *Recorder) logRecord(rec store.AuditRecord) {
	level := slog.LevelInfo
	if rec.Kind == store.AuditExecutor && rec.Outcome == store.AuditOK {
		level = slog.LevelDebug
	}
	if !r.log.Enabled(context.Background(), level) {
		return
	}
	attrs := []slog.Attr{
		slog.String("session", rec.SessionID), slog.String("kind", string(rec.Kind)), slog.String("method", rec.Method),
		slog.String("outcome", string(rec.Outcome)), slog.Int64("bytesIn", rec.BytesIn), slog.Int64("bytesOut", rec.BytesOut),
		slog.Int64("ms", rec.DurationMs),
	}
	if rec.Path != "" {
		attrs = append(attrs, slog.String("path", rec.Path), slog.String("provider", rec.Provider))
	}
	if rec.Model != "" {
		attrs = append(attrs, slog.String("model", rec.Model))
	}
	if rec.Status != 0 {
		attrs = append(attrs, slog.Int("status", rec.Status))
	}
	if rec.Actor != "" {
		attrs = append(attrs, slog.String("actor", rec.Actor))
	}
	if rec.Error != "" {
		attrs = append(attrs, slog.String("err", rec.Error))
	}
	if rec.Usage != nil {
		attrs = append(attrs, slog.Int64("inputTokens", rec.Usage.InputTokens), slog.Int64("outputTokens", rec.Usage.OutputTokens),
			slog.Int64("cacheReadTokens", rec.Usage.CacheReadInputTokens), slog.Int64("cacheCreationTokens", rec.Usage.CacheCreationInputTokens))
	}
	r.log.LogAttrs(context.Background(), level, "audit", attrs...)
}

// run is the writer: it collects records into batches and stores each in
// one call.
func (r *Recorder) run() {
	defer close(r.done)
	batch := make([]store.AuditRecord, 0, r.opts.Batch)
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	flush := func() {
		if len(batch) == 0 {
			return
		}
		r.write(batch)
		batch = batch[:0]
	}
	for {
		select {
		case rec, ok := <-r.in:
			if !ok {
				flush()
				return
			}
			if len(batch) == 0 {
				timer.Reset(r.opts.Interval)
			}
			batch = append(batch, rec)
			if len(batch) >= r.opts.Batch {
				timer.Stop()
				flush()
			}
		case <-timer.C:
			flush()
		}
	}
}

// write stores one batch. A failed batch is not retried: the records are
// in the log, and a store that fails would only make the queue back up.
func (r *Recorder) write(batch []store.AuditRecord) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err := r.opts.Store.AppendAudit(ctx, batch)
	counter := r.written
	if err != nil {
		counter = r.failed
		r.log.Error("store audit records", "records", len(batch), "err", err)
	}
	for _, rec := range batch {
		counter.WithLabelValues(string(rec.Kind)).Inc()
	}
}

// Close stores what is queued and stops the writer; records after Close
// are only logged. It returns ctx's error if the flush outlives ctx.
func (r *Recorder) Close(ctx context.Context) error {
	r.mu.Lock()
	if !r.closed {
		r.closed = true
		close(r.in)
	}
	r.mu.Unlock()
	select {
	case <-r.done:
		return nil
	case <-ctx.Done():
		return errors.Join(errors.New("audit: flush did not finish"), ctx.Err())
	}
}
