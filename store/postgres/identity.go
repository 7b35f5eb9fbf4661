package postgres

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/agentd/agentd/store"
)

var _ store.IdentityStore = (*Store)(nil)

// exec runs one write statement with the store's write context.
func (s *Store) exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	if err := checkCtx(ctx); err != nil {
		return pgconn.CommandTag{}, err
	}
	wctx, done := writeCtx(ctx)
	defer done()
	tag, err := s.pool.Exec(wctx, sql, args...)
	return tag, withCtxErr(ctx, err)
}

// affected maps an exec's error, and no row affected to store.ErrNotFound.
func affected(tag pgconn.CommandTag, err error, what string) error {
	if err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("%s: %w", what, store.ErrNotFound)
	}
	return nil
}

// queryAll runs a query and scans each row with scan.
func queryAll[T any](ctx context.Context, s *Store, what string, scan func(pgx.Row) (T, error), sql string, args ...any) ([]T, error) {
	if err := checkCtx(ctx); err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	rows, err := s.pool.Query(ctx, sql, args...)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, withCtxErr(ctx, err))
	}
	defer rows.Close()
	out := []T{}
	for rows.Next() {
		v, err := scan(rows)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", what, err)
		}
		out = append(out, v)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("%s: %w", what, withCtxErr(ctx, err))
	}
	return out, nil
}

// queryOne runs a query for one row: store.ErrNotFound when there is none.
func queryOne[T any](ctx context.Context, s *Store, what string, scan func(pgx.Row) (T, error), sql string, args ...any) (T, error) {
	var zero T
	if err := checkCtx(ctx); err != nil {
		return zero, fmt.Errorf("%s: %w", what, err)
	}
	v, err := scan(s.pool.QueryRow(ctx, sql, args...))
	if errors.Is(err, pgx.ErrNoRows) {
		return zero, fmt.Errorf("%s: %w", what, store.ErrNotFound)
	}
	if err != nil {
		return zero, fmt.Errorf("%s: %w", what, withCtxErr(ctx, err))
	}
	return v, nil
}

const userColumns = `id, name, tenant, role, issuer, subject, disabled, created_at`

func scanUser(row pgx.Row) (store.User, error) {
	var (
		u       store.User
		role    string
		created *time.Time
	)
	if err := row.Scan(&u.ID, &u.Name, &u.Tenant, &role, &u.Issuer, &u.Subject, &u.Disabled, &created); err != nil {
		return store.User{}, err
	}
	u.Role, u.CreatedAt = store.Role(role), scanTime(created)
	return u, nil
}

// CreateUser stores a new user or returns store.ErrExists.
func (s *Store) CreateUser(ctx context.Context, u store.User) error {
	if u.ID == "" {
		return errors.New("create user: no id")
	}
	_, err := s.exec(ctx, `INSERT INTO users (`+userColumns+`) VALUES ($1, $2, $3, $4, $5, $6, $7, $8)`,
		u.ID, u.Name, u.Tenant, string(u.Role), u.Issuer, u.Subject, u.Disabled, timeArg(u.CreatedAt))
	if pgCode(err) == codeUniqueViolation {
		return fmt.Errorf("create user %q: %w", u.ID, store.ErrExists)
	}
	if err != nil {
		return fmt.Errorf("create user %q: %w", u.ID, err)
	}
	return nil
}

// LoadUser returns the user or store.ErrNotFound.
func (s *Store) LoadUser(ctx context.Context, id string) (store.User, error) {
	return queryOne(ctx, s, fmt.Sprintf("load user %q", id), scanUser, `SELECT `+userColumns+` FROM users WHERE id = $1`, id)
}

// LoadUserBySubject returns the user of an OIDC identity or store.ErrNotFound.
func (s *Store) LoadUserBySubject(ctx context.Context, issuer, subject string) (store.User, error) {
	if subject == "" {
		return store.User{}, fmt.Errorf("load user: no subject: %w", store.ErrNotFound)
	}
	return queryOne(ctx, s, fmt.Sprintf("load user of subject %q", subject), scanUser,
		`SELECT `+userColumns+` FROM users WHERE issuer = $1 AND subject = $2`, issuer, subject)
}

