// Package docker is the sandbox backend that runs each session in a Docker
// container: the executor (`agentd executor`, internal/executor) is the
// container's main process, under Docker's init; the server speaks to it
// through a Unix socket in a folder mounted from this host, exactly as the
// executor backend does (the environment is that backend's, see
// executor.Provider.Connect), so re-attaching after a restart, output
// replay and flow control are the same. The container has no network
// (--network none): the model proxy's per-session socket is mounted in and
// the executor relays a loopback port to it. The workspace is a folder of
// this host mounted at /workspace; processes run as an unprivileged uid
// with no capabilities, on a read-only root file system with a private
// /tmp, within the memory, CPU and process limits.
//
// Containers carry labels (agentd.managed, agentd.node, agentd.session or
// agentd.pool); Collect removes those of this server that no session
// records. With a warm pool, containers are started ahead with an empty
// workspace of their own, which a new session's claim renames into place
// (a bind mount follows its folder).
package docker

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/moby/moby/client"

	"github.com/agentd/agentd/internal/sandbox/executor"
	"github.com/agentd/agentd/internal/sandbox/warmpool"
	"github.com/agentd/agentd/sandbox"
)

// Name is the backend name given to --sandbox.
const Name = "docker"

// Defaults for Options fields left empty.
const (
	DefaultImage        = "agentd-sandbox:latest"
	DefaultUser         = "10001:10001"
	DefaultStartTimeout = 30 * time.Second
	DefaultStopTimeout  = 10 * time.Second
	// DefaultExecutor is the executor's program inside the image.
	DefaultExecutor = "agentd"
)

// Labels set on every container of this backend.
const (
	LabelManaged = "agentd.managed" // "true"
	LabelNode    = "agentd.node"    // the server's node id
	LabelSession = "agentd.session" // the session, for containers started for one
	LabelPool    = "agentd.pool"    // the warm pool key, for containers started ahead
)

// Paths inside the container.
const (
	workspaceDir = "/workspace"
	runDir       = "/run/agentd"    // the environment's folder: socket, spool
	proxyDirIn   = "/run/agentd-mp" // the model proxy's socket, read-only
	executorIn   = "/opt/agentd/agentd"
	socketName   = "executor.sock"
)

// Options configure a Provider.
type Options struct {
	// Client reaches the Docker daemon (default: client.New(client.FromEnv),
	// which reads DOCKER_HOST).
	Client *client.Client
	// Image is the default image (default agentd-sandbox:latest; built by
	// scripts/sandbox-image.sh). Spec.Image overrides it.
	Image string
	// User is "uid:gid", who the executor and every process of a
	// container run as (default 10001:10001). The workspace is given to
	// it while the environment lives. Not root.
	User string
	// Executor is the host path of an agentd binary mounted read-only
	// into every container and run as the executor; empty: the image's
	// own `agentd` (on its PATH).
	Executor string
	// RunDir holds, in a sub-folder per Node, each environment's folder
	// (socket, spool) and model proxy folder on this host. Default:
	// $XDG_RUNTIME_DIR/agentd-docker, else <temp>/agentd-docker-<uid>.
	// Keep it short: socket paths are limited to 107 bytes.
	RunDir string
	// WarmDir holds the workspaces of warm containers; it must be on the
	// file system of the sessions' workspaces (a claim renames one into
	// place). Required when WarmPool > 0.
	WarmDir string
	// Node labels this server's containers; Collect removes only those
	// (default "default").
	Node string
	// Limits are every environment's limits; the non-zero fields of
	// Spec.Limits override them. Zero fields: unlimited.
	Limits sandbox.Limits
	// Ignore is the workspace watcher's ignore list of environments
	// started ahead (sessions' Spec.Ignore is expected to be the same).
	Ignore []string
	// WarmPool is how many environments of each kind (image and limits)
	// are kept started ahead (0: none); MaxPools bounds the kinds (default
	// 4).
	WarmPool int
	MaxPools int
	// ModelProxy, when set, is the containers' only way to the model
	// APIs (see executor.ModelProxy). Without it agents in a container
	// cannot reach any model: the container has no network.
	ModelProxy executor.ModelProxy
	// Nice is added to the niceness of the processes the executor starts.
	Nice int
	// SpoolBytes is the executor's spool per process and stream (0: its
	// default).
	SpoolBytes int64
	// StartTimeout bounds a container's start until its executor answers;
	// StopTimeout how long Terminate waits for the executor to exit.
	StartTimeout, StopTimeout time.Duration
	// OnCall is called after every call to an executor (audit).
	OnCall func(sessionID, method string, paramsSize int, err error, dur time.Duration)
	Logger *slog.Logger
}

