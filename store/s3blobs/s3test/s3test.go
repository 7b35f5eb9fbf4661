// Package s3test gives tests a real S3-compatible server: the bucket named
// by $AGENTD_TEST_S3 (s3://BUCKET?endpoint=http://127.0.0.1:PORT, with
// AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY; scripts/s3.sh starts a
// SeaweedFS server and prints them). Each test gets a prefix of its own in
// that bucket, emptied when it ends.
//
// Without a server a test is skipped, or fails when $AGENTD_REQUIRE_S3 is
// set (as in CI). It is test support only.
package s3test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"os"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"

	"github.com/agentd/agentd/store/s3blobs"
)

// EnvURL names the variable holding the test bucket's URL.
const EnvURL = "AGENTD_TEST_S3"

// EnvRequire, when set, makes a missing server fail tests instead of
// skipping them.
const EnvRequire = "AGENTD_REQUIRE_S3"

// URL returns the URL of a new, empty prefix in the test bucket (see the
// package doc); the prefix's objects are deleted when t ends.
func URL(t testing.TB) string {
	t.Helper()
	base := os.Getenv(EnvURL)
	if base == "" {
		msg := "s3test: no S3-compatible server: set " + EnvURL + " (eval \"$(scripts/s3.sh start)\")"
		if os.Getenv(EnvRequire) != "" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	cfg, err := s3blobs.ParseURL(base)
	if err != nil {
		t.Fatalf("s3test: %s: %v", EnvURL, err)
	}
	var b [6]byte
	_, _ = rand.Read(b[:])
	prefix := "test-" + hex.EncodeToString(b[:])
	if cfg.Prefix != "" {
		prefix = cfg.Prefix + "/" + prefix
	}
	cfg.Prefix = prefix
	t.Cleanup(func() { empty(t, cfg) })
	return cfg.String()
}

// Open returns the blobs of a new, empty prefix (URL), closed when t ends.
func Open(t testing.TB) *s3blobs.Blobs {
	t.Helper()
	b, err := s3blobs.Open(t.Context(), URL(t))
	if err != nil {
		t.Fatalf("s3test: %v", err)
	}
	t.Cleanup(b.Close)
	return b
}

// Objects returns the names and sizes of the objects under the prefix of
// b (content keys are PREFIX/sha256/HEX).
func Objects(t testing.TB, b *s3blobs.Blobs) map[string]int64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	objs := map[string]int64{}
	prefix := b.Prefix()
	if prefix != "" {
		prefix += "/"
	}
	for o := range b.Client().ListObjects(ctx, b.Bucket(), minio.ListObjectsOptions{Prefix: prefix, Recursive: true}) {
		if o.Err != nil {
			t.Fatalf("s3test: list objects: %v", o.Err)
		}
		objs[o.Key] = o.Size
	}
	return objs
}

// empty deletes the objects under cfg's prefix.
func empty(t testing.TB, cfg s3blobs.Config) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	b, err := s3blobs.OpenConfig(ctx, cfg)
	if err != nil {
		t.Logf("s3test: empty %s: %v", cfg, err)
		return
	}
	defer b.Close()
	for o := range b.Client().ListObjects(ctx, b.Bucket(), minio.ListObjectsOptions{Prefix: cfg.Prefix + "/", Recursive: true}) {
		if o.Err != nil {
			t.Logf("s3test: empty %s: %v", cfg, o.Err)
			return
		}
		if err := b.Client().RemoveObject(ctx, b.Bucket(), o.Key, minio.RemoveObjectOptions{}); err != nil {
			t.Logf("s3test: empty %s: %v", cfg, err)
		}
	}
}
