// Package agentd is the API for running agentd inside a Go program: build a
// Config (with any store.Store that passes store/storetest), call New, then
// Serve. cmd/agentd is a thin wrapper around it. A program adds sandbox
// backends (Config.Sandboxes, package sandbox, checked by
// sandbox/sandboxtest) and agent architectures (Config.Architectures,
// package agent, checked by agent/agenttest) of its own; docs/embedding.md
// and examples/custom-backend show how.
//
//	srv, err := agentd.New(ctx, agentd.Config{DataDir: "/var/lib/agentd", Store: myStore})
//	...
//	err = srv.ListenAndServe(ctx) // returns after a graceful shutdown when ctx ends
package agentd

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/agentd/agentd/agent"
	"github.com/agentd/agentd/internal/auth"
	"github.com/agentd/agentd/internal/sandbox/kubernetes"
	"github.com/agentd/agentd/internal/sandbox/local"
	"github.com/agentd/agentd/internal/wiring"
	"github.com/agentd/agentd/profile"
	"github.com/agentd/agentd/sandbox"
	"github.com/agentd/agentd/store"
)

// Version is the agentd version, set at build time with
// -ldflags "-X github.com/agentd/agentd.Version=…".
var Version = "dev"

// Commit is the source commit, set at build time.
var Commit = ""