// ListUsers returns every user, sorted by id.
func (s *Store) ListUsers(ctx context.Context) ([]store.User, error) {
	return queryAll(ctx, s, "list users", scanUser, `SELECT `+userColumns+` FROM users ORDER BY id`)
}

// UpdateUser replaces a user's name, tenant, role and disabled flag.
func (s *Store) UpdateUser(ctx context.Context, u store.User) error {
	tag, err := s.exec(ctx, `UPDATE users SET name = $2, tenant = $3, role = $4, disabled = $5 WHERE id = $1`,
		u.ID, u.Name, u.Tenant, string(u.Role), u.Disabled)
	return affected(tag, err, "update user "+u.ID)
}

const tokenColumns = `id, hash, user_id, name, scopes, created_at, expires_at, last_used_at, revoked_at`

func scanToken(row pgx.Row) (store.APIToken, error) {
	var (
		t                               store.APIToken
		scopes                          string
		created, expires, used, revoked *time.Time
	)
	if err := row.Scan(&t.ID, &t.Hash, &t.UserID, &t.Name, &scopes, &created, &expires, &used, &revoked); err != nil {
		return store.APIToken{}, err
	}
	t.Scopes = strings.Fields(scopes)
	t.CreatedAt, t.ExpiresAt, t.LastUsedAt, t.RevokedAt = scanTime(created), scanTime(expires), scanTime(used), scanTime(revoked)
	return t, nil
}

// CreateToken stores a token: store.ErrExists for a taken id or hash,
// store.ErrNotFound for an unknown user.
func (s *Store) CreateToken(ctx context.Context, t store.APIToken) error {
	_, err := s.exec(ctx, `INSERT INTO api_tokens (`+tokenColumns+`) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)`,
		t.ID, t.Hash, t.UserID, t.Name, strings.Join(t.Scopes, " "),
		timeArg(t.CreatedAt), timeArg(t.ExpiresAt), timeArg(t.LastUsedAt), timeArg(t.RevokedAt))
	switch pgCode(err) {
	case codeUniqueViolation:
		return fmt.Errorf("create token %q: %w", t.ID, store.ErrExists)
	case codeForeignKeyViolation:
		return fmt.Errorf("create token %q: user %q: %w", t.ID, t.UserID, store.ErrNotFound)
	}
	if err != nil {
		return fmt.Errorf("create token %q: %w", t.ID, err)
	}
	return nil
}

// LookupToken returns the token with that hash or store.ErrNotFound.
func (s *Store) LookupToken(ctx context.Context, hash string) (store.APIToken, error) {
	return queryOne(ctx, s, "token by hash", scanToken, `SELECT `+tokenColumns+` FROM api_tokens WHERE hash = $1`, hash)
}

// LoadToken returns the token with that id or store.ErrNotFound.
func (s *Store) LoadToken(ctx context.Context, id string) (store.APIToken, error) {
	return queryOne(ctx, s, fmt.Sprintf("token %q", id), scanToken, `SELECT `+tokenColumns+` FROM api_tokens WHERE id = $1`, id)
}

// ListTokens returns the user's tokens (all for ""), oldest first.
func (s *Store) ListTokens(ctx context.Context, userID string) ([]store.APIToken, error) {
	return queryAll(ctx, s, "list tokens", scanToken,
		`SELECT `+tokenColumns+` FROM api_tokens WHERE $1 = '' OR user_id = $1 ORDER BY created_at NULLS FIRST, id`, userID)
}

// RevokeToken marks a token revoked (keeping the first time).
func (s *Store) RevokeToken(ctx context.Context, id string, at time.Time) error {
	tag, err := s.exec(ctx, `UPDATE api_tokens SET revoked_at = coalesce(revoked_at, $2) WHERE id = $1`, id, timeArg(at))
	return affected(tag, err, "revoke token "+id)
}

