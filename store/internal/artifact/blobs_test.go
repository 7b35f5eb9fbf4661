package artifact

import (
	"context"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// listBlobs is a store.ArtifactBlobs whose listing gives names and then,
// with block, waits for its context to end (a large bucket).
type listBlobs struct {
	names   []string
	block   bool
	mu      sync.Mutex
	deleted []string
}

func (b *listBlobs) HasBlob(context.Context, string) (bool, error)           { return true, nil }
func (b *listBlobs) PutBlob(context.Context, string, io.Reader, int64) error { return nil }
func (b *listBlobs) OpenBlob(context.Context, string, int64, int64) (io.ReadCloser, error) {
	return nil, io.EOF
}
func (b *listBlobs) String() string { return "test blobs" }
func (b *listBlobs) DeleteBlob(_ context.Context, sha string) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.deleted = append(b.deleted, sha)
	return nil
}
func (b *listBlobs) ListBlobs(ctx context.Context, _ time.Time, f func(string) error) error {
	for _, n := range b.names {
		if err := f(n); err != nil {
			return err
		}
	}
	if b.block {
		<-ctx.Done()
		return ctx.Err()
	}
	return nil
}

func keeper(b *listBlobs, referenced map[string]bool) BlobKeeper {
	return BlobKeeper{Blobs: b, Log: slog.New(slog.DiscardHandler), Name: "test store",
		Guard: func(ctx context.Context, sha string, f func() error) error {
			if referenced[sha] {
				return nil
			}
			return f()
		},
		Unreferenced: func(_ context.Context, sha string) (bool, error) { return !referenced[sha], nil },
	}
}

// TestSweepInBackground: the sweep deletes only what no row references,
// without holding up the caller, and stop ends a sweep still listing.
func TestSweepInBackground(t *testing.T) {
	b := &listBlobs{names: []string{"a", "b", "c"}}
	stop := keeper(b, map[string]bool{"b": true}).SweepInBackground()
	stop() // waits for it
	if len(b.deleted) != 2 || b.deleted[0] != "a" || b.deleted[1] != "c" {
		t.Fatalf("deleted %v, want [a c]", b.deleted)
	}

	slow := &listBlobs{names: []string{"x"}, block: true}
	stop = keeper(slow, nil).SweepInBackground()
	done := make(chan struct{})
	go func() { stop(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("stop did not end a sweep still listing")
	}
	if len(slow.deleted) != 0 {
		t.Fatalf("a cancelled sweep deleted %v", slow.deleted)
	}

	// Without blobs nothing starts.
	BlobKeeper{}.SweepInBackground()()
}
