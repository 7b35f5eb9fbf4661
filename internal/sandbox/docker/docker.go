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
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/moby/moby/client"

	"github.com/agentd/agentd/internal/sandbox/container"
	"github.com/agentd/agentd/internal/sandbox/executor"
	"github.com/agentd/agentd/sandbox"
)

// Name is the backend name given to --sandbox.
const Name = "docker"

// Defaults for Options fields left empty (and container.Options'
// defaults).
const (
	DefaultUser         = "10001:10001"
	DefaultStartTimeout = 30 * time.Second
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

// Options configure a Provider: what every container backend is given
// (its image is never pulled: it must be in the daemon; the limits are
// the container's cgroup's; without a model proxy, agents cannot reach
// any model) and Docker's own.
type Options struct {
	container.Options
	// Client reaches the Docker daemon (default: client.New(client.FromEnv),
	// which reads DOCKER_HOST).
	Client *client.Client
	// User is "uid:gid", who the executor and every process of a
	// container run as (default 10001:10001). The workspace is given to
	// it while the environment lives. Not root.
	User string
	// Executor is the host path of an agentd binary mounted read-only
	// into every container and run as the executor; empty: the image's
	// own `agentd` (on its PATH).
	Executor string
	// WarmDir holds the workspaces of warm containers; it must be on the
	// file system of the sessions' workspaces (a claim renames one into
	// place). Required when WarmPool > 0.
	WarmDir string
}

// Provider starts containers. Safe for concurrent use.
type Provider struct {
	opts     Options
	log      *slog.Logger
	cli      *client.Client
	ownCli   bool
	exec     *executor.Provider
	uid, gid int
	limits   string          // how limits are enforced, from the daemon's info
	def      container.Shape // of a session that sets nothing of its own

	pools *container.Pools[*box] // nil without a warm pool
	live  container.Live         // containers of this process (environments, warm ones), by id and name
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
	if err := opts.Complete("agentd-docker", DefaultStartTimeout); err != nil {
		return nil, fmt.Errorf("docker sandbox: %w", err)
	}
	if opts.WarmPool > 0 && opts.WarmDir == "" {
		return nil, errors.New("docker sandbox: a warm pool needs WarmDir")
	}
	p := &Provider{
		opts: opts, log: opts.Logger.With("sandbox", Name), cli: opts.Client,
		uid: uid, gid: gid, def: opts.DefaultShape(),
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
	if opts.WarmDir != "" {
		if err := os.MkdirAll(opts.WarmDir, 0o711); err != nil {
			return fail(err)
		}
	}
	if p.exec, err = opts.NewExecutor(); err != nil {
		return fail(err)
	}
	p.pools, err = container.NewPools(&opts.Options, container.PoolOptions[*box]{
		Start: p.startWarm, Stop: p.stopWarm, StopTimeout: opts.StopTimeout + 20*time.Second, Log: p.log, Noun: "container",
	})
	if err != nil {
		return fail(err)
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
	err := p.pools.Close(ctx)
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

// Describe says what a container protects against (docs/security.md's
// docker column) and the warm pools' state.
func (p *Provider) Describe() sandbox.Info {
	return sandbox.Info{
		Protections: protections(p.opts.ModelProxy != nil), Limits: p.opts.Limits,
		LimitsEnforcement: p.limits, SurvivesRestart: true, Pools: p.pools.Infos(),
	}
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
