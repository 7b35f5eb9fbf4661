package web

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"testing/fstest"
)

func get(t *testing.T, h http.Handler, method, target string) *http.Response {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(method, target, nil))
	return rec.Result()
}

func body(t *testing.T, r *http.Response) string {
	t.Helper()
	b, err := io.ReadAll(r.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

var built = fstest.MapFS{
	"index.html":           {Data: []byte("<!doctype html><div id=root></div>")},
	"assets/index-abc1.js": {Data: []byte("console.log(1)")},
	"favicon.svg":          {Data: []byte("<svg/>")},
}

func TestServesHashedAssetsWithLongCache(t *testing.T) {
	r := get(t, NewHandler(built), http.MethodGet, "/assets/index-abc1.js")
	if r.StatusCode != 200 || body(t, r) != "console.log(1)" {
		t.Fatalf("status %d", r.StatusCode)
	}
	if cc := r.Header.Get("Cache-Control"); !strings.Contains(cc, "immutable") {
		t.Errorf("Cache-Control = %q, want immutable", cc)
	}
	if ct := r.Header.Get("Content-Type"); !strings.Contains(ct, "javascript") {
		t.Errorf("Content-Type = %q", ct)
	}
}

func TestClientRoutesFallBackToIndex(t *testing.T) {
	for _, p := range []string{"/", "/index.html", "/s/abc", "/s/abc/terminal", "/../../etc/passwd"} {
		r := get(t, NewHandler(built), http.MethodGet, p)
		if r.StatusCode != 200 {
			t.Fatalf("%s: status %d", p, r.StatusCode)
		}
		if b := body(t, r); !strings.Contains(b, "id=root") {
			t.Errorf("%s: body %q is not index.html", p, b)
		}
		if cc := r.Header.Get("Cache-Control"); cc != "no-cache" {
			t.Errorf("%s: Cache-Control = %q", p, cc)
		}
	}
}

func TestMissingHashedAssetIs404(t *testing.T) {
	if r := get(t, NewHandler(built), http.MethodGet, "/assets/index-old.js"); r.StatusCode != 404 {
		t.Fatalf("status %d, want 404", r.StatusCode)
	}
}

func TestOtherFilesAreRevalidated(t *testing.T) {
	r := get(t, NewHandler(built), http.MethodGet, "/favicon.svg")
	if r.StatusCode != 200 || r.Header.Get("Cache-Control") != "no-cache" {
		t.Fatalf("status %d, Cache-Control %q", r.StatusCode, r.Header.Get("Cache-Control"))
	}
}

func TestRejectsWrites(t *testing.T) {
	if r := get(t, NewHandler(built), http.MethodPost, "/"); r.StatusCode != http.StatusMethodNotAllowed {
		t.Fatalf("status %d", r.StatusCode)
	}
}

func TestNotBuiltPage(t *testing.T) {
	h := NewHandler(fstest.MapFS{".gitkeep": {}})
	r := get(t, h, http.MethodGet, "/s/x")
	if r.StatusCode != 200 {
		t.Fatalf("status %d", r.StatusCode)
	}
	if b := body(t, r); !strings.Contains(b, "npm run build") {
		t.Errorf("page does not say how to build: %q", b)
	}
}

func TestEmbeddedHandlerWorks(t *testing.T) {
	// Whether or not the UI was built, the embedded handler answers "/".
	r := get(t, Handler(), http.MethodGet, "/")
	if r.StatusCode != 200 || !strings.Contains(r.Header.Get("Content-Type"), "text/html") {
		t.Fatalf("status %d, type %q", r.StatusCode, r.Header.Get("Content-Type"))
	}
}
