package postgres

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/jackc/pgx/v5"

	"github.com/agentd/agentd/conversation"
	"github.com/agentd/agentd/store"
	"github.com/agentd/agentd/store/internal/artifact"
)

var _ store.ArtifactStore = (*Store)(nil)

// WithArtifactQuota limits the artifacts the store holds (default: none).
// Every server sharing the database should be given the same quota.
func WithArtifactQuota(q store.ArtifactQuota) Option { return func(c *config) { c.artifactQuota = q } }

// SetArtifactQuota implements store.ArtifactQuotaSetter.
func (s *Store) SetArtifactQuota(q store.ArtifactQuota) { s.artifactQuota.Store(&q) }

// PutArtifact implements store.ArtifactStore. The content is staged first
// (hashed, and spooled to a temporary file when larger than a chunk), then
// stored in one transaction that locks the session's row FOR KEY SHARE,
// as appends do (a delete of the session waits; appends and session
// updates do not), takes an advisory lock per session (puts of one session
// serialise, so its quota holds) and, with a total quota, one for the
// store (puts serialise store-wide). The content's row is
// upserted with its reference count, and its chunks written only by the
// transaction that inserted it. With blobs (WithArtifactBlobs) the content
// is uploaded before the transaction, which takes the content's advisory
// lock and, when it inserts the row, checks the object is still there.
func (s *Store) PutArtifact(ctx context.Context, sessionID string, meta conversation.ArtifactRef, r io.Reader) (_ conversation.ArtifactRef, err error) {
	if err := checkCtx(ctx); err != nil {
		return conversation.ArtifactRef{}, fmt.Errorf("put artifact of %q: %w", sessionID, err)
	}
	st, err := artifact.Stage(ctx, r, s.artifactQuota.Load().Largest())
	if err != nil {
		return conversation.ArtifactRef{}, fmt.Errorf("put artifact of %q: %w", sessionID, err)
	}
	defer st.Close()
	ref := conversation.ArtifactRef{SHA256: st.SHA256, Size: st.Size, ContentType: meta.ContentType, Name: meta.Name}
	if s.blobs != nil {
		// Uploaded before the transaction (which checks it is still there
		// once it holds the content's lock); deleted again if the put
		// fails and nothing references it.
		if err := artifact.EnsureBlob(ctx, s.blobs, st); err != nil {
			return conversation.ArtifactRef{}, fmt.Errorf("put artifact of %q: %w", sessionID, err)
		}
		defer func() {
			if err != nil {
				s.dropBlobs(ctx, []string{st.SHA256})
			}
		}()
	}
	// Statements run with wctx, so that the commit's outcome is known;
	// ctx is checked between chunks and before the commit.
	wctx, done := writeCtx(ctx)
	defer done()
	err = pgx.BeginFunc(wctx, s.pool, func(tx pgx.Tx) error {
		var one int
		err := tx.QueryRow(wctx, `SELECT 1 FROM sessions WHERE id = $1 FOR KEY SHARE`, sessionID).Scan(&one)
		if errors.Is(err, pgx.ErrNoRows) {
			return fmt.Errorf("session: %w", store.ErrNotFound)
		}
		if err != nil {
			return err
		}
		if _, err := tx.Exec(wctx, `SELECT pg_advisory_xact_lock(hashtext('agentd artifacts ' || current_schema() || ' ' || $1))`, sessionID); err != nil {
			return err
		}
		// A statement of its own, after the lock: its snapshot sees what
		// the put that held the lock before committed.
		var held bool
		if err := tx.QueryRow(wctx, `SELECT EXISTS (SELECT 1 FROM session_artifacts WHERE session_id = $1 AND sha256 = $2)`,
			sessionID, st.SHA256).Scan(&held); err != nil || held {
			return err
		}
		q := *s.artifactQuota.Load()
		if q.Total > 0 {
			if _, err := tx.Exec(wctx, `SELECT pg_advisory_xact_lock(hashtext('agentd artifact total ' || current_schema()))`); err != nil {
				return err
			}
		}
		if s.blobs != nil {
			if err := lockBlob(wctx, tx, st.SHA256); err != nil {
				return err
			}
		}
		var inserted bool
		if err := tx.QueryRow(wctx, `INSERT INTO artifact_contents (sha256, size, refs) VALUES ($1, $2, 1)
			ON CONFLICT (sha256) DO UPDATE SET refs = artifact_contents.refs + 1
			RETURNING xmax = 0`, st.SHA256, st.Size).Scan(&inserted); err != nil {
			return err
		}
		if q.Session > 0 || q.Total > 0 {
			var sessionUsed, totalUsed int64
			if err := tx.QueryRow(wctx, `SELECT
				(SELECT COALESCE(SUM(c.size), 0) FROM session_artifacts a JOIN artifact_contents c ON c.sha256 = a.sha256 WHERE a.session_id = $1),
				CASE WHEN $2 THEN (SELECT COALESCE(SUM(size), 0) FROM artifact_contents) ELSE 0 END`,
				sessionID, inserted && q.Total > 0).Scan(&sessionUsed, &totalUsed); err != nil {
				return err
			}
			addTotal := int64(0)
			if inserted {
				addTotal = st.Size
				totalUsed -= st.Size // the sum counted the row just inserted
			}
			if err := q.Check(sessionUsed, st.Size, totalUsed, addTotal); err != nil {
				return err
			}
		}
		if inserted && s.blobs != nil {
			if err := artifact.EnsureBlob(wctx, s.blobs, st); err != nil {
				return err
			}
		} else if inserted {
			if err := st.Chunks(func(idx int64, data []byte) error {
				if err := ctx.Err(); err != nil {
					return err
				}
				_, err := tx.Exec(wctx, `INSERT INTO artifact_chunks (sha256, idx, data) VALUES ($1, $2, $3)`, st.SHA256, idx, data)
				return err
			}); err != nil {
				return err
			}
		}
		if _, err := tx.Exec(wctx, `INSERT INTO session_artifacts (session_id, sha256, content_type, name) VALUES ($1, $2, $3, $4)`,
			sessionID, st.SHA256, meta.ContentType, meta.Name); err != nil {
			return err
		}
		return ctx.Err()
	})
	if err != nil {
		return conversation.ArtifactRef{}, fmt.Errorf("put artifact of %q: %w", sessionID, withCtxErr(ctx, err))
	}
	return ref, nil
}

