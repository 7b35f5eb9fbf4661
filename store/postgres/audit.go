package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/agentd/agentd/conversation"
	"github.com/agentd/agentd/store"
)

var (
	_ store.AuditStore      = (*Store)(nil)
	_ store.ModelTokenStore = (*Store)(nil)
)

const auditColumns = `session_id, ts, kind, method, path, provider, model, actor, outcome, status, error,
	bytes_in, bytes_out, duration_ms, has_usage, input_tokens, output_tokens, cache_read_tokens, cache_creation_tokens`

// insertAuditSQL inserts one record if its session exists, locking the
// session's row so that a DeleteSession in flight either has committed
// (the record is dropped) or waits for this one.
const insertAuditSQL = `INSERT INTO audit (` + auditColumns + `)
	SELECT $1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18, $19
	WHERE EXISTS (SELECT 1 FROM sessions WHERE id = $1 FOR KEY SHARE)`

// AppendAudit stores records in one implicit transaction (a pipelined
// batch, one round trip), one insert each so that ids follow slice order;
// records of an unknown session are dropped.
func (s *Store) AppendAudit(ctx context.Context, records []store.AuditRecord) error {
	if err := checkCtx(ctx); err != nil {
		return fmt.Errorf("append audit records: %w", err)
	}
	if len(records) == 0 {
		return nil
	}
	b := &pgx.Batch{}
	for _, r := range records {
		var u conversation.Usage
		if r.Usage != nil {
			u = *r.Usage
		}
		b.Queue(insertAuditSQL, r.SessionID, timeArg(r.Time), string(r.Kind), r.Method, r.Path, r.Provider, r.Model,
			r.Actor, string(r.Outcome), int64(r.Status), r.Error, r.BytesIn, r.BytesOut, r.DurationMs, r.Usage != nil,
			u.InputTokens, u.OutputTokens, u.CacheReadInputTokens, u.CacheCreationInputTokens)
	}
	wctx, done := writeCtx(ctx)
	defer done()
	br := s.pool.SendBatch(wctx, b)
	var err error
	for i := range b.Len() {
		if _, err = br.Exec(); err != nil {
			err = fmt.Errorf("record %d: %w", i, err)
			break
		}
	}
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("append %d audit records: %w", len(records), withCtxErr(ctx, err))
	}
	return nil
}

// ReadAudit returns the session's records with id > after, in id order.
func (s *Store) ReadAudit(ctx context.Context, sessionID string, after int64, limit int) ([]store.AuditRecord, error) {
	if err := checkCtx(ctx); err != nil {
		return nil, fmt.Errorf("read audit of %q: %w", sessionID, err)
	}
	var lim any
	if limit > 0 {
		lim = int64(limit)
	}
	rows, err := s.pool.Query(ctx, `SELECT id, `+auditColumns+` FROM audit WHERE session_id = $1 AND id > $2 ORDER BY id LIMIT $3`,
		sessionID, after, lim)
	if err != nil {
		return nil, fmt.Errorf("read audit of %q: %w", sessionID, withCtxErr(ctx, err))
	}
	defer rows.Close()
	out := []store.AuditRecord{}
	for rows.Next() {
		var (
			r                store.AuditRecord
			ts               *time.Time
			kind, outcome    string
			status           int64
			hasUsage         bool
			in, outT, cr, cc int64
		)
		if err := rows.Scan(&r.ID, &r.SessionID, &ts, &kind, &r.Method, &r.Path, &r.Provider, &r.Model, &r.Actor,
			&outcome, &status, &r.Error, &r.BytesIn, &r.BytesOut, &r.DurationMs, &hasUsage, &in, &outT, &cr, &cc); err != nil {
			return nil, fmt.Errorf("read audit of %q: %w", sessionID, err)
		}
		r.Time = scanTime(ts)
		r.Status = int(status)
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
	if err := checkCtx(ctx); err != nil {
		return conversation.Usage{}, fmt.Errorf("sum audit usage of %q: %w", sessionID, err)
	}
	var u conversation.Usage
	err := s.pool.QueryRow(ctx, `SELECT coalesce(sum(input_tokens), 0)::bigint, coalesce(sum(output_tokens), 0)::bigint,
		coalesce(sum(cache_read_tokens), 0)::bigint, coalesce(sum(cache_creation_tokens), 0)::bigint
		FROM audit WHERE session_id = $1`, sessionID).
		Scan(&u.InputTokens, &u.OutputTokens, &u.CacheReadInputTokens, &u.CacheCreationInputTokens)
	if err != nil {
		return conversation.Usage{}, fmt.Errorf("sum audit usage of %q: %w", sessionID, withCtxErr(ctx, err))
	}
	return u, nil
}

// SaveModelToken stores a token hash for a session.
func (s *Store) SaveModelToken(ctx context.Context, t store.ModelToken) error {
	if err := checkCtx(ctx); err != nil {
		return fmt.Errorf("save model token of %q: %w", t.SessionID, err)
	}
	if t.Hash == "" {
		return fmt.Errorf("save model token of %q: empty hash", t.SessionID)
	}
	_, err := s.pool.Exec(ctx, `INSERT INTO model_tokens (hash, session_id, budget, created_at) VALUES ($1, $2, $3, $4)`,
		t.Hash, t.SessionID, t.Budget, timeArg(t.CreatedAt))
	switch pgCode(err) {
	case codeForeignKeyViolation:
		return fmt.Errorf("save model token of %q: session: %w", t.SessionID, store.ErrNotFound)
	case codeUniqueViolation:
		return fmt.Errorf("save model token of %q: %w", t.SessionID, store.ErrExists)
	}
	if err != nil {
		return fmt.Errorf("save model token of %q: %w", t.SessionID, withCtxErr(ctx, err))
	}
	return nil
}

// LookupModelToken finds a token by hash.
func (s *Store) LookupModelToken(ctx context.Context, hash string) (store.ModelToken, error) {
	if err := checkCtx(ctx); err != nil {
		return store.ModelToken{}, fmt.Errorf("look up model token: %w", err)
	}
	t := store.ModelToken{Hash: hash}
	var created *time.Time
	err := s.pool.QueryRow(ctx, `SELECT session_id, budget, created_at FROM model_tokens WHERE hash = $1`, hash).
		Scan(&t.SessionID, &t.Budget, &created)
	if errors.Is(err, pgx.ErrNoRows) {
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
	if err := checkCtx(ctx); err != nil {
		return fmt.Errorf("delete model tokens of %q: %w", sessionID, err)
	}
	if _, err := s.pool.Exec(ctx, `DELETE FROM model_tokens WHERE session_id = $1`, sessionID); err != nil {
		return fmt.Errorf("delete model tokens of %q: %w", sessionID, withCtxErr(ctx, err))
	}
	return nil
}
