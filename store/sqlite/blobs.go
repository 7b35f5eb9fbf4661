package sqlite

import (
	"context"
	"database/sql"
	"time"

	"github.com/agentd/agentd/conversation"
	"github.com/agentd/agentd/store"
	"github.com/agentd/agentd/store/internal/artifact"
)

// WithArtifactBlobs keeps the bytes of artifacts in b (an S3 bucket:
// store/s3blobs) instead of chunks in the database; the database keeps the
// rest (references, sizes, names, quotas). Content is deleted from b after
// the commit that dropped its last reference, in the write transaction
// that checks no reference came back; what a crash leaves there, Open
// deletes when it is an hour old. b must hold only this database's
// content (its prefix is the database's).
func WithArtifactBlobs(b store.ArtifactBlobs) Option {
	return func(c *config) { c.artifactBlobs = b }
}

// putBlobArtifact stores st's content in s.blobs and the session's
// reference in the database. A large put checks first that it would be
// taken (session, quota), so that a refused one uploads nothing; new
// content is uploaded before the write transaction, which only checks
// again that it is there (a concurrent delete of the same content may
// have taken it: then it uploads it again, holding the writer).
func (s *Store) putBlobArtifact(ctx context.Context, sessionID string, meta conversation.ArtifactRef, st *artifact.Staged) error {
	stored := false
	if st.Size > store.ArtifactChunkSize {
		var held bool
		if err := s.write(ctx, func(tx *sql.Tx) error {
			var err error
			held, stored, err = s.checkPutLocked(ctx, tx, sessionID, st.SHA256, st.Size)
			return err
		}); err != nil || held {
			return err
		}
	}
	if !stored {
		if err := artifact.EnsureBlob(ctx, s.blobs, st); err != nil {
			return err
		}
	}
	err := s.write(ctx, func(tx *sql.Tx) error {
		held, stored, err := s.checkPutLocked(ctx, tx, sessionID, st.SHA256, st.Size)
		if err != nil || held {
			return err
		}
		now := time.Now().UnixNano()
		if stored {
			_, err = tx.ExecContext(ctx, `UPDATE artifact_contents SET refs = refs + 1 WHERE sha256 = ?`, st.SHA256)
		} else {
			_, err = tx.ExecContext(ctx, `INSERT INTO artifact_contents (sha256, size, refs, created_at) VALUES (?, ?, 1, ?)`,
				st.SHA256, st.Size, now)
			if err == nil {
				err = artifact.EnsureBlob(ctx, s.blobs, st)
			}
		}
		if err != nil {
			return err
		}
		_, err = tx.ExecContext(ctx, `INSERT INTO session_artifacts (session_id, sha256, content_type, name, created_at) VALUES (?, ?, ?, ?, ?)`,
			sessionID, st.SHA256, meta.ContentType, meta.Name, now)
		return err
	})
	if err != nil {
		s.dropBlobs(ctx, []string{st.SHA256})
	}
	return err
}

// blobsOfLocked returns the content sessionID references when it is kept
// in blobs (none otherwise), in the caller's write transaction.
func (s *Store) blobsOfLocked(ctx context.Context, tx *sql.Tx, sessionID string) ([]string, error) {
	if s.blobs == nil {
		return nil, nil
	}
	rows, err := tx.QueryContext(ctx, `SELECT sha256 FROM session_artifacts WHERE session_id = ?`, sessionID)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var shas []string
	for rows.Next() {
		var sha string
		if err := rows.Scan(&sha); err != nil {
			return nil, err
		}
		shas = append(shas, sha)
	}
	return shas, rows.Err()
}

// guardBlob runs f in a write transaction in which no content row of sha
// exists: the writer excludes every put's transaction, in this process
// and in others sharing the file.
func (s *Store) guardBlob(ctx context.Context, sha string, f func() error) error {
	return s.write(ctx, func(tx *sql.Tx) error {
		var referenced bool
		if err := tx.QueryRowContext(ctx, `SELECT EXISTS (SELECT 1 FROM artifact_contents WHERE sha256 = ?)`, sha).Scan(&referenced); err != nil || referenced {
			return err
		}
		return f()
	})
}

// blobKeeper is the store's handle on its blobs' deletions and sweeps.
func (s *Store) blobKeeper() artifact.BlobKeeper {
	return artifact.BlobKeeper{Blobs: s.blobs, Guard: s.guardBlob, Log: s.log, Name: "sqlite store",
		Unreferenced: func(ctx context.Context, sha string) (bool, error) {
			var referenced bool
			err := s.r.QueryRowContext(ctx, `SELECT EXISTS (SELECT 1 FROM artifact_contents WHERE sha256 = ?)`, sha).Scan(&referenced)
			return !referenced, err
		}}
}

// dropBlobs deletes from s.blobs the content of shas no row references
// any more. Best effort, logged: what it leaves, a sweep deletes.
func (s *Store) dropBlobs(ctx context.Context, shas []string) { s.blobKeeper().Drop(ctx, shas) }

// SweepArtifactBlobs deletes the content in the store's blobs written
// before the given time that no row references, and returns how much it
// deleted. Open starts it in the background for content an hour old
// (artifact.SweepAge).
func (s *Store) SweepArtifactBlobs(ctx context.Context, before time.Time) (int, error) {
	return s.blobKeeper().Sweep(ctx, before)
}

// sweepBlobsAtOpen starts the sweep of what a crash left in the blobs; it
// runs in the background until done or Close.
func (s *Store) sweepBlobsAtOpen() { s.stopSweep = s.blobKeeper().SweepInBackground() }