// Provider starts containers. Safe for concurrent use.
type Provider struct {
	opts     Options
	log      *slog.Logger
	cli      *client.Client
	ownCli   bool
	exec     *executor.Provider
	uid, gid int
	image    string // default image
	limits   string // how limits are enforced, from the daemon's info

	pool *warmpool.Pool[shape, *warm] // nil without a warm pool

	mu       sync.Mutex
	live     map[string]struct{}       // containers of this process (environments, warm ones), by id and name
	profiles map[shape]map[string]bool // profiles that claimed each shape
}

var (
	_ sandbox.Provider  = (*Provider)(nil)
	_ sandbox.Recoverer = (*Provider)(nil)
	_ sandbox.Collector = (*Provider)(nil)
	_ sandbox.Closer    = (*Provider)(nil)
	_ sandbox.Describer = (*Provider)(nil)
)

// New checks the daemon and the default image and returns a Provider. The
// server must run as root: it gives each workspace to the sandbox's uid.
func New(ctx context.Context, opts Options) (*Provider, error) {
	if opts.Image == "" {
		opts.Image = DefaultImage
	}
	if opts.User == "" {
		opts.User = DefaultUser
	}
	uid, gid, err := parseUser(opts.User)
	if err != nil {
		return nil, fmt.Errorf("docker sandbox: %w", err)
	}
	if os.Getuid() != 0 {
		return nil, errors.New("docker sandbox: the server must run as root (it gives each workspace to the sandbox's uid)")
	}
	if opts.RunDir == "" {
		if d := os.Getenv("XDG_RUNTIME_DIR"); d != "" {
			opts.RunDir = filepath.Join(d, "agentd-docker")
		} else {
			opts.RunDir = filepath.Join(os.TempDir(), "agentd-docker-"+strconv.Itoa(os.Getuid()))
		}
	}
	if opts.Node == "" {
		opts.Node = "default"
	}
	// Servers sharing a run folder (and a daemon) keep out of each
	// other's way: Collect cleans only its node's folder.
	node := sha256.Sum256([]byte(opts.Node))
	if opts.RunDir, err = filepath.Abs(filepath.Join(opts.RunDir, hex.EncodeToString(node[:4]))); err != nil {
		return nil, fmt.Errorf("docker sandbox: %w", err)
	}
	if len(filepath.Join(opts.RunDir, "agentd-0123456789ab", socketName)) > 107 {
		return nil, fmt.Errorf("docker sandbox: run folder %s is too long for socket paths: use a shorter one", opts.RunDir)
	}
	if opts.WarmPool < 0 {
		return nil, fmt.Errorf("docker sandbox: warm pool size %d", opts.WarmPool)
	}
	if opts.WarmPool > 0 && opts.WarmDir == "" {
		return nil, errors.New("docker sandbox: a warm pool needs WarmDir")
	}
	if opts.StartTimeout <= 0 {
		opts.StartTimeout = DefaultStartTimeout
	}
	if opts.StopTimeout <= 0 {
		opts.StopTimeout = DefaultStopTimeout
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	p := &Provider{
		opts: opts, log: opts.Logger.With("sandbox", Name), cli: opts.Client,
		uid: uid, gid: gid, image: opts.Image,
		live: map[string]struct{}{}, profiles: map[shape]map[string]bool{},
	}
	if p.cli == nil {
		if p.cli, err = client.New(client.FromEnv); err != nil {
			return nil, fmt.Errorf("docker sandbox: %w", err)
		}
		p.ownCli = true
	}
	fail := func(err error) (*Provider, error) {
		if p.ownCli {
			p.cli.Close()
		}
		return nil, fmt.Errorf("docker sandbox: %w", err)
	}
	info, err := p.cli.Info(ctx, client.InfoOptions{})
	if err != nil {
		return fail(fmt.Errorf("reach the Docker daemon (DOCKER_HOST=%q): %w", os.Getenv("DOCKER_HOST"), err))
	}
	p.limits = fmt.Sprintf("cgroup v%s (docker, %s driver)", info.Info.CgroupVersion, info.Info.CgroupDriver)
	if _, err := p.cli.ImageInspect(ctx, opts.Image); err != nil {
		return fail(fmt.Errorf("image %s: %w (build it with scripts/sandbox-image.sh; nothing is pulled)", opts.Image, err))
	}
	if opts.Executor != "" {
		if opts.Executor, err = filepath.Abs(opts.Executor); err != nil {
			return fail(err)
		}
		if _, err := os.Stat(opts.Executor); err != nil {
			return fail(fmt.Errorf("executor binary: %w", err))
		}
		p.opts.Executor = opts.Executor
	}
	if err := os.MkdirAll(filepath.Dir(opts.RunDir), 0o711); err != nil {
		return fail(err)
	}
	if err := os.MkdirAll(opts.RunDir, 0o711); err != nil {
		return fail(err)
	}
	if opts.WarmDir != "" {
		if err := os.MkdirAll(opts.WarmDir, 0o711); err != nil {
			return fail(err)
		}
	}
	p.exec, err = executor.New(executor.Options{
		RunDir: opts.RunDir, LimitMode: executor.LimitsOff, ModelProxy: opts.ModelProxy,
		StartTimeout: opts.StartTimeout, StopTimeout: opts.StopTimeout, OnCall: opts.OnCall, Logger: opts.Logger,
	})
	if err != nil {
		return fail(err)
	}
	if opts.WarmPool > 0 {
		p.pool, err = warmpool.New(warmpool.Options[shape, *warm]{
			Size: opts.WarmPool, MaxKeys: opts.MaxPools,
			Start: p.startWarm, Stop: p.stopWarm, KeyString: shape.String,
			StopTimeout: opts.StopTimeout + 20*time.Second, Logger: opts.Logger,
		})
		if err != nil {
			return fail(err)
		}
	}
	p.log.Info("docker sandbox", "image", opts.Image, "user", opts.User, "limits", p.limits,
		"warmPool", opts.WarmPool, "modelProxy", opts.ModelProxy != nil, "docker", info.Info.ServerVersion)
	return p, nil
}

// Name returns "docker".
func (p *Provider) Name() string { return Name }

// RunDir is the folder of this node's environments (socket, spool).
func (p *Provider) RunDir() string { return p.opts.RunDir }

// LimitsEnforcement says how limits are enforced, for logs.
func (p *Provider) LimitsEnforcement() string { return p.limits }

// Close drains the warm pool (its containers are removed) and closes the
// Docker client if the provider made it. Environments handed out stay.
func (p *Provider) Close(ctx context.Context) error {
	var err error
	if p.pool != nil {
		err = p.pool.Close(ctx)
	}
	if p.ownCli {
		p.cli.Close()
	}
	_ = os.Remove(p.opts.RunDir) // only when no environment is left in it
	return err
}

// parseUser reads "uid:gid" (or "uid", gid = uid), numbers only, not root.
func parseUser(s string) (uid, gid int, err error) {
	us, gs, ok := strings.Cut(s, ":")
	if !ok {
		gs = us
	}
	uid, err1 := strconv.Atoi(us)
	gid, err2 := strconv.Atoi(gs)
	if err1 != nil || err2 != nil || uid < 0 || gid < 0 {
		return 0, 0, fmt.Errorf("user %q: want numeric uid:gid", s)
	}
	if uid == 0 {
		return 0, 0, fmt.Errorf("user %q: the sandbox must not run as root", s)
	}
	return uid, gid, nil
}

// shape is what an environment is made with, before any session: the key
// of the warm pools.
type shape struct {
	Image  string
	Limits sandbox.Limits
	Ignore string // the ignore list, NUL-separated
}

func (s shape) String() string {
	return fmt.Sprintf("%s mem=%d pids=%d cpu=%d%%", s.Image, s.Limits.MemoryBytes, s.Limits.Pids, s.Limits.CPUPercent)
}

func (s shape) ignore() []string {
	if s.Ignore == "" {
		return nil
	}
	return strings.Split(s.Ignore, "\x00")
}

// shapeOf is the shape of spec's environment: its image and limits over
// the provider's defaults.
func (p *Provider) shapeOf(spec sandbox.Spec) shape {
	s := shape{Image: p.image, Limits: p.opts.Limits, Ignore: strings.Join(spec.Ignore, "\x00")}
	if spec.Image != "" {
		s.Image = spec.Image
	}
	if spec.Limits.MemoryBytes > 0 {
		s.Limits.MemoryBytes = spec.Limits.MemoryBytes
	}
	if spec.Limits.Pids > 0 {
		s.Limits.Pids = spec.Limits.Pids
	}
	if spec.Limits.CPUPercent > 0 {
		s.Limits.CPUPercent = spec.Limits.CPUPercent
	}
	return s
}

// defaultShape is the shape of a session that sets nothing of its own.
func (p *Provider) defaultShape() shape {
	return shape{Image: p.image, Limits: p.opts.Limits, Ignore: strings.Join(p.opts.Ignore, "\x00")}
}

func (p *Provider) track(id string) {
	p.mu.Lock()
	p.live[id] = struct{}{}
	p.mu.Unlock()
}

func (p *Provider) untrack(id string) {
	p.mu.Lock()
	delete(p.live, id)
	p.mu.Unlock()
}

func (p *Provider) isLive(id string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	_, ok := p.live[id]
	return ok
}

func (p *Provider) noteProfile(s shape, profile string) {
	if profile == "" {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	m := p.profiles[s]
	if m == nil {
		m = map[string]bool{}
		p.profiles[s] = m
	}
	m[profile] = true
}

// Describe says what a container protects against (docs/security.md's
// docker column) and the warm pools' state.
func (p *Provider) Describe() sandbox.Info {
	info := sandbox.Info{
		Protections: protections(p.opts.ModelProxy != nil), Limits: p.opts.Limits,
		LimitsEnforcement: p.limits, SurvivesRestart: true,
	}
	if p.pool == nil {
		return info
	}
	byKey := map[string]shape{}
	p.mu.Lock()
	for s := range p.profiles {
		byKey[s.String()] = s
	}
	p.mu.Unlock()
	def := p.defaultShape()
	byKey[def.String()] = def
	for _, st := range p.pool.Stats() {
		pi := sandbox.PoolInfo{
			Key: st.Key, Size: st.Size, Ready: st.Ready, Starting: st.Starting,
			Claims: st.Takes, Misses: st.Misses, Failures: st.Failures, LastError: st.LastError, LastStartMS: st.LastStartMS,
		}
		if s, ok := byKey[st.Key]; ok {
			pi.Image, pi.Limits = s.Image, s.Limits
			p.mu.Lock()
			for prof := range p.profiles[s] {
				pi.Profiles = append(pi.Profiles, prof)
			}
			p.mu.Unlock()
			slices.Sort(pi.Profiles)
		}
		info.Pools = append(info.Pools, pi)
	}
	return info
}

// protections is the docker column of docs/security.md.
func protections(modelProxy bool) []sandbox.Protection {
	key := sandbox.Protection{Threat: sandbox.ThreatProviderKey, Protected: true,
		Detail: "the model proxy holds the keys; the container gets a per-session token and a relay to the proxy's socket"}
	if !modelProxy {
		key = sandbox.Protection{Threat: sandbox.ThreatProviderKey, Protected: false,
			Detail: "model proxy off: the keys are passed in (and with no network the model is unreachable anyway)"}
	}
	return []sandbox.Protection{
		{Threat: sandbox.ThreatOtherWorkspaces, Protected: true, Detail: "only the session's workspace is mounted"},
		{Threat: sandbox.ThreatHostFiles, Protected: true, Detail: "the container sees the image and its own mounts, never the data folder"},
		{Threat: sandbox.ThreatServerEnvironment, Protected: true, Detail: "own pid namespace"},
		{Threat: sandbox.ThreatWriteOutside, Protected: true, Detail: "read-only root file system, private /tmp, unprivileged uid"},
		{Threat: sandbox.ThreatServerPort, Protected: true, Detail: "--network none: only loopback inside"},
		{Threat: sandbox.ThreatNetwork, Protected: true, Detail: "--network none: the model proxy relay is the only way out"},
		key,
		{Threat: sandbox.ThreatExhaustion, Protected: true, Detail: "memory, CPU and pids limits of the container's cgroup"},
		{Threat: sandbox.ThreatLeftovers, Protected: true, Detail: "Terminate removes the container with everything in it"},
		{Threat: sandbox.ThreatSignal, Protected: true, Detail: "own pid namespace, no capabilities"},
		{Threat: sandbox.ThreatHostUsers, Protected: true, Detail: "the data folder and every workspace are closed to other users (0700)"},
		{Threat: sandbox.ThreatHostRoot, Protected: true, Detail: "the container runs as an unprivileged uid without capabilities"},
		{Threat: sandbox.ThreatServerReads, Protected: true, Detail: "the server reads regular files only, non-blocking, up to a size bound"},
	}
}
