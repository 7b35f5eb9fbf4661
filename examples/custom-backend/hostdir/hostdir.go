// Package hostdir is a sandbox backend written outside agentd, against its
// public sandbox package only: each session's processes run on this host,
// in the session's workspace folder, each command in a process group of
// its own, and only the commands of an allow-list may start. Files are
// reached through an os.Root, so no path or symlink leads out of the
// workspace; the watcher polls.
//
// It isolates nothing beyond that (no other user, no namespaces, no
// limits): it shows the extension point, it is not a security boundary.
package hostdir

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/agentd/agentd/sandbox"
)

// Name is the backend's name.
const Name = "hostdir"

// Options configure a Provider.
type Options struct {
	// Allow lists the commands processes may be started with, by name
	// (looked up on PATH; argv[0] with a slash is then refused); empty
	// allows every command. It bounds what the server starts, not what
	// those commands run in turn.
	Allow []string
	// PollInterval is how often watchers compare the workspace (default
	// 50ms).
	PollInterval time.Duration
}

// Provider creates environments. It is safe for concurrent use.
type Provider struct{ opts Options }

// New returns a Provider.
func New(opts Options) *Provider {
	if opts.PollInterval <= 0 {
		opts.PollInterval = 50 * time.Millisecond
	}
	return &Provider{opts: opts}
}

// ErrNotAllowed: a command outside the allow-list.
var ErrNotAllowed = errors.New("hostdir: command not allowed")

var (
	_ sandbox.Provider    = (*Provider)(nil)
	_ sandbox.Environment = (*Environment)(nil)
	_ sandbox.Process     = (*process)(nil)
)

// Name implements sandbox.Provider.
func (p *Provider) Name() string { return Name }

// Create implements sandbox.Provider: the workspace folder is made if
// missing, and kept as it is otherwise.
func (p *Provider) Create(ctx context.Context, spec sandbox.Spec) (sandbox.Environment, error) {
	dir, err := filepath.Abs(spec.Workspace)
	if err != nil {
		return nil, fmt.Errorf("hostdir: workspace: %w", err)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("hostdir: workspace: %w", err)
	}
	root, err := os.OpenRoot(dir)
	if err != nil {
		return nil, fmt.Errorf("hostdir: workspace: %w", err)
	}
	return &Environment{p: p, spec: spec, dir: dir, root: root, procs: map[*process]struct{}{}, stop: make(chan struct{})}, nil
}

// Environment is one session's environment. Its methods are safe for
// concurrent use.
type Environment struct {
	p    *Provider
	spec sandbox.Spec
	dir  string
	root *os.Root

	mu         sync.Mutex // guards terminated, procs, tags
	terminated bool
	procs      map[*process]struct{}
	tags       int

	stop     chan struct{}  // closed by Terminate: watchers end
	watchers sync.WaitGroup // watcher goroutines
}

// Running implements sandbox.Environment.
func (e *Environment) Running() bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return !e.terminated
}

// WorkDir implements sandbox.Environment.
func (e *Environment) WorkDir() string { return e.dir }

// clean checks the environment is up and the path valid.
func (e *Environment) clean(p string) (string, error) {
	if !e.Running() {
		return "", sandbox.ErrTerminated
	}
	return sandbox.CleanPath(p)
}

// fsErr maps an os error to the sandbox package's.
func fsErr(op, p string, err error) error {
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return fmt.Errorf("%s %s: %w", op, p, sandbox.ErrNotFound)
	case strings.Contains(err.Error(), "path escapes from parent"):
		// os.Root refused a symlink out of the workspace.
		return fmt.Errorf("%s %s: %w", op, p, sandbox.ErrInvalidPath)
	}
	return fmt.Errorf("%s %s: %w", op, p, err)
}

// ReadFile implements sandbox.Environment.
func (e *Environment) ReadFile(ctx context.Context, p string) ([]byte, error) {
	c, err := e.clean(p)
	if err != nil {
		return nil, err
	}
	fi, err := e.root.Stat(c)
	if err != nil {
		return nil, fsErr("read", c, err)
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("read %s: %w", c, sandbox.ErrNotRegular)
	}
	b, err := e.root.ReadFile(c)
	if err != nil {
		return nil, fsErr("read", c, err)
	}
	return b, nil
}

