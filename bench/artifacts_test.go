package bench

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/agentd/agentd/conversation"
	"github.com/agentd/agentd/store"
	"github.com/agentd/agentd/store/postgres"
	"github.com/agentd/agentd/store/postgres/pgtest"
	"github.com/agentd/agentd/store/s3blobs/s3test"
	"github.com/agentd/agentd/store/sqlite"
)

// artifactStores are the stores the artifact benchmarks compare: SQLite
// as a server opens it (synchronous NORMAL) and PostgreSQL (the test
// server, synchronous_commit on), each also with the content in the test
// S3 server's bucket (SeaweedFS on loopback: $AGENTD_TEST_S3).
var artifactStores = []string{"sqlite", "postgres", "sqlite+s3", "postgres+s3"}

// openArtifactStore opens a fresh store of kind with one session, "s".
func openArtifactStore(tb testing.TB, kind string) (store.Store, store.ArtifactStore) {
	tb.Helper()
	ctx := context.Background()
	var st store.Store
	var err error
	switch kind {
	case "sqlite":
		st, err = sqlite.Open(ctx, tb.TempDir()+"/agentd.db", sqlite.WithLogger(quietLogger()))
	case "postgres":
		st, err = postgres.Open(ctx, pgtest.Schema(tb), postgres.WithLogger(quietLogger()))
	case "sqlite+s3":
		st, err = sqlite.Open(ctx, tb.TempDir()+"/agentd.db", sqlite.WithLogger(quietLogger()), sqlite.WithArtifactBlobs(s3test.Open(tb)))
	case "postgres+s3":
		st, err = postgres.Open(ctx, pgtest.Schema(tb), postgres.WithLogger(quietLogger()), postgres.WithArtifactBlobs(s3test.Open(tb)))
	}
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { st.Close() })
	if err := st.CreateSession(ctx, store.Session{ID: "s", Architecture: "shell", Status: conversation.SessionCreated}); err != nil {
		tb.Fatal(err)
	}
	return st, st.(store.ArtifactStore)
}

// randomBytes is n bytes that do not compress (as images and most large
// outputs' storage would see them, and so PostgreSQL's TOAST compression
// gives up at once).
func randomBytes(n int) []byte {
	b := make([]byte, n)
	r := rand.New(rand.NewPCG(1, 2))
	for i := 0; i+8 <= n; i += 8 {
		binary.LittleEndian.PutUint64(b[i:], r.Uint64())
	}
	return b
}

// BenchmarkArtifactWrite measures PutArtifact of new content (each
// iteration changes the first bytes, so nothing deduplicates): hashing,
// staging (a temporary file over one chunk) and the transaction writing
// the chunks. MB/s is go test's, from SetBytes.
func BenchmarkArtifactWrite(b *testing.B) {
	for _, kind := range artifactStores {
		for _, size := range []int{64 << 10, 4 << 20, 64 << 20} {
			b.Run(fmt.Sprintf("store=%s/size=%s", kind, sizeName(size)), func(b *testing.B) {
				_, as := openArtifactStore(b, kind)
				data := randomBytes(size)
				ctx := context.Background()
				cpu0 := processCPU()
				b.SetBytes(int64(size))
				b.ResetTimer()
				for i := 0; b.Loop(); i++ {
					binary.LittleEndian.PutUint64(data, uint64(i)+1)
					if _, err := as.PutArtifact(ctx, "s", conversation.ArtifactRef{}, bytes.NewReader(data)); err != nil {
						b.Fatal(err)
					}
				}
				b.StopTimer()
				mb := float64(size) * float64(b.N) / 1e6
				b.ReportMetric((processCPU()-cpu0).Seconds()*1e3/mb, "cpu-ms/MB")
				b.ReportMetric(load1(), "load1")
			})
		}
	}
}

// BenchmarkArtifactRangeRead measures OpenArtifact and reading a range of
// a 64 MiB artifact at random offsets (whole: the artifact from its
// start), through the chunked reader.
func BenchmarkArtifactRangeRead(b *testing.B) {
	const size = 64 << 20
	for _, kind := range artifactStores {
		b.Run("store="+kind, func(b *testing.B) {
			_, as := openArtifactStore(b, kind)
			ctx := context.Background()
			data := randomBytes(size)
			ref, err := as.PutArtifact(ctx, "s", conversation.ArtifactRef{}, bytes.NewReader(data))
			if err != nil {
				b.Fatal(err)
			}
			for _, n := range []int{4 << 10, 1 << 20, size} {
				b.Run("range="+sizeName(n), func(b *testing.B) {
					buf := make([]byte, n)
					r := rand.New(rand.NewPCG(3, 4))
					cpu0 := processCPU()
					b.SetBytes(int64(n))
					b.ResetTimer()
					for b.Loop() {
						off := int64(0)
						if n < size {
							off = r.Int64N(int64(size - n))
						}
						rc, err := as.OpenArtifact(ctx, "s", ref.SHA256, off, int64(n))
						if err != nil {
							b.Fatal(err)
						}
						if _, err := io.ReadFull(rc, buf); err != nil {
							b.Fatal(err)
						}
						rc.Close()
						if !bytes.Equal(buf[:64], data[off:off+64]) {
							b.Fatal("read the wrong bytes")
						}
					}
					b.StopTimer()
					mb := float64(n) * float64(b.N) / 1e6
					b.ReportMetric((processCPU()-cpu0).Seconds()*1e3/mb, "cpu-ms/MB")
					b.ReportMetric(load1(), "load1")
				})
			}
		})
	}
}

// The benchmarks' scenario, small, as a test: a put and ranged reads on
// each store (PostgreSQL when the test server is set up).
func TestArtifactBenchSmoke(t *testing.T) {
	for _, kind := range artifactStores {
		t.Run(kind, func(t *testing.T) {
			_, as := openArtifactStore(t, kind)
			data := randomBytes(store.ArtifactChunkSize*2 + 3)
			t0 := time.Now()
			ref, err := as.PutArtifact(t.Context(), "s", conversation.ArtifactRef{}, bytes.NewReader(data))
			if err != nil {
				t.Fatal(err)
			}
			rc, err := as.OpenArtifact(t.Context(), "s", ref.SHA256, store.ArtifactChunkSize-1, 2)
			if err != nil {
				t.Fatal(err)
			}
			got, err := io.ReadAll(rc)
			rc.Close()
			if err != nil || !bytes.Equal(got, data[store.ArtifactChunkSize-1:store.ArtifactChunkSize+1]) {
				t.Fatalf("range read %x, %v", got, err)
			}
			t.Logf("%s: put and read in %v", kind, time.Since(t0))
		})
	}
}

func sizeName(n int) string {
	switch {
	case n >= 1<<20 && n%(1<<20) == 0:
		return fmt.Sprintf("%dMiB", n>>20)
	case n >= 1<<10 && n%(1<<10) == 0:
		return fmt.Sprintf("%dKiB", n>>10)
	}
	return fmt.Sprintf("%dB", n)
}
