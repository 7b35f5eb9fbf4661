package api_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/agentd/agentd/conversation"
	"github.com/agentd/agentd/internal/api"
	"github.com/agentd/agentd/internal/auth"
	"github.com/agentd/agentd/store"
)

func sha256Hex(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// putArtifact stores data for session id through the manager's artifact
// store, as the session layer and uploads do.
func putArtifact(t *testing.T, as store.ArtifactStore, id string, data []byte, ctype, name string) conversation.ArtifactRef {
	t.Helper()
	ref, err := as.PutArtifact(context.Background(), id, conversation.ArtifactRef{ContentType: ctype, Name: name}, bytes.NewReader(data))
	if err != nil {
		t.Fatalf("PutArtifact: %v", err)
	}
	return ref
}

func readBody(t *testing.T, resp *http.Response) []byte {
	t.Helper()
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestArtifactServing covers GET (and HEAD) /api/sessions/{id}/artifacts/{sha256}:
// the whole content with its headers, single and multiple ranges (across
// chunk edges), conditional requests, and every refusal with its code.
func TestArtifactServing(t *testing.T) {
	e := newEnv(t, "")
	id := e.create()
	other := e.create()
	as := e.mgr.Artifacts()
	if as == nil {
		t.Fatal("the manager has no artifact store")
	}
	data := make([]byte, 2*store.ArtifactChunkSize+100)
	for i := range data {
		data[i] = byte(i * 7 / 3)
	}
	ref := putArtifact(t, as, id, data, "text/plain; charset=utf-8", "build log.txt")
	base := "/api/sessions/" + id + "/artifacts/"
	etag := `"` + ref.SHA256 + `"`

	resp := e.request("GET", base+ref.SHA256, "")
	if got := readBody(t, resp); resp.StatusCode != 200 || !bytes.Equal(got, data) {
		t.Fatalf("GET: %d, %d bytes", resp.StatusCode, len(got))
	}
	for k, want := range map[string]string{
		"Content-Type":           "text/plain; charset=utf-8",
		"Content-Length":         strconv.Itoa(len(data)),
		"ETag":                   etag,
		"Accept-Ranges":          "bytes",
		"X-Content-Type-Options": "nosniff",
		"Content-Disposition":    `attachment; filename="build log.txt"`,
	} {
		if got := resp.Header.Get(k); got != want {
			t.Errorf("%s: %q, want %q", k, got, want)
		}
	}
	if csp := resp.Header.Get("Content-Security-Policy"); !strings.Contains(csp, "sandbox") {
		t.Errorf("Content-Security-Policy %q: want sandbox", csp)
	}

	// HEAD: the headers, no body.
	resp = e.request("HEAD", base+ref.SHA256, "")
	if got := readBody(t, resp); resp.StatusCode != 200 || len(got) != 0 || resp.Header.Get("Content-Length") != strconv.Itoa(len(data)) {
		t.Errorf("HEAD: %d, %d bytes, Content-Length %q", resp.StatusCode, len(got), resp.Header.Get("Content-Length"))
	}

	// One range, across a chunk edge.
	c := int64(store.ArtifactChunkSize)
	resp = e.request("GET", base+ref.SHA256, "", "Range", "bytes="+strconv.FormatInt(c-5, 10)+"-"+strconv.FormatInt(c+4, 10))
	if got := readBody(t, resp); resp.StatusCode != 206 || !bytes.Equal(got, data[c-5:c+5]) {
		t.Errorf("Range across a chunk edge: %d, %q", resp.StatusCode, got)
	}
	if cr := resp.Header.Get("Content-Range"); cr != "bytes "+strconv.FormatInt(c-5, 10)+"-"+strconv.FormatInt(c+4, 10)+"/"+strconv.Itoa(len(data)) {
		t.Errorf("Content-Range %q", cr)
	}
	// A suffix range.
	resp = e.request("GET", base+ref.SHA256, "", "Range", "bytes=-10")
	if got := readBody(t, resp); resp.StatusCode != 206 || !bytes.Equal(got, data[len(data)-10:]) {
		t.Errorf("suffix range: %d, %q", resp.StatusCode, got)
	}
	// Two ranges: multipart.
	resp = e.request("GET", base+ref.SHA256, "", "Range", "bytes=0-1,"+strconv.FormatInt(2*c, 10)+"-"+strconv.FormatInt(2*c+1, 10))
	body := readBody(t, resp)
	if resp.StatusCode != 206 || !strings.HasPrefix(resp.Header.Get("Content-Type"), "multipart/byteranges") ||
		!bytes.Contains(body, data[:2]) || !bytes.Contains(body, data[2*c:2*c+2]) {
		t.Errorf("two ranges: %d %q", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	// Unsatisfiable and malformed ranges: a JSON 416.
	resp = e.request("GET", base+ref.SHA256, "", "Range", "bytes="+strconv.Itoa(len(data))+"-")
	if cr := resp.Header.Get("Content-Range"); cr != "bytes */"+strconv.Itoa(len(data)) {
		t.Errorf("416 Content-Range %q", cr)
	}
	expectCode(t, resp, 416, api.CodeRangeNotSatisfiable)
	expectCode(t, e.request("GET", base+ref.SHA256, "", "Range", "bytes=9-2"), 416, api.CodeRangeNotSatisfiable)
	expectCode(t, e.request("GET", base+ref.SHA256, "", "Range", "lines=1-2"), 416, api.CodeRangeNotSatisfiable)

	// Conditional requests: If-None-Match, If-Range.
	resp = e.request("GET", base+ref.SHA256, "", "If-None-Match", etag)
	if got := readBody(t, resp); resp.StatusCode != 304 || len(got) != 0 {
		t.Errorf("If-None-Match: %d, %d bytes", resp.StatusCode, len(got))
	}
	resp = e.request("GET", base+ref.SHA256, "", "If-None-Match", etag, "Range", "bytes=999999999-")
	if readBody(t, resp); resp.StatusCode != 304 {
		t.Errorf("If-None-Match with a range beyond the end: %d, want 304", resp.StatusCode)
	}
	resp = e.request("GET", base+ref.SHA256, "", "If-Range", `"other"`, "Range", "bytes=0-1")
	if got := readBody(t, resp); resp.StatusCode != 200 || len(got) != len(data) {
		t.Errorf("If-Range not matching: %d, %d bytes; want the whole content", resp.StatusCode, len(got))
	}
	resp = e.request("GET", base+ref.SHA256, "", "If-Range", etag, "Range", "bytes=0-1")
	if got := readBody(t, resp); resp.StatusCode != 206 || !bytes.Equal(got, data[:2]) {
		t.Errorf("If-Range matching: %d, %q", resp.StatusCode, got)
	}

	// Refusals.
	unknown := sha256Hex([]byte("never stored"))
	expectCode(t, e.request("GET", base+unknown, ""), 404, api.CodeArtifactNotFound)
	expectCode(t, e.request("GET", "/api/sessions/"+other+"/artifacts/"+ref.SHA256, ""), 404, api.CodeArtifactNotFound)
	expectCode(t, e.request("GET", "/api/sessions/nope/artifacts/"+ref.SHA256, ""), 404, api.CodeSessionNotFound)
	for _, bad := range []string{"abc", strings.ToUpper(ref.SHA256), ref.SHA256 + "0", strings.Repeat("g", 64), "..%2F..%2Fetc%2Fpasswd"} {
		expectCode(t, e.request("GET", base+bad, ""), 400, api.CodeBadRequest)
	}
}

// TestArtifactContentDisposition: raster images are shown in place; SVG,
// HTML and anything else are attachments (never active content of the
// API's origin), with the type kept and nosniff; names are encoded.
func TestArtifactContentDisposition(t *testing.T) {
	e := newEnv(t, "")
	id := e.create()
	as := e.mgr.Artifacts()
	for i, c := range []struct {
		ctype, name      string
		wantType, wantCD string
	}{
		{"image/png", "shot.png", "image/png", `inline; filename=shot.png`},
		{"image/jpeg", "", "image/jpeg", "inline; filename=artifact-"},
		{"image/svg+xml", "x.svg", "image/svg+xml", `attachment; filename=x.svg`},
		{"text/html; charset=utf-8", "page.html", "text/html; charset=utf-8", `attachment; filename=page.html`},
		{"", "", "application/octet-stream", "attachment; filename=artifact-"},
		{"not a type", "a.bin", "application/octet-stream", `attachment; filename=a.bin`},
		{"text/plain", `../../etc/"passwd"` + "\r\nX-Evil: 1", "text/plain", `attachment; filename="\"passwd\"X-Evil: 1"`},
		{"text/plain", "résumé.txt", "text/plain", `attachment; filename*=utf-8''r%C3%A9sum%C3%A9.txt`},
	} {
		ref := putArtifact(t, as, id, []byte("content "+strconv.Itoa(i)), c.ctype, c.name)
		resp := e.request("GET", "/api/sessions/"+id+"/artifacts/"+ref.SHA256, "")
		readBody(t, resp)
		if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != c.wantType ||
			!strings.HasPrefix(resp.Header.Get("Content-Disposition"), c.wantCD) ||
			resp.Header.Get("X-Content-Type-Options") != "nosniff" || resp.Header.Get("X-Evil") != "" {
			t.Errorf("%q %q: %d, Content-Type %q, Content-Disposition %q; want %q, %q", c.ctype, c.name, resp.StatusCode,
				resp.Header.Get("Content-Type"), resp.Header.Get("Content-Disposition"), c.wantType, c.wantCD)
		}
	}
}

// TestArtifactsGoWithPurge: a purged session's artifacts are gone, and so
// is content no other session holds.
func TestArtifactsGoWithPurge(t *testing.T) {
	e := newEnv(t, "")
	id, kept := e.create(), e.create()
	as := e.mgr.Artifacts()
	shared := putArtifact(t, as, id, []byte("shared"), "text/plain", "")
	putArtifact(t, as, kept, []byte("shared"), "text/plain", "")
	own := putArtifact(t, as, id, []byte("only mine"), "text/plain", "")
	// Terminating keeps the session and its artifacts.
	if code, m := e.do("DELETE", "/api/sessions/"+id, ""); code != 200 {
		t.Fatal(code, m)
	}
	if resp := e.request("GET", "/api/sessions/"+id+"/artifacts/"+own.SHA256, ""); readBody(t, resp) == nil || resp.StatusCode != 200 {
		t.Fatalf("after terminate: %d", resp.StatusCode)
	}
	if code, m := e.do("DELETE", "/api/sessions/"+id+"?purge=true", ""); code != 200 {
		t.Fatal(code, m)
	}
	expectCode(t, e.request("GET", "/api/sessions/"+id+"/artifacts/"+own.SHA256, ""), 404, api.CodeSessionNotFound)
	if resp := e.request("GET", "/api/sessions/"+kept+"/artifacts/"+shared.SHA256, ""); string(readBody(t, resp)) != "shared" {
		t.Errorf("the other session's copy after the purge: %d", resp.StatusCode)
	}
	if n, err := as.ArtifactUsage(context.Background(), ""); err != nil || n != int64(len("shared")) {
		t.Errorf("store usage after the purge = %d, %v; want only the shared content", n, err)
	}
}

// TestArtifactAccessFollowsSession: another user gets the answer of a
// missing session; a share to read is enough.
func TestArtifactAccessFollowsSession(t *testing.T) {
	e := newIdentEnv(t, auth.Limits{})
	a := e.create("alice")
	ref := putArtifact(t, e.st, a, []byte("alice's"), "text/plain", "")
	path := "/api/sessions/" + a + "/artifacts/" + ref.SHA256
	if code, _, _ := e.call("alice", "GET", path, ""); code != 200 {
		t.Fatalf("owner: %d", code)
	}
	e.expect("bob", "GET", path, "", 404, "SESSION_NOT_FOUND")
	e.expect("carol", "GET", path, "", 404, "SESSION_NOT_FOUND")
	e.expect("", "GET", path, "", 401, "UNAUTHORIZED")
	e.expect("alice", "PUT", "/api/sessions/"+a+"/shares/bob", `{"access":"read"}`, 200, "")
	if code, _, _ := e.call("bob", "GET", path, ""); code != 200 {
		t.Errorf("bob with a read share: %d", code)
	}
	if code, _, _ := e.call(rootUser, "GET", path, ""); code != 200 {
		t.Errorf("admin: %d", code)
	}
}