// TouchToken records a use; earlier times are ignored.
func (s *Store) TouchToken(ctx context.Context, id string, at time.Time) error {
	tag, err := s.exec(ctx, `UPDATE api_tokens SET last_used_at = greatest(last_used_at, $2) WHERE id = $1`, id, timeArg(at))
	return affected(tag, err, "touch token "+id)
}

const shareColumns = `session_id, user_id, access, created_at`

func scanShare(row pgx.Row) (store.Share, error) {
	var (
		sh      store.Share
		access  string
		created *time.Time
	)
	if err := row.Scan(&sh.SessionID, &sh.UserID, &access, &created); err != nil {
		return store.Share{}, err
	}
	sh.Access, sh.CreatedAt = store.ShareAccess(access), scanTime(created)
	return sh, nil
}

// PutShare creates or replaces a share; store.ErrNotFound for an unknown
// session.
func (s *Store) PutShare(ctx context.Context, sh store.Share) error {
	_, err := s.exec(ctx, `INSERT INTO session_shares (`+shareColumns+`) VALUES ($1, $2, $3, $4)
		ON CONFLICT (session_id, user_id) DO UPDATE SET access = excluded.access, created_at = excluded.created_at`,
		sh.SessionID, sh.UserID, string(sh.Access), timeArg(sh.CreatedAt))
	if pgCode(err) == codeForeignKeyViolation {
		return fmt.Errorf("share session %q: %w", sh.SessionID, store.ErrNotFound)
	}
	if err != nil {
		return fmt.Errorf("share session %q: %w", sh.SessionID, err)
	}
	return nil
}

// LoadShare returns the share or store.ErrNotFound.
func (s *Store) LoadShare(ctx context.Context, sessionID, userID string) (store.Share, error) {
	return queryOne(ctx, s, fmt.Sprintf("share of session %q", sessionID), scanShare,
		`SELECT `+shareColumns+` FROM session_shares WHERE session_id = $1 AND user_id = $2`, sessionID, userID)
}

// DeleteShare removes a share or returns store.ErrNotFound.
func (s *Store) DeleteShare(ctx context.Context, sessionID, userID string) error {
	tag, err := s.exec(ctx, `DELETE FROM session_shares WHERE session_id = $1 AND user_id = $2`, sessionID, userID)
	return affected(tag, err, "delete share of session "+sessionID)
}

// ListShares returns the session's shares, sorted by user.
func (s *Store) ListShares(ctx context.Context, sessionID string) ([]store.Share, error) {
	return queryAll(ctx, s, "list shares", scanShare,
		`SELECT `+shareColumns+` FROM session_shares WHERE session_id = $1 ORDER BY user_id`, sessionID)
}

// ListSharedWith returns the user's shares, sorted by session.
func (s *Store) ListSharedWith(ctx context.Context, userID string) ([]store.Share, error) {
	return queryAll(ctx, s, "list shares", scanShare,
		`SELECT `+shareColumns+` FROM session_shares WHERE user_id = $1 ORDER BY session_id`, userID)
}

const keyColumns = `scope, owner, provider, sealed, hint, created_at`

func scanKey(row pgx.Row) (store.ProviderKey, error) {
	var (
		k       store.ProviderKey
		scope   string
		created *time.Time
	)
	if err := row.Scan(&scope, &k.Owner, &k.Provider, &k.Sealed, &k.Hint, &created); err != nil {
		return store.ProviderKey{}, err
	}
	k.Scope, k.CreatedAt = store.KeyScope(scope), scanTime(created)
	return k, nil
}

