package executor

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/agentd/agentd/internal/executor/rpc"
	"github.com/agentd/agentd/sandbox"
)

// maxSocketPath is the longest usable Unix socket path (sun_path minus NUL).
const maxSocketPath = 107

// Create starts a detached executor for spec and returns its environment
// once it answered ping.
//
// The server creates the listening socket itself (mode 0600, owned by the
// server's uid) and hands it to the executor as fd 3, so with RunAsUser the
// agent's user can neither reach the socket's path nor pass the executor's
// peer-uid check; the executor only accepts the server's uid.
//
// The executor runs in its own session and process group (Setsid), with
// stdio on a log file in its run folder, in its own control group when
// cgroups are in use (from its first instruction on). It is not killed when
// the server exits: a goroutine reaps it if it ends while this process
// lives.
func (p *Provider) Create(ctx context.Context, spec sandbox.Spec) (sandbox.Environment, error) {
	if spec.Workspace == "" {
		return nil, errors.New("create executor: no workspace folder given")
	}
	ws, err := filepath.Abs(spec.Workspace)
	if err != nil {
		return nil, fmt.Errorf("create executor: %w", err)
	}
	// The session's alone (given to its user below, if any): no other
	// user may reach what its agents leave there.
	if err := os.MkdirAll(ws, 0o700); err != nil {
		return nil, fmt.Errorf("create executor: %w", err)
	}
	name := runName(spec.SessionID)
	dir := filepath.Join(p.opts.RunDir, name)
	socket := filepath.Join(p.opts.RunDir, name+".sock")
	if len(socket) > maxSocketPath || len(filepath.Join(proxyDir(dir), modelSocketName)) > maxSocketPath {
		return nil, fmt.Errorf("create executor: socket path %s is longer than %d bytes: use a shorter run folder", socket, maxSocketPath)
	}

	// Who the environment runs as, and the resources released on failure.
	var undo []func()
	fail := func(err error) (sandbox.Environment, error) {
		for i := len(undo) - 1; i >= 0; i-- {
			undo[i]()
		}
		return nil, fmt.Errorf("create executor: %w", err)
	}
	cred := p.cred
	var lock *os.File // the pool user's lock, inherited by the executor
	if p.pool != nil {
		if cred, lock, err = p.pool.acquire(); err != nil {
			return nil, fmt.Errorf("create executor: %w", err)
		}
		undo = append(undo, func() {
			if lock != nil {
				lock.Close()
			}
		})
	}
	if cred != nil {
		if err := chownTree(ws, int(cred.uid), int(cred.gid)); err != nil {
			return fail(fmt.Errorf("chown workspace: %w", err))
		}
		undo = append(undo, func() { _ = revokeWorkspace(ws) })
	}
	logFile, err := p.makeRunDir(dir, cred)
	if err != nil {
		return fail(err)
	}
	undo = append(undo, func() {
		logFile.Close()
		_ = os.Remove(socket)
		_ = os.RemoveAll(dir)
		_ = os.RemoveAll(proxyDir(dir))
	})
	e := newEnvironment(p, spec, Handle{Socket: socket, ProtocolVersion: rpc.ProtocolVersion, Dir: dir})
	e.cred, e.ws = cred, ws
	if cred != nil {
		e.handle.UID = cred.uid
	}
	if p.opts.ModelProxy != nil {
		if err := os.Mkdir(proxyDir(dir), 0o711); err != nil {
			return fail(err)
		}
		if err := e.serveModelProxy(ctx, proxyDir(dir)); err != nil {
			return fail(err)
		}
		undo = append(undo, func() { p.opts.ModelProxy.StopSession(spec.SessionID) })
	}
	if p.cg != nil {
		g, err := p.cg.Create(name, p.limits(spec))
		if err != nil {
			return fail(err)
		}
		e.group, e.handle.Cgroup = g, name
		undo = append(undo, func() {
			rctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			_ = g.Remove(rctx)
		})
	}

	if spec.Record != nil {
		// Before the executor exists: a server killed from here on leaves
		// a handle (without a pid) from which Recover removes it.
		if err := spec.Record(ctx, e.Handle()); err != nil {
			return fail(fmt.Errorf("record handle: %w", err))
		}
	}
	lnFile, err := listen(socket)
	if err != nil {
		return fail(err)
	}
	argv, err := p.command(spec, ws, dir, cred, lock != nil)
	if err != nil {
		lnFile.Close()
		return fail(err)
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Dir = "/"
	cmd.Env = p.executorEnv(cred)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.ExtraFiles = []*os.File{lnFile} // fd 3
	if lock != nil {
		cmd.ExtraFiles = append(cmd.ExtraFiles, lock) // fd 4: --hold-fd 4
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if cred != nil && !p.switchInside() {
		cmd.SysProcAttr.Credential = &syscall.Credential{Uid: cred.uid, Gid: cred.gid, Groups: cred.groups}
	}
	var startErr error
	if e.group != nil {
		startErr = e.group.Start(cmd)
	} else {
		startErr = cmd.Start()
	}
	lnFile.Close()
	logFile.Close()
	if startErr != nil {
		return fail(fmt.Errorf("start %s: %w", argv[0], startErr))
	}
	if lock != nil {
		// The executor holds the user now, for as long as it lives.
		lock.Close()
		lock = nil
	}
	reaped := make(chan struct{})
	go func() {
		// Reap it if it ends while we live; never kill it on our exit.
		_ = cmd.Wait()
		close(reaped)
	}()
	e.handle.PID = cmd.Process.Pid
	e.log = e.log.With("executor", e.handle.PID)
	e.reaped = reaped

	sctx, cancel := context.WithTimeout(ctx, p.opts.StartTimeout)
	defer cancel()
	connected := make(chan error, 1)
	go func() { connected <- e.connect(sctx, nil) }()
	exitedEarly := false
	select {
	case err = <-connected:
	case <-reaped:
		exitedEarly = true
		cancel()
		err = <-connected
	}
	if err != nil || exitedEarly {
		if e.client != nil {
			e.client.Close()
			e.client.Wait()
			if err == nil { // connected: watchConn runs
				<-e.connEnded
			}
		}
		if e.group != nil {
			kctx, kcancel := context.WithTimeout(context.Background(), 5*time.Second)
			_ = e.group.Kill(kctx)
			kcancel()
		}
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		<-reaped
		why := "exited at start"
		if err != nil {
			why = err.Error()
		}
		return fail(fmt.Errorf("%s; executor log: %s", why, logTail(dir)))
	}
	e.handle.StartedAt = e.ping.StartedAt
	e.handle.OwnSocket = true // it called listen() itself (see Recover)
	if e.ping.PID != e.handle.PID {
		e.handle.InnerPID = e.ping.PID // in a pid namespace of its own
	}
	p.log.Info("executor started", "session", spec.SessionID, "pid", e.handle.PID, "socket", socket,
		"uid", e.ping.UID, "cgroup", e.handle.Cgroup)
	return e, nil
}

// switchInside reports whether the executor starts as the server's user
// and switches to the environment's itself.
func (p *Provider) switchInside() bool { return p.opts.SwitchUserInside && p.opts.Wrapper != nil }

// command is the executor's command line (a Wrapper or Wrap may rewrite
// it).
func (p *Provider) command(spec sandbox.Spec, ws, dir string, cred *credential, holdLock bool) ([]string, error) {
	argv := []string{
		p.opts.Binary, "executor",
		"--listen-fd", "3",
		"--workspace", ws,
		"--session", spec.SessionID,
		"--spool-dir", filepath.Join(dir, "spool"),
		"--path", p.opts.Path,
	}
	if p.opts.Nice > 0 {
		argv = append(argv, "--nice", strconv.Itoa(p.opts.Nice))
	}
	if p.opts.SpoolBytes > 0 {
		argv = append(argv, "--spool-bytes", strconv.FormatInt(p.opts.SpoolBytes, 10))
	}
	if p.opts.OrphanTimeout > 0 {
		argv = append(argv, "--orphan-timeout", p.opts.OrphanTimeout.String())
	}
	for _, ig := range spec.Ignore {
		argv = append(argv, "--ignore", ig)
	}
	l := p.limits(spec)
	if l.MemoryBytes > 0 || l.Pids > 0 || l.CPUPercent > 0 {
		argv = append(argv, "--memory", strconv.FormatInt(l.MemoryBytes, 10),
			"--pids", strconv.FormatInt(l.Pids, 10), "--cpu", strconv.Itoa(l.CPUPercent))
	}
	// RLIMIT_NPROC counts per uid: only a uid of the environment's own
	// makes it a per-environment bound.
	nproc := p.rlimits && p.pool != nil && l.Pids > 0
	if nproc {
		argv = append(argv, "--nproc", strconv.FormatInt(l.Pids, 10))
	}
	if l.Pids > 0 && (nproc || (p.cg != nil && slices.Contains(p.cg.Controllers(), "pids"))) {
		argv = append(argv, "--reserve-threads", strconv.Itoa(reservedThreads))
	}
	if holdLock {
		argv = append(argv, "--hold-fd", "4")
	}
	if p.opts.ModelProxy != nil {
		argv = append(argv, "--model-proxy-socket", filepath.Join(proxyDir(dir), modelSocketName))
	}
	uid, gid := os.Getuid(), os.Getgid()
	if cred != nil {
		uid, gid = int(cred.uid), int(cred.gid)
	}
	switchUser := cred != nil && p.switchInside()
	if switchUser {
		gs := make([]string, len(cred.groups))
		for i, g := range cred.groups {
			gs[i] = strconv.FormatUint(uint64(g), 10)
		}
		argv = append(argv, "--uid", strconv.Itoa(uid), "--gid", strconv.Itoa(gid), "--groups", strings.Join(gs, ","))
	}
	launch := Launch{
		Spec: spec, Workspace: ws, RunDir: dir, Path: p.opts.Path,
		UID: uid, GID: gid, SwitchUser: switchUser,
	}
	if p.opts.ModelProxy != nil {
		launch.ModelProxyDir = proxyDir(dir)
	}
	// The only uid the executor accepts: the server's, as it sees it.
	peer := os.Getuid()
	if pm, ok := p.opts.Wrapper.(PeerMapper); ok {
		peer = pm.PeerUID(launch)
	}
	argv = append(argv, "--peer-uid", strconv.Itoa(peer))
	switch {
	case p.opts.Wrapper != nil:
		launch.Argv = argv
		wrapped, err := p.opts.Wrapper.Wrap(launch)
		if err != nil {
			return nil, fmt.Errorf("wrap executor: %w", err)
		}
		if len(wrapped) == 0 {
			return nil, errors.New("wrap executor: empty command line")
		}
		return wrapped, nil
	case p.opts.Wrap != nil:
		return p.opts.Wrap(argv), nil
	}
	return argv, nil
}

// executorEnv is the executor's own environment: little, since nothing of
// the server's environment is to leak into the sandbox.
func (p *Provider) executorEnv(cred *credential) []string {
	env := []string{"PATH=" + p.opts.Path, "LANG=C.UTF-8"}
	if cred != nil {
		env = append(env, "HOME="+cred.home, "USER="+cred.name, "LOGNAME="+cred.name)
	}
	return append(env, p.opts.ExecutorEnv...)
}

// makeRunDir checks the run folder (made again if something removed it;
// 0711 with users: the executor's user may pass through to its own
// folder, nobody may list it) and creates the environment's folder inside
// it (0700, given to the executor's user) with its log file, opened
// while the folder is still the server's alone (0600, the server's: the
// executor writes it through its inherited stdout).
func (p *Provider) makeRunDir(dir string, cred *credential) (*os.File, error) {
	if err := ensureRunDir(p.opts.RunDir, p.sharedRunDir()); err != nil {
		return nil, err
	}
	if err := os.Mkdir(dir, 0o700); err != nil {
		return nil, err
	}
	if err := os.Mkdir(filepath.Join(dir, "spool"), 0o700); err != nil {
		return nil, err
	}
	logFile, err := os.OpenFile(filepath.Join(dir, "executor.log"), os.O_CREATE|os.O_EXCL|os.O_WRONLY|os.O_APPEND|syscall.O_NOFOLLOW, 0o600)
	if err != nil {
		return nil, err
	}
	if cred != nil {
		for _, d := range []string{dir, filepath.Join(dir, "spool")} {
			if err := os.Chown(d, int(cred.uid), int(cred.gid)); err != nil {
				logFile.Close()
				return nil, err
			}
		}
	}
	return logFile, nil
}

// listen creates the listening socket (0600) and returns it as a file to
// hand to the executor. The server keeps no listener open.
func listen(path string) (*os.File, error) {
	_ = os.Remove(path)
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		return nil, fmt.Errorf("listen: %w", err)
	}
	ln.SetUnlinkOnClose(false)
	defer ln.Close()
	if err := os.Chmod(path, 0o600); err != nil {
		_ = os.Remove(path)
		return nil, fmt.Errorf("listen: %w", err)
	}
	f, err := ln.File()
	if err != nil {
		_ = os.Remove(path)
		return nil, fmt.Errorf("listen: %w", err)
	}
	return f, nil
}

// runName is a short, unique, path-safe name for an environment.
func runName(sessionID string) string {
	var b strings.Builder
	for _, r := range sessionID {
		if b.Len() >= 12 {
			break
		}
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_' {
			b.WriteRune(r)
		}
	}
	var rnd [4]byte
	_, _ = rand.Read(rnd[:])
	if b.Len() == 0 {
		b.WriteString("env")
	}
	return b.String() + "-" + hex.EncodeToString(rnd[:])
}

