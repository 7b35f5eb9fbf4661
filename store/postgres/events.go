package postgres

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/agentd/agentd/conversation"
	"github.com/agentd/agentd/store"
)

// insertEventsSQL inserts a batch given as one array per column: one
// statement and one Bind message for any number of events, the arrays in
// binary form.
const insertEventsSQL = `INSERT INTO events (session_id, seq, type, payload, conversation_id, source, ts, actor)
	SELECT * FROM unnest($1::text[], $2::bigint[], $3::text[], $4::bytea[], $5::text[], $6::text[], $7::timestamptz[], $8::text[])`

// AppendEvents stores events atomically in one round trip: the check of
// fences and sessions (agentd_check_append, which locks their rows) and
// the insert are pipelined as one implicit transaction, so an error in
// either stores nothing. A stale fence fails the call with a
// *store.FencedError naming every stale session, before any seq is
// looked at; an unknown session with store.ErrNotFound; a stored or
// repeated (session, seq) with store.ErrSeqConflict (the primary key).
func (s *Store) AppendEvents(ctx context.Context, events []conversation.Event, fences ...store.Fence) error {
	if err := checkCtx(ctx); err != nil {
		return fmt.Errorf("append events: %w", err)
	}
	if err := store.ValidateFences(fences); err != nil {
		return fmt.Errorf("append events: %w", err)
	}
	if len(events) == 0 && len(fences) == 0 {
		return nil
	}
	n := len(events)
	var (
		sessionIDs = make([]string, n)
		seqs       = make([]int64, n)
		types      = make([]string, n)
		payloads   = make([][]byte, n)
		convs      = make([]string, n)
		sources    = make([]string, n)
		stamps     = make([]pgtype.Timestamptz, n) // by value: no allocation per event
		actors     = make([]*string, n)
		distinct   []string
		seen       = make(map[string]bool, 4)
	)
	for i, e := range events {
		id := e.Context.SessionID
		if id == "" {
			return fmt.Errorf("append events: event %d (seq %d) has no session id", i, e.Seq)
		}
		if e.Seq <= 0 {
			return fmt.Errorf("append events: event %d of session %q has seq %d, want > 0", i, id, e.Seq)
		}
		sessionIDs[i], seqs[i], types[i] = id, e.Seq, string(e.Type)
		payloads[i] = e.Payload
		convs[i], sources[i] = e.Context.ConversationID, string(e.Context.Source)
		if !e.Context.Timestamp.IsZero() {
			stamps[i] = pgtype.Timestamptz{Time: e.Context.Timestamp, Valid: true}
		}
		actors[i] = e.Context.Actor
		if !seen[id] {
			seen[id] = true
			distinct = append(distinct, id)
		}
	}
	fs, fg := fenceArrays(fences)
	b := &pgx.Batch{}
	b.Queue(`SELECT agentd_check_append($1, $2, $3)`, distinct, fs, fg)
	if n > 0 {
		b.Queue(insertEventsSQL, sessionIDs, seqs, types, payloads, convs, sources, stamps, actors)
	}
	wctx, done := writeCtx(ctx)
	defer done()
	br := s.pool.SendBatch(wctx, b)
	var err error
	for range b.Len() {
		if _, err = br.Exec(); err != nil {
			break
		}
	}
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("append events: %w", appendError(ctx, err))
	}
	return nil
}

// appendError maps a failed append's (or fenced update's) error to the
// store's.
func appendError(ctx context.Context, err error) error {
	switch pgCode(err) {
	case codeFenced:
		return &store.FencedError{Sessions: pgDetailList(err)}
	case codeUnknownSession:
		return fmt.Errorf("session %v: %w", pgDetailList(err), store.ErrNotFound)
	case codeUniqueViolation:
		return fmt.Errorf("%w: %w", store.ErrSeqConflict, err)
	}
	return withCtxErr(ctx, err)
}

// ReadEvents returns the session's events with seq > after in seq order, at
// most limit of them (limit <= 0: all). An unknown session has none.
func (s *Store) ReadEvents(ctx context.Context, sessionID string, after int64, limit int) ([]conversation.Event, error) {
	if err := checkCtx(ctx); err != nil {
		return nil, fmt.Errorf("read events of %q: %w", sessionID, err)
	}
	var lim any
	if limit > 0 {
		lim = int64(limit)
	}
	rows, err := s.pool.Query(ctx, `SELECT seq, type, payload, conversation_id, source, ts, actor
		FROM events WHERE session_id = $1 AND seq > $2 ORDER BY seq LIMIT $3`, sessionID, after, lim)
	if err != nil {
		return nil, fmt.Errorf("read events of %q: %w", sessionID, withCtxErr(ctx, err))
	}
	defer rows.Close()
	out := make([]conversation.Event, 0, min(max(limit, 16), 1024))
	for rows.Next() {
		var (
			e           conversation.Event
			typ, source string
			payload     []byte
			ts          *time.Time
			actor       *string
		)
		if err := rows.Scan(&e.Seq, &typ, &payload, &e.Context.ConversationID, &source, &ts, &actor); err != nil {
			return nil, fmt.Errorf("read events of %q: %w", sessionID, err)
		}
		e.Type = conversation.EventType(typ)
		e.Payload = payload
		e.Context.SessionID = sessionID
		e.Context.Source = conversation.Source(source)
		e.Context.Timestamp = scanTime(ts)
		e.Context.Actor = actor
		out = append(out, e)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read events of %q: %w", sessionID, withCtxErr(ctx, err))
	}
	return out, nil
}

// LastSeq returns the highest stored seq of the session, 0 if none.
func (s *Store) LastSeq(ctx context.Context, sessionID string) (int64, error) {
	if err := checkCtx(ctx); err != nil {
		return 0, fmt.Errorf("last seq of %q: %w", sessionID, err)
	}
	var seq int64
	if err := s.pool.QueryRow(ctx, `SELECT coalesce(max(seq), 0) FROM events WHERE session_id = $1`, sessionID).Scan(&seq); err != nil {
		return 0, fmt.Errorf("last seq of %q: %w", sessionID, withCtxErr(ctx, err))
	}
	return seq, nil
}
