package wiring

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/agentd/agentd/agent"
	"github.com/agentd/agentd/conversation"
	"github.com/agentd/agentd/internal/api"
	"github.com/agentd/agentd/internal/audit"
	"github.com/agentd/agentd/internal/auth"
	"github.com/agentd/agentd/internal/bus"
	"github.com/agentd/agentd/internal/datadir"
	"github.com/agentd/agentd/internal/eventlog"
	"github.com/agentd/agentd/internal/modelproxy"
	"github.com/agentd/agentd/internal/sandbox/kubernetes"
	"github.com/agentd/agentd/internal/sandbox/local"
	"github.com/agentd/agentd/internal/session"
	"github.com/agentd/agentd/profile"
	"github.com/agentd/agentd/sandbox"
	"github.com/agentd/agentd/store"
	"github.com/agentd/agentd/store/postgres"
	"github.com/agentd/agentd/store/s3blobs"
	"github.com/agentd/agentd/store/sqlite"
	"github.com/agentd/agentd/web"
)

// Config is a server's configuration as the root package's New resolved
// it from agentd.Config, which documents each field: defaults applied,
// DataDir absolute and locked, and the public option types turned into the
// internal packages' (OIDC, Limits, ModelPrices, Kubernetes).
type Config struct {
	Addr          string
	DataDir       string
	WorkspacesDir string
	Store         store.Store
	StoreURL      string
	// ArtifactsURL keeps artifact content in an S3-compatible object store
	// (s3://BUCKET/PREFIX?endpoint=…, store/s3blobs) instead of the
	// store's database; "" keeps it in the store. Only for a store opened
	// by URL (Store nil).
	ArtifactsURL string
	ProfilesDir  string
	Profiles     []profile.Profile

	Sandbox          string
	Sandboxes        map[string]sandbox.Provider
	Architectures    []agent.Architecture
	RunAsUser        string
	RunAsUserPool    []string
	SandboxLimits    sandbox.Limits
	SandboxLimitMode string
	DockerImage      string
	DockerUser       string
	DockerExecutor   string
	WarmPool         int
	// Kubernetes holds the kubernetes sandbox's options from
	// agentd.KubernetesConfig; the wiring adds the node, limits, ignore
	// list, warm pool, model proxy, niceness, audit and logger.
	Kubernetes      kubernetes.Options
	SandboxReadOnly []string
	SandboxUID      uint32
	AgentNice       int

	APIKey        string
	RequireAuth   bool
	OIDC          *auth.OIDCConfig
	DefaultTenant string
	ServerKey     []byte
	Limits        auth.Limits
	ModelPrices   auth.Prices
	AuthRecheck   time.Duration
	AllowedHosts  []string

	IdleTimeout       time.Duration
	PermissionTimeout time.Duration
	MaxBody           int64
	Env               map[string]string
	// OutputLimit: session.Config.OutputLimit (0: its default; negative:
	// no limit).
	OutputLimit int

	DisableModelProxy  bool
	ModelProxyAddr     string
	SessionTokenBudget int64

	WatchIgnore []string
	DisableUI   bool
	Registerer  *prometheus.Registry
	Logger      *slog.Logger

	NATSURL          string
	NATSPrefix       string
	NATSEventNotices bool
	NodeID           string
	LeaseTTL         time.Duration

	ArtifactQuota store.ArtifactQuota
	// The API's content limits (api.Config's; 0: its defaults).
	MaxUploadBytes, MaxImageBytes, MaxMessageBody int64

	// Version is the server's version, reported by /health and the API.
	Version string
}

// Server is the assembled server: store, event log, sessions, sandboxes,
// identity, model proxy and API. The root package's Server serves it.
type Server struct {
	cfg      Config
	log      *slog.Logger
	store    store.Store
	ownStore bool
	blobs    *s3blobs.Blobs // nil: artifact content in the store's database
	events   *eventlog.Log
	sessions *session.Manager
	bus      *bus.Bus // nil: not in a fleet
	node     string
	audit    *audit.Recorder
	auth     *auth.Service
	proxy    *modelproxy.Proxy // nil when off
	api      *api.Server

	sandbox   sandbox.Provider            // where sessions run
	sandboxes map[string]sandbox.Provider // every backend this server has, by name

	manager atomic.Pointer[session.Manager] // sessions, for hooks that may run before New returns
}

