// Package executor is the sandbox backend whose environments outlive the
// API server: each environment is a detached executor process (`agentd
// executor`, package internal/executor) that runs the session's processes
// and serves its workspace over a Unix socket, speaking the protocol of
// package internal/executor/rpc. The server records the environment's
// Handle and, after a restart, Recover re-attaches to it and Attach
// resumes each process's output from the offsets it had consumed. Connect
// and ConnectTransport give the same Environment for executors other
// backends start (in a container, in a Kubernetes pod).
package executor

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/agentd/agentd/internal/executor/rpc"
	"github.com/agentd/agentd/internal/sandbox/executor/cgroup"
	"github.com/agentd/agentd/internal/sandbox/local"
	"github.com/agentd/agentd/sandbox"
)

// Name is the backend name given to --sandbox.
const Name = "executor"

// Defaults for Options fields left zero.
const (
	DefaultStartTimeout = 10 * time.Second
	DefaultStopTimeout  = 5 * time.Second
	DefaultWindow       = 8 << 20
)

// ErrIncompatible: the executor speaks another protocol version.
var ErrIncompatible = errors.New("executor: incompatible protocol version")

// SecretSource answers the executor's secrets.get requests.
type SecretSource interface {
	Secret(ctx context.Context, sessionID, name string) (string, error)
}

// PermissionAsker answers the executor's permission.request requests.
type PermissionAsker interface {
	AskPermission(ctx context.Context, sessionID string, req rpc.PermissionParams) (rpc.PermissionResult, error)
}

// Options configure a Provider.
type Options struct {
	// Binary is the agentd binary that runs `agentd executor`. Default:
	// this process's executable.
	Binary string
	// RunDir holds each environment's socket, log and output spool.
	// Default: $XDG_RUNTIME_DIR/agentd, else <temp>/agentd-<uid>. Keep it
	// short: a socket path is limited to 107 bytes. It must be the
	// server's: New refuses a folder of another user, a symlink, one
	// others may write, or one under a parent others may change.
	RunDir string
	// RunAsUser, when set, is the user (name or uid) the executor and so
	// every process of the environment run as. The workspace is chowned to
	// it while the environment lives (and taken back, 0700, at
	// Terminate). Needs the server to run as root. Every environment
	// shares the user: agents are kept from the server's files, not from
	// each other's live workspaces (UserPool does that).
	RunAsUser string
	// UserPool, when set, gives every environment a user of its own,
	// taken from these entries (user names, uids, uid ranges
	// "200000-200099") and free again once its executor is gone. It
	// replaces RunAsUser. Needs root.
	UserPool []string
	// SwitchUserInside starts the executor (through Wrapper) as the
	// server's user and has it switch to the environment's user itself,
	// for wrappers that need root to build the sandbox (bubblewrap without
	// a user namespace). Otherwise the executor is started as that user.
	SwitchUserInside bool
	// Wrapper, when set, starts the executor inside another sandbox
	// (bubblewrap). It takes precedence over Wrap.
	Wrapper Wrapper
	// Wrap, when set (and Wrapper is not), rewrites the executor's command
	// line, as a Wrapper does without the Launch details: the file
	// descriptor 3 (the listening socket) must be passed through.
	Wrap func(argv []string) []string
	// ExecutorEnv is added to the executor's environment (which is
	// otherwise PATH, LANG and, with RunAsUser, HOME/USER/LOGNAME).
	ExecutorEnv []string
	// Path is the PATH of the environment's processes. Default: this
	// process's PATH.
	Path string
	// Limits are every environment's limits; the non-zero fields of
	// Spec.Limits override them. Zero fields: unlimited.
	Limits sandbox.Limits
	// LimitMode says how limits are enforced (default: cgroups where
	// possible, else rlimits). With cgroups every environment also gets a
	// group of its own, which Terminate empties: nothing it started
	// survives it, not even a process that left its process group.
	LimitMode LimitMode
	// CgroupParent is the group holding the environments' groups,
	// relative to the server's own (default "agentd").
	CgroupParent string
	// ModelProxy, when set, is the environments' only way to the model
	// APIs, and the real API keys are kept out of them (see ModelProxy).
	ModelProxy ModelProxy
	// Nice is added to the niceness of the environment's processes (see
	// local.Options.Nice; 0: the executor's own priority).
	Nice int
	// SpoolBytes is the executor's spool per process and stream (0: the
	// executor's default).
	SpoolBytes int64
	// OrphanTimeout makes an executor stop itself once no server has been
	// connected for that long (0: never).
	OrphanTimeout time.Duration
	// StartTimeout bounds an executor's start until it answers ping.
	StartTimeout time.Duration
	// StopTimeout is how long Terminate waits for the executor to exit
	// after shutdown before killing it.
	StopTimeout time.Duration
	// Window is the flow-control window per process: how much output the
	// executor sends ahead of what the consumer of Process.Output took.
	Window int64
	// SecretEnv maps environment variable names to secret names: instead
	// of a value from Spec.Env or Cmd.Env, the executor asks Secrets for
	// the value just before it starts each process.
	SecretEnv map[string]string
	// Secrets answers secrets.get; nil refuses every request.
	Secrets SecretSource
	// Permissions answers permission.request; nil refuses every request.
	Permissions PermissionAsker
	// OnCall, when set, is called after every call to an executor (for
	// audit records and metrics). paramsSize is the request's size in
	// bytes.
	OnCall func(sessionID, method string, paramsSize int, err error, dur time.Duration)
	Logger *slog.Logger
}

