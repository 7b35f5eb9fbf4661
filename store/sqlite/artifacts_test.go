package sqlite_test

import (
	"bytes"
	"context"
	"io"
	"path/filepath"
	"testing"

	"github.com/agentd/agentd/conversation"
	"github.com/agentd/agentd/store"
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