// New opens the store, loads profiles and sessions (settling the ones that
// were active when the previous server stopped) and builds the API. On an
// error, and on a panic, it closes again what it started.
func New(ctx context.Context, cfg Config) (*Server, error) {
	log := cfg.Logger
	dataDir := cfg.DataDir
	s := &Server{cfg: cfg, log: log, store: cfg.Store}
	// Everything started below is closed again, newest first, unless New
	// returns a server: on an error and on a panic (a metric registered
	// twice) alike.
	var undo []func()
	succeeded := false
	defer func() {
		if succeeded {
			return
		}
		for i := len(undo) - 1; i >= 0; i-- {
			undo[i]()
		}
	}()
	if cfg.ArtifactsURL != "" {
		if s.store != nil {
			return nil, errors.New("artifacts URL: only for a store opened by URL (give your store the object store itself: sqlite.WithArtifactBlobs, postgres.WithArtifactBlobs)")
		}
		b, err := s3blobs.Open(ctx, cfg.ArtifactsURL)
		if err != nil {
			return nil, err
		}
		s.blobs = b
		undo = append(undo, b.Close)
		log.Info("artifact content kept in an object store", "artifacts", b.String())
	}
	if s.store == nil {
		url := cfg.StoreURL
		if url == "" {
			url = "sqlite://" + filepath.Join(dataDir, "agentd.db")
		}
		var blobs store.ArtifactBlobs
		if s.blobs != nil {
			blobs = s.blobs
		}
		st, err := openStore(ctx, url, blobs, log)
		if err != nil {
			return nil, err
		}
		s.store, s.ownStore = st, true
		undo = append(undo, func() { _ = st.Close() })
	}
	undo = append(undo, func() { _ = s.closeIdentity(context.Background()) })
	if err := s.startIdentity(ctx); err != nil {
		return nil, err
	}
	undo = append(undo, func() { _ = s.closeModelProxy(context.Background()) })
	if err := s.startModelProxy(dataDir); err != nil {
		return nil, err
	}

	// Profiles: folder files (reported and skipped when malformed), then
	// those given in code.
	var folder []profile.Profile
	if cfg.ProfilesDir != "" {
		ps, errs := profile.LoadDir(cfg.ProfilesDir)
		for _, e := range errs {
			log.Error("skipping agent profile", "err", e)
		}
		folder = ps
		log.Info("agent profiles loaded", "dir", cfg.ProfilesDir, "count", len(ps), "skipped", len(errs))
	}
	for _, p := range cfg.Profiles {
		if err := p.Validate(); err != nil {
			return nil, fmt.Errorf("profile %q: %w", p.ID, err)
		}
		folder = append(folder, p)
	}
	profiles := session.NewProfiles(s.store, folder)

	providers := map[string]sandbox.Provider{
		"local": local.New(local.Options{Nice: cfg.AgentNice, Logger: log}),
	}
	for name, p := range cfg.Sandboxes {
		providers[name] = p
	}
	provider, ok := providers[cfg.Sandbox]
	if !ok {
		p, err := s.builtinSandbox(cfg.Sandbox, dataDir)
		if err != nil {
			return nil, err
		}
		provider = p
		providers[cfg.Sandbox] = p
	}
	// Other users get no way into the data folder: the workspaces hold
	// whatever the agents made (set-uid programs included). Sandboxes that
	// run as other users and open their workspace by its path may pass
	// through (docs/security.md).
	shared := false
	if r, ok := provider.(workspaceUsers); ok {
		shared = r.OtherUsersReachWorkspaces()
	}
	if err := datadir.Secure(dataDir, shared); err != nil {
		return nil, fmt.Errorf("%s sandbox: %w", cfg.Sandbox, err)
	}
	if cfg.WorkspacesDir != "" {
		var err error
		if cfg.WorkspacesDir, err = filepath.Abs(cfg.WorkspacesDir); err != nil {
			return nil, fmt.Errorf("workspaces dir: %w", err)
		}
		if err := datadir.SecureWorkspaces(cfg.WorkspacesDir, shared); err != nil {
			return nil, err
		}
	}
	s.sandbox, s.sandboxes = provider, providers
	undo = append(undo, func() { _ = s.closeSandbox(context.Background()) })

	// Agent configuration written into workspaces lives under .agentd/; it
	// is not the user's work, so it is not watched.
	cfg.WatchIgnore = append(append([]string(nil), cfg.WatchIgnore...), ".agentd")
	archs, err := Registry(cfg.Architectures, cfg.OutputLimit >= 0)
	if err != nil {
		return nil, err
	}

	holder := cfg.NodeID
	if holder == "" {
		if holder, err = nodeID(dataDir); err != nil {
			return nil, err
		}
	}
	s.node = holder
	logOpts := eventlog.Options{Registerer: cfg.Registerer, Logger: log}
	var cluster session.Cluster
	if cfg.NATSURL != "" {
		b, err := bus.Open(ctx, bus.Options{URL: cfg.NATSURL, Prefix: cfg.NATSPrefix, Name: holder, Registerer: cfg.Registerer, Logger: log})
		if err != nil {
			return nil, err
		}
		s.bus = b
		undo = append(undo, b.Close)
		logOpts.Peers, logOpts.PeerNotices = b, cfg.NATSEventNotices
		cluster = busCluster{b}
	}
	s.events = eventlog.New(s.store, logOpts)
	undo = append(undo, func() { _ = s.events.Close() })
	s.sessions, err = session.New(session.Config{
		Store: s.store, Log: s.events, Sandbox: provider, Files: s.filesView(provider, providers["local"]),
		Architectures: archs, Profiles: profiles, DataDir: dataDir,
		IdleTimeout: cfg.IdleTimeout, PermissionTimeout: cfg.PermissionTimeout,
		Env: cfg.Env, WatchIgnore: cfg.WatchIgnore, PersistFilesMax: 1 << 20,
		Logger: log, Metrics: newSessionMetrics(cfg.Registerer), Holder: holder,
		Credentials: s.credentials(),
		// Agents are probed on this server's PATH, where the host
		// sandboxes find them; a container's image, or a sandbox of the
		// embedding program, may hold others.
		RefuseMissingAgents: cfg.Sandboxes[cfg.Sandbox] == nil && hostSandbox(cfg.Sandbox),
		LeaseTTL:            cfg.LeaseTTL, WorkspacesDir: cfg.WorkspacesDir,
		Cluster: cluster, Registerer: cfg.Registerer, OutputLimit: cfg.OutputLimit,
		Artifacts: artifactStore(s.store, cfg.ArtifactQuota, cfg.Registerer, log),
	})
	if err != nil {
		return nil, err
	}
	s.manager.Store(s.sessions)
	undo = append(undo, func() {
		// As at shutdown: turns end with a reason; environments that
		// outlive the server are left to the next start.
		cctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := s.sessions.Close(cctx); err != nil {
			log.Error("close sessions after a failed start", "err", err)
		}
	})
	if err := s.sessions.Start(ctx); err != nil {
		return nil, err
	}
	if err := s.collectSandbox(ctx); err != nil {
		return nil, err
	}
	if err := s.collectWorkspaces(ctx); err != nil {
		return nil, err
	}
	var ui http.Handler
	if !cfg.DisableUI {
		ui = web.Handler()
	}
	s.api, err = newAPI(api.Config{
		Sessions: s.sessions, Log: s.events, Profiles: profiles, Architectures: archs,
		APIKey: cfg.APIKey, Auth: s.auth, AuthRecheck: cfg.AuthRecheck, MaxBody: cfg.MaxBody, Gatherer: cfg.Registerer, Registerer: cfg.Registerer,
		AllowedHosts: cfg.AllowedHosts, AllowIPHosts: !LoopbackAddr(cfg.Addr),
		UI: ui, Logger: log, Version: cfg.Version, DataDir: dataDir,
		Audit: auditReader(s.store), ModelUsage: s.modelUsage(), Sandboxes: sandboxLister{s},
		MaxUploadBytes: cfg.MaxUploadBytes, MaxImageBytes: cfg.MaxImageBytes, MaxMessageBody: cfg.MaxMessageBody,
		Health: s.health,
	})
	if err != nil {
		return nil, err
	}
	succeeded = true
	return s, nil
}

