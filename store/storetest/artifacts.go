package storetest

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"sync"
	"testing"

	"github.com/agentd/agentd/conversation"
	"github.com/agentd/agentd/store"
)

// chunk is the stores' chunk size, the edge the range tests probe.
const chunk = store.ArtifactChunkSize

// artifactContent is n bytes that differ per seed and per position.
func artifactContent(seed byte, n int) []byte {
	b := make([]byte, n)
	x := uint32(seed)*2654435761 + 1
	for i := range b {
		x ^= x << 13
		x ^= x >> 17
		x ^= x << 5
		b[i] = byte(x)
	}
	return b
}

func hexSHA(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// artifactStore returns s as an ArtifactStore, skipping t when it is not one.
func artifactStore(t *testing.T, s store.Store) store.ArtifactStore {
	t.Helper()
	as, ok := s.(store.ArtifactStore)
	if !ok {
		t.Skip("the store does not implement store.ArtifactStore")
	}
	return as
}

func putArtifact(t *testing.T, as store.ArtifactStore, sessionID string, data []byte, ct, name string) conversation.ArtifactRef {
	t.Helper()
	ref, err := as.PutArtifact(ctx(t), sessionID, conversation.ArtifactRef{ContentType: ct, Name: name}, bytes.NewReader(data))
	if err != nil {
		t.Fatalf("PutArtifact(%q, %d bytes): %v", sessionID, len(data), err)
	}
	want := conversation.ArtifactRef{SHA256: hexSHA(data), Size: int64(len(data)), ContentType: ct, Name: name}
	if ref != want {
		t.Fatalf("PutArtifact(%q) = %+v, want %+v", sessionID, ref, want)
	}
	return ref
}

func readArtifact(t *testing.T, as store.ArtifactStore, sessionID, sha string, off, n int64) []byte {
	t.Helper()
	rc, err := as.OpenArtifact(ctx(t), sessionID, sha, off, n)
	if err != nil {
		t.Fatalf("OpenArtifact(%q, %s, %d, %d): %v", sessionID, sha[:8], off, n, err)
	}
	defer rc.Close()
	b, err := io.ReadAll(rc)
	if err != nil {
		t.Fatalf("read artifact (%q, %s, %d, %d): %v", sessionID, sha[:8], off, n, err)
	}
	return b
}

func checkUsage(t *testing.T, as store.ArtifactStore, sessionID string, want int64) {
	t.Helper()
	got, err := as.ArtifactUsage(ctx(t), sessionID)
	if err != nil {
		t.Fatalf("ArtifactUsage(%q): %v", sessionID, err)
	}
	if got != want {
		t.Errorf("ArtifactUsage(%q) = %d, want %d", sessionID, got, want)
	}
}

func (h harness) artifacts(t *testing.T) {
	t.Run("RoundTrip", func(t *testing.T) {
		s := h.store(t)
		as := artifactStore(t, s)
		createSession(t, s, "s1")
		for _, n := range []int{1, 1000, chunk - 1, chunk, chunk + 1, 3*chunk + 17, 40*chunk + 1} {
			data := artifactContent(byte(n), n)
			ref := putArtifact(t, as, "s1", data, "application/octet-stream", fmt.Sprintf("f%d.bin", n))
			if got := readArtifact(t, as, "s1", ref.SHA256, 0, -1); !bytes.Equal(got, data) {
				t.Fatalf("%d bytes: read back %d bytes, different", n, len(got))
			}
			st, err := as.StatArtifact(ctx(t), "s1", ref.SHA256)
			if err != nil || st != ref {
				t.Fatalf("StatArtifact = %+v, %v; want %+v", st, err, ref)
			}
		}
	})

	t.Run("Empty", func(t *testing.T) {
		s := h.store(t)
		as := artifactStore(t, s)
		createSession(t, s, "s1")
		ref := putArtifact(t, as, "s1", nil, "text/plain", "")
		if got := readArtifact(t, as, "s1", ref.SHA256, 0, -1); len(got) != 0 {
			t.Errorf("empty artifact read %d bytes", len(got))
		}
		if _, err := as.StatArtifact(ctx(t), "s1", ref.SHA256); err != nil {
			t.Errorf("StatArtifact(empty): %v", err)
		}
		checkUsage(t, as, "s1", 0)
	})

	t.Run("NotFound", func(t *testing.T) {
		s := h.store(t)
		as := artifactStore(t, s)
		createSession(t, s, "s1")
		createSession(t, s, "s2")
		data := []byte("only in s1")
		ref := putArtifact(t, as, "s1", data, "", "")
		unknown := hexSHA([]byte("never stored"))
		for _, c := range []struct{ session, sha string }{{"s1", unknown}, {"s2", ref.SHA256}, {"nope", ref.SHA256}} {
			if _, err := as.StatArtifact(ctx(t), c.session, c.sha); !errors.Is(err, store.ErrNotFound) {
				t.Errorf("StatArtifact(%q, %s): got %v, want ErrNotFound", c.session, c.sha[:8], err)
			}
			if rc, err := as.OpenArtifact(ctx(t), c.session, c.sha, 0, -1); !errors.Is(err, store.ErrNotFound) {
				if rc != nil {
					rc.Close()
				}
				t.Errorf("OpenArtifact(%q, %s): got %v, want ErrNotFound", c.session, c.sha[:8], err)
			}
		}
		if _, err := as.PutArtifact(ctx(t), "nope", conversation.ArtifactRef{}, bytes.NewReader(data)); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("PutArtifact for an unknown session: got %v, want ErrNotFound", err)
		}
		checkUsage(t, as, "", int64(len(data)))
	})

	t.Run("DedupAcrossSessions", func(t *testing.T) {
		s := h.store(t)
		as := artifactStore(t, s)
		createSession(t, s, "s1")
		createSession(t, s, "s2")
		data := artifactContent(7, 2*chunk+5)
		other := artifactContent(8, 100)
		putArtifact(t, as, "s1", data, "text/plain", "a.txt")
		putArtifact(t, as, "s2", data, "text/markdown", "b.md")
		// Again in the same session: nothing new; the first name stays.
		putArtifact(t, as, "s1", data, "text/html", "c.html")
		putArtifact(t, as, "s2", other, "", "")
		checkUsage(t, as, "s1", int64(len(data)))
		checkUsage(t, as, "s2", int64(len(data)+len(other)))
		checkUsage(t, as, "", int64(len(data)+len(other)))
		st, err := as.StatArtifact(ctx(t), "s1", hexSHA(data))
		if err != nil || st.Name != "a.txt" || st.ContentType != "text/plain" {
			t.Errorf("StatArtifact after a second put = %+v, %v; want the first put's name and type", st, err)
		}
		st, err = as.StatArtifact(ctx(t), "s2", hexSHA(data))
		if err != nil || st.Name != "b.md" || st.ContentType != "text/markdown" {
			t.Errorf("StatArtifact of s2 = %+v, %v; want its own name and type", st, err)
		}
	})

	t.Run("RangesAtChunkEdges", func(t *testing.T) {
		s := h.store(t)
		as := artifactStore(t, s)
		createSession(t, s, "s1")
		data := artifactContent(3, 3*chunk+11)
		ref := putArtifact(t, as, "s1", data, "", "")
		size := int64(len(data))
		for _, off := range []int64{0, 1, chunk - 1, chunk, chunk + 1, 2*chunk - 1, 2 * chunk, 3 * chunk, size - 1, size} {
			for _, n := range []int64{-1, 0, 1, 2, chunk - 1, chunk, chunk + 1, 2*chunk + 3, size} {
				end := size
				if n >= 0 && off+n < size {
					end = off + n
				}
				if got := readArtifact(t, as, "s1", ref.SHA256, off, n); !bytes.Equal(got, data[off:end]) {
					t.Fatalf("range (%d, %d): got %d bytes, want data[%d:%d]", off, n, len(got), off, end)
				}
			}
		}
		for _, off := range []int64{-1, size + 1} {
			if rc, err := as.OpenArtifact(ctx(t), "s1", ref.SHA256, off, 1); err == nil {
				rc.Close()
				t.Errorf("OpenArtifact at offset %d of %d bytes: no error", off, size)
			} else if errors.Is(err, store.ErrNotFound) {
				t.Errorf("OpenArtifact at offset %d: ErrNotFound, want a range error", off)
			}
		}
		// Small reads across a chunk edge.
		rc, err := as.OpenArtifact(ctx(t), "s1", ref.SHA256, chunk-3, 10)
		if err != nil {
			t.Fatal(err)
		}
		var got []byte
		p := make([]byte, 3)
		for {
			n, err := rc.Read(p)
			got = append(got, p[:n]...)
			if err == io.EOF {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
		}
		rc.Close()
		if !bytes.Equal(got, data[chunk-3:chunk+7]) {
			t.Errorf("small reads across a chunk edge: got %x", got)
		}
	})

	t.Run("DeleteSessionCascade", func(t *testing.T) {
		s := h.store(t)
		as := artifactStore(t, s)
		for _, id := range []string{"s1", "s2"} {
			createSession(t, s, id)
		}
		shared := artifactContent(1, 2*chunk+1)
		own := artifactContent(2, chunk+2)
		refShared := putArtifact(t, as, "s1", shared, "", "")
		refOwn := putArtifact(t, as, "s1", own, "", "")
		putArtifact(t, as, "s2", shared, "", "")
		checkUsage(t, as, "", int64(len(shared)+len(own)))

		if err := s.DeleteSession(ctx(t), "s1"); err != nil {
			t.Fatal(err)
		}
		checkUsage(t, as, "s1", 0)
		checkUsage(t, as, "", int64(len(shared)))
		for _, sha := range []string{refShared.SHA256, refOwn.SHA256} {
			if _, err := as.StatArtifact(ctx(t), "s1", sha); !errors.Is(err, store.ErrNotFound) {
				t.Errorf("StatArtifact of a deleted session: got %v, want ErrNotFound", err)
			}
		}
		if got := readArtifact(t, as, "s2", refShared.SHA256, 0, -1); !bytes.Equal(got, shared) {
			t.Errorf("shared content after the other session's delete: %d bytes, different", len(got))
		}

		if err := s.DeleteSession(ctx(t), "s2"); err != nil {
			t.Fatal(err)
		}
		checkUsage(t, as, "", 0)

		// The same content can be stored again, whole.
		createSession(t, s, "s3")
		putArtifact(t, as, "s3", shared, "", "")
		if got := readArtifact(t, as, "s3", refShared.SHA256, 0, -1); !bytes.Equal(got, shared) {
			t.Errorf("content stored again after its delete: %d bytes, different", len(got))
		}
	})

	t.Run("FailedPutStoresNothing", func(t *testing.T) {
		s := h.store(t)
		as := artifactStore(t, s)
		createSession(t, s, "s1")
		boom := errors.New("boom")
		r := io.MultiReader(bytes.NewReader(artifactContent(4, 2*chunk)), errReader{boom})
		if _, err := as.PutArtifact(ctx(t), "s1", conversation.ArtifactRef{}, r); !errors.Is(err, boom) {
			t.Errorf("PutArtifact with a failing reader: got %v, want it to wrap the reader's error", err)
		}
		cctx, cancel := context.WithCancel(ctx(t))
		cancel()
		if _, err := as.PutArtifact(cctx, "s1", conversation.ArtifactRef{}, bytes.NewReader([]byte("x"))); !errors.Is(err, context.Canceled) {
			t.Errorf("PutArtifact with a cancelled context: got %v, want context.Canceled", err)
		}
		checkUsage(t, as, "s1", 0)
		checkUsage(t, as, "", 0)
		if _, err := as.StatArtifact(ctx(t), "s1", hexSHA([]byte("x"))); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("StatArtifact after a cancelled put: got %v, want ErrNotFound", err)
		}
	})

	t.Run("PutRacingTheLastReferencesDelete", h.artifactPutRacingDelete)

	t.Run("ConcurrentPutsOfTheSameContent", func(t *testing.T) {
		s := h.store(t)
		as := artifactStore(t, s)
		sessions := []string{"s1", "s2", "s3", "s4"}
		for _, id := range sessions {
			createSession(t, s, id)
		}
		data := artifactContent(9, chunk+chunk/2)
		var wg sync.WaitGroup
		errs := make(chan error, 2*len(sessions))
		for i := range 2 * len(sessions) {
			wg.Add(1)
			go func() {
				defer wg.Done()
				ref, err := as.PutArtifact(ctx(t), sessions[i%len(sessions)], conversation.ArtifactRef{Name: "x"}, bytes.NewReader(data))
				if err == nil && ref.SHA256 != hexSHA(data) {
					err = fmt.Errorf("ref %+v", ref)
				}
				errs <- err
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			if err != nil {
				t.Errorf("concurrent PutArtifact: %v", err)
			}
		}
		checkUsage(t, as, "", int64(len(data)))
		for _, id := range sessions {
			checkUsage(t, as, id, int64(len(data)))
			if got := readArtifact(t, as, id, hexSHA(data), 0, -1); !bytes.Equal(got, data) {
				t.Errorf("%s: read back %d bytes, different", id, len(got))
			}
		}
		for i, id := range sessions {
			if err := s.DeleteSession(ctx(t), id); err != nil {
				t.Fatal(err)
			}
			want := int64(len(data))
			if i == len(sessions)-1 {
				want = 0
			}
			checkUsage(t, as, "", want)
		}
	})
}

// PutRacingTheLastReferencesDelete: one session's delete drops the
// last reference to content while another session puts the same content;
// whichever commits first, the put's session ends up with the whole
// content and nothing leaks.
func (h harness) artifactPutRacingDelete(t *testing.T) {
	s := h.store(t)
	as := artifactStore(t, s)
	data := artifactContent(11, chunk+10)
	for round := range 12 {
		a, b := fmt.Sprintf("a%d", round), fmt.Sprintf("b%d", round)
		createSession(t, s, a)
		createSession(t, s, b)
		putArtifact(t, as, a, data, "", "")
		var wg sync.WaitGroup
		var delErr, putErr error
		wg.Add(2)
		go func() { defer wg.Done(); delErr = s.DeleteSession(ctx(t), a) }()
		go func() {
			defer wg.Done()
			_, putErr = as.PutArtifact(ctx(t), b, conversation.ArtifactRef{}, bytes.NewReader(data))
		}()
		wg.Wait()
		if delErr != nil || putErr != nil {
			t.Fatalf("round %d: delete %v, put %v", round, delErr, putErr)
		}
		if got := readArtifact(t, as, b, hexSHA(data), 0, -1); !bytes.Equal(got, data) {
			t.Fatalf("round %d: the put's session reads %d bytes, different", round, len(got))
		}
		checkUsage(t, as, "", int64(len(data)))
		if err := s.DeleteSession(ctx(t), b); err != nil {
			t.Fatal(err)
		}
		checkUsage(t, as, "", 0)
	}
}

type errReader struct{ err error }

func (r errReader) Read([]byte) (int, error) { return 0, r.err }

// RunArtifactQuota checks that a store opened with a quota (open must
// return a new, empty store limited by q) refuses what would pass it with
// store.ErrArtifactQuota and stores none of it. Run closes the stores.
func RunArtifactQuota(t *testing.T, open func(t *testing.T, q store.ArtifactQuota) store.Store) {
	t.Helper()
	withQuota := func(t *testing.T, q store.ArtifactQuota) (store.Store, store.ArtifactStore) {
		t.Helper()
		s := harness{open: func(t *testing.T) store.Store { return open(t, q) }}.store(t)
		return s, artifactStore(t, s)
	}
	t.Run("Session", func(t *testing.T) {
		s, as := withQuota(t, store.ArtifactQuota{Session: 3 * chunk})
		createSession(t, s, "s1")
		createSession(t, s, "s2")
		a := artifactContent(1, 2*chunk)
		b := artifactContent(2, chunk+1)
		putArtifact(t, as, "s1", a, "", "")
		if _, err := as.PutArtifact(ctx(t), "s1", conversation.ArtifactRef{}, bytes.NewReader(b)); !errors.Is(err, store.ErrArtifactQuota) {
			t.Fatalf("PutArtifact over the session quota: got %v, want ErrArtifactQuota", err)
		}
		checkUsage(t, as, "s1", int64(len(a)))
		if _, err := as.StatArtifact(ctx(t), "s1", hexSHA(b)); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("StatArtifact of the refused artifact: got %v, want ErrNotFound", err)
		}
		// Exactly up to the quota fits; content already held adds nothing.
		putArtifact(t, as, "s1", b[:chunk], "", "")
		putArtifact(t, as, "s1", a, "", "")
		// Another session has its own quota.
		putArtifact(t, as, "s2", b, "", "")
		// A single artifact larger than the quota is refused.
		if _, err := as.PutArtifact(ctx(t), "s2", conversation.ArtifactRef{}, bytes.NewReader(artifactContent(5, 4*chunk))); !errors.Is(err, store.ErrArtifactQuota) {
			t.Errorf("PutArtifact larger than the quota: got %v, want ErrArtifactQuota", err)
		}
		checkUsage(t, as, "s2", int64(len(b)))
	})
	t.Run("Total", func(t *testing.T) {
		s, as := withQuota(t, store.ArtifactQuota{Total: 2*chunk + 10})
		createSession(t, s, "s1")
		createSession(t, s, "s2")
		a := artifactContent(1, 2*chunk)
		putArtifact(t, as, "s1", a, "", "")
		// Shared content takes no more room: allowed.
		putArtifact(t, as, "s2", a, "", "")
		putArtifact(t, as, "s2", []byte("0123456789"), "", "")
		if _, err := as.PutArtifact(ctx(t), "s1", conversation.ArtifactRef{}, bytes.NewReader([]byte("!"))); !errors.Is(err, store.ErrArtifactQuota) {
			t.Fatalf("PutArtifact over the total quota: got %v, want ErrArtifactQuota", err)
		}
		checkUsage(t, as, "", int64(len(a))+10)
		// Deleting a session frees what only it held.
		if err := s.DeleteSession(ctx(t), "s2"); err != nil {
			t.Fatal(err)
		}
		putArtifact(t, as, "s1", []byte("!"), "", "")
	})
}

// RunArtifacts runs the artifact part of Run alone (the same subtests as
// Run's "Artifacts"): for a store whose artifacts can be kept in several
// ways, e.g. its content in an object store, each checked apart.
func RunArtifacts(t *testing.T, open func(t *testing.T) store.Store) {
	t.Helper()
	harness{open: open}.artifacts(t)
}
