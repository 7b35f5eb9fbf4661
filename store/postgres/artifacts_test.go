package postgres_test

import (
	"bytes"
	"io"
	"testing"

	"github.com/agentd/agentd/conversation"
	"github.com/agentd/agentd/store"
	"github.com/agentd/agentd/store/postgres"
	"github.com/agentd/agentd/store/postgres/pgtest"
	"github.com/agentd/agentd/store/storetest"
)

func TestArtifactQuota(t *testing.T) {
	storetest.RunArtifactQuota(t, func(t *testing.T, q store.ArtifactQuota) store.Store {
		s, err := postgres.Open(t.Context(), pgtest.Schema(t), postgres.WithLogger(quiet), postgres.WithArtifactQuota(q))
		if err != nil {
			t.Fatal(err)
		}
		return s
	})
}

// Two stores on one database (two servers of a fleet) see each other's
// artifacts, and a delete through one frees the content for both, leaving
// no chunk behind.
func TestArtifactsSharedAcrossStores(t *testing.T) {
	dsn := pgtest.Schema(t)
	ctx := t.Context()
	var nodes [2]*postgres.Store
	for i := range nodes {
		s, err := postgres.Open(ctx, dsn, postgres.WithLogger(quiet))
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		nodes[i] = s
	}
	if err := nodes[0].CreateSession(ctx, store.Session{ID: "s1", Status: "idle"}); err != nil {
		t.Fatal(err)
	}
	data := bytes.Repeat([]byte("fleet "), store.ArtifactChunkSize/2)
	ref, err := nodes[0].PutArtifact(ctx, "s1", conversation.ArtifactRef{Name: "log.txt"}, bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	rc, err := nodes[1].OpenArtifact(ctx, "s1", ref.SHA256, 0, -1)
	if err != nil {
		t.Fatalf("OpenArtifact on the other node: %v", err)
	}
	got, err := io.ReadAll(rc)
	rc.Close()
	if err != nil || !bytes.Equal(got, data) {
		t.Fatalf("read on the other node: %d bytes, %v", len(got), err)
	}
	if err := nodes[1].DeleteSession(ctx, "s1"); err != nil {
		t.Fatal(err)
	}
	for _, table := range []string{"artifact_chunks", "artifact_contents", "session_artifacts"} {
		var n int
		if err := nodes[0].Pool().QueryRow(ctx, `SELECT count(*) FROM `+table).Scan(&n); err != nil || n != 0 {
			t.Errorf("%s: %d rows after the delete, %v", table, n, err)
		}
	}
}