// newAPI builds the API server (a test makes it fail).
var newAPI = api.New

// Handler returns the HTTP handler (API, WebSocket, SSE, Socket.IO, UI).
func (s *Server) Handler() http.Handler { return s.api }

// Node returns the name this server holds session leases under.
func (s *Server) Node() string { return s.node }

// InFleet reports whether the server is one of a fleet (NATS).
func (s *Server) InFleet() bool { return s.bus != nil }

// Close shuts the server down: sessions (turns end with a reason, or are
// left running for a sandbox that outlives the server), then the event log
// (in-flight appends finish), then every stream, then the store. It is
// called once.
func (s *Server) Close(ctx context.Context) error {
	var errs []error
	if err := s.sessions.Close(ctx); err != nil {
		errs = append(errs, fmt.Errorf("close sessions: %w", err))
	}
	if err := s.closeSandbox(ctx); err != nil {
		errs = append(errs, fmt.Errorf("close sandbox: %w", err))
	}
	if err := s.events.Close(); err != nil {
		errs = append(errs, err)
	}
	s.api.Shutdown(ctx)
	// Last before the store: agents in environments that outlive the
	// server (executor) keep reaching the model while the rest shuts down.
	if err := s.closeModelProxy(ctx); err != nil {
		errs = append(errs, err)
	}
	if err := s.closeIdentity(ctx); err != nil {
		errs = append(errs, err)
	}
	if s.bus != nil {
		s.bus.Close()
	}
	if s.ownStore {
		if err := s.store.Close(); err != nil {
			errs = append(errs, fmt.Errorf("close store: %w", err))
		}
	}
	if s.blobs != nil {
		s.blobs.Close()
	}
	return errors.Join(errs...)
}

