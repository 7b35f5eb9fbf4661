package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/agentd/agentd/store"
)

// AcquireLease takes or renews the lease on sessionID for holder until
// ttl from now by the database server's clock (the clock every server of a
// fleet shares), and returns its generation. It fails with
// store.ErrLeaseHeld while another holder's lease is unexpired, and with
// store.ErrNotFound for an unknown session. One upsert decides, so racing
// holders cannot both win; the generation grows in the same statement when
// the holder changes.
func (s *Store) AcquireLease(ctx context.Context, sessionID, holder string, ttl time.Duration) (int64, error) {
	if err := checkCtx(ctx); err != nil {
		return 0, fmt.Errorf("acquire lease on %q: %w", sessionID, err)
	}
	if holder == "" {
		return 0, fmt.Errorf("acquire lease on %q: empty holder", sessionID)
	}
	if ttl <= 0 {
		return 0, fmt.Errorf("acquire lease on %q: ttl %v must be positive", sessionID, ttl)
	}
	var gen int64
	err := s.pool.QueryRow(ctx, `INSERT INTO leases AS l (session_id, holder, expires_at, generation)
		VALUES ($1, $2, clock_timestamp() + $3 * interval '1 microsecond', 1)
		ON CONFLICT (session_id) DO UPDATE SET holder = excluded.holder, expires_at = excluded.expires_at,
			generation = CASE WHEN l.holder = excluded.holder THEN l.generation ELSE l.generation + 1 END
		WHERE l.holder = excluded.holder OR l.expires_at <= clock_timestamp()
		RETURNING generation`, sessionID, holder, ttl.Microseconds()).Scan(&gen)
	switch {
	case pgCode(err) == codeForeignKeyViolation:
		return 0, fmt.Errorf("acquire lease on %q: session: %w", sessionID, store.ErrNotFound)
	case errors.Is(err, pgx.ErrNoRows):
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
	if err := checkCtx(ctx); err != nil {
		return fmt.Errorf("release lease on %q: %w", sessionID, err)
	}
	if _, err := s.pool.Exec(ctx, `UPDATE leases SET expires_at = '-infinity' WHERE session_id = $1 AND holder = $2`, sessionID, holder); err != nil {
		return fmt.Errorf("release lease on %q: %w", sessionID, withCtxErr(ctx, err))
	}
	return nil
}

// fenceArrays returns fences as the two arrays agentd_check_append takes.
func fenceArrays(fences []store.Fence) ([]string, []int64) {
	ss := make([]string, len(fences))
	gs := make([]int64, len(fences))
	for i, f := range fences {
		ss[i], gs[i] = f.SessionID, f.Generation
	}
	return ss, gs
}

// OrphanedSessions implements store.OrphanLister: the active sessions
// without an unexpired lease, by the database server's clock.
func (s *Store) OrphanedSessions(ctx context.Context) ([]string, error) {
	rows, err := s.pool.Query(ctx, `SELECT s.id FROM sessions s LEFT JOIN leases l ON l.session_id = s.id
		WHERE s.status IN ('starting', 'ready', 'running', 'idle')
			AND (l.session_id IS NULL OR l.expires_at <= clock_timestamp())
		ORDER BY s.id`)
	if err != nil {
		return nil, fmt.Errorf("list orphaned sessions: %w", withCtxErr(ctx, err))
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("list orphaned sessions: %w", withCtxErr(ctx, err))
	}
	return ids, nil
}
