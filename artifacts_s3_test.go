package agentd_test

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/agentd/agentd/internal/agentdtest"
	"github.com/agentd/agentd/restapi"
	"github.com/agentd/agentd/store/s3blobs"
	"github.com/agentd/agentd/store/s3blobs/s3test"
)

// `agentd serve --artifacts s3://…` keeps artifact content in the bucket
// (issue 18): a long shell output's artifact is an object there, served
// whole and by range by GET /api/sessions/{id}/artifacts/{sha256}, /health
// names the object store (without credentials), and a purge deletes the
// object. With SQLite and with PostgreSQL as the store.
func TestServeArtifactsInS3(t *testing.T) {
	t.Run("sqlite", func(t *testing.T) { serveArtifactsInS3(t) })
	t.Run("postgres", func(t *testing.T) { serveArtifactsInS3(t, "--store", postgresStore(t)) })
}

func serveArtifactsInS3(t *testing.T, args ...string) {
	u := s3test.URL(t)
	ctx := context.Background()
	p := agentdtest.StartProcess(t, nil, append([]string{"--data-dir", t.TempDir(), "--no-ui", "--output-limit", "1KiB", "--artifacts", u}, args...)...)

	h, err := p.Client.Health(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if h.Status != "ok" || h.Artifacts == nil || h.Artifacts.Kind != "s3" || h.Artifacts.Status != "ok" || !strings.HasPrefix(h.Artifacts.URL, "s3://agentd-test/") {
		t.Fatalf("health: %+v, artifacts %+v", h, h.Artifacts)
	}

	created, err := p.Client.CreateSession(ctx, restapi.CreateSessionRequest{Architecture: "shell"})
	if err != nil {
		t.Fatal(err)
	}
	id := created.SessionID
	var want bytes.Buffer
	for i := 1; i <= 20000; i++ {
		fmt.Fprintf(&want, "line %d of a long output\n", i)
	}
	sent, err := p.Client.Send(ctx, id, `for i in $(seq 1 20000); do echo "line $i of a long output"; done`)
	if err != nil {
		t.Fatal(err)
	}
	waitTurn(t, p.Client, id, sent.QueryID)
	st, err := p.Client.Session(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	var sha string
	for _, b := range st.Blocks {
		if b.ID == "shell-"+sent.QueryID+"-result" && b.Truncated != nil && b.Truncated.Artifact != nil {
			sha = b.Truncated.Artifact.SHA256
		}
	}
	if sha == "" {
		t.Fatalf("no artifact for the long output in %+v", st.Blocks)
	}

	path := p.URL + "/api/sessions/" + id + "/artifacts/" + sha
	get := func(rng string) (int, []byte) {
		t.Helper()
		return getRange(t, path, rng)
	}
	if code, body := get(""); code != 200 || !bytes.Equal(body, want.Bytes()) {
		t.Fatalf("GET the artifact: %d, %d bytes; want 200 and the output's %d", code, len(body), want.Len())
	}
	if code, body := get("bytes=300000-300099"); code != 206 || !bytes.Equal(body, want.Bytes()[300000:300100]) {
		t.Fatalf("GET a range: %d, %q", code, body)
	}

	// The bytes are an object in the bucket.
	b, err := s3blobs.Open(ctx, u)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if objs := s3test.Objects(t, b); objs[b.Key(sha)] != int64(want.Len()) {
		t.Fatalf("objects in the bucket: %v; want %s of %d bytes", objs, b.Key(sha), want.Len())
	}

	req, _ := http.NewRequest("DELETE", p.URL+"/api/sessions/"+id+"?purge=true", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("purge: %d", resp.StatusCode)
	}
	if objs := s3test.Objects(t, b); len(objs) != 0 {
		t.Fatalf("objects in the bucket after the purge: %v", objs)
	}
}