// workspaceUsers is implemented by sandbox providers whose environments
// may open their workspace by its host path as another user (the executor
// started as a session's user, bubblewrap started as the sandbox's uid):
// the data folder must then let other users pass (datadir.Secure).
type workspaceUsers interface {
	OtherUsersReachWorkspaces() bool
}

// nodeID returns this server's stable identity (kept in the data folder),
// the holder name of its session leases: a server restarted on the same data
// takes its sessions back at once instead of waiting for its own old leases
// to expire.
func nodeID(dataDir string) (string, error) {
	p := filepath.Join(dataDir, "node-id")
	if b, err := os.ReadFile(p); err == nil && len(strings.TrimSpace(string(b))) > 0 {
		return strings.TrimSpace(string(b)), nil
	}
	id := "agentd-" + uuid.NewString()
	if err := os.WriteFile(p, []byte(id+"\n"), 0o644); err != nil {
		return "", fmt.Errorf("write node id: %w", err)
	}
	return id, nil
}

// OpenStore opens a store by URL scheme: sqlite://path (or a plain path)
// for the embedded SQLite store, postgres://… or postgresql://… for the
// PostgreSQL store that several servers can share.
func OpenStore(ctx context.Context, url string, log *slog.Logger) (store.Store, error) {
	return openStore(ctx, url, nil, log)
}

// openStore is OpenStore keeping artifact content in blobs (nil: in the
// store's database).
func openStore(ctx context.Context, url string, blobs store.ArtifactBlobs, log *slog.Logger) (store.Store, error) {
	switch {
	case strings.HasPrefix(url, "sqlite:") || !strings.Contains(url, "://"):
		opts := []sqlite.Option{sqlite.WithLogger(log)}
		if blobs != nil {
			opts = append(opts, sqlite.WithArtifactBlobs(blobs))
		}
		st, err := sqlite.Open(ctx, url, opts...)
		if err != nil {
			return nil, fmt.Errorf("open store: %w", err)
		}
		return st, nil
	case strings.HasPrefix(url, "postgres://"), strings.HasPrefix(url, "postgresql://"):
		opts := []postgres.Option{postgres.WithLogger(log)}
		if blobs != nil {
			opts = append(opts, postgres.WithArtifactBlobs(blobs))
		}
		st, err := postgres.Open(ctx, url, opts...)
		if err != nil {
			return nil, fmt.Errorf("open store: %w", err)
		}
		return st, nil
	}
	scheme, _, _ := strings.Cut(url, "://")
	return nil, fmt.Errorf("open store: unknown store URL scheme %q (use sqlite://PATH or postgres://…)", scheme)
}

// LoopbackAddr reports whether a listen address binds loopback only; a
// wildcard ("", 0.0.0.0, ::) or any other address is reachable from the
// network.
func LoopbackAddr(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		host = addr
	}
	if strings.EqualFold(strings.TrimSuffix(host, "."), "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// sessionMetrics counts sessions by state.
type sessionMetrics struct{ g *prometheus.GaugeVec }

func newSessionMetrics(reg prometheus.Registerer) *sessionMetrics {
	g := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "agentd_sessions", Help: "Sessions by state."}, []string{"state"})
	for _, st := range conversation.SessionStatuses {
		g.WithLabelValues(string(st)).Set(0)
	}
	reg.MustRegister(g)
	return &sessionMetrics{g: g}
}

func (m *sessionMetrics) StatusChanged(from, to conversation.SessionStatus) {
	if from != "" {
		m.g.WithLabelValues(string(from)).Dec()
	}
	if to != "" {
		m.g.WithLabelValues(string(to)).Inc()
	}
}