// StatArtifact implements store.ArtifactStore.
func (s *Store) StatArtifact(ctx context.Context, sessionID, sha256 string) (conversation.ArtifactRef, error) {
	if err := checkCtx(ctx); err != nil {
		return conversation.ArtifactRef{}, fmt.Errorf("stat artifact %s of %q: %w", sha256, sessionID, err)
	}
	ref := conversation.ArtifactRef{SHA256: sha256}
	err := s.pool.QueryRow(ctx, `SELECT c.size, a.content_type, a.name FROM session_artifacts a
		JOIN artifact_contents c ON c.sha256 = a.sha256 WHERE a.session_id = $1 AND a.sha256 = $2`,
		sessionID, sha256).Scan(&ref.Size, &ref.ContentType, &ref.Name)
	if errors.Is(err, pgx.ErrNoRows) {
		return conversation.ArtifactRef{}, fmt.Errorf("stat artifact %s of %q: %w", sha256, sessionID, store.ErrNotFound)
	}
	if err != nil {
		return conversation.ArtifactRef{}, fmt.Errorf("stat artifact %s of %q: %w", sha256, sessionID, withCtxErr(ctx, err))
	}
	return ref, nil
}

// OpenArtifact implements store.ArtifactStore: the reader loads one chunk
// per query, with ctx.
func (s *Store) OpenArtifact(ctx context.Context, sessionID, sha256 string, off, n int64) (io.ReadCloser, error) {
	ref, err := s.StatArtifact(ctx, sessionID, sha256)
	if err != nil {
		return nil, fmt.Errorf("open artifact: %w", err)
	}
	n, err = store.CheckArtifactRange(ref.Size, off, n)
	if err != nil {
		return nil, fmt.Errorf("open artifact %s of %q: %w", sha256, sessionID, err)
	}
	if s.blobs != nil {
		return artifact.OpenBlob(ctx, s.blobs, sha256, off, n)
	}
	return artifact.NewReader(ctx, off, n, func(ctx context.Context, idx, from, n int64) ([]byte, error) {
		var data []byte
		var err error
		if from == 0 && n == store.ArtifactChunkSize {
			// A whole chunk: substring would fetch its TOAST slices one by
			// one, several times slower.
			err = s.pool.QueryRow(ctx, `SELECT data FROM artifact_chunks WHERE sha256 = $1 AND idx = $2`, sha256, idx).Scan(&data)
		} else {
			err = s.pool.QueryRow(ctx, `SELECT substring(data FROM $3 FOR $4) FROM artifact_chunks WHERE sha256 = $1 AND idx = $2`,
				sha256, idx, from+1, n).Scan(&data)
		}
		if errors.Is(err, pgx.ErrNoRows) {
			return nil, fmt.Errorf("read artifact %s: chunk %d is gone: %w", sha256, idx, io.ErrUnexpectedEOF)
		}
		if err != nil {
			return nil, fmt.Errorf("read artifact %s: %w", sha256, withCtxErr(ctx, err))
		}
		return data, nil
	}), nil
}

// ArtifactUsage implements store.ArtifactStore.
func (s *Store) ArtifactUsage(ctx context.Context, sessionID string) (int64, error) {
	if err := checkCtx(ctx); err != nil {
		return 0, fmt.Errorf("artifact usage of %q: %w", sessionID, err)
	}
	var used int64
	var err error
	if sessionID == "" {
		err = s.pool.QueryRow(ctx, `SELECT COALESCE(SUM(size), 0) FROM artifact_contents`).Scan(&used)
	} else {
		err = s.pool.QueryRow(ctx, `SELECT COALESCE(SUM(c.size), 0) FROM session_artifacts a
			JOIN artifact_contents c ON c.sha256 = a.sha256 WHERE a.session_id = $1`, sessionID).Scan(&used)
	}
	if err != nil {
		return 0, fmt.Errorf("artifact usage of %q: %w", sessionID, withCtxErr(ctx, err))
	}
	return used, nil
}