// Provider starts executors. Safe for concurrent use.
type Provider struct {
	opts Options
	log  *slog.Logger
	cred *credential // nil without RunAsUser
	pool *userPool   // nil without UserPool

	files     *local.Provider // process-less views of workspaces (OpenFile)
	cg        *cgroup.Manager // nil: no cgroups
	rlimits   bool            // enforce what rlimits can
	limitsHow string
}

type credential struct {
	uid, gid uint32
	groups   []uint32
	home     string
	name     string
}

var (
	_ sandbox.Provider  = (*Provider)(nil)
	_ sandbox.Recoverer = (*Provider)(nil)
)

// New returns a Provider.
func New(opts Options) (*Provider, error) {
	if opts.Binary == "" {
		exe, err := os.Executable()
		if err != nil {
			return nil, fmt.Errorf("executor backend: find agentd binary: %w", err)
		}
		opts.Binary = exe
	}
	if opts.RunDir == "" {
		if d := os.Getenv("XDG_RUNTIME_DIR"); d != "" {
			opts.RunDir = filepath.Join(d, "agentd")
		} else {
			opts.RunDir = filepath.Join(os.TempDir(), "agentd-"+strconv.Itoa(os.Getuid()))
		}
	}
	if opts.Path == "" {
		opts.Path = os.Getenv("PATH")
	}
	if opts.StartTimeout <= 0 {
		opts.StartTimeout = DefaultStartTimeout
	}
	if opts.StopTimeout <= 0 {
		opts.StopTimeout = DefaultStopTimeout
	}
	if opts.Window <= 0 {
		opts.Window = DefaultWindow
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	p := &Provider{opts: opts, log: opts.Logger.With("sandbox", Name), files: local.New(local.Options{Logger: opts.Logger})}
	switch {
	case len(opts.UserPool) > 0:
		if os.Getuid() != 0 {
			return nil, errors.New("executor backend: a user pool needs the server to run as root")
		}
		users, err := parseUserPool(opts.UserPool)
		if err != nil {
			return nil, fmt.Errorf("executor backend: %w", err)
		}
		if err := ensureRunDir(opts.RunDir, !p.switchInside()); err != nil {
			return nil, fmt.Errorf("executor backend: %w", err)
		}
		if p.pool, err = newUserPool(users, filepath.Join(opts.RunDir, "users")); err != nil {
			return nil, fmt.Errorf("executor backend: %w", err)
		}
	case opts.RunAsUser != "":
		c, err := lookupUser(opts.RunAsUser)
		if err != nil && isDigits(opts.RunAsUser) {
			// A uid without a passwd entry, as in a pool.
			if n, perr := strconv.ParseUint(opts.RunAsUser, 10, 32); perr == nil {
				c, err = uidCredential(uint32(n)), nil
			}
		}
		if err != nil {
			return nil, fmt.Errorf("executor backend: run as %q: %w", opts.RunAsUser, err)
		}
		p.cred = c
	}
	if err := ensureRunDir(opts.RunDir, p.sharedRunDir()); err != nil {
		return nil, fmt.Errorf("executor backend: %w", err)
	}
	if err := p.setupLimits(); err != nil {
		return nil, fmt.Errorf("executor backend: %w", err)
	}
	return p, nil
}

// OtherUsersReachWorkspaces reports whether environments run as other
// users who open their workspace by its host path (not mounted for them
// by a root wrapper): the folders above a workspace must let them pass.
func (p *Provider) OtherUsersReachWorkspaces() bool {
	return (p.pool != nil || p.cred != nil) && !p.switchInside()
}

// sharedRunDir reports whether executors run as other users who must
// pass through the run folder to their own folders in it (not when a root
// wrapper mounts those for them).
func (p *Provider) sharedRunDir() bool { return p.OtherUsersReachWorkspaces() }

func lookupUser(name string) (*credential, error) {
	u, err := user.Lookup(name)
	if err != nil {
		var uerr error
		if u, uerr = user.LookupId(name); uerr != nil {
			return nil, err
		}
	}
	uid, err := strconv.ParseUint(u.Uid, 10, 32)
	if err != nil {
		return nil, err
	}
	gid, err := strconv.ParseUint(u.Gid, 10, 32)
	if err != nil {
		return nil, err
	}
	c := &credential{uid: uint32(uid), gid: uint32(gid), home: u.HomeDir, name: u.Username}
	if ids, err := u.GroupIds(); err == nil {
		for _, id := range ids {
			if g, err := strconv.ParseUint(id, 10, 32); err == nil {
				c.groups = append(c.groups, uint32(g))
			}
		}
	}
	return c, nil
}

// Name returns "executor".
func (p *Provider) Name() string { return Name }

// Handle is what Environment.Handle records and Recover reads.
type Handle struct {
	Socket          string    `json:"socket"`
	PID             int       `json:"pid"`
	ProtocolVersion int       `json:"protocolVersion"`
	StartedAt       time.Time `json:"startedAt"`
	// Dir is the environment's run folder (log, spool), removed by
	// Terminate.
	Dir string `json:"dir,omitempty"`
	// UID is the environment's user (0: the server's own).
	UID uint32 `json:"uid,omitempty"`
	// Cgroup names the environment's control group ("" if none).
	Cgroup string `json:"cgroup,omitempty"`
	// InnerPID is the executor's pid as it sees itself, when it runs in a
	// pid namespace of its own (PID is then its wrapper's).
	InnerPID int `json:"innerPid,omitempty"`
	// OwnSocket: the executor called listen() on its socket itself, so
	// the socket's peer credentials are its own (set by this version's
	// Create; Recover then checks them strictly).
	OwnSocket bool `json:"ownSocket,omitempty"`
}

// Recover re-attaches to the executor described by handle. A dead
// executor, or a socket nobody answers on, is sandbox.ErrGone; one that
// speaks another protocol version is ErrIncompatible.
func (p *Provider) Recover(ctx context.Context, spec sandbox.Spec, handle json.RawMessage) (sandbox.Environment, error) {
	var h Handle
	if err := json.Unmarshal(handle, &h); err != nil {
		return nil, fmt.Errorf("recover executor: bad handle: %w", err)
	}
	if h.Socket == "" {
		return nil, fmt.Errorf("recover executor: handle without socket: %s", handle)
	}
	if h.PID <= 0 {
		// Recorded before the executor started (Spec.Record): the server
		// stopped while creating it, and it never served.
		p.removeUnstarted(ctx, spec, h)
		return nil, fmt.Errorf("recover executor: %w: the server stopped while creating it", sandbox.ErrGone)
	}
	if h.ProtocolVersion != rpc.ProtocolVersion {
		return nil, fmt.Errorf("recover executor: %w: handle says %d, we speak %d", ErrIncompatible, h.ProtocolVersion, rpc.ProtocolVersion)
	}
	if !pidAlive(h.PID) {
		p.cleanupGone(spec, h)
		return nil, fmt.Errorf("recover executor: pid %d: %w", h.PID, sandbox.ErrGone)
	}
	e := newEnvironment(p, spec, h)
	cctx, cancel := context.WithTimeout(ctx, p.opts.StartTimeout)
	defer cancel()
	if testHookRecoverConnect != nil {
		testHookRecoverConnect(h)
	}
	if err := e.connect(cctx, func(pid, uid int) error { return p.checkPeer(h, pid, uid) }); err != nil {
		if errors.Is(err, errImpostor) {
			p.log.Error("executor socket answered by another process: not re-attaching", "session", spec.SessionID, "socket", h.Socket, "err", err)
			return nil, fmt.Errorf("recover executor: %w: %v", sandbox.ErrGone, err)
		}
		var pe *rpc.Error
		if errors.Is(err, ErrIncompatible) || errors.As(err, &pe) || cctx.Err() != nil {
			return nil, fmt.Errorf("recover executor: %w", err)
		}
		// The executor may have died after the check above (it was being
		// killed as we connected): then what it left is ours to remove,
		// as for one found dead. A killed process is gone within
		// milliseconds; one still there after a second is left alone.
		gctx, gcancel := context.WithTimeout(cctx, time.Second)
		gone := waitGone(gctx, h.PID)
		gcancel()
		if gone {
			p.cleanupGone(spec, h)
		}
		return nil, fmt.Errorf("recover executor: %w: %v", sandbox.ErrGone, err)
	}
	ping := e.ping
	want := h.PID
	if h.InnerPID > 0 {
		want = h.InnerPID
	}
	if ping.PID != want || !ping.StartedAt.Equal(h.StartedAt) {
		e.closeConn()
		return nil, fmt.Errorf("recover executor: %w: socket answered by pid %d started %s, not pid %d started %s",
			sandbox.ErrGone, ping.PID, ping.StartedAt, want, h.StartedAt)
	}
	if err := e.adopt(cctx); err != nil {
		e.closeConn()
		return nil, fmt.Errorf("recover executor: %w", err)
	}
	p.log.Info("executor recovered", "session", spec.SessionID, "pid", h.PID, "socket", h.Socket)
	return e, nil
}

// errImpostor: the process listening on an executor's socket is not that
// executor.
var errImpostor = errors.New("socket not served by the recorded executor")

// checkPeer checks the credentials of the process serving an executor's
// socket (SO_PEERCRED) before anything is sent to it: a socket another
// process put at that path could otherwise be handed commands, secrets
// and permission answers. Its uid must be the environment's (the
// server's own without a user). An executor of this version called
// listen() itself (Handle.OwnSocket): the pid must be the executor's,
// which under bubblewrap is the process of the wrapper's pid namespace
// whose own pid there is InnerPID. An older executor serves the socket
// the server created, whose credentials are that server's: the server's
// uid is accepted then, as the one who could have made it.
func (p *Provider) checkPeer(h Handle, pid, uid int) error {
	want := os.Getuid()
	if h.UID != 0 {
		want = int(h.UID)
	}
	if !h.OwnSocket {
		if uid != want && uid != os.Getuid() {
			return fmt.Errorf("%w: its uid is %d, not %d", errImpostor, uid, want)
		}
		return nil
	}
	if uid != want {
		return fmt.Errorf("%w: its uid is %d, not %d", errImpostor, uid, want)
	}
	if !executorPID(h, pid) {
		return fmt.Errorf("%w: it is pid %d, not the executor (pid %d, inner pid %d)", errImpostor, pid, h.PID, h.InnerPID)
	}
	return nil
}

// executorPID reports whether pid (as this process sees it) is the
// executor h describes: h.PID itself, or, in a pid namespace of its own,
// a descendant of h.PID (bubblewrap) whose pid in its innermost namespace
// is h.InnerPID.
func executorPID(h Handle, pid int) bool {
	if h.InnerPID == 0 {
		return pid == h.PID
	}
	st, err := readStatus(pid)
	if err != nil {
		return false
	}
	ns := strings.Fields(st["NSpid"])
	if len(ns) < 2 || ns[len(ns)-1] != strconv.Itoa(h.InnerPID) {
		return false
	}
	for depth, cur := 0, pid; depth < 4; depth++ {
		ppid, err := strconv.Atoi(st["PPid"])
		if err != nil || ppid <= 1 {
			return false
		}
		if ppid == h.PID {
			return true
		}
		cur = ppid
		if st, err = readStatus(cur); err != nil {
			return false
		}
	}
	return false
}

// readStatus reads the "Key:\tvalue" lines of /proc/<pid>/status.
func readStatus(pid int) (map[string]string, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return nil, err
	}
	out := map[string]string{}
	for _, l := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(l, ":"); ok {
			out[k] = strings.TrimSpace(v)
		}
	}
	return out, nil
}

