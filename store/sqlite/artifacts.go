package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/agentd/agentd/conversation"
	"github.com/agentd/agentd/store"
	"github.com/agentd/agentd/store/internal/artifact"
)

var _ store.ArtifactStore = (*Store)(nil)

// WithArtifactQuota limits the artifacts the store holds (default: none).
func WithArtifactQuota(q store.ArtifactQuota) Option { return func(c *config) { c.artifactQuota = q } }

// SetArtifactQuota implements store.ArtifactQuotaSetter.
func (s *Store) SetArtifactQuota(q store.ArtifactQuota) { s.artifactQuota.Store(&q) }

// PutArtifact implements store.ArtifactStore. The content is staged first
// (hashed and spooled to a temporary file when larger than a chunk), so
// the write transaction, which holds the writer connection, runs at disk
// speed however slowly r delivers; the session's row, its existing
// reference and the quota are checked in that transaction.
func (s *Store) PutArtifact(ctx context.Context, sessionID string, meta conversation.ArtifactRef, r io.Reader) (conversation.ArtifactRef, error) {
	if err := ctx.Err(); err != nil {
		return conversation.ArtifactRef{}, fmt.Errorf("put artifact of %q: %w", sessionID, err)
	}
	st, err := artifact.Stage(ctx, r, s.artifactQuota.Load().Largest())
	if err != nil {
		return conversation.ArtifactRef{}, fmt.Errorf("put artifact of %q: %w", sessionID, err)
	}
	defer st.Close()
	ref := conversation.ArtifactRef{SHA256: st.SHA256, Size: st.Size, ContentType: meta.ContentType, Name: meta.Name}
	err = s.write(ctx, func(tx *sql.Tx) error {
		var known, held bool
		if err := tx.QueryRowContext(ctx, `SELECT EXISTS (SELECT 1 FROM sessions WHERE id = ?1),
			EXISTS (SELECT 1 FROM session_artifacts WHERE session_id = ?1 AND sha256 = ?2)`,
			sessionID, st.SHA256).Scan(&known, &held); err != nil {
			return err
		}
		if !known {
			return fmt.Errorf("session: %w", store.ErrNotFound)
		}
		if held {
			return nil
		}
		var stored bool
		if err := tx.QueryRowContext(ctx, `SELECT EXISTS (SELECT 1 FROM artifact_contents WHERE sha256 = ?)`,
			st.SHA256).Scan(&stored); err != nil {
			return err
		}
		if err := s.checkArtifactQuotaLocked(ctx, tx, sessionID, st.Size, stored); err != nil {
			return err
		}
		now := time.Now().UnixNano()
		if stored {
			if _, err := tx.ExecContext(ctx, `UPDATE artifact_contents SET refs = refs + 1 WHERE sha256 = ?`, st.SHA256); err != nil {
				return err
			}
		} else {
			if _, err := tx.ExecContext(ctx, `INSERT INTO artifact_contents (sha256, size, refs, created_at) VALUES (?, ?, 1, ?)`,
				st.SHA256, st.Size, now); err != nil {
				return err
			}
			ins, err := tx.PrepareContext(ctx, `INSERT INTO artifact_chunks (sha256, idx, data) VALUES (?, ?, ?)`)
			if err != nil {
				return err
			}
			defer ins.Close()
			if err := st.Chunks(func(idx int64, data []byte) error {
				if err := ctx.Err(); err != nil {
					return err
				}
				_, err := ins.ExecContext(ctx, st.SHA256, idx, data)
				return err
			}); err != nil {
				return err
			}
		}
		_, err := tx.ExecContext(ctx, `INSERT INTO session_artifacts (session_id, sha256, content_type, name, created_at) VALUES (?, ?, ?, ?, ?)`,
			sessionID, st.SHA256, meta.ContentType, meta.Name, now)
		return err
	})
	if err != nil {
		return conversation.ArtifactRef{}, fmt.Errorf("put artifact of %q: %w", sessionID, err)
	}
	return ref, nil
}

