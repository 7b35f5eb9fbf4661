// Package api is agentd's transport layer: REST, SSE, WebSocket, Socket.IO
// and the OpenAPI description. It holds no domain logic: every handler
// decodes a request, calls the session manager or the event log, and maps
// the result (errors via classify, in one place).
package api

import (
	"bufio"
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/agentd/agentd/internal/agent"
	"github.com/agentd/agentd/internal/eventlog"
	"github.com/agentd/agentd/internal/session"
	"github.com/agentd/agentd/restapi"
)

// Config wires a Server.
type Config struct {
	Sessions      *session.Manager
	Log           *eventlog.Log
	Profiles      *session.Profiles
	Architectures *agent.Registry
	// APIKey, when set, is required on every /api/* route, the WebSocket and
	// Socket.IO.
	APIKey string
	// MaxBody bounds request bodies (default 1 MiB).
	MaxBody int64
	// MaxFileBytes bounds what one GET of a workspace file sends: a whole
	// file up to it, ranges totalling up to it (default
	// DefaultMaxFileBytes).
	MaxFileBytes int64
	// Gatherer serves /metrics (default prometheus.DefaultGatherer).
	Gatherer   prometheus.Gatherer
	Registerer prometheus.Registerer
	// UI serves everything outside /api (the embedded web UI).
	UI     http.Handler
	Logger *slog.Logger
	// Version is reported by /health.
	Version string
	// Audit serves GET /api/sessions/{id}/audit (audit.go); nil: every
	// session's list is empty.
	Audit AuditReader
	// ModelUsage adds the model proxy's count to that answer when set.
	ModelUsage ModelUsage
	// Sandboxes answers GET /api/sandboxes; nil: an empty list.
	Sandboxes SandboxLister
	// Health reports the node, its store and its bus for GET /health;
	// nil: {"status":"ok"}.
	Health func(ctx context.Context) restapi.Health
	// StreamFlushInterval spaces the writes of each WebSocket and SSE
	// event stream at least this far apart: events closer together share a
	// write (default DefaultStreamFlushInterval; negative: none).
	StreamFlushInterval time.Duration
}

// DefaultStreamFlushInterval is Config.StreamFlushInterval's default.
const DefaultStreamFlushInterval = 2 * time.Millisecond

// Server is the HTTP handler. It is safe for concurrent use.
type Server struct {
	cfg    Config
	log    *slog.Logger
	mux    *http.ServeMux
	routes []route
	sio    *socketIO

	mu       sync.Mutex // guards conns, closing
	conns    map[*wsConn]struct{}
	closing  bool
	connWG   sync.WaitGroup
	wsGauge  prometheus.Gauge
	closeCtx context.Context
	cancel   context.CancelFunc

	openapiOnce sync.Once
	openapiDoc  []byte

	flushInterval time.Duration // Config.StreamFlushInterval, resolved
}

// principal is the authenticated caller stored in the request context.
type principalKey struct{}

// Principal returns the caller's identity: "local" when auth is off.
func Principal(ctx context.Context) string {
	if p, ok := ctx.Value(principalKey{}).(string); ok {
		return p
	}
	return "local"
}

