package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"sync/atomic"
	"time"
)

// defaultCompactAt is how many rows the event tail holds before the
// compactor moves it, once appends pause: with 50 sessions streaming, about
// 20 rows each, so a session's rows fill its pages of events together.
const defaultCompactAt = 1024

// compactHardFactor times the threshold is the tail at which the compactor
// stops waiting for a pause in appends: it bounds what a read scans (the
// tail has no index) under a sustained stream.
const compactHardFactor = 16

// compactIdle is the pause in appends the compactor waits for. Compaction
// holds the writer: while sessions stream, each of its transactions lets
// their lines pile up behind it and leave together, a burst that costs
// them milliseconds each (BenchmarkShellLatency, 50 sessions: p95 1.2–1.6
// ms without compaction, 3.5–6.1 ms with compactions interleaved).
const compactIdle = 20 * time.Millisecond

// compactChunk is how many rows one compaction transaction moves: the
// oldest ones, so the rows deleted from the tail are contiguous pages and
// the sessions' rows moved together fill their pages of events (about 7 ms
// of the writer for 50 sessions' rows, BenchmarkCompact). Smaller chunks
// hold the writer less but write more pages per row.
const compactChunk = 1024

const (
	// chunkEndSQL is the id of the chunk's last row, the oldest first.
	chunkEndSQL      = `SELECT id FROM events_tail ORDER BY id LIMIT 1 OFFSET ?`
	compactInsertSQL = `INSERT INTO events (session_id, seq, type, payload, conversation_id, source, ts, actor)
		SELECT session_id, seq, type, payload, conversation_id, source, ts, actor
		FROM events_tail WHERE id <= ?1 ORDER BY session_id, seq`
	compactDeleteSQL = `DELETE FROM events_tail WHERE id <= ?1`
)

// compactor moves the event tail into events in the background, on the
// writer connection: once appends have brought the tail to its threshold
// and then paused for compactIdle, or at once when the tail reaches
// compactHardFactor times the threshold. It works in transactions of about
// compactChunk rows and goes back to waiting when appends resume (below
// the hard limit). AppendEvents only counts rows and kicks it, so no
// append pays for a compaction it did not wait on the writer for. Its
// methods are safe for concurrent use; a nil compactor ignores appends.
type compactor struct {
	at   int64
	rows atomic.Int64 // rows in the tail, as far as this process knows
	last atomic.Int64 // when rows were last added, Unix nanoseconds
	kick chan struct{}
	s    *Store
	log  *slog.Logger

	cancel context.CancelFunc
	done   chan struct{}
}

// startCompactor starts s's compactor, counting the rows an earlier run
// left in the tail.
func (s *Store) startCompactor(ctx context.Context, at int, log *slog.Logger) error {
	var n int64
	if err := s.w.QueryRowContext(ctx, `SELECT count(*) FROM events_tail`).Scan(&n); err != nil {
		return fmt.Errorf("count the event tail: %w", err)
	}
	cctx, cancel := context.WithCancel(context.Background())
	c := &compactor{at: int64(at), kick: make(chan struct{}, 1), s: s, log: log, cancel: cancel, done: make(chan struct{})}
	s.compactor = c
	go c.run(cctx)
	c.appended(int(n))
	return nil
}

// appended counts n rows added to the tail and kicks the compactor when
// the tail crosses its threshold or its hard limit (not on every append:
// that would wake it for each one).
func (c *compactor) appended(n int) {
	if c == nil || n == 0 {
		return
	}
	c.last.Store(time.Now().UnixNano())
	now := c.rows.Add(int64(n))
	before, hard := now-int64(n), compactHardFactor*c.at
	if (before < c.at && now >= c.at) || (before < hard && now >= hard) {
		select {
		case c.kick <- struct{}{}:
		default: // a kick is pending already
		}
	}
}

// busy reports whether appends have not paused long enough: how much
// longer to wait, 0 when the compactor may go on.
func (c *compactor) busy() time.Duration {
	if c.rows.Load() >= compactHardFactor*c.at {
		return 0
	}
	return max(compactIdle-time.Duration(time.Now().UnixNano()-c.last.Load()), 0)
}

func (c *compactor) run(ctx context.Context) {
	defer close(c.done)
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-c.kick:
		}
		for c.rows.Load() >= c.at {
			wait := c.busy()
			if wait == 0 && !c.compactWhileQuiet(ctx) {
				wait = time.Second // it failed: try again later
			}
			if wait == 0 {
				continue
			}
			t.Reset(wait)
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			case <-c.kick: // the hard limit
			}
		}
	}
}

// compactWhileQuiet moves the tail chunk by chunk, until it is below the
// threshold or appends resume below the hard limit. It reports false when
// a compaction failed.
func (c *compactor) compactWhileQuiet(ctx context.Context) bool {
	for c.rows.Load() >= c.at && c.busy() == 0 {
		moved, err := c.s.compact(ctx, compactChunk)
		if err != nil {
			if ctx.Err() == nil {
				// The tail keeps its rows (reads see them there).
				c.log.Error("sqlite event tail compaction failed", "err", err)
			}
			return false
		}
		// Another process sharing the file may have added or moved rows
		// this one did not count: never below zero, and empty is empty.
		if moved == 0 || c.rows.Add(-moved) < 0 {
			c.rows.Store(0)
		}
	}
	return true
}

// stop ends the background loop; a compaction under way is rolled back.
func (c *compactor) stop() {
	c.cancel()
	<-c.done
}

// compact moves the tail's oldest chunk rows (all of them when it holds
// fewer) into events in one writer transaction, sorted by (session_id,
// seq) so each session's rows fill its pages together: readers see a row
// in one table or the other, never both or neither. It returns how many
// rows it moved (0: the tail is empty).
func (s *Store) compact(ctx context.Context, chunk int) (int64, error) {
	var moved int64
	err := s.write(ctx, func(tx *sql.Tx) error {
		last := int64(math.MaxInt64)
		err := tx.QueryRowContext(ctx, chunkEndSQL, chunk-1).Scan(&last)
		if err != nil && !errors.Is(err, sql.ErrNoRows) {
			return fmt.Errorf("find the chunk: %w", err)
		}
		if _, err := tx.ExecContext(ctx, compactInsertSQL, last); err != nil {
			return fmt.Errorf("copy tail rows: %w", err)
		}
		res, err := tx.ExecContext(ctx, compactDeleteSQL, last)
		if err != nil {
			return fmt.Errorf("delete tail rows: %w", err)
		}
		moved, err = res.RowsAffected()
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("compact the event tail: %w", err)
	}
	return moved, nil
}
