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
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	rpc "github.com/agentd/agentd/internal/executor"
	"github.com/agentd/agentd/internal/sandbox"
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
// stdio on a log file in its run folder. It is not killed when the server
// exits: a goroutine reaps it if it ends while this process lives.
func (p *Provider) Create(ctx context.Context, spec sandbox.Spec) (sandbox.Environment, error) {
	if spec.Workspace == "" {
		return nil, errors.New("create executor: no workspace folder given")
	}
	ws, err := filepath.Abs(spec.Workspace)
	if err != nil {
		return nil, fmt.Errorf("create executor: %w", err)
	}
	if err := os.MkdirAll(ws, 0o755); err != nil {
		return nil, fmt.Errorf("create executor: %w", err)
	}
	if p.cred != nil {
		if err := chownTree(ws, int(p.cred.uid), int(p.cred.gid)); err != nil {
			return nil, fmt.Errorf("create executor: chown workspace: %w", err)
		}
	}
	name := runName(spec.SessionID)
	dir := filepath.Join(p.opts.RunDir, name)
	socket := filepath.Join(p.opts.RunDir, name+".sock")
	if len(socket) > maxSocketPath {
		return nil, fmt.Errorf("create executor: socket path %s is longer than %d bytes: use a shorter run folder", socket, maxSocketPath)
	}
	if err := p.makeRunDir(dir); err != nil {
		return nil, fmt.Errorf("create executor: %w", err)
	}
	cleanup := func() {
		_ = os.Remove(socket)
		_ = os.RemoveAll(dir)
	}
	lnFile, err := listen(socket)
	if err != nil {
		cleanup()
		return nil, fmt.Errorf("create executor: %w", err)
	}
	logFile, err := os.OpenFile(filepath.Join(dir, "executor.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		lnFile.Close()
		cleanup()
		return nil, fmt.Errorf("create executor: %w", err)
	}
	argv := p.command(spec, ws, dir)
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Dir = "/"
	cmd.Env = p.executorEnv()
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.ExtraFiles = []*os.File{lnFile} // fd 3
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if p.cred != nil {
		cmd.SysProcAttr.Credential = &syscall.Credential{Uid: p.cred.uid, Gid: p.cred.gid, Groups: p.cred.groups}
	}
	startErr := cmd.Start()
	lnFile.Close()
	logFile.Close()
	if startErr != nil {
		cleanup()
		return nil, fmt.Errorf("create executor: start %s: %w", argv[0], startErr)
	}
	reaped := make(chan struct{})
	go func() {
		// Reap it if it ends while we live; never kill it on our exit.
		_ = cmd.Wait()
		close(reaped)
	}()
	e := newEnvironment(p, spec, Handle{
		Socket: socket, PID: cmd.Process.Pid, ProtocolVersion: rpc.ProtocolVersion, Dir: dir,
	})
	e.reaped = reaped

	sctx, cancel := context.WithTimeout(ctx, p.opts.StartTimeout)
	defer cancel()
	connected := make(chan error, 1)
	go func() { connected <- e.connect(sctx) }()
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
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		<-reaped
		why := "exited at start"
		if err != nil {
			why = err.Error()
		}
		err = fmt.Errorf("%s; executor log: %s", why, logTail(dir))
		cleanup()
		return nil, fmt.Errorf("create executor: %w", err)
	}
	e.handle.StartedAt = e.ping.StartedAt
	p.log.Info("executor started", "session", spec.SessionID, "pid", e.handle.PID, "socket", socket)
	return e, nil
}

// command is the executor's command line (Wrap may prefix it).
func (p *Provider) command(spec sandbox.Spec, ws, dir string) []string {
	argv := []string{
		p.opts.Binary, "executor",
		"--listen-fd", "3",
		"--workspace", ws,
		"--session", spec.SessionID,
		"--spool-dir", filepath.Join(dir, "spool"),
		"--peer-uid", strconv.Itoa(os.Getuid()),
		"--path", p.opts.Path,
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
	if l := spec.Limits; l.MemoryBytes > 0 || l.Pids > 0 || l.CPUPercent > 0 {
		argv = append(argv, "--memory", strconv.FormatInt(l.MemoryBytes, 10),
			"--pids", strconv.FormatInt(l.Pids, 10), "--cpu", strconv.Itoa(l.CPUPercent))
	}
	if p.opts.Wrap != nil {
		argv = p.opts.Wrap(argv)
	}
	return argv
}

// executorEnv is the executor's own environment: little, since nothing of
// the server's environment is to leak into the sandbox.
func (p *Provider) executorEnv() []string {
	env := []string{"PATH=" + p.opts.Path, "LANG=C.UTF-8"}
	if p.cred != nil {
		env = append(env, "HOME="+p.cred.home, "USER="+p.cred.name, "LOGNAME="+p.cred.name)
	}
	return append(env, p.opts.ExecutorEnv...)
}

// makeRunDir creates the run folder (0711: the executor's user may pass
// through to its own folder, nobody may list it) and the environment's
// folder inside it (0700, owned by the executor's user).
func (p *Provider) makeRunDir(dir string) error {
	if err := os.MkdirAll(p.opts.RunDir, 0o711); err != nil {
		return err
	}
	if err := os.Mkdir(dir, 0o700); err != nil {
		return err
	}
	if err := os.Mkdir(filepath.Join(dir, "spool"), 0o700); err != nil {
		return err
	}
	if p.cred != nil {
		if err := os.Chmod(p.opts.RunDir, 0o711); err != nil {
			return err
		}
		for _, d := range []string{dir, filepath.Join(dir, "spool")} {
			if err := os.Chown(d, int(p.cred.uid), int(p.cred.gid)); err != nil {
				return err
			}
		}
	}
	return nil
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

func chownTree(root string, uid, gid int) error {
	return filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		return os.Lchown(p, uid, gid)
	})
}

// logTail returns the end of an executor's log, for error messages.
func logTail(dir string) string {
	b, err := os.ReadFile(filepath.Join(dir, "executor.log"))
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
