package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/agentd/agentd/store"
)

var _ store.IdentityStore = (*Store)(nil)

const userColumns = `id, name, tenant, role, issuer, subject, disabled, created_at`

func scanUser(row interface{ Scan(...any) error }) (store.User, error) {
	var (
		u       store.User
		role    string
		created sql.NullInt64
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
	created, err := timeArg(u.CreatedAt)
	if err != nil {
		return fmt.Errorf("create user %q: %w", u.ID, err)
	}
	_, err = s.w.ExecContext(ctx, `INSERT INTO users (`+userColumns+`) VALUES (?, ?, ?, ?, ?, ?, ?, ?)`,
		u.ID, u.Name, u.Tenant, string(u.Role), u.Issuer, u.Subject, u.Disabled, created)
	if isUniqueViolation(err) {
		return fmt.Errorf("create user %q: %w", u.ID, store.ErrExists)
	}
	if err != nil {
		return fmt.Errorf("create user %q: %w", u.ID, withCtxErr(ctx, err))
	}
	return nil
}

func (s *Store) loadUser(ctx context.Context, what, where string, args ...any) (store.User, error) {
	u, err := scanUser(s.r.QueryRowContext(ctx, `SELECT `+userColumns+` FROM users WHERE `+where, args...))
	if errors.Is(err, sql.ErrNoRows) {
		return store.User{}, fmt.Errorf("load user %s: %w", what, store.ErrNotFound)
	}
	if err != nil {
		return store.User{}, fmt.Errorf("load user %s: %w", what, withCtxErr(ctx, err))
	}
	return u, nil
}

// LoadUser returns the user or store.ErrNotFound.
func (s *Store) LoadUser(ctx context.Context, id string) (store.User, error) {
	return s.loadUser(ctx, fmt.Sprintf("%q", id), `id = ?`, id)
}

// LoadUserBySubject returns the user of an OIDC identity or store.ErrNotFound.
func (s *Store) LoadUserBySubject(ctx context.Context, issuer, subject string) (store.User, error) {
	if subject == "" {
		return store.User{}, fmt.Errorf("load user: no subject: %w", store.ErrNotFound)
	}
	return s.loadUser(ctx, fmt.Sprintf("of subject %q", subject), `issuer = ? AND subject = ?`, issuer, subject)
}

// ListUsers returns every user, sorted by id.
func (s *Store) ListUsers(ctx context.Context) ([]store.User, error) {
	rows, err := s.r.QueryContext(ctx, `SELECT `+userColumns+` FROM users ORDER BY id`)
	if err != nil {
		return nil, fmt.Errorf("list users: %w", withCtxErr(ctx, err))
	}
	defer rows.Close()
	out := []store.User{}
	for rows.Next() {
		u, err := scanUser(rows)
		if err != nil {
			return nil, fmt.Errorf("list users: %w", err)
		}
		out = append(out, u)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list users: %w", withCtxErr(ctx, err))
	}
	return out, nil
}

// UpdateUser replaces a user's name, tenant, role and disabled flag.
func (s *Store) UpdateUser(ctx context.Context, u store.User) error {
	res, err := s.w.ExecContext(ctx, `UPDATE users SET name = ?, tenant = ?, role = ?, disabled = ? WHERE id = ?`,
		u.Name, u.Tenant, string(u.Role), u.Disabled, u.ID)
	return affected(ctx, res, err, "update user "+u.ID)
}

// affected maps an exec's error, and no row affected to store.ErrNotFound.
func affected(ctx context.Context, res sql.Result, err error, what string) error {
	if err != nil {
		return fmt.Errorf("%s: %w", what, withCtxErr(ctx, err))
	}
	n, err := res.RowsAffected()
	if err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	if n == 0 {
		return fmt.Errorf("%s: %w", what, store.ErrNotFound)
	}
	return nil
}

const tokenColumns = `id, hash, user_id, name, scopes, created_at, expires_at, last_used_at, revoked_at`

func scanToken(row interface{ Scan(...any) error }) (store.APIToken, error) {
	var (
		t                               store.APIToken
		scopes                          string
		created, expires, used, revoked sql.NullInt64
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
	var args []any
	for _, tm := range []time.Time{t.CreatedAt, t.ExpiresAt, t.LastUsedAt, t.RevokedAt} {
		a, err := timeArg(tm)
		if err != nil {
			return fmt.Errorf("create token %q: %w", t.ID, err)
		}
		args = append(args, a)
	}
	_, err := s.w.ExecContext(ctx, `INSERT INTO api_tokens (`+tokenColumns+`) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)`,
		append([]any{t.ID, t.Hash, t.UserID, t.Name, strings.Join(t.Scopes, " ")}, args...)...)
	switch {
	case isUniqueViolation(err):
		return fmt.Errorf("create token %q: %w", t.ID, store.ErrExists)
	case isForeignKeyViolation(err):
		return fmt.Errorf("create token %q: user %q: %w", t.ID, t.UserID, store.ErrNotFound)
	case err != nil:
		return fmt.Errorf("create token %q: %w", t.ID, withCtxErr(ctx, err))
	}
	return nil
}

func (s *Store) loadToken(ctx context.Context, what, where string, arg any) (store.APIToken, error) {
	t, err := scanToken(s.r.QueryRowContext(ctx, `SELECT `+tokenColumns+` FROM api_tokens WHERE `+where, arg))
	if errors.Is(err, sql.ErrNoRows) {
		return store.APIToken{}, fmt.Errorf("token %s: %w", what, store.ErrNotFound)
	}
	if err != nil {
		return store.APIToken{}, fmt.Errorf("token %s: %w", what, withCtxErr(ctx, err))
	}
	return t, nil
}

// LookupToken returns the token with that hash or store.ErrNotFound.
func (s *Store) LookupToken(ctx context.Context, hash string) (store.APIToken, error) {
	return s.loadToken(ctx, "by hash", `hash = ?`, hash)
}

// LoadToken returns the token with that id or store.ErrNotFound.
func (s *Store) LoadToken(ctx context.Context, id string) (store.APIToken, error) {
	return s.loadToken(ctx, fmt.Sprintf("%q", id), `id = ?`, id)
}

// ListTokens returns the user's tokens (all for ""), oldest first.
func (s *Store) ListTokens(ctx context.Context, userID string) ([]store.APIToken, error) {
	q, args := `SELECT `+tokenColumns+` FROM api_tokens`, []any{}
	if userID != "" {
		q += ` WHERE user_id = ?`
		args = append(args, userID)
	}
	rows, err := s.r.QueryContext(ctx, q+` ORDER BY created_at, id`, args...)
	if err != nil {
		return nil, fmt.Errorf("list tokens: %w", withCtxErr(ctx, err))
	}
	defer rows.Close()
	out := []store.APIToken{}
	for rows.Next() {
		t, err := scanToken(rows)
		if err != nil {
			return nil, fmt.Errorf("list tokens: %w", err)
		}
		out = append(out, t)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list tokens: %w", withCtxErr(ctx, err))
	}
	return out, nil
}

// RevokeToken marks a token revoked (keeping the first time).
func (s *Store) RevokeToken(ctx context.Context, id string, at time.Time) error {
	ts, err := timeArg(at)
	if err != nil {
		return fmt.Errorf("revoke token %q: %w", id, err)
	}
	res, err := s.w.ExecContext(ctx, `UPDATE api_tokens SET revoked_at = coalesce(revoked_at, ?) WHERE id = ?`, ts, id)
	return affected(ctx, res, err, "revoke token "+id)
}

// TouchToken records a use; earlier times are ignored.
func (s *Store) TouchToken(ctx context.Context, id string, at time.Time) error {
	ts, err := timeArg(at)
	if err != nil {
		return fmt.Errorf("touch token %q: %w", id, err)
	}
	res, err := s.w.ExecContext(ctx, `UPDATE api_tokens SET last_used_at = max(coalesce(last_used_at, ?1), ?1) WHERE id = ?2`, ts, id)
	return affected(ctx, res, err, "touch token "+id)
}

const shareColumns = `session_id, user_id, access, created_at`

func scanShare(row interface{ Scan(...any) error }) (store.Share, error) {
	var (
		sh      store.Share
		access  string
		created sql.NullInt64
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
	created, err := timeArg(sh.CreatedAt)
	if err != nil {
		return fmt.Errorf("share session %q: %w", sh.SessionID, err)
	}
	_, err = s.w.ExecContext(ctx, `INSERT INTO session_shares (`+shareColumns+`) VALUES (?, ?, ?, ?)
		ON CONFLICT (session_id, user_id) DO UPDATE SET access = excluded.access, created_at = excluded.created_at`,
		sh.SessionID, sh.UserID, string(sh.Access), created)
	if isForeignKeyViolation(err) {
		return fmt.Errorf("share session %q: %w", sh.SessionID, store.ErrNotFound)
	}
	if err != nil {
		return fmt.Errorf("share session %q: %w", sh.SessionID, withCtxErr(ctx, err))
	}
	return nil
}

// LoadShare returns the share or store.ErrNotFound.
func (s *Store) LoadShare(ctx context.Context, sessionID, userID string) (store.Share, error) {
	sh, err := scanShare(s.r.QueryRowContext(ctx, `SELECT `+shareColumns+` FROM session_shares WHERE session_id = ? AND user_id = ?`, sessionID, userID))
	if errors.Is(err, sql.ErrNoRows) {
		return store.Share{}, fmt.Errorf("share of session %q: %w", sessionID, store.ErrNotFound)
	}
	if err != nil {
		return store.Share{}, fmt.Errorf("share of session %q: %w", sessionID, withCtxErr(ctx, err))
	}
	return sh, nil
}

// DeleteShare removes a share or returns store.ErrNotFound.
func (s *Store) DeleteShare(ctx context.Context, sessionID, userID string) error {
	res, err := s.w.ExecContext(ctx, `DELETE FROM session_shares WHERE session_id = ? AND user_id = ?`, sessionID, userID)
	return affected(ctx, res, err, "delete share of session "+sessionID)
}

func (s *Store) listShares(ctx context.Context, where, order, arg string) ([]store.Share, error) {
	rows, err := s.r.QueryContext(ctx, `SELECT `+shareColumns+` FROM session_shares WHERE `+where+` ORDER BY `+order, arg)
	if err != nil {
		return nil, fmt.Errorf("list shares: %w", withCtxErr(ctx, err))
	}
	defer rows.Close()
	out := []store.Share{}
	for rows.Next() {
		sh, err := scanShare(rows)
		if err != nil {
			return nil, fmt.Errorf("list shares: %w", err)
		}
		out = append(out, sh)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list shares: %w", withCtxErr(ctx, err))
	}
	return out, nil
}

// ListShares returns the session's shares, sorted by user.
func (s *Store) ListShares(ctx context.Context, sessionID string) ([]store.Share, error) {
	return s.listShares(ctx, `session_id = ?`, `user_id`, sessionID)
}

// ListSharedWith returns the user's shares, sorted by session.
func (s *Store) ListSharedWith(ctx context.Context, userID string) ([]store.Share, error) {
	return s.listShares(ctx, `user_id = ?`, `session_id`, userID)
}

const keyColumns = `scope, owner, provider, sealed, hint, created_at`

func scanKey(row interface{ Scan(...any) error }) (store.ProviderKey, error) {
	var (
		k       store.ProviderKey
		scope   string
		created sql.NullInt64
	)
	if err := row.Scan(&scope, &k.Owner, &k.Provider, &k.Sealed, &k.Hint, &created); err != nil {
		return store.ProviderKey{}, err
	}
	k.Scope, k.CreatedAt = store.KeyScope(scope), scanTime(created)
	return k, nil
}

// PutProviderKey creates or replaces a sealed key.
func (s *Store) PutProviderKey(ctx context.Context, k store.ProviderKey) error {
	created, err := timeArg(k.CreatedAt)
	if err != nil {
		return fmt.Errorf("put provider key: %w", err)
	}
	_, err = s.w.ExecContext(ctx, `INSERT INTO provider_keys (`+keyColumns+`) VALUES (?, ?, ?, ?, ?, ?)
		ON CONFLICT (scope, owner, provider) DO UPDATE SET sealed = excluded.sealed, hint = excluded.hint, created_at = excluded.created_at`,
		string(k.Scope), k.Owner, k.Provider, reqBytes(k.Sealed), k.Hint, created)
	if err != nil {
		return fmt.Errorf("put provider key: %w", withCtxErr(ctx, err))
	}
	return nil
}

// LoadProviderKey returns a sealed key or store.ErrNotFound.
func (s *Store) LoadProviderKey(ctx context.Context, scope store.KeyScope, owner, provider string) (store.ProviderKey, error) {
	k, err := scanKey(s.r.QueryRowContext(ctx, `SELECT `+keyColumns+` FROM provider_keys WHERE scope = ? AND owner = ? AND provider = ?`,
		string(scope), owner, provider))
	if errors.Is(err, sql.ErrNoRows) {
		return store.ProviderKey{}, fmt.Errorf("provider key: %w", store.ErrNotFound)
	}
	if err != nil {
		return store.ProviderKey{}, fmt.Errorf("provider key: %w", withCtxErr(ctx, err))
	}
	return k, nil
}

// ListProviderKeys returns the owner's keys, sorted by provider.
func (s *Store) ListProviderKeys(ctx context.Context, scope store.KeyScope, owner string) ([]store.ProviderKey, error) {
	rows, err := s.r.QueryContext(ctx, `SELECT `+keyColumns+` FROM provider_keys WHERE scope = ? AND owner = ? ORDER BY provider`, string(scope), owner)
	if err != nil {
		return nil, fmt.Errorf("list provider keys: %w", withCtxErr(ctx, err))
	}
	defer rows.Close()
	out := []store.ProviderKey{}
	for rows.Next() {
		k, err := scanKey(rows)
		if err != nil {
			return nil, fmt.Errorf("list provider keys: %w", err)
		}
		out = append(out, k)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list provider keys: %w", withCtxErr(ctx, err))
	}
	return out, nil
}

// DeleteProviderKey removes a key or returns store.ErrNotFound.
func (s *Store) DeleteProviderKey(ctx context.Context, scope store.KeyScope, owner, provider string) error {
	res, err := s.w.ExecContext(ctx, `DELETE FROM provider_keys WHERE scope = ? AND owner = ? AND provider = ?`, string(scope), owner, provider)
	return affected(ctx, res, err, "delete provider key")
}

const budgetColumns = `scope, owner, tokens_per_day, tokens_per_month, cost_per_day_micros, cost_per_month_micros`

func scanBudget(row interface{ Scan(...any) error }) (store.Budget, error) {
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
	_, err := s.w.ExecContext(ctx, `INSERT INTO budgets (`+budgetColumns+`) VALUES (?, ?, ?, ?, ?, ?)
		ON CONFLICT (scope, owner) DO UPDATE SET tokens_per_day = excluded.tokens_per_day, tokens_per_month = excluded.tokens_per_month,
		cost_per_day_micros = excluded.cost_per_day_micros, cost_per_month_micros = excluded.cost_per_month_micros`,
		string(b.Scope), b.Owner, b.TokensPerDay, b.TokensPerMonth, b.CostPerDayMicros, b.CostPerMonthMicros)
	if err != nil {
		return fmt.Errorf("put budget: %w", withCtxErr(ctx, err))
	}
	return nil
}

// LoadBudget returns a budget or store.ErrNotFound.
func (s *Store) LoadBudget(ctx context.Context, scope store.KeyScope, owner string) (store.Budget, error) {
	b, err := scanBudget(s.r.QueryRowContext(ctx, `SELECT `+budgetColumns+` FROM budgets WHERE scope = ? AND owner = ?`, string(scope), owner))
	if errors.Is(err, sql.ErrNoRows) {
		return store.Budget{}, fmt.Errorf("budget: %w", store.ErrNotFound)
	}
	if err != nil {
		return store.Budget{}, fmt.Errorf("budget: %w", withCtxErr(ctx, err))
	}
	return b, nil
}

// ListBudgets returns every budget, sorted by scope and owner.
func (s *Store) ListBudgets(ctx context.Context) ([]store.Budget, error) {
	rows, err := s.r.QueryContext(ctx, `SELECT `+budgetColumns+` FROM budgets ORDER BY scope, owner`)
	if err != nil {
		return nil, fmt.Errorf("list budgets: %w", withCtxErr(ctx, err))
	}
	defer rows.Close()
	out := []store.Budget{}
	for rows.Next() {
		b, err := scanBudget(rows)
		if err != nil {
			return nil, fmt.Errorf("list budgets: %w", err)
		}
		out = append(out, b)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list budgets: %w", withCtxErr(ctx, err))
	}
	return out, nil
}

// DeleteBudget removes a budget or returns store.ErrNotFound.
func (s *Store) DeleteBudget(ctx context.Context, scope store.KeyScope, owner string) error {
	res, err := s.w.ExecContext(ctx, `DELETE FROM budgets WHERE scope = ? AND owner = ?`, string(scope), owner)
	return affected(ctx, res, err, "delete budget")
}

func unixDay(t time.Time) int64 { return store.UTCDay(t).Unix() / 86400 }

// AddUsage adds to the per-day counts in one transaction.
func (s *Store) AddUsage(ctx context.Context, entries []store.UsageEntry) error {
	if len(entries) == 0 {
		return ctx.Err()
	}
	err := s.write(ctx, func(tx *sql.Tx) error {
		for _, e := range entries {
			if _, err := tx.ExecContext(ctx, `INSERT INTO usage_days (user_id, tenant, day, tokens, cost_micros) VALUES (?, ?, ?, ?, ?)
				ON CONFLICT (user_id, tenant, day) DO UPDATE SET tokens = tokens + excluded.tokens, cost_micros = cost_micros + excluded.cost_micros`,
				e.UserID, e.Tenant, unixDay(e.Day), e.Tokens, e.CostMicros); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("add usage: %w", err)
	}
	return nil
}

// SumUsage sums a user's or tenant's counts over a range of UTC days.
func (s *Store) SumUsage(ctx context.Context, scope store.KeyScope, owner string, from, to time.Time) (store.Usage, error) {
	col := "user_id"
	if scope == store.ScopeTenant {
		col = "tenant"
	}
	var u store.Usage
	err := s.r.QueryRowContext(ctx, `SELECT coalesce(sum(tokens), 0), coalesce(sum(cost_micros), 0) FROM usage_days
		WHERE `+col+` = ? AND day BETWEEN ? AND ?`, owner, unixDay(from), unixDay(to)).Scan(&u.Tokens, &u.CostMicros)
	if err != nil {
		return store.Usage{}, fmt.Errorf("sum usage: %w", withCtxErr(ctx, err))
	}
	return u, nil
}

// AppendAccess stores access records in one transaction.
func (s *Store) AppendAccess(ctx context.Context, records []store.AccessRecord) error {
	if len(records) == 0 {
		return ctx.Err()
	}
	err := s.write(ctx, func(tx *sql.Tx) error {
		for i, r := range records {
			ts, err := timeArg(r.Time)
			if err != nil {
				return fmt.Errorf("record %d: %w", i, err)
			}
			if _, err := tx.ExecContext(ctx, `INSERT INTO access_log (ts, kind, actor, token_id, subject, detail) VALUES (?, ?, ?, ?, ?, ?)`,
				ts, string(r.Kind), r.Actor, r.TokenID, r.Subject, r.Detail); err != nil {
				return fmt.Errorf("record %d: %w", i, err)
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("append %d access records: %w", len(records), err)
	}
	return nil
}

// ReadAccess returns access records after an id, in id order.
func (s *Store) ReadAccess(ctx context.Context, after int64, limit int) ([]store.AccessRecord, error) {
	q, args := `SELECT id, ts, kind, actor, token_id, subject, detail FROM access_log WHERE id > ? ORDER BY id`, []any{after}
	if limit > 0 {
		q += ` LIMIT ?`
		args = append(args, limit)
	}
	rows, err := s.r.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, fmt.Errorf("read access log: %w", withCtxErr(ctx, err))
	}
	defer rows.Close()
	out := []store.AccessRecord{}
	for rows.Next() {
		var (
			r    store.AccessRecord
			ts   sql.NullInt64
			kind string
		)
		if err := rows.Scan(&r.ID, &ts, &kind, &r.Actor, &r.TokenID, &r.Subject, &r.Detail); err != nil {
			return nil, fmt.Errorf("read access log: %w", err)
		}
		r.Time, r.Kind = scanTime(ts), store.AccessKind(kind)
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read access log: %w", withCtxErr(ctx, err))
	}
	return out, nil
}