// removeUnstarted stops and removes an environment recorded before its
// executor started (a handle without pid): the executor, if it got as far
// as serving its socket, is shut down (it kills its processes and exits);
// then what is left goes as for an executor found dead.
func (p *Provider) removeUnstarted(ctx context.Context, spec sandbox.Spec, h Handle) {
	if filepath.Dir(h.Socket) != p.opts.RunDir {
		return // not ours: the handle comes from the store
	}
	e := newEnvironment(p, spec, h)
	cctx, cancel := context.WithTimeout(ctx, p.opts.StartTimeout)
	defer cancel()
	// No pid to check the peer against yet: its uid must be the
	// environment's, as for any executor of ours.
	sameUser := func(_, uid int) error {
		want := os.Getuid()
		if h.UID != 0 {
			want = int(h.UID)
		}
		if uid != want {
			return fmt.Errorf("%w: its uid is %d, not %d", errImpostor, uid, want)
		}
		return nil
	}
	if err := e.connect(cctx, sameUser); err == nil {
		_ = e.client.Shutdown(cctx)
		e.closeConn()
		if p.opts.Wrapper == nil && p.opts.Wrap == nil {
			waitGone(cctx, e.ping.PID) // its own pid (a wrapper's pid namespace aside)
		}
	} else if e.client != nil {
		e.client.Close()
		e.client.Wait()
	}
	p.cleanupGone(spec, h)
}

