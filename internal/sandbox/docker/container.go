package docker

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/api/pkg/stdcopy"
	mcontainer "github.com/moby/moby/api/types/container"
	"github.com/moby/moby/api/types/mount"
	"github.com/moby/moby/client"
	"golang.org/x/sys/unix"

	"github.com/agentd/agentd/internal/executor/rpc"
	"github.com/agentd/agentd/internal/sandbox/container"
	"github.com/agentd/agentd/internal/sandbox/executor"
	"github.com/agentd/agentd/sandbox"
)

// box is a started container whose executor answered ping, not yet
// bound to a session's Environment; started ahead (warm), it has a
// workspace of its own under WarmDir.
type box struct {
	id, name  string
	dir       string // the environment's folder here (mounted at /run/agentd)
	ws        string // the workspace folder here (mounted at /workspace)
	pid       int    // the container's init, as this host sees it
	startedAt time.Time
}

// Name is the container's name (also its folders' under RunDir).
func (b *box) Name() string { return b.name }

func (b *box) socket() string { return filepath.Join(b.dir, socketName) }

// Create starts a container for spec, or claims one started ahead when the
// workspace is new (missing or empty) and one of its kind is ready.
func (p *Provider) Create(ctx context.Context, spec sandbox.Spec) (sandbox.Environment, error) {
	if spec.Workspace == "" {
		return nil, errors.New("create container: no workspace folder given")
	}
	ws, err := filepath.Abs(spec.Workspace)
	if err != nil {
		return nil, fmt.Errorf("create container: %w", err)
	}
	spec.Workspace = ws
	sh := p.def.For(spec)
	// A workspace with files cannot take a warm one's place; once it has
	// some, no other warm container would do better.
	e, err := p.pools.Claim(ctx, sh, spec.Profile, func() bool { return missingOrEmpty(ws) },
		func(w *box) (sandbox.Environment, error) { return p.claim(ctx, spec, w) })
	if err != nil {
		return nil, fmt.Errorf("create container: %w", err)
	}
	if e != nil {
		return e, nil
	}
	b, err := p.start(ctx, sh, ws, map[string]string{LabelSession: spec.SessionID}, spec.SessionID)
	if err != nil {
		return nil, fmt.Errorf("create container: %w", err)
	}
	env, err := p.bind(ctx, spec, b)
	if err != nil {
		p.remove(context.WithoutCancel(ctx), b)
		return nil, fmt.Errorf("create container: %w", err)
	}
	p.log.Info("container started", "session", spec.SessionID, "container", b.name, "pid", b.pid)
	return env, nil
}

// missingOrEmpty reports whether dir does not exist or is an empty folder
// (one a files request made before the first message, say): a warm
// workspace can take its place.
func missingOrEmpty(dir string) bool {
	fi, err := os.Lstat(dir)
	if errors.Is(err, os.ErrNotExist) {
		return true
	}
	if err != nil || !fi.IsDir() {
		return false
	}
	f, err := os.Open(dir)
	if err != nil {
		return false
	}
	defer f.Close()
	names, _ := f.Readdirnames(1)
	return len(names) == 0
}

// claim makes a warm container spec's: its workspace is renamed into
// place (the container's mount follows the folder) and the executor's
// environment is bound to the session.
func (p *Provider) claim(ctx context.Context, spec sandbox.Spec, w *box) (sandbox.Environment, error) {
	if err := os.MkdirAll(filepath.Dir(spec.Workspace), 0o755); err != nil {
		return nil, err
	}
	// rename(2) replaces an empty folder there (os.Rename refuses to).
	if err := unix.Rename(w.ws, spec.Workspace); err != nil {
		return nil, fmt.Errorf("move the warm workspace into place: rename %s %s: %w", w.ws, spec.Workspace, err)
	}
	w.ws = spec.Workspace
	e, err := p.bind(ctx, spec, w)
	if err != nil {
		return nil, err
	}
	p.log.Info("warm container claimed", "session", spec.SessionID, "container", w.name)
	return e, nil
}

// bind connects the executor of b as spec's environment.
func (p *Provider) bind(ctx context.Context, spec sandbox.Spec, b *box) (*Environment, error) {
	inner, err := p.exec.Connect(ctx, spec, executor.Handle{
		Socket: b.socket(), PID: b.pid, Dir: b.dir, UID: uint32(p.uid), StartedAt: b.startedAt,
	})
	if err != nil {
		return nil, err
	}
	return p.wrap(inner, b), nil
}

// startWarm is the warm pool's Start: a container with an empty
// workspace of its own, for no session yet.
func (p *Provider) startWarm(ctx context.Context, sh container.Shape) (*box, error) {
	name := container.NewName()
	ws := filepath.Join(p.opts.WarmDir, name)
	return p.startNamed(ctx, name, sh, ws, map[string]string{LabelPool: sh.String()}, "")
}

