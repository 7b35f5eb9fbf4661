package artifact

import (
	"context"
	"errors"
	"fmt"
	"io"
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

// DropUnreferenced deletes from blobs the content of each sha that no row
// references, each checked and deleted in guard. It returns the number
// deleted and the first error (it goes on after one: what it leaves, the
// next sweep deletes).
func DropUnreferenced(ctx context.Context, blobs store.ArtifactBlobs, guard Guarded, shas []string) (int, error) {
	var first error
	dropped := 0
	for _, sha := range shas {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), CleanupTimeout)
		err := guard(cctx, sha, func() error {
			if err := blobs.DeleteBlob(cctx, sha); err != nil {
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

// Sweep deletes from blobs the content stored before the given time that
// no row references (what a crash between a commit and the deletion that
// follows it left). unreferenced reports, outside any critical section,
// whether a content row of sha is missing; guard checks again.
func Sweep(ctx context.Context, blobs store.ArtifactBlobs, guard Guarded, before time.Time,
	unreferenced func(ctx context.Context, sha string) (bool, error)) (int, error) {
	var orphans []string
	if err := blobs.ListBlobs(ctx, before, func(sha string) error {
		un, err := unreferenced(ctx, sha)
		if err == nil && un {
			orphans = append(orphans, sha)
		}
		return err
	}); err != nil {
		return 0, fmt.Errorf("sweep artifact content: %w", err)
	}
	return DropUnreferenced(ctx, blobs, guard, orphans)
}