// Config configures a Server. Zero values take the documented defaults.
type Config struct {
	// Addr is the listen address (default 127.0.0.1:8080).
	Addr string
	// DataDir holds the SQLite database, workspaces and run files
	// (default DefaultDataDir(): $XDG_DATA_HOME/agentd). One server at a
	// time may use it: New fails with ErrDataDirInUse otherwise.
	DataDir string
	// Store is the persistence; when nil, StoreURL is opened.
	Store store.Store
	// StoreURL selects the store when Store is nil (default
	// sqlite://<DataDir>/agentd.db).
	StoreURL string
	// ArtifactsURL keeps artifact content (large outputs, images, files)
	// in an S3-compatible object store instead of the store's database:
	// s3://BUCKET/PREFIX?endpoint=http(s)://HOST:PORT&region=R&path-style=true,
	// credentials from AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY. The
	// database keeps which session references what. Only with StoreURL
	// (Store nil); "" keeps content in the database.
	ArtifactsURL string
	// ProfilesDir is a folder of agent profiles (YAML or JSON, one a file).
	ProfilesDir string
	// Profiles are added to those of ProfilesDir (they win on id clashes).
	Profiles []profile.Profile
	// Sandbox is the sandbox backend: "local" (default), "executor" (a
	// detached executor per session), "bwrap" (the executor inside
	// bubblewrap), "docker" (the executor in a container per session,
	// docs/sandboxes.md). Other backends register through Sandboxes. What
	// each protects against: docs/security.md.
	Sandbox string
	// Sandboxes adds sandbox backends by name, for embedding programs
	// (docs/embedding.md); sandbox/sandboxtest is their conformance suite.
	// A name of a built-in backend replaces it.
	Sandboxes map[string]sandbox.Provider
	// Architectures adds agent architectures, for embedding programs
	// (docs/embedding.md); agent/agenttest is their conformance suite.
	// Their names must differ from the built-ins' (shell, claude-code,
	// codex, gemini-cli, opencode and their aliases).
	Architectures []agent.Architecture
	// RunAsUser runs the executor and bwrap sandboxes' processes as this
	// Unix user (needs root). All sessions share it.
	RunAsUser string
	// RunAsUserPool gives each session of the executor and bwrap
	// sandboxes a Unix user of its own, from these user names, uids and
	// uid ranges ("200000-200099"); it replaces RunAsUser. Needs root.
	RunAsUserPool []string
	// SandboxLimits bound each environment of the executor and bwrap
	// sandboxes (zero fields: unlimited).
	SandboxLimits sandbox.Limits
	// SandboxLimitMode says how: "auto" (default: cgroups where possible,
	// else rlimits), "cgroup", "rlimit", "off".
	SandboxLimitMode string
	// DockerImage is the docker sandbox's image (default
	// agentd-sandbox:latest, built by scripts/sandbox-image.sh); a
	// profile's sandbox.image overrides it.
	DockerImage string
	// DockerUser is "uid:gid" the docker sandbox's processes run as
	// (default 10001:10001).
	DockerUser string
	// DockerExecutor, when set, is an agentd binary (this host's path)
	// mounted into every container and run as its executor, instead of
	// the image's own.
	DockerExecutor string
	// WarmPool is how many environments of each kind (image and limits)
	// the docker and kubernetes sandboxes keep started ahead for new
	// sessions (0: none).
	WarmPool int
	// Kubernetes configures the kubernetes sandbox (the executor in a pod
	// per session, docs/kubernetes.md).
	Kubernetes KubernetesConfig
	// SandboxReadOnly are more host paths the bwrap sandbox shows,
	// read-only (the system, the agents' PATH and the workspace are
	// always there).
	SandboxReadOnly []string
	// SandboxUID is the host uid a root server's bwrap sandboxes run as
	// (root inside, mapped to it) when neither RunAsUser nor RunAsUserPool
	// is set; 0 means bwrap.DefaultSandboxUID.
	SandboxUID uint32
	// AgentNice is added to the niceness of every agent process (up to
	// 19), so that agents' builds and tests yield the CPU to the server
	// streaming their output (docs/benchmarks.md measures what it does
	// while 50 sessions start their commands on two cores). 0 means
	// DefaultAgentNice; a negative value runs agents at the server's own
	// priority.
	AgentNice int
	// APIKey, when set, is required on every /api/* route but /api/auth
	// (the WebSocket, the PTY and /api/openapi.json included), on /metrics
	// and on Socket.IO. /health and the web UI's files need none. It is
	// the bootstrap admin's credential (user id "admin").
	APIKey string
	// RequireAuth makes every request authenticate even without APIKey or
	// OIDC: API tokens only (made with agentd token create on the store).
	// Implied by APIKey and OIDC. Needs a store.IdentityStore.
	RequireAuth bool
	// OIDC lets users sign in with an OpenID Connect provider.
	OIDC *OIDCConfig
	// DefaultTenant is the tenant of users made without one (default
	// "default").
	DefaultTenant string
	// ServerKey (32 bytes) seals the provider keys users and tenants store
	// (LoadServerKey); without it they cannot store any.
	ServerKey []byte
	// Limits are per-token rate limits, session quotas and default budgets.
	Limits Limits
	// ModelPrices turn model token counts into costs for cost budgets
	// (LoadModelPrices); models without a price cost nothing.
	ModelPrices map[string]ModelPrice
	// AuthRecheck is how often open connections' credentials are checked
	// again (default 10s; at once after a revocation on this server).
	AuthRecheck time.Duration
	// AllowedHosts are more host names (or IP addresses) clients may reach
	// the server by, with any port, e.g. the name of a reverse proxy in
	// front of it. A request with another Host header gets 403
	// HOST_NOT_ALLOWED: a page that rebinds its own name to the server's
	// address (DNS rebinding) cannot reach the API. localhost, 127.0.0.1
	// and ::1 are always allowed; when Addr is not a loopback address
	// (0.0.0.0, a LAN address) any IP address is too, and names must be
	// listed here. "*.example.com" allows the subdomains of example.com,
	// "*" any host.
	AllowedHosts []string
	// IdleTimeout terminates an idle environment (default 15m).
	IdleTimeout time.Duration
	// PermissionTimeout denies unanswered permission requests (default 5m).
	PermissionTimeout time.Duration
	// MaxBody bounds request bodies (default 1 MiB).
	MaxBody int64
	// OutputLimit is the most bytes of one block's text (a command's or
	// tool's output, a file's content) a session's log and state keep
	// (default 64 KiB; negative: no limit). A longer text keeps its first
	// and last OutputLimit/2 bytes in the conversation, with its length,
	// and the whole text is stored once as an artifact (GET
	// /api/sessions/{id}/artifacts/{sha256}); see docs/api.md, *Long
	// texts*. The server's memory per session is then bounded by it, not
	// by the outputs.
	OutputLimit int
	// Env is passed to every sandbox. When nil, the provider settings named
	// in ProviderEnv are taken from the server's environment; nothing else of
	// it reaches a sandbox.
	Env map[string]string
	// DisableModelProxy passes the provider keys of Env into sandboxes as
	// they are. By default, whenever Env has a provider key, sandboxes get
	// a per-session token and the model proxy's address instead, and the
	// keys stay in the server (package modelproxy).
	DisableModelProxy bool
	// ModelProxyAddr is the proxy's loopback listen address (default: a
	// port kept in DataDir/model-proxy.port, the same across restarts, so
	// environments that outlive the server keep reaching it).
	ModelProxyAddr string
	// SessionTokenBudget bounds the model tokens (input, output and cache)
	// of each session; 0 means none. A profile may set a lower one with
	// the variable AGENTD_SESSION_TOKEN_BUDGET. Needs the model proxy.
	SessionTokenBudget int64
	// ArtifactQuotaSession bounds the bytes of artifacts (large outputs
	// kept whole, images and files; GET /api/sessions/{id}/artifacts/…)
	// one session may hold; 0 means no limit (the agentd command's default
	// is 1 GiB). A put over it is refused (ARTIFACT_QUOTA_EXCEEDED), never
	// silently dropped.
	ArtifactQuotaSession int64
	// ArtifactQuotaTotal bounds the bytes of distinct artifact content in
	// the store (shared by a fleet: give every server the same); 0 means no
	// limit.
	ArtifactQuotaTotal int64
	// MaxUploadBytes bounds one PUT /api/sessions/{id}/files/{path} (default
	// 32 MiB); MaxImageBytes one image of a message, decoded (default 5
	// MiB); MaxMessageBody a message's body with its base64 images and
	// files (default 24 MiB). Larger ones are refused with 413.
	MaxUploadBytes, MaxImageBytes, MaxMessageBody int64
	// WatchIgnore adds workspace paths the file watcher ignores.
	WatchIgnore []string
	// DisableUI serves no web UI at /.
	DisableUI bool
	// Registerer receives the server's metrics and is what /metrics
	// serves, hence a *prometheus.Registry (a Registerer and a Gatherer)
	// rather than a prometheus.Registerer: an embedding program's own
	// metrics registered there are served too. Default: a new registry
	// with the Go and process collectors.
	Registerer *prometheus.Registry
	Logger     *slog.Logger

	// NATSURL, when set, makes this server one of a fleet: servers that
	// share one store (a PostgreSQL StoreURL) and this NATS server, any of
	// which serves any session (docs/fleet.md).
	NATSURL string
	// NATSPrefix starts the fleet's NATS subjects (default "agentd"); each
	// fleet sharing a NATS server needs its own.
	NATSPrefix string
	// NATSEventNotices announces each commit on NATS as its seq range
	// only, which other servers then read from the store, instead of the
	// events themselves (slower; kept for comparison, docs/benchmarks.md).
	NATSEventNotices bool
	// NodeID names this server in session leases (default: an id kept in
	// DataDir/node-id). Every server of a fleet needs its own.
	NodeID string
	// LeaseTTL is how long a session's lease lasts unless renewed (every
	// third of it): the longest a session whose server died waits for
	// another to take it over (default 15s).
	LeaseTTL time.Duration
	// WorkspacesDir holds the sessions' workspaces (default
	// DataDir/workspaces). Servers of a fleet on one machine (or sharing a
	// network file system) may share one, so that a server taking a
	// session over finds its workspace, and an executor it re-attaches to
	// works in the same folder; otherwise the workspace is restored from
	// the store's copies.
	WorkspacesDir string
}