// stopWarm is the warm pool's Stop: the container, its folders and its
// unused workspace go.
func (p *Provider) stopWarm(ctx context.Context, _ container.Shape, w *box) {
	p.remove(ctx, w)
	if filepath.Dir(w.ws) == p.opts.WarmDir {
		_ = os.RemoveAll(w.ws)
	}
}

// start creates and starts a container for a workspace folder and waits
// for its executor.
func (p *Provider) start(ctx context.Context, sh container.Shape, ws string, labels map[string]string, session string) (*box, error) {
	return p.startNamed(ctx, container.NewName(), sh, ws, labels, session)
}

func (p *Provider) startNamed(ctx context.Context, name string, sh container.Shape, ws string, labels map[string]string, session string) (*box, error) {
	b := &box{name: name, dir: filepath.Join(p.opts.RunDir, name), ws: ws}
	p.live.Add(name) // Collect leaves it alone from now on
	ok := false
	defer func() {
		if !ok {
			p.remove(context.WithoutCancel(ctx), b)
		}
	}()
	if err := os.MkdirAll(ws, 0o755); err != nil {
		return nil, err
	}
	if err := executor.ChownTree(ws, p.uid, p.gid); err != nil {
		return nil, fmt.Errorf("give the workspace to uid %d: %w", p.uid, err)
	}
	// The environment's folder is the sandbox user's (the executor makes
	// its socket and spool there); the model proxy's is the server's, and
	// mounted read-only.
	if err := os.Mkdir(b.dir, 0o700); err != nil {
		return nil, err
	}
	if err := os.Mkdir(filepath.Join(b.dir, "spool"), 0o700); err != nil {
		return nil, err
	}
	for _, d := range []string{b.dir, filepath.Join(b.dir, "spool")} {
		if err := os.Chown(d, p.uid, p.gid); err != nil {
			return nil, err
		}
	}
	if p.opts.ModelProxy != nil {
		if err := os.Mkdir(container.ProxyDir(b.dir), 0o711); err != nil {
			return nil, err
		}
	}
	cfg, hc := p.containerConfig(b, sh, labels, session)
	t0 := time.Now()
	created, err := p.cli.ContainerCreate(ctx, client.ContainerCreateOptions{Name: name, Config: cfg, HostConfig: hc})
	if err != nil {
		return nil, fmt.Errorf("docker create: %w", err)
	}
	b.id = created.ID
	p.live.Add(b.id)
	if _, err := p.cli.ContainerStart(ctx, b.id, client.ContainerStartOptions{}); err != nil {
		return nil, fmt.Errorf("docker start: %w", err)
	}
	started := time.Since(t0)
	if err := p.waitReady(ctx, b); err != nil {
		return nil, err
	}
	p.log.Debug("container ready", "container", name, "createStartMs", started.Milliseconds(), "readyMs", time.Since(t0).Milliseconds())
	ok = true
	return b, nil
}

// containerConfig is a container's configuration: the executor as its
// main process under Docker's init, no network, no capabilities, a
// read-only root, the workspace and the two folders mounted, the limits.
func (p *Provider) containerConfig(b *box, sh container.Shape, labels map[string]string, session string) (*mcontainer.Config, *mcontainer.HostConfig) {
	bin := DefaultExecutor
	mounts := []mount.Mount{
		{Type: mount.TypeBind, Source: b.ws, Target: workspaceDir},
		{Type: mount.TypeBind, Source: b.dir, Target: runDir},
	}
	if p.opts.Executor != "" {
		bin = executorIn
		mounts = append(mounts, mount.Mount{Type: mount.TypeBind, Source: p.opts.Executor, Target: executorIn, ReadOnly: true})
	}
	if session == "" {
		session = b.name // a warm container: its name, for the executor's logs
	}
	argv := []string{bin, "executor",
		"--socket", runDir + "/" + socketName,
		"--workspace", workspaceDir,
		"--session", session,
		"--spool-dir", runDir + "/spool",
		"--peer-uid", strconv.Itoa(os.Getuid()),
	}
	argv = append(argv, sh.ExecutorArgs(p.opts.Nice, p.opts.SpoolBytes)...)
	if p.opts.ModelProxy != nil {
		mounts = append(mounts, mount.Mount{Type: mount.TypeBind, Source: container.ProxyDir(b.dir), Target: proxyDirIn, ReadOnly: true})
		argv = append(argv, "--model-proxy-socket", proxyDirIn+"/model.sock")
	}
	res := mcontainer.Resources{}
	if l := sh.Limits; l.MemoryBytes > 0 {
		res.Memory = l.MemoryBytes
		res.MemorySwap = l.MemoryBytes // no swap
	}
	if sh.Limits.Pids > 0 {
		pids := sh.Limits.Pids
		res.PidsLimit = &pids
	}
	if sh.Limits.CPUPercent > 0 {
		res.NanoCPUs = int64(sh.Limits.CPUPercent) * 10_000_000
	}
	all := map[string]string{LabelManaged: "true", LabelNode: p.opts.Node}
	for k, v := range labels {
		all[k] = v
	}
	init := true
	cfg := &mcontainer.Config{
		Image:      sh.Image,
		User:       fmt.Sprintf("%d:%d", p.uid, p.gid),
		Entrypoint: argv,
		Cmd:        []string{},
		WorkingDir: workspaceDir,
		Env:        []string{"LANG=C.UTF-8"},
		Labels:     all,
		// The executor logs to stderr: the container's log.
	}
	hc := &mcontainer.HostConfig{
		NetworkMode:    "none",
		Init:           &init,
		ReadonlyRootfs: true,
		CapDrop:        []string{"ALL"},
		SecurityOpt:    []string{"no-new-privileges"},
		IpcMode:        mcontainer.IPCModePrivate,
		Mounts:         mounts,
		Tmpfs:          map[string]string{"/tmp": "rw,nosuid,nodev,mode=1777", "/var/tmp": "rw,nosuid,nodev,mode=1777"},
		Resources:      res,
		LogConfig:      mcontainer.LogConfig{Type: "json-file", Config: map[string]string{"max-size": "1m", "max-file": "1"}},
	}
	return cfg, hc
}

