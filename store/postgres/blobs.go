package postgres

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/agentd/agentd/store"
	"github.com/agentd/agentd/store/internal/artifact"
)

// WithArtifactBlobs keeps the bytes of artifacts in b (an S3 bucket:
// store/s3blobs) instead of chunks in the database; the database keeps the
// rest (references, sizes, names, quotas), so every server of a fleet
// agrees on them. Content is deleted from b after the commit that dropped
// its last reference, holding a transaction-scoped advisory lock on the
// content that every put of it takes too, once no row is found; what a
// crash leaves there, a sweep Open starts in the background deletes when
// it is an hour old. Every server
// sharing the database must be given the same b, and b must hold only
// this database's content (its prefix is the database's).
func WithArtifactBlobs(b store.ArtifactBlobs) Option {
	return func(c *config) { c.artifactBlobs = b }
}

// lockBlob takes the advisory lock of the content sha for tx.
func lockBlob(ctx context.Context, tx pgx.Tx, sha string) error {
	_, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(hashtext('agentd artifact blob ' || current_schema() || ' ' || $1))`, sha)
	return err
}

// blobsOf returns the content sessionID references when it is kept in
// blobs (none otherwise).
func (s *Store) blobsOf(ctx context.Context, tx pgx.Tx, sessionID string) ([]string, error) {
	if s.blobs == nil {
		return nil, nil
	}
	rows, err := tx.Query(ctx, `SELECT sha256 FROM session_artifacts WHERE session_id = $1`, sessionID)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowTo[string])
}

// guardBlob runs f holding the content's advisory lock, in a transaction
// that found no content row of sha once it held it.
func (s *Store) guardBlob(ctx context.Context, sha string, f func() error) error {
	return pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if err := lockBlob(ctx, tx, sha); err != nil {
			return err
		}
		var referenced bool
		if err := tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM artifact_contents WHERE sha256 = $1)`, sha).Scan(&referenced); err != nil || referenced {
			return err
		}
		return f()
	})
}

// blobKeeper is the store's handle on its blobs' deletions and sweeps.
func (s *Store) blobKeeper() artifact.BlobKeeper {
	return artifact.BlobKeeper{Blobs: s.blobs, Guard: s.guardBlob, Log: s.log, Name: "postgres store",
		Unreferenced: func(ctx context.Context, sha string) (bool, error) {
			var referenced bool
			err := s.pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM artifact_contents WHERE sha256 = $1)`, sha).Scan(&referenced)
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