// PutProviderKey creates or replaces a sealed key.
func (s *Store) PutProviderKey(ctx context.Context, k store.ProviderKey) error {
	_, err := s.exec(ctx, `INSERT INTO provider_keys (`+keyColumns+`) VALUES ($1, $2, $3, $4, $5, $6)
		ON CONFLICT (scope, owner, provider) DO UPDATE SET sealed = excluded.sealed, hint = excluded.hint, created_at = excluded.created_at`,
		string(k.Scope), k.Owner, k.Provider, reqBytes(k.Sealed), k.Hint, timeArg(k.CreatedAt))
	if err != nil {
		return fmt.Errorf("put provider key: %w", err)
	}
	return nil
}

// LoadProviderKey returns a sealed key or store.ErrNotFound.
func (s *Store) LoadProviderKey(ctx context.Context, scope store.KeyScope, owner, provider string) (store.ProviderKey, error) {
	return queryOne(ctx, s, "provider key", scanKey,
		`SELECT `+keyColumns+` FROM provider_keys WHERE scope = $1 AND owner = $2 AND provider = $3`, string(scope), owner, provider)
}

// ListProviderKeys returns the owner's keys, sorted by provider.
func (s *Store) ListProviderKeys(ctx context.Context, scope store.KeyScope, owner string) ([]store.ProviderKey, error) {
	return queryAll(ctx, s, "list provider keys", scanKey,
		`SELECT `+keyColumns+` FROM provider_keys WHERE scope = $1 AND owner = $2 ORDER BY provider`, string(scope), owner)
}

// DeleteProviderKey removes a key or returns store.ErrNotFound.
func (s *Store) DeleteProviderKey(ctx context.Context, scope store.KeyScope, owner, provider string) error {
	tag, err := s.exec(ctx, `DELETE FROM provider_keys WHERE scope = $1 AND owner = $2 AND provider = $3`, string(scope), owner, provider)
	return affected(tag, err, "delete provider key")
}

const budgetColumns = `scope, owner, tokens_per_day, tokens_per_month, cost_per_day_micros, cost_per_month_micros`

func scanBudget(row pgx.Row) (store.Budget, error) {
	var (
		b     store.Budget
		scope string
	)
	if err := row.Scan(&scope, &b.Owner, &b.TokensPerDay, &b.TokensPerMonth, &b.CostPerDayMicros, &b.CostPerMonthMicros); err != nil {
		return store.Budget{}, err
	}
	b.Scope = store.KeyScope(scope)
	return b, nil
}

// PutBudget creates or replaces a budget.
func (s *Store) PutBudget(ctx context.Context, b store.Budget) error {
	_, err := s.exec(ctx, `INSERT INTO budgets (`+budgetColumns+`) VALUES ($1, $2, $3, $4, $5, $6)
		ON CONFLICT (scope, owner) DO UPDATE SET tokens_per_day = excluded.tokens_per_day, tokens_per_month = excluded.tokens_per_month,
		cost_per_day_micros = excluded.cost_per_day_micros, cost_per_month_micros = excluded.cost_per_month_micros`,
		string(b.Scope), b.Owner, b.TokensPerDay, b.TokensPerMonth, b.CostPerDayMicros, b.CostPerMonthMicros)
	if err != nil {
		return fmt.Errorf("put budget: %w", err)
	}
	return nil
}

// LoadBudget returns a budget or store.ErrNotFound.
func (s *Store) LoadBudget(ctx context.Context, scope store.KeyScope, owner string) (store.Budget, error) {
	return queryOne(ctx, s, "budget", scanBudget, `SELECT `+budgetColumns+` FROM budgets WHERE scope = $1 AND owner = $2`, string(scope), owner)
}

// ListBudgets returns every budget, sorted by scope and owner.
func (s *Store) ListBudgets(ctx context.Context) ([]store.Budget, error) {
	return queryAll(ctx, s, "list budgets", scanBudget, `SELECT `+budgetColumns+` FROM budgets ORDER BY scope, owner`)
}

// DeleteBudget removes a budget or returns store.ErrNotFound.
func (s *Store) DeleteBudget(ctx context.Context, scope store.KeyScope, owner string) error {
	tag, err := s.exec(ctx, `DELETE FROM budgets WHERE scope = $1 AND owner = $2`, string(scope), owner)
	return affected(tag, err, "delete budget")
}