// DefaultLeaseTTL is Config.LeaseTTL's default.
const DefaultLeaseTTL = 15 * time.Second

// DefaultAgentNice is Config.AgentNice's default: the niceness nice(1)
// gives by default, a background job's.
const DefaultAgentNice = 10

// ProviderEnv are the variables passed from the server's environment to
// agents: provider settings only (README.md).
var ProviderEnv = []string{
	"ANTHROPIC_API_KEY", "ANTHROPIC_BASE_URL", "OPENAI_API_KEY", "OPENAI_BASE_URL",
	"GEMINI_API_KEY", "GOOGLE_GEMINI_BASE_URL",
}

// Server is a running agentd. Its methods are safe for concurrent use.
type Server struct {
	cfg      Config
	log      *slog.Logger
	w        *wiring.Server
	dataLock *os.File // agentd.lock in the data folder, held while serving

	mu       sync.Mutex
	listener net.Listener
	closed   bool
}

// New opens the store, loads profiles and sessions (settling the ones that
// were active when the previous server stopped) and builds the handler.
func New(ctx context.Context, cfg Config) (*Server, error) {
	if cfg.Addr == "" {
		cfg.Addr = "127.0.0.1:8080"
	}
	if cfg.DataDir == "" {
		cfg.DataDir = DefaultDataDir()
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Sandbox == "" {
		cfg.Sandbox = "local"
	}
	if cfg.LeaseTTL == 0 {
		cfg.LeaseTTL = DefaultLeaseTTL
	}
	if cfg.LeaseTTL < 300*time.Millisecond {
		return nil, fmt.Errorf("lease ttl %v: want at least 300ms", cfg.LeaseTTL)
	}
	switch {
	case cfg.AgentNice == 0:
		cfg.AgentNice = DefaultAgentNice
	case cfg.AgentNice < 0:
		cfg.AgentNice = 0
	case cfg.AgentNice > local.MaxNice:
		return nil, fmt.Errorf("agent niceness %d: want at most %d", cfg.AgentNice, local.MaxNice)
	}
	var kube kubernetes.Options
	if cfg.Sandbox == "kubernetes" && cfg.Sandboxes[cfg.Sandbox] == nil {
		var err error
		if kube, err = cfg.Kubernetes.options(); err != nil {
			return nil, err
		}
	}
	if cfg.Registerer == nil {
		cfg.Registerer = prometheus.NewRegistry()
		cfg.Registerer.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	}
	if cfg.Env == nil {
		cfg.Env = map[string]string{}
		for _, k := range ProviderEnv {
			if v, ok := os.LookupEnv(k); ok {
				cfg.Env[k] = v
			}
		}
	}
	dataDir, err := filepath.Abs(cfg.DataDir)
	if err != nil {
		return nil, fmt.Errorf("data dir: %w", err)
	}
	cfg.DataDir = dataDir
	if err := os.MkdirAll(dataDir, 0o700); err != nil {
		return nil, fmt.Errorf("create data dir: %w", err)
	}
	lock, err := lockDataDir(dataDir)
	if err != nil {
		return nil, err
	}
	// The lock is released unless New returns a server: on an error and on
	// a panic (a metric registered twice) alike; wiring.New closes what it
	// started itself.
	succeeded := false
	defer func() {
		if !succeeded {
			lock.Close()
		}
	}()
	w, err := wiring.New(ctx, wiring.Config{
		Addr: cfg.Addr, DataDir: cfg.DataDir, WorkspacesDir: cfg.WorkspacesDir,
		Store: cfg.Store, StoreURL: cfg.StoreURL, ArtifactsURL: cfg.ArtifactsURL, ProfilesDir: cfg.ProfilesDir, Profiles: cfg.Profiles,
		Sandbox: cfg.Sandbox, Sandboxes: cfg.Sandboxes, Architectures: cfg.Architectures,
		RunAsUser: cfg.RunAsUser, RunAsUserPool: cfg.RunAsUserPool,
		SandboxLimits: cfg.SandboxLimits, SandboxLimitMode: cfg.SandboxLimitMode,
		DockerImage: cfg.DockerImage, DockerUser: cfg.DockerUser, DockerExecutor: cfg.DockerExecutor,
		WarmPool: cfg.WarmPool, Kubernetes: kube, SandboxReadOnly: cfg.SandboxReadOnly, SandboxUID: cfg.SandboxUID,
		AgentNice: cfg.AgentNice,
		APIKey:    cfg.APIKey, RequireAuth: cfg.RequireAuth, OIDC: cfg.OIDC.oidc(), DefaultTenant: cfg.DefaultTenant,
		ServerKey: cfg.ServerKey, Limits: cfg.Limits.limits(), ModelPrices: auth.Prices(cfg.ModelPrices),
		AuthRecheck: cfg.AuthRecheck, AllowedHosts: cfg.AllowedHosts,
		IdleTimeout: cfg.IdleTimeout, PermissionTimeout: cfg.PermissionTimeout, MaxBody: cfg.MaxBody, Env: cfg.Env,
		OutputLimit:       cfg.OutputLimit,
		DisableModelProxy: cfg.DisableModelProxy, ModelProxyAddr: cfg.ModelProxyAddr, SessionTokenBudget: cfg.SessionTokenBudget,
		WatchIgnore: cfg.WatchIgnore, DisableUI: cfg.DisableUI, Registerer: cfg.Registerer, Logger: cfg.Logger,
		NATSURL: cfg.NATSURL, NATSPrefix: cfg.NATSPrefix, NATSEventNotices: cfg.NATSEventNotices,
		NodeID: cfg.NodeID, LeaseTTL: cfg.LeaseTTL, Version: Version,
		ArtifactQuota:  store.ArtifactQuota{Session: cfg.ArtifactQuotaSession, Total: cfg.ArtifactQuotaTotal},
		MaxUploadBytes: cfg.MaxUploadBytes, MaxImageBytes: cfg.MaxImageBytes, MaxMessageBody: cfg.MaxMessageBody,
	})
	if err != nil {
		return nil, err
	}
	succeeded = true
	return &Server{cfg: cfg, log: cfg.Logger, w: w, dataLock: lock}, nil
}

// OpenStore opens a store by URL scheme: sqlite://path (or a plain path)
// for the embedded SQLite store, postgres://… or postgresql://… for the
// PostgreSQL store that several servers can share.
func OpenStore(ctx context.Context, url string, log *slog.Logger) (store.Store, error) {
	return wiring.OpenStore(ctx, url, log)
}

// NodeID returns the name this server holds session leases under.
func (s *Server) NodeID() string { return s.w.Node() }

// Handler returns the HTTP handler (API, WebSocket, SSE, Socket.IO, UI).
func (s *Server) Handler() http.Handler { return s.w.Handler() }

// Listen binds the configured address; Addr then reports it (useful with
// port 0).
func (s *Server) Listen() error {
	ln, err := net.Listen("tcp", s.cfg.Addr)
	if err != nil {
		return fmt.Errorf("listen: %w", err)
	}
	s.mu.Lock()
	s.listener = ln
	s.mu.Unlock()
	return nil
}

// Addr returns the bound address after Listen, else the configured one.
func (s *Server) Addr() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.listener != nil {
		return s.listener.Addr().String()
	}
	return s.cfg.Addr
}

