package sqlite_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"path/filepath"
	"runtime"
	"testing"

	"github.com/agentd/agentd/conversation"
	"github.com/agentd/agentd/store"
	"github.com/agentd/agentd/store/s3blobs/s3test"
	"github.com/agentd/agentd/store/sqlite"
	"github.com/agentd/agentd/store/storetest"
)

func TestArtifactQuota(t *testing.T) {
	storetest.RunArtifactQuota(t, func(t *testing.T, q store.ArtifactQuota) store.Store {
		return openTemp(t, sqlite.WithArtifactQuota(q))
	})
}

// Artifacts survive closing and reopening the database, and a session's
// delete leaves no chunk of content only it held.
func TestArtifactsSurviveReopenAndLeaveNoChunks(t *testing.T) {
	path := filepath.Join(t.TempDir(), "agentd.db")
	ctx := t.Context()
	s, err := sqlite.Open(ctx, path, sqlite.WithLogger(quiet))
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"s1", "s2"} {
		if err := s.CreateSession(ctx, store.Session{ID: id, Status: "idle"}); err != nil {
			t.Fatal(err)
		}
	}
	data := bytes.Repeat([]byte("0123456789abcdef"), store.ArtifactChunkSize/16*3+5)
	ref, err := s.PutArtifact(ctx, "s1", conversation.ArtifactRef{ContentType: "text/plain", Name: "out.txt"}, bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.PutArtifact(ctx, "s2", conversation.ArtifactRef{}, bytes.NewReader([]byte("s2 only"))); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	s, err = sqlite.Open(ctx, path, sqlite.WithLogger(quiet))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	got, err := s.StatArtifact(ctx, "s1", ref.SHA256)
	if err != nil || got != ref {
		t.Fatalf("StatArtifact after reopen = %+v, %v; want %+v", got, err, ref)
	}
	rc, err := s.OpenArtifact(ctx, "s1", ref.SHA256, 0, -1)
	if err != nil {
		t.Fatal(err)
	}
	b, err := io.ReadAll(rc)
	rc.Close()
	if err != nil || !bytes.Equal(b, data) {
		t.Fatalf("read after reopen: %d bytes, %v", len(b), err)
	}
	if n := countRows(t, s, "artifact_chunks"); n != 4+1 {
		t.Errorf("%d chunks stored, want 5", n)
	}
	for _, id := range []string{"s1", "s2"} {
		if err := s.DeleteSession(ctx, id); err != nil {
			t.Fatal(err)
		}
	}
	for _, table := range []string{"artifact_chunks", "artifact_contents", "session_artifacts"} {
		if n := countRows(t, s, table); n != 0 {
			t.Errorf("%s holds %d rows after every session's delete", table, n)
		}
	}
}

func countRows(t *testing.T, s *sqlite.Store, table string) int {
	t.Helper()
	n, err := sqlite.CountRows(context.Background(), s, table)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// A large put writes its chunks in several transactions before the one
// that adds the content: if that last one fails (here: the session was
// deleted meanwhile), the chunks go; if chunks went meanwhile (a delete of
// the same content), the last one writes them again; chunks no content
// owns (a crash) are deleted at open.
func TestLargeArtifactPutInBatches(t *testing.T) {
	ctx := t.Context()
	path := filepath.Join(t.TempDir(), "agentd.db")
	s, err := sqlite.Open(ctx, path, sqlite.WithLogger(quiet))
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"s1", "s2"} {
		if err := s.CreateSession(ctx, store.Session{ID: id, Status: "idle"}); err != nil {
			t.Fatal(err)
		}
	}
	data := bytes.Repeat([]byte("large artifact. "), (sqlite.ChunksPerWrite*2+3)*store.ArtifactChunkSize/16+1)
	chunks := (len(data) + store.ArtifactChunkSize - 1) / store.ArtifactChunkSize

	// The session goes between the batches and the last transaction.
	sqlite.SetAfterPreWrite(t, func() {
		if n := countRows(t, s, "artifact_chunks"); n != chunks {
			t.Errorf("%d chunks written before the last transaction, want %d", n, chunks)
		}
		if err := s.DeleteSession(ctx, "s2"); err != nil {
			t.Error(err)
		}
	})
	if _, err := s.PutArtifact(ctx, "s2", conversation.ArtifactRef{}, bytes.NewReader(data)); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("put for a session deleted meanwhile: %v, want ErrNotFound", err)
	}
	if n := countRows(t, s, "artifact_chunks"); n != 0 {
		t.Errorf("%d chunks left by the failed put", n)
	}

	// Chunks go between the batches and the last transaction.
	sqlite.SetAfterPreWrite(t, func() {
		if err := sqlite.Exec(ctx, s, `DELETE FROM artifact_chunks WHERE idx % 3 = 1`); err != nil {
			t.Error(err)
		}
	})
	ref, err := s.PutArtifact(ctx, "s1", conversation.ArtifactRef{}, bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	sqlite.SetAfterPreWrite(t, nil)
	rc, err := s.OpenArtifact(ctx, "s1", ref.SHA256, 0, -1)
	if err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(rc)
	rc.Close()
	if err != nil || !bytes.Equal(got, data) {
		t.Fatalf("read back %d of %d bytes, %v", len(got), len(data), err)
	}

	// Chunks without content (a crash mid-put) go at the next open.
	if err := sqlite.Exec(ctx, s, `INSERT INTO artifact_chunks (sha256, idx, data) VALUES ('orphan', 0, x'00')`); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s, err = sqlite.Open(ctx, path, sqlite.WithLogger(quiet))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if n := countRows(t, s, "artifact_chunks"); n != chunks {
		t.Errorf("%d chunks after reopening, want the artifact's %d", n, chunks)
	}
}

// A put streams: a 64 MiB artifact makes the Go heap allocate a few MiB
// in all (about one chunk per buffer), never the artifact's size.
func TestArtifactPutMemoryBounded(t *testing.T) {
	s := openTemp(t)
	defer s.Close()
	if err := s.CreateSession(t.Context(), store.Session{ID: "s", Status: "idle"}); err != nil {
		t.Fatal(err)
	}
	const size = 64 << 20
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	ref, err := s.PutArtifact(t.Context(), "s", conversation.ArtifactRef{}, s3test.PatternReader(size))
	runtime.ReadMemStats(&after)
	if err != nil || ref.Size != size {
		t.Fatalf("PutArtifact: %+v, %v", ref, err)
	}
	if alloc := after.TotalAlloc - before.TotalAlloc; alloc > size/4 {
		t.Errorf("a %d MiB put allocated %d MiB", size>>20, alloc>>20)
	}
}
