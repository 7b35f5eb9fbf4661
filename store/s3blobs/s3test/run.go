package s3test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/agentd/agentd/conversation"
	"github.com/agentd/agentd/store"
	"github.com/agentd/agentd/store/s3blobs"
	"github.com/agentd/agentd/store/storetest"
)

// Sweeper is implemented by the SQL stores given blobs.
type Sweeper interface {
	SweepArtifactBlobs(ctx context.Context, before time.Time) (int, error)
}

// RunStore checks a SQL store whose artifact content is kept in a real
// bucket: the artifact part of storetest (unchanged) and its quotas, then
// that the bytes are objects in the bucket and not rows (chunks counts
// the store's chunk rows), that deleting a session deletes the content
// only it referenced (also racing a put of the same content), that a
// ranged read of a large artifact and a large put stream, and the sweep
// of unreferenced content. open returns a new, empty store
// keeping its content in b, with quota q; RunStore closes it.
func RunStore(t *testing.T, open func(t *testing.T, b store.ArtifactBlobs, q store.ArtifactQuota) store.Store, chunks func(t *testing.T, s store.Store) int) {
	// fresh opens a new bucket and a store keeping its content there
	// (closed when t ends), holding idle sessions ids.
	fresh := func(t *testing.T, ids ...string) (*s3blobs.Blobs, store.Store) {
		t.Helper()
		b := Open(t)
		s := open(t, b, store.ArtifactQuota{})
		t.Cleanup(func() { _ = s.Close() })
		for _, id := range ids {
			if err := s.CreateSession(t.Context(), store.Session{ID: id, Status: "idle"}); err != nil {
				t.Fatal(err)
			}
		}
		return b, s
	}
	t.Run("Conformance", func(t *testing.T) {
		storetest.RunArtifacts(t, func(t *testing.T) store.Store { return open(t, Open(t), store.ArtifactQuota{}) })
	})
	t.Run("Quota", func(t *testing.T) {
		storetest.RunArtifactQuota(t, func(t *testing.T, q store.ArtifactQuota) store.Store { return open(t, Open(t), q) })
	})
	t.Run("ContentInBucketAndPurge", func(t *testing.T) {
		b, s := fresh(t, "s1", "s2")
		as := s.(store.ArtifactStore)
		ctx := t.Context()
		shared := bytes.Repeat([]byte("shared by two sessions "), 3*store.ArtifactChunkSize/23)
		only := []byte("s1 only")
		put := func(id string, data []byte) conversation.ArtifactRef {
			ref, err := as.PutArtifact(ctx, id, conversation.ArtifactRef{Name: "x"}, bytes.NewReader(data))
			if err != nil {
				t.Fatalf("PutArtifact(%s): %v", id, err)
			}
			return ref
		}
		a, o := put("s1", shared), put("s1", only)
		put("s2", shared)
		put("s2", shared) // held already: nothing new
		want := map[string]int64{b.Key(a.SHA256): int64(len(shared)), b.Key(o.SHA256): int64(len(only))}
		checkObjects(t, b, want)
		if n := chunks(t, s); n != 0 {
			t.Errorf("%d chunk rows in the database, want none: the content is in the bucket", n)
		}
		if err := s.DeleteSession(ctx, "s1"); err != nil {
			t.Fatal(err)
		}
		delete(want, b.Key(o.SHA256))
		checkObjects(t, b, want) // the shared content stays: s2 references it
		rc, err := as.OpenArtifact(ctx, "s2", a.SHA256, 0, -1)
		if err != nil {
			t.Fatal(err)
		}
		got, err := io.ReadAll(rc)
		rc.Close()
		if err != nil || !bytes.Equal(got, shared) {
			t.Fatalf("read of the shared artifact after s1's purge: %d bytes, %v", len(got), err)
		}
		if err := s.DeleteSession(ctx, "s2"); err != nil {
			t.Fatal(err)
		}
		checkObjects(t, b, map[string]int64{})
	})
	t.Run("LargeRangeStreams", func(t *testing.T) {
		b, s := fresh(t, "s")
		as := s.(store.ArtifactStore)
		ctx := t.Context()
		const size = 24 << 20 // a multipart upload (over 16 MiB)
		data := make([]byte, size)
		for i := range data {
			data[i] = byte(i*7 + i>>13)
		}
		ref, err := as.PutArtifact(ctx, "s", conversation.ArtifactRef{}, bytes.NewReader(data))
		if err != nil || ref.Size != size {
			t.Fatalf("PutArtifact: %+v, %v", ref, err)
		}
		checkObjects(t, b, map[string]int64{b.Key(ref.SHA256): size})
		off, n := int64(3<<20+12345), int64(16<<20)
		rc, err := as.OpenArtifact(ctx, "s", ref.SHA256, off, n)
		if err != nil {
			t.Fatal(err)
		}
		h := sha256.New()
		buf := make([]byte, 32<<10)
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		got, err := io.CopyBuffer(h, rc, buf)
		runtime.ReadMemStats(&after)
		rc.Close()
		if err != nil || got != n {
			t.Fatalf("ranged read: %d bytes, %v; want %d", got, err, n)
		}
		want := sha256.Sum256(data[off : off+n])
		if !bytes.Equal(h.Sum(nil), want[:]) {
			t.Fatal("ranged read returned other bytes")
		}
		if alloc := after.TotalAlloc - before.TotalAlloc; alloc > uint64(n/4) {
			t.Errorf("a %d MiB ranged read allocated %d MiB: it does not stream", n>>20, alloc>>20)
		}
	})
	t.Run("PutRacingDeleteKeepsOrDropsTheObject", func(t *testing.T) {
		// One session's delete drops the last reference to content while
		// another puts it: the put's session reads it whole from the
		// bucket, and once that session goes too no object is left.
		b, s := fresh(t)
		as := s.(store.ArtifactStore)
		ctx := t.Context()
		data := bytes.Repeat([]byte("raced "), store.ArtifactChunkSize/3)
		for round := range 20 {
			a, c := fmt.Sprintf("a%d", round), fmt.Sprintf("c%d", round)
			for _, id := range []string{a, c} {
				if err := s.CreateSession(ctx, store.Session{ID: id, Status: "idle"}); err != nil {
					t.Fatal(err)
				}
			}
			ref, err := as.PutArtifact(ctx, a, conversation.ArtifactRef{}, bytes.NewReader(data))
			if err != nil {
				t.Fatal(err)
			}
			var wg sync.WaitGroup
			var delErr, putErr error
			wg.Go(func() { delErr = s.DeleteSession(ctx, a) })
			wg.Go(func() {
				_, putErr = as.PutArtifact(ctx, c, conversation.ArtifactRef{}, bytes.NewReader(data))
			})
			wg.Wait()
			if delErr != nil || putErr != nil {
				t.Fatalf("round %d: delete %v, put %v", round, delErr, putErr)
			}
			checkObjects(t, b, map[string]int64{b.Key(ref.SHA256): int64(len(data))})
			rc, err := as.OpenArtifact(ctx, c, ref.SHA256, 0, -1)
			if err != nil {
				t.Fatalf("round %d: %v", round, err)
			}
			got, err := io.ReadAll(rc)
			rc.Close()
			if err != nil || !bytes.Equal(got, data) {
				t.Fatalf("round %d: the put's session reads %d bytes, %v", round, len(got), err)
			}
			if err := s.DeleteSession(ctx, c); err != nil {
				t.Fatal(err)
			}
			checkObjects(t, b, map[string]int64{})
		}
	})
	t.Run("LargePutStreams", func(t *testing.T) {
		// A 64 MiB put (staged to a file, then a multipart upload) makes
		// the Go heap allocate a few MiB, never the artifact's size.
		b, s := fresh(t, "s")
		const size = 64 << 20
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		ref, err := s.(store.ArtifactStore).PutArtifact(t.Context(), "s", conversation.ArtifactRef{}, PatternReader(size))
		runtime.ReadMemStats(&after)
		if err != nil || ref.Size != size {
			t.Fatalf("PutArtifact: %+v, %v", ref, err)
		}
		if alloc := after.TotalAlloc - before.TotalAlloc; alloc > size/4 {
			t.Errorf("a %d MiB put allocated %d MiB", size>>20, alloc>>20)
		}
		checkObjects(t, b, map[string]int64{b.Key(ref.SHA256): size})
	})
	t.Run("SweepDeletesOnlyUnreferenced", func(t *testing.T) {
		b, s := fresh(t, "s")
		as := s.(store.ArtifactStore)
		ctx := t.Context()
		kept, err := as.PutArtifact(ctx, "s", conversation.ArtifactRef{}, bytes.NewReader([]byte("referenced")))
		if err != nil {
			t.Fatal(err)
		}
		// What a crash between a commit and the deletion leaves.
		orphan := []byte("orphan")
		sum := sha256.Sum256(orphan)
		osha := hex.EncodeToString(sum[:])
		if err := b.PutBlob(ctx, osha, bytes.NewReader(orphan), int64(len(orphan))); err != nil {
			t.Fatal(err)
		}
		sw := s.(Sweeper)
		if n, err := sw.SweepArtifactBlobs(ctx, time.Now().Add(-time.Hour)); err != nil || n != 0 {
			t.Fatalf("sweep of content younger than its age: %d deleted, %v; want 0", n, err)
		}
		if n, err := sw.SweepArtifactBlobs(ctx, time.Now().Add(time.Minute)); err != nil || n != 1 {
			t.Fatalf("sweep: %d deleted, %v; want 1", n, err)
		}
		checkObjects(t, b, map[string]int64{b.Key(kept.SHA256): int64(len("referenced"))})
	})
}

func checkObjects(t *testing.T, b *s3blobs.Blobs, want map[string]int64) {
	t.Helper()
	got := Objects(t, b)
	if len(got) != len(want) {
		t.Fatalf("objects in the bucket: %v, want %v", got, want)
	}
	for k, n := range want {
		if got[k] != n {
			t.Fatalf("objects in the bucket: %v, want %v", got, want)
		}
	}
}

// PatternReader returns n bytes of a repeating pattern, made as they are
// read: a large artifact's content without holding it (the stores' tests
// of what a big put allocates).
func PatternReader(n int64) io.Reader { return &patternReader{left: n} }

// patternReader is n bytes, made as they are read.
type patternReader struct{ left int64 }

func (z *patternReader) Read(p []byte) (int, error) {
	if z.left <= 0 {
		return 0, io.EOF
	}
	n := min(int64(len(p)), z.left)
	for i := range p[:n] {
		p[i] = byte(z.left) + byte(i)
	}
	z.left -= n
	return int(n), nil
}
