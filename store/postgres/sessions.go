package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/agentd/agentd/conversation"
	"github.com/agentd/agentd/store"
)

const sessionColumns = `id, architecture, agent_profile_ref, name, status, session_options,
	runtime, created_at, last_activity, turns, sandbox_state, agent_state, owner, tenant`

// sessionArgs returns s's column values in sessionColumns order.
func sessionArgs(s store.Session) ([]any, error) {
	if s.ID == "" {
		return nil, errors.New("session has no id")
	}
	runtime, err := json.Marshal(s.Runtime)
	if err != nil {
		return nil, fmt.Errorf("encode runtime: %w", err)
	}
	return []any{
		s.ID, s.Architecture, s.AgentProfileRef, s.Name, string(s.Status), optBytes(s.SessionOptions),
		runtime, timeArg(s.CreatedAt), timeArg(s.LastActivity), s.Turns, optBytes(s.SandboxState), optBytes(s.AgentState), s.Owner, s.Tenant,
	}, nil
}

func scanSession(row pgx.Row) (store.Session, error) {
	var (
		s                       store.Session
		status                  string
		runtime                 []byte
		created, last           *time.Time
		options, sandbox, agent []byte
	)
	if err := row.Scan(&s.ID, &s.Architecture, &s.AgentProfileRef, &s.Name, &status, &options,
		&runtime, &created, &last, &s.Turns, &sandbox, &agent, &s.Owner, &s.Tenant); err != nil {
		return store.Session{}, err
	}
	s.SessionOptions, s.SandboxState, s.AgentState = options, sandbox, agent
	s.Status = conversation.SessionStatus(status)
	if err := json.Unmarshal(runtime, &s.Runtime); err != nil {
		return store.Session{}, fmt.Errorf("decode runtime of session %q: %w", s.ID, err)
	}
	s.CreatedAt, s.LastActivity = scanTime(created), scanTime(last)
	return s, nil
}

// ListSessions returns every session, newest CreatedAt first (ties: the
// later created first; the zero time last).
func (s *Store) ListSessions(ctx context.Context) ([]store.Session, error) {
	if err := checkCtx(ctx); err != nil {
		return nil, fmt.Errorf("list sessions: %w", err)
	}
	rows, err := s.pool.Query(ctx, `SELECT `+sessionColumns+` FROM sessions ORDER BY created_at DESC NULLS LAST, created_order DESC`)
	if err != nil {
		return nil, fmt.Errorf("list sessions: %w", withCtxErr(ctx, err))
	}
	defer rows.Close()
	out := []store.Session{}
	for rows.Next() {
		sess, err := scanSession(rows)
		if err != nil {
			return nil, fmt.Errorf("list sessions: %w", err)
		}
		out = append(out, sess)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list sessions: %w", withCtxErr(ctx, err))
	}
	return out, nil
}

// LoadSession returns the record or store.ErrNotFound.
func (s *Store) LoadSession(ctx context.Context, id string) (store.Session, error) {
	if err := checkCtx(ctx); err != nil {
		return store.Session{}, fmt.Errorf("load session %q: %w", id, err)
	}
	sess, err := scanSession(s.pool.QueryRow(ctx, `SELECT `+sessionColumns+` FROM sessions WHERE id = $1`, id))
	if errors.Is(err, pgx.ErrNoRows) {
		return store.Session{}, fmt.Errorf("load session %q: %w", id, store.ErrNotFound)
	}
	if err != nil {
		return store.Session{}, fmt.Errorf("load session %q: %w", id, withCtxErr(ctx, err))
	}
	return sess, nil
}

