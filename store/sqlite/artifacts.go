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

// chunksPerWrite is how many chunks (4 MiB) one write transaction of a
// large put stores: the single writer connection is shared with every
// session's event appends, which wait at most that long for it.
const chunksPerWrite = 16

// testHookAfterPreWrite runs between a large put's chunk batches and its
// last transaction (tests).
var testHookAfterPreWrite func()

// PutArtifact implements store.ArtifactStore. The content is staged first
// (hashed, and spooled to a temporary file when larger than a chunk), so no
// transaction waits on r. A small put is one transaction. A large one of
// new content writes its chunks chunksPerWrite at a time, each batch its
// own transaction, then adds the content's row and the session's reference
// in a last one, which checks everything again (session, reference, quota)
// and writes any chunk that is missing (a concurrent delete of the same
// content can take chunks written before it). A put that fails deletes the
// chunks it wrote unless the content got its row. With blobs
// (WithArtifactBlobs) no chunk is written: putBlobArtifact.
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
	if s.blobs != nil {
		if err := s.putBlobArtifact(ctx, sessionID, meta, st); err != nil {
			return conversation.ArtifactRef{}, fmt.Errorf("put artifact of %q: %w", sessionID, err)
		}
		return ref, nil
	}
	chunks := (st.Size + store.ArtifactChunkSize - 1) / store.ArtifactChunkSize
	if chunks > chunksPerWrite {
		done, err := s.preWriteChunks(ctx, sessionID, st)
		if err == nil && !done && testHookAfterPreWrite != nil {
			testHookAfterPreWrite()
		}
		if err != nil || done {
			if err != nil {
				s.dropOrphanChunks(ctx, st.SHA256)
				return conversation.ArtifactRef{}, fmt.Errorf("put artifact of %q: %w", sessionID, err)
			}
			return ref, nil
		}
	}
	err = s.write(ctx, func(tx *sql.Tx) error {
		held, stored, err := s.checkPutLocked(ctx, tx, sessionID, st.SHA256, st.Size)
		if err != nil || held {
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
			var have int64
			if err := tx.QueryRowContext(ctx, `SELECT count(*) FROM artifact_chunks WHERE sha256 = ?`, st.SHA256).Scan(&have); err != nil {
				return err
			}
			if have != chunks {
				if err := insertChunksLocked(ctx, tx, st, 0, chunks); err != nil {
					return err
				}
			}
		}
		_, err = tx.ExecContext(ctx, `INSERT INTO session_artifacts (session_id, sha256, content_type, name, created_at) VALUES (?, ?, ?, ?, ?)`,
			sessionID, st.SHA256, meta.ContentType, meta.Name, now)
		return err
	})
	if err != nil {
		if chunks > chunksPerWrite {
			s.dropOrphanChunks(ctx, st.SHA256)
		}
		return conversation.ArtifactRef{}, fmt.Errorf("put artifact of %q: %w", sessionID, err)
	}
	return ref, nil
}

// checkPutLocked checks, in the caller's write transaction, that the
// session exists and a reference to size bytes fits its quota; held: the
// session has the content already (nothing to do); stored: the store has
// it (no chunk to write).
func (s *Store) checkPutLocked(ctx context.Context, tx *sql.Tx, sessionID, sha string, size int64) (held, stored bool, err error) {
	var known bool
	if err := tx.QueryRowContext(ctx, `SELECT EXISTS (SELECT 1 FROM sessions WHERE id = ?1),
		EXISTS (SELECT 1 FROM session_artifacts WHERE session_id = ?1 AND sha256 = ?2),
		EXISTS (SELECT 1 FROM artifact_contents WHERE sha256 = ?2)`,
		sessionID, sha).Scan(&known, &held, &stored); err != nil {
		return false, false, err
	}
	if !known {
		return false, false, fmt.Errorf("session: %w", store.ErrNotFound)
	}
	if held {
		return true, stored, nil
	}
	return false, stored, s.checkArtifactQuotaLocked(ctx, tx, sessionID, size, stored)
}

// preWriteChunks checks a large put (done: nothing to store, the session
// holds the content; or the store has it, then PutArtifact's last
// transaction only adds the reference) and else writes its chunks in
// transactions of chunksPerWrite.
func (s *Store) preWriteChunks(ctx context.Context, sessionID string, st *artifact.Staged) (done bool, err error) {
	var held, stored bool
	if err := s.write(ctx, func(tx *sql.Tx) error {
		held, stored, err = s.checkPutLocked(ctx, tx, sessionID, st.SHA256, st.Size)
		return err
	}); err != nil {
		return false, err
	}
	if held || stored {
		return held, nil
	}
	chunks := (st.Size + store.ArtifactChunkSize - 1) / store.ArtifactChunkSize
	for from := int64(0); from < chunks; from += chunksPerWrite {
		if err := s.write(ctx, func(tx *sql.Tx) error {
			return insertChunksLocked(ctx, tx, st, from, min(from+chunksPerWrite, chunks))
		}); err != nil {
			return false, err
		}
	}
	return false, nil
}

// insertChunksLocked writes chunks [from, to) of st, keeping any already
// stored (the same bytes: they are content addressed).
func insertChunksLocked(ctx context.Context, tx *sql.Tx, st *artifact.Staged, from, to int64) error {
	ins, err := tx.PrepareContext(ctx, `INSERT INTO artifact_chunks (sha256, idx, data) VALUES (?, ?, ?) ON CONFLICT DO NOTHING`)
	if err != nil {
		return err
	}
	defer ins.Close()
	return st.ChunkRange(from, to, func(idx int64, data []byte) error {
		if err := ctx.Err(); err != nil {
			return err
		}
		_, err := ins.ExecContext(ctx, st.SHA256, idx, data)
		return err
	})
}

// orphanCleanupTimeout bounds the cleanup after a failed put, which runs
// even when the put's context ended.
const orphanCleanupTimeout = 30 * time.Second

// dropOrphanChunks deletes the chunks of sha when no content row owns
// them: what a failed large put wrote. Best effort: what it leaves, the
// next open deletes.
func (s *Store) dropOrphanChunks(ctx context.Context, sha string) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), orphanCleanupTimeout)
	defer cancel()
	_ = s.write(ctx, func(tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, `DELETE FROM artifact_chunks WHERE sha256 = ?1
			AND NOT EXISTS (SELECT 1 FROM artifact_contents WHERE sha256 = ?1)`, sha)
		return err
	})
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
	if s.blobs != nil {
		return artifact.OpenBlob(ctx, s.blobs, sha256, off, n)
	}
	return artifact.NewReader(ctx, off, n, func(ctx context.Context, idx, from, n int64) ([]byte, error) {
		var data []byte
		err := s.r.QueryRowContext(ctx, `SELECT substr(data, ?, ?) FROM artifact_chunks WHERE sha256 = ? AND idx = ?`,
			from+1, n, sha256, idx).Scan(&data)
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
