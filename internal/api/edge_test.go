package api_test

import (
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentd/agentd/internal/api"
	"github.com/agentd/agentd/internal/eventlog"
)

// A name longer than NAME_MAX (255 bytes) or a path longer than PATH_MAX
// is a bad path, not a server error.
func TestLongPathsAreInvalid(t *testing.T) {
	e := newEnv(t, "")
	id := e.create()
	e.do("POST", "/api/sessions/"+id+"/messages", `{"content":"mkdir -p a/b/c"}`)
	e.waitTurn(id, "q1")
	files := "/api/sessions/" + id + "/files/"
	for name, p := range map[string]string{
		"a name of 256 bytes":            strings.Repeat("n", 256),
		"a name of 300 bytes in a dir":   "a/b/" + strings.Repeat("n", 300),
		"a path of 4096 bytes":           strings.Repeat("abcdefg/", 512),
		"a path of 5000 bytes in a tree": "a/b/c/" + strings.Repeat("x/", 2500),
	} {
		resp := e.request("GET", files+p, "")
		if resp.StatusCode != 400 {
			data, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			t.Errorf("%s: %d %.200s, want 400 INVALID_PATH", name, resp.StatusCode, data)
			continue
		}
		expectCode(t, resp, 400, "INVALID_PATH")
	}
	// At the limits it is just a missing file.
	expectCode(t, e.request("GET", files+strings.Repeat("n", 255), ""), 404, "FILE_NOT_FOUND")
	expectCode(t, e.request("GET", files+"a/b/c/"+strings.Repeat("n", 255), ""), 404, "FILE_NOT_FOUND")
}

// No error body shows where the server keeps its data: a workspace file is
// named by its workspace path, anything else under the data folder without
// the folder.
func TestErrorBodiesHideServerPaths(t *testing.T) {
	e := newEnv(t, "")
	id := e.create()
	e.do("POST", "/api/sessions/"+id+"/messages", `{"content":"mkdir -p d/e && echo hi > f && ln -s f link && ln -s ../.. up && ln -s /etc abs && ln -s nowhere dangling"}`)
	e.waitTurn(id, "q1")
	roots := []string{e.dataDir}
	if real, err := filepath.EvalSymlinks(e.dataDir); err == nil && real != e.dataDir {
		roots = append(roots, real)
	}
	files := "/api/sessions/" + id + "/files/"
	for _, p := range []string{
		"d", "d/e", "f/x", "nope", "d/nope", "up/x", "up", "abs/hostname", "abs", "dangling", "link/x",
		strings.Repeat("n", 300), "d/" + strings.Repeat("x/", 2100), "%00", "a%5Cb",
	} {
		resp := e.request("GET", files+p, "")
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode < 400 {
			continue
		}
		for _, root := range roots {
			if strings.Contains(string(body), root) {
				t.Errorf("GET files/%.40s: %d body shows the data folder: %s", p, resp.StatusCode, body)
			}
		}
		if resp.StatusCode >= 500 {
			t.Errorf("GET files/%.40s: %d %s", p, resp.StatusCode, body)
		}
	}
}

// When a key is set every /api route but /api/auth needs it, and so does
// /metrics; /health, /api/auth and the UI stay open.
func TestOpenAPIAndMetricsNeedTheKey(t *testing.T) {
	ui := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "<html>") })
	e := newEnvWith(t, eventlog.Options{}, func(c *api.Config) { c.APIKey = "k3y"; c.UI = ui })
	get := func(path string, hdr ...string) int {
		req, _ := http.NewRequest("GET", e.srv.URL+path, nil)
		for i := 0; i+1 < len(hdr); i += 2 {
			req.Header.Set(hdr[i], hdr[i+1])
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	for _, p := range []string{"/api/openapi.json", "/metrics"} {
		expectCode(t, e.requestNoKey("GET", p), 401, "UNAUTHORIZED")
		if code := get(p, "Authorization", "Bearer wrong"); code != 401 {
			t.Errorf("%s with a wrong key: %d", p, code)
		}
		if code := get(p, "Authorization", "Bearer k3y"); code != 200 {
			t.Errorf("%s with the key: %d", p, code)
		}
		if code := get(p + "?access_token=k3y"); code != 200 {
			t.Errorf("%s with access_token: %d", p, code)
		}
	}
	for _, p := range []string{"/health", "/api/auth", "/", "/index.html"} {
		if code := get(p); code != 200 {
			t.Errorf("%s without a key: %d, want 200", p, code)
		}
	}
	// Without a key nothing needs one.
	open := newEnv(t, "")
	for _, p := range []string{"/api/openapi.json", "/metrics", "/health", "/api/auth"} {
		if resp := open.request("GET", p, ""); resp.StatusCode != 200 {
			t.Errorf("%s with no key configured: %d", p, resp.StatusCode)
		}
	}
}

// requestNoKey sends a request without the env's key.
func (e *env) requestNoKey(method, path string) *http.Response {
	e.t.Helper()
	req, _ := http.NewRequest(method, e.srv.URL+path, nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	return resp
}
