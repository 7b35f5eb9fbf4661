// Package web serves agentd's browser UI. The UI is built with Vite into
// web/dist (npm ci && npm run build in web/) and embedded at compile time;
// a binary built without the UI serves a page that says how to build it.
package web

import (
	"embed"
	"io/fs"
	"net/http"
	"path"
	"strings"
	"time"
)

//go:embed all:dist
var dist embed.FS

// Handler returns the UI handler over the embedded build. It is safe for
// concurrent use. Mount it at "/" after the API routes: every path that is
// not a file of the build gets index.html, so client-side routes such as
// /s/{id} survive a reload.
func Handler() http.Handler {
	sub, err := fs.Sub(dist, "dist")
	if err != nil {
		// dist is a fixed, embedded directory; failing here is a build error.
		panic("web: embedded dist missing: " + err.Error())
	}
	return NewHandler(sub)
}

// NewHandler serves the SPA in root (a Vite build: index.html plus hashed
// files under assets/). Exported for tests and for serving a build from disk.
func NewHandler(root fs.FS) http.Handler {
	index, err := fs.ReadFile(root, "index.html")
	if err != nil {
		return notBuilt{}
	}
	return &spa{root: root, index: index, files: http.FileServerFS(root)}
}

type spa struct {
	root  fs.FS
	index []byte
	files http.Handler
}

func (s *spa) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
		return
	}
	name := strings.TrimPrefix(path.Clean("/"+r.URL.Path), "/")
	if name != "" && name != "index.html" {
		if st, err := fs.Stat(s.root, name); err == nil && !st.IsDir() {
			if strings.HasPrefix(name, "assets/") {
				// Vite puts a content hash in every asset name: cache for good.
				w.Header().Set("Cache-Control", "public, max-age=31536000, immutable")
			} else {
				w.Header().Set("Cache-Control", "no-cache")
			}
			s.files.ServeHTTP(w, r)
			return
		}
		if path.Ext(name) != "" && strings.HasPrefix(name, "assets/") {
			// A missing hashed asset is a stale page asking for an old build:
			// answering index.html would be served as JS and fail obscurely.
			http.NotFound(w, r)
			return
		}
	}
	// index.html names the current hashed assets, so it must be revalidated.
	w.Header().Set("Cache-Control", "no-cache")
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	http.ServeContent(w, r, "index.html", time.Time{}, strings.NewReader(string(s.index)))
}

// notBuilt answers every request with a short page on how to build the UI.
type notBuilt struct{}

const notBuiltPage = `<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>agentd — UI not built</title>
<meta name="viewport" content="width=device-width, initial-scale=1"></head>
<body style="font-family: system-ui, sans-serif; max-width: 40rem; margin: 3rem auto; padding: 0 1rem; line-height: 1.5">
<h1>agentd is running, but its web UI was not built</h1>
<p>This binary was compiled without the UI. The API works as usual under <code>/api/</code>.</p>
<p>To include the UI, build it and recompile:</p>
<pre style="background:#f3f3f3;padding:1rem;border-radius:6px">cd web &amp;&amp; npm ci &amp;&amp; npm run build
cd .. &amp;&amp; go build -o agentd ./cmd/agentd</pre>
</body></html>
`

func (notBuilt) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	if r.Method != http.MethodHead {
		_, _ = w.Write([]byte(notBuiltPage))
	}
}
