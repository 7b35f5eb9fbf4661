package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"

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
	created, err := timeArg(s.CreatedAt)
	if err != nil {
		return nil, fmt.Errorf("createdAt: %w", err)
	}
	last, err := timeArg(s.LastActivity)
	if err != nil {
		return nil, fmt.Errorf("lastActivity: %w", err)
	}
	return []any{
		s.ID, s.Architecture, s.AgentProfileRef, s.Name, string(s.Status), optBytes(s.SessionOptions),
		runtime, created, last, s.Turns, optBytes(s.SandboxState), optBytes(s.AgentState), s.Owner, s.Tenant,
	}, nil
}

// scanSession reads one row of sessionColumns.
func scanSession(row interface{ Scan(...any) error }) (store.Session, error) {
	var (
		s             store.Session
		status        string
		runtime       []byte
		created, last sql.NullInt64
		// Scanned as []byte: database/sql cannot store NULL into a
		// *json.RawMessage.
		options, sandbox, agent []byte
	)
	err := row.Scan(&s.ID, &s.Architecture, &s.AgentProfileRef, &s.Name, &status, &options,
		&runtime, &created, &last, &s.Turns, &sandbox, &agent, &s.Owner, &s.Tenant)
	if err != nil {
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
// later created first).
func (s *Store) ListSessions(ctx context.Context) ([]store.Session, error) {
	rows, err := s.r.QueryContext(ctx, `SELECT `+sessionColumns+` FROM sessions ORDER BY created_at DESC, rowid DESC`)
	if err != nil {
		return nil, fmt.Errorf("list sessions: %w", err)
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
		return nil, fmt.Errorf("list sessions: %w", err)
	}
	return out, nil
}

// LoadSession returns the record or store.ErrNotFound.
func (s *Store) LoadSession(ctx context.Context, id string) (store.Session, error) {
	sess, err := scanSession(s.r.QueryRowContext(ctx, `SELECT `+sessionColumns+` FROM sessions WHERE id = ?`, id))
	if errors.Is(err, sql.ErrNoRows) {
		return store.Session{}, fmt.Errorf("load session %q: %w", id, store.ErrNotFound)
	}
	if err != nil {
		return store.Session{}, fmt.Errorf("load session %q: %w", id, err)
	}
	return sess, nil
}

// CreateSession stores a new record or returns store.ErrExists.
func (s *Store) CreateSession(ctx context.Context, sess store.Session) error {
	args, err := sessionArgs(sess)
	if err != nil {
		return fmt.Errorf("create session %q: %w", sess.ID, err)
	}
	_, err = s.w.ExecContext(ctx, `INSERT INTO sessions (`+sessionColumns+`) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`, args...)
	if isUniqueViolation(err) {
		return fmt.Errorf("create session %q: %w", sess.ID, store.ErrExists)
	}
	if err != nil {
		return fmt.Errorf("create session %q: %w", sess.ID, withCtxErr(ctx, err))
	}
	return nil
}

const updateSessionSQL = `UPDATE sessions SET
	architecture = ?2, agent_profile_ref = ?3, name = ?4, status = ?5, session_options = ?6,
	runtime = ?7, created_at = ?8, last_activity = ?9, turns = ?10, sandbox_state = ?11, agent_state = ?12,
	owner = ?13, tenant = ?14
	WHERE id = ?1`

// UpdateSession replaces an existing record or returns store.ErrNotFound;
// with a fence, only while the fence's generation is the lease's (checked
// in the same transaction), else store.ErrFenced.
func (s *Store) UpdateSession(ctx context.Context, sess store.Session, fences ...store.Fence) error {
	if err := store.ValidateSessionFences(sess.ID, fences); err != nil {
		return fmt.Errorf("update session %q: %w", sess.ID, err)
	}
	args, err := sessionArgs(sess)
	if err != nil {
		return fmt.Errorf("update session %q: %w", sess.ID, err)
	}
	var res sql.Result
	if len(fences) == 0 {
		res, err = s.w.ExecContext(ctx, updateSessionSQL, args...)
	} else {
		err = s.write(ctx, func(tx *sql.Tx) error {
			if err := checkFencesLocked(ctx, tx, s.leaseGen, fences); err != nil {
				return err
			}
			res, err = tx.ExecContext(ctx, updateSessionSQL, args...)
			return err
		})
	}
	if err != nil {
		return fmt.Errorf("update session %q: %w", sess.ID, withCtxErr(ctx, err))
	}
	if n, err := res.RowsAffected(); err != nil {
		return fmt.Errorf("update session %q: %w", sess.ID, err)
	} else if n == 0 {
		return fmt.Errorf("update session %q: %w", sess.ID, store.ErrNotFound)
	}
	return nil
}

// DeleteSession removes the record and, by cascade in the same statement,
// its events, transcripts, files and lease. store.ErrNotFound if absent.
func (s *Store) DeleteSession(ctx context.Context, id string) error {
	var shas []string // the content the session referenced, kept in blobs
	err := s.write(ctx, func(tx *sql.Tx) error {
		var err error
		if shas, err = s.blobsOfLocked(ctx, tx, id); err != nil {
			return err
		}
		res, err := tx.ExecContext(ctx, `DELETE FROM sessions WHERE id = ?`, id)
		if err != nil {
			return err
		}
		if n, err := res.RowsAffected(); err != nil {
			return err
		} else if n == 0 {
			return store.ErrNotFound
		}
		// Inside the transaction: no append can run between the delete
		// and this.
		s.seqs.forget(id)
		return nil
	})
	if err != nil {
		return fmt.Errorf("delete session %q: %w", id, err)
	}
	s.dropBlobs(ctx, shas)
	return nil
}