// testHookRecoverConnect, when set (tests), runs in Recover after the
// executor was found alive, before connecting to it.
var testHookRecoverConnect func(Handle)

// cleanupGone releases what an executor that died while the server was
// away left behind: whatever still runs in its group (a process that left
// its process group), the group itself, its run folder, and the workspace
// it was given. Its pool user is free already (its lock died with it).
func (p *Provider) cleanupGone(spec sandbox.Spec, h Handle) {
	e := newEnvironment(p, spec, h)
	if h.UID != 0 && spec.Workspace != "" {
		e.cred = uidCredential(h.UID)
		e.ws, _ = filepath.Abs(spec.Workspace)
	}
	if h.Cgroup != "" && p.cg != nil {
		e.group = p.cg.Open(h.Cgroup)
	}
	e.release()
	// Only what is ours: the handle comes from the store.
	if filepath.Dir(h.Socket) == p.opts.RunDir {
		_ = os.Remove(h.Socket)
	}
	if h.Dir != "" && filepath.Dir(h.Dir) == p.opts.RunDir {
		_ = os.RemoveAll(h.Dir)
		_ = os.RemoveAll(proxyDir(h.Dir))
	}
	p.log.Info("executor gone; its leftovers removed", "session", spec.SessionID, "pid", h.PID, "cgroup", h.Cgroup)
}
