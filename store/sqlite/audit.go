package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/agentd/agentd/conversation"
	"github.com/agentd/agentd/store"
)

var (
	_ store.AuditStore      = (*Store)(nil)
	_ store.ModelTokenStore = (*Store)(nil)
)

const auditColumns = `session_id, ts, kind, method, path, provider, model, actor, outcome, status, error,
	bytes_in, bytes_out, duration_ms, has_usage, input_tokens, output_tokens, cache_read_tokens, cache_creation_tokens`

// insertAuditSQL inserts one record if its session exists: a record of a
// session purged while it waited in a batch is dropped instead of failing
// the batch on the foreign key.
const insertAuditSQL = `INSERT INTO audit (` + auditColumns + `)
	SELECT ?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, ?18, ?19
	WHERE EXISTS (SELECT 1 FROM sessions WHERE id = ?1)`

// AppendAudit stores records in one transaction.
func (s *Store) AppendAudit(ctx context.Context, records []store.AuditRecord) error {
	if len(records) == 0 {
		return ctx.Err()
	}
	err := s.write(ctx, func(tx *sql.Tx) error {
		stmt, err := tx.PrepareContext(ctx, insertAuditSQL)
		if err != nil {
			return err
		}
		defer stmt.Close()
		for i, r := range records {
			ts, err := timeArg(r.Time)
			if err != nil {
				return fmt.Errorf("record %d: %w", i, err)
			}
			var u conversation.Usage
			if r.Usage != nil {
				u = *r.Usage
			}
			if _, err := stmt.ExecContext(ctx, r.SessionID, ts, string(r.Kind), r.Method, r.Path, r.Provider, r.Model,
				r.Actor, string(r.Outcome), r.Status, r.Error, r.BytesIn, r.BytesOut, r.DurationMs, r.Usage != nil,
				u.InputTokens, u.OutputTokens, u.CacheReadInputTokens, u.CacheCreationInputTokens); err != nil {
				return fmt.Errorf("record %d: %w", i, err)
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("append %d audit records: %w", len(records), err)
	}
	return nil
}

// ReadAudit returns the session's records with id > after, in id order.
func (s *Store) ReadAudit(ctx context.Context, sessionID string, after int64, limit int) ([]store.AuditRecord, error) {
	q := `SELECT id, ` + auditColumns + ` FROM audit WHERE session_id = ? AND id > ? ORDER BY id`
	args := []any{sessionID, after}
	if limit > 0 {
		q += ` LIMIT ?`
		args = append(args, limit)
	}
	rows, err := s.r.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, fmt.Errorf("read audit of %q: %w", sessionID, withCtxErr(ctx, err))
	}
	defer rows.Close()
	out := []store.AuditRecord{}
	for rows.Next() {
		var (
			r                store.AuditRecord
			ts               sql.NullInt64
			kind, outcome    string
			hasUsage         bool
			in, outT, cr, cc int64
		)
		if err := rows.Scan(&r.ID, &r.SessionID, &ts, &kind, &r.Method, &r.Path, &r.Provider, &r.Model, &r.Actor,
			&outcome, &r.Status, &r.Error, &r.BytesIn, &r.BytesOut, &r.DurationMs, &hasUsage, &in, &outT, &cr, &cc); err != nil {
			return nil, fmt.Errorf("read audit of %q: %w", sessionID, err)
		}
		r.Time = scanTime(ts)
		r.Kind, r.Outcome = store.AuditKind(kind), store.AuditOutcome(outcome)
		if hasUsage {
			r.Usage = &conversation.Usage{InputTokens: in, OutputTokens: outT, CacheReadInputTokens: cr, CacheCreationInputTokens: cc}
		}
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read audit of %q: %w", sessionID, withCtxErr(ctx, err))
	}
	return out, nil
}

// AuditUsage sums the usage of the session's records.
func (s *Store) AuditUsage(ctx context.Context, sessionID string) (conversation.Usage, error) {
	var u conversation.Usage
	err := s.r.QueryRowContext(ctx, `SELECT coalesce(sum(input_tokens), 0), coalesce(sum(output_tokens), 0),
		coalesce(sum(cache_read_tokens), 0), coalesce(sum(cache_creation_tokens), 0)
		FROM audit WHERE session_id = ?`, sessionID).
		Scan(&u.InputTokens, &u.OutputTokens, &u.CacheReadInputTokens, &u.CacheCreationInputTokens)
	if err != nil {
		return conversation.Usage{}, fmt.Errorf("sum audit usage of %q: %w", sessionID, withCtxErr(ctx, err))
	}
	return u, nil
}

// SaveModelToken stores a token hash for a session.
func (s *Store) SaveModelToken(ctx context.Context, t store.ModelToken) error {
	if t.Hash == "" {
		return fmt.Errorf("save model token of %q: empty hash", t.SessionID)
	}
	created, err := timeArg(t.CreatedAt)
	if err != nil {
		return fmt.Errorf("save model token of %q: %w", t.SessionID, err)
	}
	_, err = s.w.ExecContext(ctx, `INSERT INTO model_tokens (hash, session_id, budget, created_at) VALUES (?, ?, ?, ?)`,
		t.Hash, t.SessionID, t.Budget, created)
	switch {
	case isForeignKeyViolation(err):
		return fmt.Errorf("save model token of %q: session: %w", t.SessionID, store.ErrNotFound)
	case isUniqueViolation(err):
		return fmt.Errorf("save model token of %q: %w", t.SessionID, store.ErrExists)
	case err != nil:
		return fmt.Errorf("save model token of %q: %w", t.SessionID, withCtxErr(ctx, err))
	}
	return nil
}

// LookupModelToken finds a token by hash.
func (s *Store) LookupModelToken(ctx context.Context, hash string) (store.ModelToken, error) {
	t := store.ModelToken{Hash: hash}
	var created sql.NullInt64
	err := s.r.QueryRowContext(ctx, `SELECT session_id, budget, created_at FROM model_tokens WHERE hash = ?`, hash).
		Scan(&t.SessionID, &t.Budget, &created)
	if errors.Is(err, sql.ErrNoRows) {
		return store.ModelToken{}, fmt.Errorf("look up model token: %w", store.ErrNotFound)
	}
	if err != nil {
		return store.ModelToken{}, fmt.Errorf("look up model token: %w", withCtxErr(ctx, err))
	}
	t.CreatedAt = scanTime(created)
	return t, nil
}

// DeleteModelTokens removes the session's tokens.
func (s *Store) DeleteModelTokens(ctx context.Context, sessionID string) error {
	if _, err := s.w.ExecContext(ctx, `DELETE FROM model_tokens WHERE session_id = ?`, sessionID); err != nil {
		return fmt.Errorf("delete model tokens of %q: %w", sessionID, withCtxErr(ctx, err))
	}
	return nil
}
