package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"

	"github.com/agentd/agentd/conversation"
	"github.com/agentd/agentd/store"
)

const (
	eventColumns    = 8
	eventsPerInsert = 32
	eventValues     = `(?, ?, ?, ?, ?, ?, ?, ?)`
	// directEvents is how many events of one session a batch must carry
	// to skip the tail: about a page of them fills a page of events' own,
	// so writing them there at once costs no more WAL than the tail would,
	// and saves the compactor's second write.
	directEvents = 8
)

// insertSQL inserts n events into table in one statement. Statements of 32
// rows cut the CPU per event by about a quarter against one row per
// statement (database/sql and driver overhead; see BenchmarkAppendEvents).
func insertSQL(table string, n int) string {
	return `INSERT INTO ` + table + ` (session_id, seq, type, payload, conversation_id, source, ts, actor) VALUES ` +
		strings.Repeat(eventValues+", ", n-1) + eventValues
}

// inserts are one table's prepared inserts, on the writer.
type inserts struct{ one, many *sql.Stmt }

func (s *Store) prepareInserts(ctx context.Context, table string) (inserts, error) {
	var ins inserts
	var err error
	if ins.one, err = s.w.PrepareContext(ctx, insertSQL(table, 1)); err != nil {
		return ins, fmt.Errorf("prepare %s insert: %w", table, err)
	}
	if ins.many, err = s.w.PrepareContext(ctx, insertSQL(table, eventsPerInsert)); err != nil {
		return ins, fmt.Errorf("prepare %s insert: %w", table, err)
	}
	return ins, nil
}

// AppendEvents stores events in one transaction: all or none, one commit
// (one fsync with SyncFull) per call. A session's events go to the event
// tail, in arrival order, unless the batch carries directEvents or more of
// them, which go to events at once (compact.go says why). A stored
// (session, seq) fails the batch with store.ErrSeqConflict (seqs.go); an
// event of a session that does not exist fails it with store.ErrNotFound
// (the schema's foreign key keeps a deleted session from getting events
// back). Fences are checked first, in the same transaction (leases.go).
// Once the tail holds enough rows, the compactor is told to move it.
func (s *Store) AppendEvents(ctx context.Context, events []conversation.Event, fences ...store.Fence) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("append events: %w", err)
	}
	if err := store.ValidateFences(fences); err != nil {
		return fmt.Errorf("append events: %w", err)
	}
	if len(events) == 0 && len(fences) == 0 {
		return nil
	}
	// Convert and check everything before taking the write lock.
	rows := make([][eventColumns]any, len(events))
	perSession := make(map[string]int, 4)
	for i, e := range events {
		if e.Context.SessionID == "" {
			return fmt.Errorf("append events: event %d (seq %d) has no session id", i, e.Seq)
		}
		if e.Seq <= 0 {
			return fmt.Errorf("append events: event %d of session %q has seq %d, want > 0", i, e.Context.SessionID, e.Seq)
		}
		ts, err := timeArg(e.Context.Timestamp)
		if err != nil {
			return fmt.Errorf("append events: session %q seq %d: %w", e.Context.SessionID, e.Seq, err)
		}
		var payload any
		if e.Payload != nil {
			payload = []byte(e.Payload)
		}
		rows[i] = [eventColumns]any{e.Context.SessionID, e.Seq, string(e.Type), payload,
			e.Context.ConversationID, string(e.Context.Source), ts, optString(e.Context.Actor)}
		perSession[e.Context.SessionID]++
	}
	var tail, direct []int // indexes into events and rows
	for i, e := range events {
		if perSession[e.Context.SessionID] >= directEvents {
			direct = append(direct, i)
		} else {
			tail = append(tail, i)
		}
	}
	// The rows run with ctx's values but not its cancellation: the driver
	// would start a watcher goroutine per statement. database/sql still
	// rolls the transaction back when ctx ends, and ctx is checked between
	// statements, so a cancelled batch stores nothing.
	rowCtx := context.WithoutCancel(ctx)
	err := s.write(ctx, func(tx *sql.Tx) error {
		if err := checkFencesLocked(rowCtx, tx, s.leaseGen, fences); err != nil {
			return err
		}
		if len(rows) == 0 {
			return nil
		}
		if err := s.seqs.checkLocked(rowCtx, tx, s.dataVersion, rows); err != nil {
			return err
		}
		if err := insertLocked(ctx, rowCtx, tx, s.insertDirect, events, rows, direct); err != nil {
			return err
		}
		return insertLocked(ctx, rowCtx, tx, s.insertTail, events, rows, tail)
	})
	if err != nil {
		if errors.Is(err, errCommit) {
			s.seqs.reset() // stored or not: look again
		}
		return fmt.Errorf("append events: %w", err)
	}
	if testHookAppended != nil {
		testHookAppended()
	}
	s.compactor.appended(len(tail))
	return nil
}