// checkArtifactQuotaLocked fails with store.ErrArtifactQuota when the
// session taking a reference to size bytes (already stored or not) would
// pass a quota. The caller holds the write transaction.
func (s *Store) checkArtifactQuotaLocked(ctx context.Context, tx *sql.Tx, sessionID string, size int64, stored bool) error {
	q := *s.artifactQuota.Load()
	var sessionUsed, totalUsed int64
	if q.Session > 0 {
		if err := tx.QueryRowContext(ctx, `SELECT COALESCE(SUM(c.size), 0) FROM session_artifacts a
			JOIN artifact_contents c ON c.sha256 = a.sha256 WHERE a.session_id = ?`, sessionID).Scan(&sessionUsed); err != nil {
			return err
		}
	}
	addTotal := size
	if stored {
		addTotal = 0
	}
	if q.Total > 0 && addTotal > 0 {
		if err := tx.QueryRowContext(ctx, `SELECT COALESCE(SUM(size), 0) FROM artifact_contents`).Scan(&totalUsed); err != nil {
			return err
		}
	}
	return q.Check(sessionUsed, size, totalUsed, addTotal)
}

// StatArtifact implements store.ArtifactStore.
func (s *Store) StatArtifact(ctx context.Context, sessionID, sha256 string) (conversation.ArtifactRef, error) {
	ref := conversation.ArtifactRef{SHA256: sha256}
	err := s.r.QueryRowContext(ctx, `SELECT c.size, a.content_type, a.name FROM session_artifacts a
		JOIN artifact_contents c ON c.sha256 = a.sha256 WHERE a.session_id = ? AND a.sha256 = ?`,
		sessionID, sha256).Scan(&ref.Size, &ref.ContentType, &ref.Name)
	if errors.Is(err, sql.ErrNoRows) {
		return conversation.ArtifactRef{}, fmt.Errorf("stat artifact %s of %q: %w", sha256, sessionID, store.ErrNotFound)
	}
	if err != nil {
		return conversation.ArtifactRef{}, fmt.Errorf("stat artifact %s of %q: %w", sha256, sessionID, err)
	}
	return ref, nil
}

// OpenArtifact implements store.ArtifactStore: the reader loads one chunk
// per query, on the read pool, with ctx.
func (s *Store) OpenArtifact(ctx context.Context, sessionID, sha256 string, off, n int64) (io.ReadCloser, error) {
	ref, err := s.StatArtifact(ctx, sessionID, sha256)
	if err != nil {
		return nil, fmt.Errorf("open artifact: %w", err)
	}
	n, err = store.CheckArtifactRange(ref.Size, off, n)
	if err != nil {
		return nil, fmt.Errorf("open artifact %s of %q: %w", sha256, sessionID, err)
	}
	return artifact.NewReader(ctx, off, n, func(ctx context.Context, idx int64) ([]byte, error) {
		var data []byte
		err := s.r.QueryRowContext(ctx, `SELECT data FROM artifact_chunks WHERE sha256 = ? AND idx = ?`, sha256, idx).Scan(&data)
		if errors.Is(err, sql.ErrNoRows) {
			return nil, fmt.Errorf("read artifact %s: chunk %d is gone: %w", sha256, idx, io.ErrUnexpectedEOF)
		}
		if err != nil {
			return nil, fmt.Errorf("read artifact %s: %w", sha256, err)
		}
		return data, nil
	}), nil
}

// ArtifactUsage implements store.ArtifactStore.
func (s *Store) ArtifactUsage(ctx context.Context, sessionID string) (int64, error) {
	var used int64
	var err error
	if sessionID == "" {
		err = s.r.QueryRowContext(ctx, `SELECT COALESCE(SUM(size), 0) FROM artifact_contents`).Scan(&used)
	} else {
		err = s.r.QueryRowContext(ctx, `SELECT COALESCE(SUM(c.size), 0) FROM session_artifacts a
			JOIN artifact_contents c ON c.sha256 = a.sha256 WHERE a.session_id = ?`, sessionID).Scan(&used)
	}
	if err != nil {
		return 0, fmt.Errorf("artifact usage of %q: %w", sessionID, err)
	}
	return used, nil
}