// ListenAndServe serves until ctx ends, then shuts down gracefully: stop
// accepting connections, finish appending what is in flight, settle the
// sessions, close subscribers cleanly.
func (s *Server) ListenAndServe(ctx context.Context) error {
	s.mu.Lock()
	ln := s.listener
	s.mu.Unlock()
	if ln == nil {
		if err := s.Listen(); err != nil {
			return err
		}
		s.mu.Lock()
		ln = s.listener
		s.mu.Unlock()
	}
	hs := &http.Server{Handler: s.w.Handler(), ReadHeaderTimeout: 10 * time.Second}
	errc := make(chan error, 1)
	go func() { errc <- hs.Serve(ln) }()
	s.log.Info("agentd listening", "addr", ln.Addr().String(), "sandbox", s.cfg.Sandbox, "data", s.cfg.DataDir, "version", Version,
		"node", s.w.Node(), "fleet", s.w.InFleet())
	select {
	case err := <-errc:
		_ = s.Close(context.Background())
		return err
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// Stop accepting; long-lived streams are ended by Close below.
	go func() { _ = hs.Shutdown(sctx) }()
	err := s.Close(sctx)
	_ = hs.Close()
	return err
}

// Close shuts the server down: sessions (turns end with a reason, or are
// left running for a sandbox that outlives the server), then the event log
// (in-flight appends finish), then every stream, then the store.
func (s *Server) Close(ctx context.Context) error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	s.mu.Unlock()
	var errs []error
	if err := s.w.Close(ctx); err != nil {
		errs = append(errs, err)
	}
	// Last: the next server on this folder may start once this returns.
	if err := s.dataLock.Close(); err != nil {
		errs = append(errs, fmt.Errorf("unlock data folder: %w", err))
	}
	s.log.Info("agentd stopped")
	return errors.Join(errs...)
}