// CreateSession stores a new record or returns store.ErrExists.
func (s *Store) CreateSession(ctx context.Context, sess store.Session) error {
	if err := checkCtx(ctx); err != nil {
		return fmt.Errorf("create session %q: %w", sess.ID, err)
	}
	args, err := sessionArgs(sess)
	if err != nil {
		return fmt.Errorf("create session %q: %w", sess.ID, err)
	}
	_, err = s.pool.Exec(ctx, `INSERT INTO sessions (`+sessionColumns+`) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14)`, args...)
	if pgCode(err) == codeUniqueViolation {
		return fmt.Errorf("create session %q: %w", sess.ID, store.ErrExists)
	}
	if err != nil {
		return fmt.Errorf("create session %q: %w", sess.ID, withCtxErr(ctx, err))
	}
	return nil
}

const updateSessionSQL = `UPDATE sessions SET
	architecture = $2, agent_profile_ref = $3, name = $4, status = $5, session_options = $6,
	runtime = $7, created_at = $8, last_activity = $9, turns = $10, sandbox_state = $11, agent_state = $12,
	owner = $13, tenant = $14
	WHERE id = $1`

// UpdateSession replaces an existing record or returns store.ErrNotFound;
// with a fence, only while the fence's generation is the lease's (checked
// and locked in the same implicit transaction, one round trip), else
// store.ErrFenced.
func (s *Store) UpdateSession(ctx context.Context, sess store.Session, fences ...store.Fence) error {
	if err := checkCtx(ctx); err != nil {
		return fmt.Errorf("update session %q: %w", sess.ID, err)
	}
	if err := store.ValidateSessionFences(sess.ID, fences); err != nil {
		return fmt.Errorf("update session %q: %w", sess.ID, err)
	}
	args, err := sessionArgs(sess)
	if err != nil {
		return fmt.Errorf("update session %q: %w", sess.ID, err)
	}
	var n int64
	wctx, done := writeCtx(ctx)
	defer done()
	if len(fences) == 0 {
		tag, err := s.pool.Exec(wctx, updateSessionSQL, args...)
		if err != nil {
			return fmt.Errorf("update session %q: %w", sess.ID, withCtxErr(ctx, err))
		}
		n = tag.RowsAffected()
	} else {
		fs, fg := fenceArrays(fences)
		b := &pgx.Batch{}
		// The session's row is locked before its lease's (see the
		// function), then updated.
		b.Queue(`SELECT agentd_check_append($1, $2, $3)`, []string{sess.ID}, fs, fg)
		b.Queue(updateSessionSQL, args...)
		br := s.pool.SendBatch(wctx, b)
		_, err := br.Exec()
		if err == nil {
			var tag pgconn.CommandTag
			tag, err = br.Exec()
			n = tag.RowsAffected()
		}
		if cerr := br.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return fmt.Errorf("update session %q: %w", sess.ID, appendError(ctx, err))
		}
	}
	if n == 0 {
		return fmt.Errorf("update session %q: %w", sess.ID, store.ErrNotFound)
	}
	return nil
}

// DeleteSession removes the record and everything of the session:
// transcripts, files, lease, audit and tokens by cascade, events by a
// second statement in the same transaction, after the session's row is
// locked (so an append in flight has committed, and a later one finds no
// session). store.ErrNotFound if absent.
func (s *Store) DeleteSession(ctx context.Context, id string) error {
	if err := checkCtx(ctx); err != nil {
		return fmt.Errorf("delete session %q: %w", id, err)
	}
	wctx, done := writeCtx(ctx)
	defer done()
	var shas []string // the content the session referenced, kept in blobs
	err := pgx.BeginFunc(wctx, s.pool, func(tx pgx.Tx) error {
		var err error
		if shas, err = s.blobsOf(wctx, tx, id); err != nil {
			return err
		}
		tag, err := tx.Exec(wctx, `DELETE FROM sessions WHERE id = $1`, id)
		if err != nil {
			return err
		}
		if tag.RowsAffected() == 0 {
			return store.ErrNotFound
		}
		_, err = tx.Exec(wctx, `DELETE FROM events WHERE session_id = $1`, id)
		return err
	})
	if err != nil {
		return fmt.Errorf("delete session %q: %w", id, withCtxErr(ctx, err))
	}
	s.dropBlobs(ctx, shas)
	return nil
}
