package agentd_test

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net/http"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentd/agentd"
	"github.com/agentd/agentd/conversation"
	"github.com/agentd/agentd/internal/agentdtest"
	"github.com/agentd/agentd/restapi"
	"github.com/agentd/agentd/store"
)

// Artifacts are the store's (issue 18): two servers on one store both
// serve a session's artifact, it survives a server's restart, and a purge
// through either server deletes it, leaving nothing in the store.
func TestArtifactsAcrossServersRestartAndPurge(t *testing.T) {
	t.Run("sqlite", func(t *testing.T) {
		artifactsAcrossServers(t, "sqlite://"+filepath.Join(t.TempDir(), "shared.db"))
	})
	t.Run("postgres", func(t *testing.T) {
		artifactsAcrossServers(t, postgresStore(t))
	})
}

func artifactsAcrossServers(t *testing.T, storeURL string) {
	ctx := context.Background()
	a := agentdtest.Start(t, agentd.Config{StoreURL: storeURL})
	b := agentdtest.Start(t, agentd.Config{StoreURL: storeURL})
	created, err := a.Client.CreateSession(ctx, restapi.CreateSessionRequest{Architecture: "shell"})
	if err != nil {
		t.Fatal(err)
	}
	id := created.SessionID

	// What the session layer does with a large output, through a store
	// handle of the test's own on the same database.
	st, err := agentd.OpenStore(ctx, storeURL, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	as, ok := st.(store.ArtifactStore)
	if !ok {
		t.Fatalf("%T keeps no artifacts", st)
	}
	data := bytes.Repeat([]byte("0123456789abcdef"), 3*store.ArtifactChunkSize/16/2+7)
	ref, err := as.PutArtifact(ctx, id, conversation.ArtifactRef{ContentType: "text/plain", Name: "out.txt"}, bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	path := "/api/sessions/" + id + "/artifacts/" + ref.SHA256
	get := func(base string, rng string) (int, []byte) {
		t.Helper()
		return getRange(t, base+path, rng)
	}
	for name, srv := range map[string]*agentdtest.Server{"first": a, "second": b} {
		if code, body := get(srv.URL, ""); code != 200 || !bytes.Equal(body, data) {
			t.Fatalf("%s server: %d, %d bytes", name, code, len(body))
		}
		if code, body := get(srv.URL, "bytes=262140-262150"); code != 206 || !bytes.Equal(body, data[262140:262151]) {
			t.Fatalf("%s server, a range: %d, %q", name, code, body)
		}
	}

	a.Restart()
	if body, err := a.Client.Artifact(ctx, id, ref.SHA256); err != nil || !bytes.Equal(body, data) {
		t.Fatalf("after a restart: %d bytes, %v", len(body), err)
	}

	req, _ := http.NewRequest("DELETE", b.URL+"/api/sessions/"+id+"?purge=true", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("purge: %d", resp.StatusCode)
	}
	for name, srv := range map[string]*agentdtest.Server{"first": a, "second": b} {
		if code, _ := get(srv.URL, ""); code != 404 {
			t.Errorf("%s server after the purge: %d, want 404", name, code)
		}
	}
	if _, err := b.Client.Artifact(ctx, id, ref.SHA256); err == nil || !strings.Contains(err.Error(), "SESSION_NOT_FOUND") {
		t.Errorf("client after the purge: %v, want SESSION_NOT_FOUND", err)
	}
	if n, err := as.ArtifactUsage(ctx, ""); err != nil || n != 0 {
		t.Errorf("the store holds %d bytes of artifacts after the purge, %v", n, err)
	}
}

// getRange GETs url, with a Range header when rng is set, and returns the
// status and the body.
func getRange(t *testing.T, url, rng string) (int, []byte) {
	t.Helper()
	req, _ := http.NewRequest("GET", url, nil)
	if rng != "" {
		req.Header.Set("Range", rng)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, body
}