// testHookAppended, when set by a test, runs after an append's commit,
// where the next append's transaction may already run.
var testHookAppended func()

// insertLocked inserts the rows at idx through ins, 32 rows a statement
// and then one; tx is the writer's. Statements run with rowCtx (see
// AppendEvents); ctx is checked between them.
func insertLocked(ctx, rowCtx context.Context, tx *sql.Tx, ins inserts, events []conversation.Event, rows [][eventColumns]any, idx []int) error {
	if len(idx) == 0 {
		return nil
	}
	many := tx.StmtContext(rowCtx, ins.many)
	one := tx.StmtContext(rowCtx, ins.one)
	args := make([]any, 0, eventsPerInsert*eventColumns)
	for i := 0; i < len(idx); {
		if err := ctx.Err(); err != nil {
			return err
		}
		stmt, n := one, 1
		if len(idx)-i >= eventsPerInsert {
			stmt, n = many, eventsPerInsert
		}
		args = args[:0]
		for _, j := range idx[i : i+n] {
			args = append(args, rows[j][:]...)
		}
		if _, err := stmt.ExecContext(rowCtx, args...); err != nil {
			where := describeEvents(events, idx[i:i+n])
			switch {
			case isUniqueViolation(err):
				return fmt.Errorf("%s: %w", where, store.ErrSeqConflict)
			case isForeignKeyViolation(err):
				return fmt.Errorf("%s: session: %w", where, store.ErrNotFound)
			}
			return fmt.Errorf("%s: %w", where, err)
		}
		i += n
	}
	return nil
}

// describeEvents names the events of one insert statement for an error: a
// multi-row statement cannot say which of its rows failed.
func describeEvents(events []conversation.Event, idx []int) string {
	first, last := events[idx[0]], events[idx[len(idx)-1]]
	if len(idx) == 1 {
		return fmt.Sprintf("session %q seq %d", first.Context.SessionID, first.Seq)
	}
	return fmt.Sprintf("one of %d events from session %q seq %d to session %q seq %d",
		len(idx), first.Context.SessionID, first.Seq, last.Context.SessionID, last.Seq)
}

// ReadEvents returns the session's events with seq > after in seq order, at
// most limit of them (limit <= 0: all). An unknown session has none.
func (s *Store) ReadEvents(ctx context.Context, sessionID string, after int64, limit int) ([]conversation.Event, error) {
	if limit <= 0 {
		limit = -1 // SQLite: no limit
	}
	// Both tables, merged by seq: a range scan of events' primary key and a
	// scan of the (short) tail. A reader's snapshot sees a compaction whole
	// or not at all.
	rows, err := s.r.QueryContext(ctx, `SELECT seq, type, payload, conversation_id, source, ts, actor
		FROM events WHERE session_id = ?1 AND seq > ?2
		UNION ALL SELECT seq, type, payload, conversation_id, source, ts, actor
		FROM events_tail WHERE session_id = ?1 AND seq > ?2
		ORDER BY seq LIMIT ?3`, sessionID, after, limit)
	if err != nil {
		return nil, fmt.Errorf("read events of %q: %w", sessionID, err)
	}
	defer rows.Close()
	out := make([]conversation.Event, 0, min(max(limit, 16), 1024))
	for rows.Next() {
		var (
			e       conversation.Event
			typ     string
			payload []byte
			source  string
			ts      sql.NullInt64
			actor   sql.NullString
		)
		if err := rows.Scan(&e.Seq, &typ, &payload, &e.Context.ConversationID, &source, &ts, &actor); err != nil {
			return nil, fmt.Errorf("read events of %q: %w", sessionID, err)
		}
		e.Type = conversation.EventType(typ)
		e.Payload = payload
		e.Context.SessionID = sessionID
		e.Context.Source = conversation.Source(source)
		e.Context.Timestamp = scanTime(ts)
		if actor.Valid {
			e.Context.Actor = &actor.String
		}
		out = append(out, e)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read events of %q: %w", sessionID, err)
	}
	return out, nil
}

// LastSeq returns the highest stored seq of the session, 0 if none.
func (s *Store) LastSeq(ctx context.Context, sessionID string) (int64, error) {
	var seq int64
	err := s.r.QueryRowContext(ctx, maxStoredSeqSQL, sessionID).Scan(&seq)
	if err != nil && !errors.Is(err, sql.ErrNoRows) {
		return 0, fmt.Errorf("last seq of %q: %w", sessionID, err)
	}
	return seq, nil
}
