package sqlite

import (
	"context"
	"fmt"
	"time"

	"github.com/agentd/agentd/store"
)

// AcquireLease takes or renews the lease on sessionID for holder until
// now+ttl, by this process's clock. It fails with store.ErrLeaseHeld while
// another holder's lease is unexpired, and with store.ErrNotFound for an
// unknown session. One upsert statement decides, so racing holders cannot
// both win.
func (s *Store) AcquireLease(ctx context.Context, sessionID, holder string, ttl time.Duration) error {
	if holder == "" {
		return fmt.Errorf("acquire lease on %q: empty holder", sessionID)
	}
	if ttl <= 0 {
		return fmt.Errorf("acquire lease on %q: ttl %v must be positive", sessionID, ttl)
	}
	now := time.Now()
	expires, err := timeArg(now.Add(ttl))
	if err != nil {
		return fmt.Errorf("acquire lease on %q: ttl %v: %w", sessionID, ttl, err)
	}
	res, err := s.w.ExecContext(ctx, `INSERT INTO leases (session_id, holder, expires_at) VALUES (?1, ?2, ?3)
		ON CONFLICT (session_id) DO UPDATE SET holder = excluded.holder, expires_at = excluded.expires_at
		WHERE leases.holder = excluded.holder OR leases.expires_at <= ?4`,
		sessionID, holder, expires, now.UnixNano())
	if isForeignKeyViolation(err) {
		return fmt.Errorf("acquire lease on %q: session: %w", sessionID, store.ErrNotFound)
	}
	if err != nil {
		return fmt.Errorf("acquire lease on %q: %w", sessionID, withCtxErr(ctx, err))
	}
	n, err := res.RowsAffected()
	if err != nil {
		return fmt.Errorf("acquire lease on %q: %w", sessionID, err)
	}
	if n == 0 {
		return fmt.Errorf("acquire lease on %q for %q: %w", sessionID, holder, store.ErrLeaseHeld)
	}
	return nil
}

// ReleaseLease gives the lease up if holder has it; otherwise it does
// nothing.
func (s *Store) ReleaseLease(ctx context.Context, sessionID, holder string) error {
	if _, err := s.w.ExecContext(ctx, `DELETE FROM leases WHERE session_id = ? AND holder = ?`, sessionID, holder); err != nil {
		return fmt.Errorf("release lease on %q: %w", sessionID, withCtxErr(ctx, err))
	}
	return nil
}