func unixDay(t time.Time) int64 { return store.UTCDay(t).Unix() / 86400 }

// AddUsage adds to the per-day counts in one implicit transaction (a
// pipelined batch).
func (s *Store) AddUsage(ctx context.Context, entries []store.UsageEntry) error {
	if err := checkCtx(ctx); err != nil {
		return fmt.Errorf("add usage: %w", err)
	}
	if len(entries) == 0 {
		return nil
	}
	b := &pgx.Batch{}
	for _, e := range entries {
		b.Queue(`INSERT INTO usage_days (user_id, tenant, day, tokens, cost_micros) VALUES ($1, $2, $3, $4, $5)
			ON CONFLICT (user_id, tenant, day) DO UPDATE SET tokens = usage_days.tokens + excluded.tokens,
			cost_micros = usage_days.cost_micros + excluded.cost_micros`,
			e.UserID, e.Tenant, unixDay(e.Day), e.Tokens, e.CostMicros)
	}
	wctx, done := writeCtx(ctx)
	defer done()
	if err := s.pool.SendBatch(wctx, b).Close(); err != nil {
		return fmt.Errorf("add usage: %w", withCtxErr(ctx, err))
	}
	return nil
}

// SumUsage sums a user's or tenant's counts over a range of UTC days.
func (s *Store) SumUsage(ctx context.Context, scope store.KeyScope, owner string, from, to time.Time) (store.Usage, error) {
	col := "user_id"
	if scope == store.ScopeTenant {
		col = "tenant"
	}
	return queryOne(ctx, s, "sum usage", func(row pgx.Row) (store.Usage, error) {
		var u store.Usage
		err := row.Scan(&u.Tokens, &u.CostMicros)
		return u, err
	}, `SELECT coalesce(sum(tokens), 0)::bigint, coalesce(sum(cost_micros), 0)::bigint FROM usage_days
		WHERE `+col+` = $1 AND day BETWEEN $2 AND $3`, owner, unixDay(from), unixDay(to))
}

// AppendAccess stores access records in one implicit transaction, in
// slice order.
func (s *Store) AppendAccess(ctx context.Context, records []store.AccessRecord) error {
	if err := checkCtx(ctx); err != nil {
		return fmt.Errorf("append access records: %w", err)
	}
	if len(records) == 0 {
		return nil
	}
	b := &pgx.Batch{}
	for _, r := range records {
		b.Queue(`INSERT INTO access_log (ts, kind, actor, token_id, subject, detail) VALUES ($1, $2, $3, $4, $5, $6)`,
			timeArg(r.Time), string(r.Kind), r.Actor, r.TokenID, r.Subject, r.Detail)
	}
	wctx, done := writeCtx(ctx)
	defer done()
	if err := s.pool.SendBatch(wctx, b).Close(); err != nil {
		return fmt.Errorf("append %d access records: %w", len(records), withCtxErr(ctx, err))
	}
	return nil
}

// ReadAccess returns access records after an id, in id order.
func (s *Store) ReadAccess(ctx context.Context, after int64, limit int) ([]store.AccessRecord, error) {
	q, args := `SELECT id, ts, kind, actor, token_id, subject, detail FROM access_log WHERE id > $1 ORDER BY id`, []any{after}
	if limit > 0 {
		q += ` LIMIT $2`
		args = append(args, limit)
	}
	return queryAll(ctx, s, "read access log", func(row pgx.Row) (store.AccessRecord, error) {
		var (
			r    store.AccessRecord
			ts   *time.Time
			kind string
		)
		err := row.Scan(&r.ID, &ts, &kind, &r.Actor, &r.TokenID, &r.Subject, &r.Detail)
		r.Time, r.Kind = scanTime(ts), store.AccessKind(kind)
		return r, err
	}, q, args...)
}