// WriteFile implements sandbox.Environment.
func (e *Environment) WriteFile(ctx context.Context, p string, data []byte, mode fs.FileMode) error {
	c, err := e.clean(p)
	if err != nil {
		return err
	}
	if c == "." {
		return fmt.Errorf("write: %w: the workspace root", sandbox.ErrInvalidPath)
	}
	if mode == 0 {
		mode = 0o644
	}
	if d := path.Dir(c); d != "." {
		if err := e.root.MkdirAll(d, 0o755); err != nil {
			return fsErr("write", c, err)
		}
	}
	if err := e.root.WriteFile(c, data, mode); err != nil {
		return fsErr("write", c, err)
	}
	if err := e.root.Chmod(c, mode); err != nil {
		return fsErr("write", c, err)
	}
	return nil
}

// WriteFiles implements sandbox.Environment.
func (e *Environment) WriteFiles(ctx context.Context, files []sandbox.File) error {
	for _, f := range files {
		if err := e.WriteFile(ctx, f.Path, f.Content, f.Mode); err != nil {
			return err
		}
	}
	return nil
}

// List implements sandbox.Environment.
func (e *Environment) List(ctx context.Context, dir string, recursive bool) ([]sandbox.FileInfo, error) {
	c, err := e.clean(dir)
	if err != nil {
		return nil, err
	}
	fi, err := e.root.Stat(c)
	if err != nil {
		return nil, fsErr("list", c, err)
	}
	if !fi.IsDir() {
		return nil, fmt.Errorf("list %s: %w: not a folder", c, sandbox.ErrInvalidPath)
	}
	var out []sandbox.FileInfo
	err = fs.WalkDir(e.root.FS(), c, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if p == c {
			return nil
		}
		if e.ignored(p) && c == "." {
			if d.IsDir() {
				return fs.SkipDir
			}
			return nil
		}
		info, err := d.Info()
		if err != nil {
			return nil // removed meanwhile
		}
		out = append(out, sandbox.FileInfo{Path: p, Size: info.Size(), Mode: info.Mode(), IsDir: d.IsDir(), ModTime: info.ModTime()})
		if d.IsDir() && !recursive {
			return fs.SkipDir
		}
		return nil
	})
	if err != nil {
		return nil, fsErr("list", c, err)
	}
	slices.SortFunc(out, func(a, b sandbox.FileInfo) int { return strings.Compare(a.Path, b.Path) })
	return out, nil
}

// Remove implements sandbox.Environment: a file, or a folder with what
// it holds.
func (e *Environment) Remove(ctx context.Context, p string) error {
	c, err := e.clean(p)
	if err != nil {
		return err
	}
	if c == "." {
		return fmt.Errorf("remove: %w: the workspace root", sandbox.ErrInvalidPath)
	}
	if _, err := e.root.Lstat(c); err != nil {
		return fsErr("remove", c, err)
	}
	if err := e.root.RemoveAll(c); err != nil {
		return fsErr("remove", c, err)
	}
	return nil
}

// ignored reports whether the spec's ignore list names a part of p.
func (e *Environment) ignored(p string) bool {
	for _, ig := range e.spec.Ignore {
		if p == ig || strings.HasPrefix(p, ig+"/") || slices.Contains(strings.Split(p, "/"), ig) {
			return true
		}
	}
	return false
}

