package artifact

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"time"

	"github.com/agentd/agentd/store"
)

// What a SQL store given a store.ArtifactBlobs shares. The rule that keeps
// referenced content from being deleted: content is deleted only by
// DropUnreferenced, in a critical section (the store's own: SQLite's write
// transaction, a PostgreSQL advisory lock on the content) that first finds
// no content row; and a put that inserts a content row calls EnsureBlob in
// the same critical section, before it commits. So either the delete comes
// first and the put uploads again, or the put commits first and the delete
// finds its row.

// EnsureBlob stores st's content in blobs unless it is there already.
func EnsureBlob(ctx context.Context, blobs store.ArtifactBlobs, st *Staged) error {
	has, err := blobs.HasBlob(ctx, st.SHA256)
	if err != nil || has {
		return err
	}
	return blobs.PutBlob(ctx, st.SHA256, st.Reader(), st.Size)
}

// OpenBlob returns n bytes of the content of sha from off (the range
// checked by the caller against the stored size). Content missing from
// blobs (deleted while its reference went) fails with io.ErrUnexpectedEOF,
// as a missing chunk does.
func OpenBlob(ctx context.Context, blobs store.ArtifactBlobs, sha string, off, n int64) (io.ReadCloser, error) {
	if n == 0 {
		return io.NopCloser(strings.NewReader("")), nil
	}
	rc, err := blobs.OpenBlob(ctx, sha, off, n)
	if errors.Is(err, store.ErrNotFound) {
		return nil, fmt.Errorf("read artifact %s: its content is gone: %w", sha, io.ErrUnexpectedEOF)
	}
	if err != nil {
		return nil, fmt.Errorf("read artifact %s: %w", sha, err)
	}
	return &exactReader{rc: rc, left: n}, nil
}

// exactReader fails a read that ends before n bytes with
// io.ErrUnexpectedEOF, and one that goes past them.
type exactReader struct {
	rc   io.ReadCloser
	left int64
}

func (r *exactReader) Read(p []byte) (int, error) {
	if r.left <= 0 {
		return 0, io.EOF
	}
	if int64(len(p)) > r.left {
		p = p[:r.left]
	}
	n, err := r.rc.Read(p)
	r.left -= int64(n)
	if errors.Is(err, io.EOF) {
		if r.left > 0 {
			return n, fmt.Errorf("artifact content is short by %d bytes: %w", r.left, io.ErrUnexpectedEOF)
		}
		err = nil
	}
	if r.left == 0 && err == nil {
		return n, io.EOF
	}
	return n, err
}

func (r *exactReader) Close() error { return r.rc.Close() }

// CleanupTimeout bounds a deletion of content after its last reference
// went (or a put failed), which runs even when the caller's context ended.
const CleanupTimeout = 30 * time.Second

// SweepAge is how old unreferenced content must be before a sweep deletes
// it: younger content may be a put's, uploaded before its transaction.
const SweepAge = time.Hour

// Guarded runs f(sha) in the store's critical section for sha if no
// content row of sha exists then.
type Guarded func(ctx context.Context, sha string, f func() error) error

// BlobKeeper is what a SQL store given a store.ArtifactBlobs does with it
// beyond puts and reads: delete content whose last reference went, and
// sweep what a crash left. The store gives its critical section (Guard)
// and its row check (Unreferenced).
type BlobKeeper struct {
	Blobs store.ArtifactBlobs
	Guard Guarded
	// Unreferenced reports, outside any critical section, whether no
	// content row of sha exists (Guard checks again).
	Unreferenced func(ctx context.Context, sha string) (bool, error)
	Log          *slog.Logger
	Name         string // the store in log lines: "sqlite store"
}

// Drop deletes the content of shas that no row references any more. Best
// effort, logged: what it leaves, a sweep deletes.
func (k BlobKeeper) Drop(ctx context.Context, shas []string) {
	if k.Blobs == nil || len(shas) == 0 {
		return
	}
	if _, err := k.drop(ctx, shas); err != nil {
		k.Log.Warn(k.Name+": unreferenced artifact content left in the object store (the next start deletes it)", "err", err)
	}
}

// drop deletes from the blobs the content of each sha that no row
// references, each checked and deleted in Guard. It returns the number
// deleted and the first error (it goes on after one).
func (k BlobKeeper) drop(ctx context.Context, shas []string) (int, error) {
	var first error
	dropped := 0
	for _, sha := range shas {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), CleanupTimeout)
		err := k.Guard(cctx, sha, func() error {
			if err := k.Blobs.DeleteBlob(cctx, sha); err != nil {
				return err
			}
			dropped++
			return nil
		})
		cancel()
		if err != nil && first == nil {
			first = fmt.Errorf("delete unreferenced artifact content: %w", err)
		}
	}
	return dropped, first
}

// Sweep deletes the content stored before the given time that no row
// references (what a crash between a commit and the deletion that follows
// it left), and returns how much it deleted.
func (k BlobKeeper) Sweep(ctx context.Context, before time.Time) (int, error) {
	if k.Blobs == nil {
		return 0, nil
	}
	var orphans []string
	if err := k.Blobs.ListBlobs(ctx, before, func(sha string) error {
		un, err := k.Unreferenced(ctx, sha)
		if err == nil && un {
			orphans = append(orphans, sha)
		}
		return err
	}); err != nil {
		return 0, fmt.Errorf("sweep artifact content: %w", err)
	}
	return k.drop(ctx, orphans)
}

// SweepInBackground runs SweepAtOpen in a goroutine, so that a store's
// start does not wait on listing a large bucket; stop cancels it and waits
// for it. Without blobs it starts nothing.
func (k BlobKeeper) SweepInBackground() (stop func()) {
	if k.Blobs == nil {
		return func() {}
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		k.SweepAtOpen(ctx)
	}()
	return func() {
		cancel()
		<-done
	}
}

// SweepAtOpen sweeps content SweepAge old, logging what it did.
func (k BlobKeeper) SweepAtOpen(ctx context.Context) {
	if k.Blobs == nil {
		return
	}
	n, err := k.Sweep(ctx, time.Now().Add(-SweepAge))
	if err != nil && ctx.Err() == nil {
		k.Log.Warn(k.Name+": sweep of unreferenced artifact content failed", "blobs", k.Blobs.String(), "err", err)
	} else if n > 0 {
		k.Log.Info(k.Name+": deleted unreferenced artifact content", "blobs", k.Blobs.String(), "objects", n)
	}
}