// New builds the server.
func New(cfg Config) (*Server, error) {
	if cfg.Sessions == nil || cfg.Log == nil || cfg.Profiles == nil || cfg.Architectures == nil {
		return nil, errors.New("api: Sessions, Log, Profiles and Architectures are required")
	}
	if cfg.MaxBody <= 0 {
		cfg.MaxBody = 1 << 20
	}
	if cfg.MaxFileBytes <= 0 {
		cfg.MaxFileBytes = DefaultMaxFileBytes
	}
	if cfg.Gatherer == nil {
		cfg.Gatherer = prometheus.DefaultGatherer
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.StreamFlushInterval == 0 {
		cfg.StreamFlushInterval = DefaultStreamFlushInterval
		if v, err := time.ParseDuration(os.Getenv("AGENTD_STREAM_FLUSH_INTERVAL")); err == nil {
			cfg.StreamFlushInterval = v // measurement knob (docs/benchmarks.md)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	s := &Server{flushInterval: cfg.StreamFlushInterval,
		cfg: cfg, log: cfg.Logger, mux: http.NewServeMux(), conns: make(map[*wsConn]struct{}),
		closeCtx: ctx, cancel: cancel,
		wsGauge: prometheus.NewGauge(prometheus.GaugeOpts{Name: "agentd_websocket_connections", Help: "Open WebSocket connections (/api/ws)."}),
	}
	if cfg.Registerer != nil {
		cfg.Registerer.MustRegister(s.wsGauge)
	}
	s.routes = s.table()
	for _, rt := range s.routes {
		h := rt.handler
		if rt.auth {
			h = s.requireAuth(h)
		}
		if rt.body {
			h = s.limitBody(h)
		}
		s.mux.HandleFunc(rt.method+" "+rt.pattern, h)
	}
	sio, err := newSocketIO(s)
	if err != nil {
		return nil, err
	}
	s.sio = sio
	// Socket.IO checks the key itself (auth.token, query or header).
	s.mux.Handle("/socket.io/", sio)
	// Unknown /api routes answer JSON, not the UI.
	s.mux.HandleFunc("/api/", func(w http.ResponseWriter, r *http.Request) {
		if allowed := s.methodsFor(r); len(allowed) > 0 {
			w.Header().Set("Allow", strings.Join(allowed, ", "))
			writeError(w, http.StatusMethodNotAllowed, CodeMethodNotAllowed, r.Method+" is not allowed here (allowed: "+strings.Join(allowed, ", ")+")")
			return
		}
		writeError(w, http.StatusNotFound, CodeNotFound, "no route "+r.Method+" "+r.URL.Path)
	})
	if cfg.UI != nil {
		s.mux.Handle("/", cfg.UI)
	}
	return s, nil
}

// methodsFor lists the methods the route table serves at r's path.
func (s *Server) methodsFor(r *http.Request) []string {
	var out []string
	seen := map[string]bool{}
	for _, rt := range s.routes {
		if seen[rt.method] || rt.method == r.Method {
			continue
		}
		probe := r.Clone(r.Context())
		probe.Method = rt.method
		if _, pattern := s.mux.Handler(probe); pattern != "" && pattern != "/api/" && pattern != "/" {
			seen[rt.method] = true
			out = append(out, rt.method)
		}
	}
	return out
}

// ServeHTTP implements http.Handler.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	defer func() {
		if v := recover(); v != nil {
			if v == http.ErrAbortHandler {
				panic(v)
			}
			s.log.Error("handler panic", "method", r.Method, "path", r.URL.Path, "panic", v)
			writeError(w, http.StatusInternalServerError, CodeInternal, "internal error")
		}
	}()
	if strings.HasPrefix(r.URL.Path, "/api/sessions/") || strings.HasPrefix(r.URL.Path, "/sessions/") {
		if err := checkFilesPath(r.URL.Path); err != nil {
			writeError(w, http.StatusBadRequest, CodeInvalidPath, err.Error())
			return
		}
	}
	// The mux answers a known path with another method 405 in plain text;
	// methodAware turns that into the JSON error shape.
	s.mux.ServeHTTP(&methodAware{ResponseWriter: w}, r)
}

// methodAware rewrites the mux's plain-text 405 into the JSON error shape.
type methodAware struct {
	http.ResponseWriter
	rewritten bool
}

func (m *methodAware) WriteHeader(code int) {
	if code == http.StatusMethodNotAllowed && !m.rewritten {
		m.rewritten = true
		m.ResponseWriter.Header().Set("Content-Type", "application/json")
		m.ResponseWriter.WriteHeader(code)
		_ = json.NewEncoder(m.ResponseWriter).Encode(apiError{Error: "method not allowed", Code: CodeMethodNotAllowed})
		return
	}
	m.ResponseWriter.WriteHeader(code)
}

func (m *methodAware) Write(b []byte) (int, error) {
	if m.rewritten {
		return len(b), nil // drop the mux's plain-text body
	}
	return m.ResponseWriter.Write(b)
}