// logTail returns the end of an executor's log, for error messages.
func logTail(dir string) string {
	b, err := readTail(filepath.Join(dir, "executor.log"), 2000)
	if err != nil {
		return "(no log: " + err.Error() + ")"
	}
	b = bytes.TrimSpace(b)
	if len(b) > 2000 {
		b = b[len(b)-2000:]
	}
	if len(b) == 0 {
		return "(empty log)"
	}
	return string(b)
}

// pidAlive reports whether pid is a live process (not a zombie).
func pidAlive(pid int) bool {
	if err := unix.Kill(pid, 0); err != nil && !errors.Is(err, unix.EPERM) {
		return false
	}
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return !errors.Is(err, fs.ErrNotExist)
	}
	// The state follows the command name, which is in parentheses and may
	// itself contain ") ".
	i := bytes.LastIndexByte(b, ')')
	if i < 0 || i+2 >= len(b) {
		return true
	}
	return b[i+2] != 'Z' && b[i+2] != 'X'
}

// waitGone waits until pid is no longer alive, polling, or until ctx ends.
func waitGone(ctx context.Context, pid int) bool {
	t := time.NewTicker(5 * time.Millisecond)
	defer t.Stop()
	for pidAlive(pid) {
		select {
		case <-ctx.Done():
			return false
		case <-t.C:
		}
	}
	return true
}
