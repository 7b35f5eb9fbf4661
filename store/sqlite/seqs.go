package sqlite

import (
	"context"
	"database/sql"
	"fmt"
	"sync"

	"github.com/agentd/agentd/store"
)

// storedSeqs is what keeps (session, seq) unique across events and the
// event tail, which has no index of its own (an index on (session_id, seq)
// dirtied a page per session per commit, the cost the tail exists to
// avoid). It caches the highest stored seq of each session this process
// appended to: an event above it cannot conflict, and one at or below it
// (a gap filled late, or a bug) is looked up in both tables.
//
// The cache is trusted only while the database has no commits but this
// process's writer's: SQLite's data_version, read inside each append
// transaction, changes when another connection (another process sharing
// the file) has committed, and the cache is then dropped. It is used only
// inside writer transactions, which the single writer connection
// serialises; mu states that to the race detector too.
type storedSeqs struct {
	mu      sync.Mutex
	version int64            // data_version when the cache was last valid; -1: none
	max     map[string]int64 // session → highest stored seq
}

func newStoredSeqs() *storedSeqs { return &storedSeqs{version: -1, max: map[string]int64{}} }

const (
	// maxStoredSeqSQL is a session's highest stored seq, 0 if none (also
	// LastSeq's query).
	maxStoredSeqSQL = `SELECT coalesce(max(m), 0) FROM (
		SELECT max(seq) AS m FROM events WHERE session_id = ?1
		UNION ALL SELECT max(seq) FROM events_tail WHERE session_id = ?1)`
	seqStoredSQL = `SELECT EXISTS (SELECT 1 FROM events WHERE session_id = ?1 AND seq = ?2)
		OR EXISTS (SELECT 1 FROM events_tail WHERE session_id = ?1 AND seq = ?2)`
)

// checkLocked fails with store.ErrSeqConflict when one of rows' (session,
// seq) is stored or repeats within rows. Otherwise it raises each
// session's highest seq to cover rows before they are inserted: the next
// transaction may start as soon as this one commits, before the caller
// runs again. Should this one roll back instead, the cache is too high,
// which only costs lookups (a seq at or below it is looked up in both
// tables); too low would let a duplicate through. tx is the writer's, and
// dataVersion PRAGMA data_version prepared on it.
func (c *storedSeqs) checkLocked(ctx context.Context, tx *sql.Tx, dataVersion *sql.Stmt, rows [][eventColumns]any) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	var version int64
	if err := tx.StmtContext(ctx, dataVersion).QueryRowContext(ctx).Scan(&version); err != nil {
		return fmt.Errorf("read data_version: %w", err)
	}
	if version != c.version {
		clear(c.max)
		c.version = version
	}
	next := make(map[string]int64, 4)
	var seen map[[2]any]bool // only when a session's seqs do not rise
	for _, r := range rows {
		session, seq := r[0].(string), r[1].(int64)
		top, ok := next[session]
		if !ok {
			if top, ok = c.max[session]; !ok {
				if err := tx.QueryRowContext(ctx, maxStoredSeqSQL, session).Scan(&top); err != nil {
					return fmt.Errorf("highest stored seq of %q: %w", session, err)
				}
				c.max[session] = top
			}
		}
		if seq <= top {
			// At or below the highest seq: stored, or earlier in rows?
			if seen == nil {
				seen = make(map[[2]any]bool, len(rows))
				for _, p := range rows {
					k := [2]any{p[0], p[1]}
					if seen[k] {
						return fmt.Errorf("session %q seq %d twice in one batch: %w", p[0], p[1], store.ErrSeqConflict)
					}
					seen[k] = true
				}
			}
			var stored bool
			if err := tx.QueryRowContext(ctx, seqStoredSQL, session, seq).Scan(&stored); err != nil {
				return fmt.Errorf("look up session %q seq %d: %w", session, seq, err)
			}
			if stored {
				return fmt.Errorf("session %q seq %d: %w", session, seq, store.ErrSeqConflict)
			}
		}
		next[session] = max(top, seq)
	}
	for session, seq := range next {
		c.max[session] = seq
	}
	return nil
}

// forget drops what is known of the session (its events are being
// deleted); call it inside the deleting writer transaction.
func (c *storedSeqs) forget(session string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.max, session)
}

// reset drops everything known: a commit whose outcome is unknown.
func (c *storedSeqs) reset() {
	c.mu.Lock()
	defer c.mu.Unlock()
	clear(c.max)
	c.version = -1
}