// waitReady waits until the container's executor answers ping on its
// socket, and records the container's init pid. A container that exits
// first fails with the tail of its log.
func (p *Provider) waitReady(ctx context.Context, b *box) error {
	ctx, cancel := context.WithTimeout(ctx, p.opts.StartTimeout)
	defer cancel()
	ins, err := p.cli.ContainerInspect(ctx, b.id, client.ContainerInspectOptions{})
	if err != nil {
		return fmt.Errorf("docker inspect: %w", err)
	}
	if !ins.Container.State.Running || ins.Container.State.Pid <= 0 {
		return fmt.Errorf("container exited at start (code %d): %s", ins.Container.State.ExitCode, p.logTail(b.id))
	}
	b.pid = ins.Container.State.Pid
	sock := b.socket()
	lastCheck := time.Now()
	var lastErr error
	for {
		if _, err := os.Stat(sock); err == nil {
			ping, err := pingExecutor(ctx, sock)
			if err == nil {
				b.startedAt = ping.StartedAt
				return nil
			}
			lastErr = err
		}
		if time.Since(lastCheck) > 100*time.Millisecond {
			lastCheck = time.Now()
			ins, err := p.cli.ContainerInspect(ctx, b.id, client.ContainerInspectOptions{})
			if err == nil && !ins.Container.State.Running {
				return fmt.Errorf("container exited at start (code %d): %s", ins.Container.State.ExitCode, p.logTail(b.id))
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("executor did not answer within %v (last error: %v): %s", p.opts.StartTimeout, lastErr, p.logTail(b.id))
		case <-time.After(2 * time.Millisecond):
		}
	}
}

// pingExecutor dials the executor at sock and pings it once.
func pingExecutor(ctx context.Context, sock string) (rpc.PingResult, error) {
	var d net.Dialer
	nc, err := d.DialContext(ctx, "unix", sock)
	if err != nil {
		return rpc.PingResult{}, fmt.Errorf("dial executor: %w", err)
	}
	return container.Ping(ctx, nc, "rebuild the image, or mount this server's binary")
}

// logTail is the end of a container's log, for error messages.
func (p *Provider) logTail(id string) string {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	r, err := p.cli.ContainerLogs(ctx, id, client.ContainerLogsOptions{ShowStdout: true, ShowStderr: true, Tail: "20"})
	if err != nil {
		return "(no log: " + err.Error() + ")"
	}
	defer r.Close()
	var out bytes.Buffer
	if _, err := stdcopy.StdCopy(&out, &out, io.LimitReader(r, 64<<10)); err != nil && out.Len() == 0 {
		return "(no log: " + err.Error() + ")"
	}
	s := bytes.TrimSpace(out.Bytes())
	if len(s) == 0 {
		return "(empty log)"
	}
	return string(s)
}

// remove removes a container (killing what runs in it) and its folders
// under RunDir. The workspace stays.
func (p *Provider) remove(ctx context.Context, b *box) {
	if b.id != "" {
		_, err := p.cli.ContainerRemove(ctx, b.id, client.ContainerRemoveOptions{Force: true, RemoveVolumes: true})
		if err != nil && !cerrdefs.IsNotFound(err) {
			p.log.Error("remove container", "container", b.name, "err", err)
			return // the next Collect tries again
		}
		p.live.Remove(b.id)
	}
	container.RemoveDirs(p.opts.RunDir, b.name)
	p.live.Remove(b.name)
}
