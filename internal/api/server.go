// Package api is agentd's transport layer: REST, SSE, WebSocket, Socket.IO
// and the OpenAPI description. It holds no domain logic: every handler
// decodes a request, calls the session manager or the event log, and maps
// the result (errors via classify, in one place).
package api

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
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

	"github.com/agentd/agentd/agent"
	"github.com/agentd/agentd/internal/auth"
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
	// APIKey, when set, is required on every /api/* route but /api/auth
	// (the WebSocket, the PTY and the OpenAPI document included), on
	// /metrics and on Socket.IO; /health and the UI need none. Ignored
	// when Auth is set (it holds the key then).
	APIKey string
	// Auth authenticates callers and decides what they may do (identity.go);
	// nil: a single-user Service built from APIKey.
	Auth *auth.Service
	// AuthRecheck is how often open connections' credentials are checked
	// again (default 10s; at once after a revocation on this server).
	AuthRecheck time.Duration
	// MaxBody bounds request bodies (default 1 MiB).
	MaxBody int64
	// MaxMessageBody bounds a message's body, with its base64 images and
	// files (default DefaultMaxMessageBody).
	MaxMessageBody int64
	// MaxImageBytes bounds one image of a message, decoded (default
	// DefaultMaxImageBytes).
	MaxImageBytes int64
	// MaxUploadBytes bounds one PUT of a workspace file (default
	// DefaultMaxUploadBytes).
	MaxUploadBytes int64
	// MaxFileBytes bounds what one GET of a workspace file sends: a whole
	// file up to it, ranges totalling up to it (default
	// DefaultMaxFileBytes).
	MaxFileBytes int64
	// WriteTimeout: a streaming client (WebSocket, SSE, Socket.IO) that
	// takes none of what is written to it for this long is a slow
	// consumer and is cut off (default 10s).
	WriteTimeout time.Duration
	// CloseTimeout bounds the best-effort goodbye to a slow consumer (the
	// rest of the frame in flight and a close frame or error event;
	// default 2s).
	CloseTimeout time.Duration
	// AllowedHosts are the host names (or IP addresses) clients may reach
	// the server by, with any port; a request with another Host gets 403
	// HOST_NOT_ALLOWED, which stops DNS rebinding. localhost, 127.0.0.1 and
	// ::1 are always allowed. "*.example.com" allows the subdomains of
	// example.com, "*" any host.
	AllowedHosts []string
	// AllowIPHosts also allows any IP address as Host: for a server bound
	// to a non-loopback address, reached by address (a rebinding page
	// always uses a name).
	AllowIPHosts bool
	// Gatherer serves /metrics (default prometheus.DefaultGatherer).
	Gatherer   prometheus.Gatherer
	Registerer prometheus.Registerer
	// UI serves everything outside /api (the embedded web UI).
	UI     http.Handler
	Logger *slog.Logger
	// Version is reported by /health.
	Version string
	// DataDir is the server's data folder: error answers never show it (a
	// workspace path is told workspace-relative, another as <data-dir>/…).
	DataDir string
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
	hosts  *hostPolicy
	cop    *http.CrossOriginProtection
	hidden []string // the data folder's forms, hidden in error answers

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

	live liveConns // connections to close when their credential goes (revoke.go)
}

// New builds the server.
func New(cfg Config) (*Server, error) {
	if cfg.Sessions == nil || cfg.Log == nil || cfg.Profiles == nil || cfg.Architectures == nil {
		return nil, errors.New("api: Sessions, Log, Profiles and Architectures are required")
	}
	if cfg.MaxBody <= 0 {
		cfg.MaxBody = 1 << 20
	}
	if cfg.MaxMessageBody <= 0 {
		cfg.MaxMessageBody = DefaultMaxMessageBody
	}
	if cfg.MaxImageBytes <= 0 {
		cfg.MaxImageBytes = DefaultMaxImageBytes
	}
	if cfg.MaxUploadBytes <= 0 {
		cfg.MaxUploadBytes = DefaultMaxUploadBytes
	}
	if cfg.MaxFileBytes <= 0 {
		cfg.MaxFileBytes = DefaultMaxFileBytes
	}
	if cfg.WriteTimeout <= 0 {
		cfg.WriteTimeout = defaultWriteTimeout
	}
	if cfg.CloseTimeout <= 0 {
		cfg.CloseTimeout = defaultCloseTimeout
	}
	if cfg.Gatherer == nil {
		cfg.Gatherer = prometheus.DefaultGatherer
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	hosts, err := newHostPolicy(cfg.AllowedHosts, cfg.AllowIPHosts)
	if err != nil {
		return nil, fmt.Errorf("api: %w", err)
	}
	if cfg.Auth == nil {
		a, err := auth.New(auth.Config{BootstrapKey: cfg.APIKey, Logger: cfg.Logger})
		if err != nil {
			return nil, err
		}
		cfg.Auth = a
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
		closeCtx: ctx, cancel: cancel, hosts: hosts, cop: http.NewCrossOriginProtection(), hidden: hiddenRoots(cfg.DataDir),
		wsGauge: prometheus.NewGauge(prometheus.GaugeOpts{Name: "agentd_websocket_connections", Help: "Open WebSocket connections (/api/ws)."}),
	}
	if cfg.Registerer != nil {
		cfg.Registerer.MustRegister(s.wsGauge)
	}
	s.routes = append(s.table(), s.identityRoutes()...)
	for _, rt := range s.routes {
		h := rt.handler
		if unsafeMethod(rt.method) && !rt.rawBody {
			h = s.requireJSON(h)
		}
		if rt.auth {
			h = s.requireAuth(s.authorize(rt, h))
		}
		if rt.body {
			h = s.limitBody(h, s.bodyLimit(rt.bodyLimit))
		}
		s.mux.HandleFunc(rt.method+" "+rt.pattern, h)
	}
	sio, err := newSocketIO(s)
	if err != nil {
		return nil, err
	}
	s.sio = sio
	s.live.init(s)
	// Socket.IO checks the key itself (auth.token, query or header).
	s.mux.HandleFunc("/socket.io/", func(w http.ResponseWriter, r *http.Request) {
		if checkOrigin(w, r) {
			sio.ServeHTTP(w, r)
		}
	})
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
	if !s.hosts.allows(r.Host) {
		writeError(w, http.StatusForbidden, CodeHostNotAllowed, "host "+strconvQuote(r.Host)+" is not allowed: reach the server by localhost or a name given with --allowed-hosts")
		return
	}
	if unsafeMethod(r.Method) {
		if err := s.cop.Check(r); err != nil {
			writeError(w, http.StatusForbidden, CodeCrossOrigin, "cross-origin request refused")
			return
		}
	}
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

// Which body limit a route has (route.bodyLimit).
const (
	defaultBody = iota
	msgBody
	uploadBody
)

func (s *Server) bodyLimit(which int) int64 {
	switch which {
	case msgBody:
		return s.cfg.MaxMessageBody
	case uploadBody:
		return s.cfg.MaxUploadBytes
	}
	return s.cfg.MaxBody
}

func (s *Server) limitBody(next http.HandlerFunc, limit int64) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if r.ContentLength > limit {
			writeError(w, http.StatusRequestEntityTooLarge, CodeTooLarge, "request body too large")
			return
		}
		r.Body = http.MaxBytesReader(w, r.Body, limit)
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

// shortCtx bounds a handler's work that must not hang forever.
func shortCtx(r *http.Request) (context.Context, context.CancelFunc) {
	return context.WithTimeout(r.Context(), 30*time.Second)
}