// Unwrap lets http.ResponseController reach Flush and Hijack.
func (m *methodAware) Unwrap() http.ResponseWriter { return m.ResponseWriter }

// Flush and Hijack are implemented directly too, for libraries that
// type-assert instead of using http.ResponseController (Socket.IO).
func (m *methodAware) Flush() { _ = http.NewResponseController(m.ResponseWriter).Flush() }

func (m *methodAware) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	return http.NewResponseController(m.ResponseWriter).Hijack()
}

// Shutdown closes every WebSocket and SSE stream (after the event log has
// been closed, so they end at a clean point).
func (s *Server) Shutdown(ctx context.Context) {
	s.mu.Lock()
	s.closing = true
	conns := make([]*wsConn, 0, len(s.conns))
	for c := range s.conns {
		conns = append(conns, c)
	}
	s.mu.Unlock()
	s.cancel()
	for _, c := range conns {
		c.closeGoingAway()
	}
	if s.sio != nil {
		s.sio.close()
	}
	done := make(chan struct{})
	go func() { s.connWG.Wait(); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
	}
}

func (s *Server) requireAuth(next http.HandlerFunc) http.HandlerFunc {
	if s.cfg.APIKey == "" {
		return next
	}
	want := []byte(s.cfg.APIKey)
	return func(w http.ResponseWriter, r *http.Request) {
		got := ""
		if h := r.Header.Get("Authorization"); strings.HasPrefix(h, "Bearer ") {
			got = strings.TrimPrefix(h, "Bearer ")
		} else if q := r.URL.Query().Get("access_token"); q != "" {
			got = q
		}
		if got == "" || subtle.ConstantTimeCompare([]byte(got), want) != 1 {
			w.Header().Set("WWW-Authenticate", `Bearer realm="agentd"`)
			writeError(w, http.StatusUnauthorized, CodeUnauthorized, "missing or wrong API key (Authorization: Bearer <key>)")
			return
		}
		next(w, r.WithContext(context.WithValue(r.Context(), principalKey{}, "api-key")))
	}
}

func (s *Server) limitBody(next http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if r.ContentLength > s.cfg.MaxBody {
			writeError(w, http.StatusRequestEntityTooLarge, CodeTooLarge, "request body too large")
			return
		}
		r.Body = http.MaxBytesReader(w, r.Body, s.cfg.MaxBody)
		next(w, r)
	}
}

// decode reads a JSON body into v; an empty body is an error unless
// optional.
func decode(r *http.Request, v any, optional bool) error {
	data, err := io.ReadAll(r.Body)
	if err != nil {
		return err
	}
	if len(strings.TrimSpace(string(data))) == 0 {
		if optional {
			return nil
		}
		return badRequest("request body must be a JSON object")
	}
	if err := json.Unmarshal(data, v); err != nil {
		return badRequest("malformed JSON: " + err.Error())
	}
	return nil
}

type badRequestError string

func (e badRequestError) Error() string { return string(e) }
func (e badRequestError) Is(target error) bool {
	return target == session.ErrInvalidRequest
}

func badRequest(msg string) error { return badRequestError(msg) }

func (s *Server) handleHealth(w http.ResponseWriter, r *http.Request) {
	if s.cfg.Health == nil {
		writeJSON(w, http.StatusOK, restapi.Health{Status: "ok", Version: s.cfg.Version})
		return
	}
	h := s.cfg.Health(r.Context())
	status := http.StatusOK
	if h.Status != "ok" {
		status = http.StatusServiceUnavailable
	}
	writeJSON(w, status, h)
}

func (s *Server) handleMetrics() http.HandlerFunc {
	h := promhttp.HandlerFor(s.cfg.Gatherer, promhttp.HandlerOpts{})
	return h.ServeHTTP
}

func (s *Server) handleAuth(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, map[string]bool{"required": s.cfg.APIKey != ""})
}

// shortCtx bounds a handler's work that must not hang forever.
func shortCtx(r *http.Request) (context.Context, context.CancelFunc) {
	return context.WithTimeout(r.Context(), 30*time.Second)
}