// Exec implements sandbox.Environment.
func (e *Environment) Exec(ctx context.Context, cmd sandbox.Cmd) (sandbox.Process, error) {
	if !e.Running() {
		return nil, sandbox.ErrTerminated
	}
	if len(cmd.Argv) == 0 {
		return nil, errors.New("hostdir: empty command line")
	}
	if cmd.PTY != nil {
		return nil, fmt.Errorf("hostdir: terminals: %w", errors.ErrUnsupported)
	}
	if len(e.p.opts.Allow) > 0 && (strings.Contains(cmd.Argv[0], "/") || !slices.Contains(e.p.opts.Allow, cmd.Argv[0])) {
		return nil, fmt.Errorf("%w: %s", ErrNotAllowed, cmd.Argv[0])
	}
	dir := "."
	if cmd.Dir != "" {
		var err error
		if dir, err = sandbox.CleanPath(cmd.Dir); err != nil {
			return nil, err
		}
	}
	c := exec.Command(cmd.Argv[0], cmd.Argv[1:]...)
	c.Dir = filepath.Join(e.dir, dir)
	c.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + e.dir}
	for _, vars := range []map[string]string{e.spec.Env, cmd.Env} {
		for k, v := range vars {
			c.Env = append(c.Env, k+"="+v)
		}
	}
	c.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.terminated {
		return nil, sandbox.ErrTerminated
	}
	stdout, err := c.StdoutPipe()
	if err != nil {
		return nil, err
	}
	stderr, err := c.StderrPipe()
	if err != nil {
		return nil, err
	}
	var stdin io.WriteCloser
	if cmd.Stdin {
		if stdin, err = c.StdinPipe(); err != nil {
			return nil, err
		}
	}
	if err := c.Start(); err != nil {
		return nil, fmt.Errorf("hostdir: start %s: %w", cmd.Argv[0], err)
	}
	tag := cmd.Tag
	if tag == "" {
		e.tags++
		tag = "p" + strconv.Itoa(e.tags)
	}
	p := &process{tag: tag, cmd: c, stdin: stdin, out: make(chan sandbox.Chunk, 16), exited: make(chan struct{})}
	e.procs[p] = struct{}{}
	var readers sync.WaitGroup
	for _, s := range []struct {
		r  io.Reader
		st sandbox.Stream
	}{{stdout, sandbox.Stdout}, {stderr, sandbox.Stderr}} {
		readers.Go(func() { p.read(s.r, s.st) })
	}
	go func() {
		readers.Wait() // Wait may not be called before the pipes are read out
		close(p.out)
		p.status = exitStatus(c.Wait())
		close(p.exited)
		e.mu.Lock()
		delete(e.procs, p)
		e.mu.Unlock()
	}()
	return p, nil
}

// Watch implements sandbox.Environment: the workspace is compared every
// PollInterval.
func (e *Environment) Watch(ctx context.Context) (<-chan sandbox.FileEvent, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.terminated {
		return nil, sandbox.ErrTerminated
	}
	ch := make(chan sandbox.FileEvent, 64)
	before := e.scan()
	e.watchers.Go(func() {
		defer close(ch)
		t := time.NewTicker(e.p.opts.PollInterval)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-e.stop:
				return
			case <-t.C:
			}
			now := e.scan()
			for _, ev := range diff(before, now) {
				if ev.Op != sandbox.Deleted {
					ev.SHA256 = e.sum(ev.Path)
				}
				select {
				case ch <- ev:
				case <-ctx.Done():
					return
				case <-e.stop:
					return
				}
			}
			before = now
		}
	})
	return ch, nil
}

type entry struct {
	size  int64
	mtime time.Time
}

// scan returns the workspace's regular files.
func (e *Environment) scan() map[string]entry {
	files := map[string]entry{}
	_ = fs.WalkDir(e.root.FS(), ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil || p == "." {
			return nil
		}
		if e.ignored(p) {
			if d.IsDir() {
				return fs.SkipDir
			}
			return nil
		}
		if d.Type().IsRegular() {
			if info, err := d.Info(); err == nil {
				files[p] = entry{info.Size(), info.ModTime()}
			}
		}
		return nil
	})
	return files
}

// diff returns the changes from before to now, by path.
func diff(before, now map[string]entry) []sandbox.FileEvent {
	var evs []sandbox.FileEvent
	for p, n := range now {
		b, ok := before[p]
		switch {
		case !ok:
			evs = append(evs, sandbox.FileEvent{Op: sandbox.Created, Path: p, Size: n.size})
		case b != n:
			evs = append(evs, sandbox.FileEvent{Op: sandbox.Modified, Path: p, Size: n.size})
		}
	}
	for p := range before {
		if _, ok := now[p]; !ok {
			evs = append(evs, sandbox.FileEvent{Op: sandbox.Deleted, Path: p})
		}
	}
	slices.SortFunc(evs, func(a, b sandbox.FileEvent) int { return strings.Compare(a.Path, b.Path) })
	return evs
}

