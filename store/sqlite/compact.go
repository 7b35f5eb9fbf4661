package sqlite

import (
	"context"
	"database/sql"
	"fmt"
	"log/slog"
	"sync/atomic"
)

// defaultCompactAt is how many rows the event tail holds before the
// compactor moves it. Large enough that a compaction writes several events
// per session page (64 sessions streaming: ~16 each), small enough that the
// tail's index stays a handful of pages and a compaction holds the writer
// for about a millisecond.
const defaultCompactAt = 1024

const (
	compactInsertSQL = `INSERT INTO events (session_id, seq, type, payload, conversation_id, source, ts, actor)
		SELECT session_id, seq, type, payload, conversation_id, source, ts, actor
		FROM events_tail ORDER BY session_id, seq`
	compactDeleteSQL = `DELETE FROM events_tail`
)

// compactor moves the event tail into events in the background, on the
// writer connection, whenever appends have brought the tail to its
// threshold. AppendEvents only counts rows and kicks it, so no append pays
// for a compaction it did not wait on the writer for. Its methods are safe
// for concurrent use; a nil compactor ignores appends.
type compactor struct {
	at      int64
	rows    atomic.Int64 // rows in the tail, as far as this process knows
	kick    chan struct{}
	compact func(context.Context) (int64, error)
	log     *slog.Logger
	cancel  context.CancelFunc
	done    chan struct{}
}

// startCompactor starts s's compactor, counting the rows an earlier run
// left in the tail.
func (s *Store) startCompactor(ctx context.Context, at int, log *slog.Logger) error {
	var n int64
	if err := s.w.QueryRowContext(ctx, `SELECT count(*) FROM events_tail`).Scan(&n); err != nil {
		return fmt.Errorf("count the event tail: %w", err)
	}
	cctx, cancel := context.WithCancel(context.Background())
	c := &compactor{at: int64(at), kick: make(chan struct{}, 1), compact: s.compact, log: log, cancel: cancel, done: make(chan struct{})}
	s.compactor = c
	go c.run(cctx)
	c.appended(int(n))
	return nil
}

// appended counts n rows added to the tail and kicks the compactor when
// the tail has reached its threshold.
func (c *compactor) appended(n int) {
	if c == nil || n == 0 {
		return
	}
	if c.rows.Add(int64(n)) >= c.at {
		select {
		case c.kick <- struct{}{}:
		default: // a kick is pending already
		}
	}
}

func (c *compactor) run(ctx context.Context) {
	defer close(c.done)
	for {
		select {
		case <-ctx.Done():
			return
		case <-c.kick:
		}
		moved, err := c.compact(ctx)
		if err != nil {
			if ctx.Err() == nil {
				// The tail keeps its rows (reads see them there); the
				// next kick tries again.
				c.log.Error("sqlite event tail compaction failed", "err", err)
			}
			continue
		}
		// Another process sharing the file may have added rows this one
		// did not count: never below zero.
		if c.rows.Add(-moved) < 0 {
			c.rows.Store(0)
		}
	}
}

// stop ends the background loop; a compaction under way is rolled back.
func (c *compactor) stop() {
	c.cancel()
	<-c.done
}

// compact moves every row of the event tail into events, sorted by
// (session_id, seq) so each session's rows fill its pages together, in
// one writer transaction: readers see the rows in one table or the other,
// never both or neither. It returns how many rows it moved.
func (s *Store) compact(ctx context.Context) (int64, error) {
	var moved int64
	err := s.write(ctx, func(tx *sql.Tx) error {
		if _, err := tx.ExecContext(ctx, compactInsertSQL); err != nil {
			return fmt.Errorf("copy the tail: %w", err)
		}
		res, err := tx.ExecContext(ctx, compactDeleteSQL)
		if err != nil {
			return fmt.Errorf("empty the tail: %w", err)
		}
		moved, err = res.RowsAffected()
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("compact the event tail: %w", err)
	}
	return moved, nil
}
