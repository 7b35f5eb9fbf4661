package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/agentd/agentd/store"
)

// AcquireLease takes or renews the lease on sessionID for holder until
// now+ttl, by this process's clock, and returns its generation. It fails
// with store.ErrLeaseHeld while another holder's lease is unexpired, and
// with store.ErrNotFound for an unknown session. One upsert statement
// decides, so racing holders cannot both win; the generation grows in the
// same statement when the holder changes.
func (s *Store) AcquireLease(ctx context.Context, sessionID, holder string, ttl time.Duration) (int64, error) {
	if holder == "" {
		return 0, fmt.Errorf("acquire lease on %q: empty holder", sessionID)
	}
	if ttl <= 0 {
		return 0, fmt.Errorf("acquire lease on %q: ttl %v must be positive", sessionID, ttl)
	}
	now := time.Now()
	expires, err := timeArg(now.Add(ttl))
	if err != nil {
		return 0, fmt.Errorf("acquire lease on %q: ttl %v: %w", sessionID, ttl, err)
	}
	// In SET, leases.* are the row's values before the update.
	var gen int64
	err = s.w.QueryRowContext(ctx, `INSERT INTO leases (session_id, holder, expires_at, generation) VALUES (?1, ?2, ?3, 1)
		ON CONFLICT (session_id) DO UPDATE SET holder = excluded.holder, expires_at = excluded.expires_at,
			generation = CASE WHEN leases.holder = excluded.holder THEN leases.generation ELSE leases.generation + 1 END
		WHERE leases.holder = excluded.holder OR leases.expires_at <= ?4
		RETURNING generation`,
		sessionID, holder, expires, now.UnixNano()).Scan(&gen)
	switch {
	case isForeignKeyViolation(err):
		return 0, fmt.Errorf("acquire lease on %q: session: %w", sessionID, store.ErrNotFound)
	case errors.Is(err, sql.ErrNoRows):
		return 0, fmt.Errorf("acquire lease on %q for %q: %w", sessionID, holder, store.ErrLeaseHeld)
	case err != nil:
		return 0, fmt.Errorf("acquire lease on %q: %w", sessionID, withCtxErr(ctx, err))
	}
	return gen, nil
}

// ReleaseLease gives the lease up if holder has it; otherwise it does
// nothing. The row stays, expired, so the next holder's generation is
// higher.
func (s *Store) ReleaseLease(ctx context.Context, sessionID, holder string) error {
	if _, err := s.w.ExecContext(ctx, `UPDATE leases SET expires_at = 0 WHERE session_id = ? AND holder = ?`, sessionID, holder); err != nil {
		return fmt.Errorf("release lease on %q: %w", sessionID, withCtxErr(ctx, err))
	}
	return nil
}

// checkFencesLocked fails with a *store.FencedError naming every session
// of fences whose lease generation is not the fence's; tx is the writer's,
// leaseGen the statement reading a generation, prepared on it.
func checkFencesLocked(ctx context.Context, tx *sql.Tx, leaseGen *sql.Stmt, fences []store.Fence) error {
	if len(fences) == 0 {
		return nil
	}
	var stale []string
	seen := make(map[string]bool, len(fences))
	stmt := tx.StmtContext(ctx, leaseGen)
	for _, f := range fences {
		var gen int64
		err := stmt.QueryRowContext(ctx, f.SessionID).Scan(&gen)
		if err != nil && !errors.Is(err, sql.ErrNoRows) {
			return fmt.Errorf("read lease generation of %q: %w", f.SessionID, err)
		}
		if gen != f.Generation && !seen[f.SessionID] {
			seen[f.SessionID] = true
			stale = append(stale, f.SessionID)
		}
	}
	if len(stale) > 0 {
		return &store.FencedError{Sessions: stale}
	}
	return nil
}

// OrphanedSessions implements store.OrphanLister: the active sessions
// without an unexpired lease, by this process's clock.
func (s *Store) OrphanedSessions(ctx context.Context) ([]string, error) {
	rows, err := s.r.QueryContext(ctx, `SELECT s.id FROM sessions s LEFT JOIN leases l ON l.session_id = s.id
		WHERE s.status IN ('starting', 'ready', 'running', 'idle')
			AND (l.session_id IS NULL OR l.expires_at <= ?)
		ORDER BY s.id`, time.Now().UnixNano())
	if err != nil {
		return nil, fmt.Errorf("list orphaned sessions: %w", withCtxErr(ctx, err))
	}
	defer rows.Close()
	var ids []string
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			return nil, fmt.Errorf("list orphaned sessions: %w", err)
		}
		ids = append(ids, id)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list orphaned sessions: %w", withCtxErr(ctx, err))
	}
	return ids, nil
}

// Ping implements store.Pinger.
func (s *Store) Ping(ctx context.Context) error {
	if err := s.r.PingContext(ctx); err != nil {
		return fmt.Errorf("ping sqlite store: %w", withCtxErr(ctx, err))
	}
	return nil
}
