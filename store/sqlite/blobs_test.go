package sqlite_test

import (
	"testing"

	"github.com/agentd/agentd/store"
	"github.com/agentd/agentd/store/s3blobs/s3test"
	"github.com/agentd/agentd/store/sqlite"
)

// Artifact content in a real S3-compatible bucket ($AGENTD_TEST_S3).
func TestArtifactsInS3(t *testing.T) {
	s3test.RunStore(t, func(t *testing.T, b store.ArtifactBlobs, q store.ArtifactQuota) store.Store {
		return openTemp(t, sqlite.WithArtifactBlobs(b), sqlite.WithArtifactQuota(q))
	}, func(t *testing.T, s store.Store) int {
		return countRows(t, s.(*sqlite.Store), "artifact_chunks")
	})
}