// sum is a file's SHA-256, for files up to 1 MiB.
func (e *Environment) sum(p string) string {
	b, err := e.root.ReadFile(p)
	if err != nil || len(b) > 1<<20 {
		return ""
	}
	h := sha256.Sum256(b)
	return hex.EncodeToString(h[:])
}

// Terminate implements sandbox.Environment: every process group is
// killed, every watch channel closed; the workspace stays.
func (e *Environment) Terminate(ctx context.Context) error {
	e.mu.Lock()
	if e.terminated {
		e.mu.Unlock()
		return nil
	}
	e.terminated = true
	procs := make([]*process, 0, len(e.procs))
	for p := range e.procs {
		procs = append(procs, p)
	}
	close(e.stop)
	e.mu.Unlock()
	for _, p := range procs {
		_ = p.Kill()
	}
	for _, p := range procs {
		select {
		case <-p.exited:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	e.watchers.Wait()
	return e.root.Close()
}

// process is a started command. It is reaped once its output has been
// read to the end (as the server always does): Output must be drained.
type process struct {
	tag    string
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	out    chan sandbox.Chunk
	exited chan struct{}
	status sandbox.ExitStatus // set before exited is closed
}

func (p *process) read(r io.Reader, st sandbox.Stream) {
	var off int64
	for {
		buf := make([]byte, 32<<10)
		n, err := r.Read(buf)
		if n > 0 {
			p.out <- sandbox.Chunk{Stream: st, Data: buf[:n], Offset: off}
			off += int64(n)
		}
		if err != nil {
			return
		}
	}
}

func (p *process) Tag() string                  { return p.tag }
func (p *process) Output() <-chan sandbox.Chunk { return p.out }

func (p *process) Write(b []byte) (int, error) {
	if p.stdin == nil {
		return 0, errors.New("hostdir: the process has no stdin pipe")
	}
	return p.stdin.Write(b)
}

func (p *process) CloseStdin() error {
	if p.stdin == nil {
		return nil
	}
	return p.stdin.Close()
}

// Signal signals the whole process group.
func (p *process) Signal(sig os.Signal) error {
	s, ok := sig.(syscall.Signal)
	if !ok {
		return fmt.Errorf("hostdir: signal %v: %w", sig, errors.ErrUnsupported)
	}
	if err := syscall.Kill(-p.cmd.Process.Pid, s); err != nil && !errors.Is(err, syscall.ESRCH) {
		return err
	}
	return nil
}

// Kill kills the whole process group.
func (p *process) Kill() error { return p.Signal(syscall.SIGKILL) }

func (p *process) Resize(sandbox.WindowSize) error {
	return fmt.Errorf("hostdir: terminals: %w", errors.ErrUnsupported)
}

func (p *process) Wait(ctx context.Context) (sandbox.ExitStatus, error) {
	select {
	case <-p.exited:
		return p.status, nil
	case <-ctx.Done():
		return sandbox.ExitStatus{}, ctx.Err()
	}
}

// exitStatus reads how a process ended from Wait's error.
func exitStatus(err error) sandbox.ExitStatus {
	var ee *exec.ExitError
	if !errors.As(err, &ee) {
		if err != nil {
			return sandbox.ExitStatus{Code: -1}
		}
		return sandbox.ExitStatus{}
	}
	if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return sandbox.ExitStatus{Code: -1, Signal: signalName(ws.Signal())}
	}
	return sandbox.ExitStatus{Code: ee.ExitCode()}
}

func signalName(s syscall.Signal) string {
	switch s {
	case syscall.SIGKILL:
		return "SIGKILL"
	case syscall.SIGTERM:
		return "SIGTERM"
	case syscall.SIGINT:
		return "SIGINT"
	}
	return "SIG" + strconv.Itoa(int(s))
}
