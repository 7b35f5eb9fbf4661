package postgres_test

import (
	"context"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/agentd/agentd/store"
	"github.com/agentd/agentd/store/postgres"
	"github.com/agentd/agentd/store/postgres/pgtest"
	"github.com/agentd/agentd/store/s3blobs/s3test"
)

// Artifact content in a real S3-compatible bucket ($AGENTD_TEST_S3).
func TestArtifactsInS3(t *testing.T) {
	var mu sync.Mutex
	dsns := map[store.Store]string{}
	s3test.RunStore(t, func(t *testing.T, b store.ArtifactBlobs, q store.ArtifactQuota) store.Store {
		dsn := pgtest.Schema(t)
		s, err := postgres.Open(t.Context(), dsn, postgres.WithLogger(quiet), postgres.WithArtifactBlobs(b), postgres.WithArtifactQuota(q))
		if err != nil {
			t.Fatalf("Open: %v", err)
		}
		mu.Lock()
		dsns[s] = dsn
		mu.Unlock()
		return s
	}, func(t *testing.T, s store.Store) int {
		mu.Lock()
		dsn := dsns[s]
		mu.Unlock()
		conn, err := pgx.Connect(context.Background(), dsn)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close(context.Background())
		var n int
		if err := conn.QueryRow(context.Background(), `SELECT count(*) FROM artifact_chunks`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	})
}
