package local

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/agentd/agentd/sandbox"
)

var (
	// ErrNoInput: Write or CloseStdin on a process started without
	// Cmd.Stdin or Cmd.PTY.
	ErrNoInput = errors.New("local: process has no input")
	// ErrNotTerminal: Resize on a process not started with Cmd.PTY.
	ErrNotTerminal = errors.New("local: process has no terminal")
	// ErrTagInUse: Exec with the Tag of a process that is still running.
	ErrTagInUse = errors.New("local: process tag in use")
)

// Exec starts cmd. It is the one place where the environment's processes
// start:
//
//   - each process leads a new process group (in PTY mode a new session
//     with the terminal as its controlling tty), so Signal and Kill reach
//     everything it starts that stays in that group;
//   - its working folder is Cmd.Dir inside the workspace (symlinks inside
//     the workspace are followed);
//   - its environment is PATH (Options.Path), HOME (the workspace), LANG
//     (C.UTF-8), TERM (dumb, or xterm-256color on a PTY), overridden by
//     Spec.Env, then Cmd.Env; PWD is set to the working folder. Nothing
//     else of this process's environment is passed;
//   - argv[0] is looked up in that PATH (not this process's), and a
//     missing program is an error wrapping exec.ErrNotFound;
//   - stdin is a pipe with Cmd.Stdin, else /dev/null;
//   - on Linux, it gets SIGKILL if the process that started it dies
//     (Pdeathsig; macOS has no such signal).
//
// When the process exits, whatever is left in its process group (and, in
// PTY mode, its session) is killed with SIGKILL: background jobs do not
// outlive the command that started them.
//
// ctx bounds only the start.
func (e *Environment) Exec(ctx context.Context, c sandbox.Cmd) (sandbox.Process, error) {
	if len(c.Argv) == 0 || c.Argv[0] == "" {
		return nil, errors.New("exec: empty command")
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("exec %q: %w", c.Argv[0], err)
	}
	leave, err := e.enter()
	if err != nil {
		return nil, err
	}
	defer leave()

	dir, err := e.target(c.Dir, true, true)
	if err != nil {
		return nil, fmt.Errorf("exec %q: %w", c.Argv[0], err)
	}
	if info, err := e.root.Stat(dir); err != nil {
		return nil, fmt.Errorf("exec %q: %w", c.Argv[0], fsError("working folder", c.Dir, err))
	} else if !info.IsDir() {
		return nil, fmt.Errorf("exec %q: working folder %s: %w: not a folder", c.Argv[0], c.Dir, sandbox.ErrInvalidPath)
	}
	cwd := e.dir
	if dir != "." {
		cwd = filepath.Join(e.dir, filepath.FromSlash(dir))
	}
	env, err := e.environ(c, cwd)
	if err != nil {
		return nil, fmt.Errorf("exec %q: %w", c.Argv[0], err)
	}
	bin, err := lookPath(c.Argv[0], envValue(env, "PATH"), cwd)
	if err != nil {
		return nil, err
	}

	e.mu.Lock()
	tag := c.Tag
	if tag == "" {
		e.nextTag++
		tag = "p" + strconv.FormatUint(e.nextTag, 10)
		for e.tagTakenLocked(tag) { // a caller chose this name
			e.nextTag++
			tag = "p" + strconv.FormatUint(e.nextTag, 10)
		}
	}
	if e.tagTakenLocked(tag) {
		e.mu.Unlock()
		return nil, fmt.Errorf("exec %q: %w: %s", c.Argv[0], ErrTagInUse, tag)
	}
	// Reserve the tag (nil entry) so a concurrent Exec can't take it.
	e.procs[tag] = nil
	e.mu.Unlock()

	cmd := &exec.Cmd{Path: bin, Args: c.Argv, Dir: cwd, Env: env}
	p, err := start(e, cmd, tag, c)
	e.mu.Lock()
	if err != nil {
		delete(e.procs, tag)
	} else {
		e.procs[tag] = p
	}
	e.mu.Unlock()
	if err != nil {
		return nil, fmt.Errorf("exec %q: %w", c.Argv[0], err)
	}
	e.log.Debug("process started", "tag", tag, "pid", p.pid, "argv", c.Argv, "dir", dir, "pty", c.PTY != nil)
	go p.wait()
	return p, nil
}

// tagTakenLocked reports whether tag names a running process or one being
// started (reserved as a nil entry). e.mu must be held.
func (e *Environment) tagTakenLocked(tag string) bool {
	_, ok := e.procs[tag]
	return ok
}

// environ builds a process's environment: a minimal base, then Spec.Env,
// then Cmd.Env.
func (e *Environment) environ(c sandbox.Cmd, cwd string) ([]string, error) {
	m := map[string]string{
		"PATH": e.opts.Path,
		"HOME": e.dir,
		"LANG": "C.UTF-8",
		"TERM": "dumb",
	}
	if c.PTY != nil {
		m["TERM"] = "xterm-256color"
	}
	for _, src := range []map[string]string{e.spec.Env, c.Env} {
		for k, v := range src {
			if k == "" || strings.ContainsAny(k, "=\x00") || strings.ContainsRune(v, 0) {
				return nil, fmt.Errorf("invalid environment variable %q", k)
			}
			m[k] = v
		}
	}
	m["PWD"] = cwd
	env := make([]string, 0, len(m))
	for k, v := range m {
		env = append(env, k+"="+v)
	}
	sort.Strings(env)
	return env, nil
}

func envValue(env []string, key string) string {
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, key+"="); ok {
			return v
		}
	}
	return ""
}

// lookPath finds name the way the child's shell would: a name with a slash
// is taken relative to the working folder, else each absolute folder of
// pathEnv is tried (relative PATH entries are skipped, as exec.LookPath
// refuses them too).
func lookPath(name, pathEnv, cwd string) (string, error) {
	if strings.Contains(name, "/") {
		p := name
		if !filepath.IsAbs(p) {
			p = filepath.Join(cwd, p)
		}
		if err := executable(p); err != nil {
			return "", fmt.Errorf("exec %q: %w: %w", name, exec.ErrNotFound, err)
		}
		return p, nil
	}
	for _, dir := range filepath.SplitList(pathEnv) {
		if !filepath.IsAbs(dir) {
			continue
		}
		p := filepath.Join(dir, name)
		if executable(p) == nil {
			return p, nil
		}
	}
	return "", fmt.Errorf("exec %q: %w in PATH %s", name, exec.ErrNotFound, pathEnv)
}

func executable(p string) error {
	info, err := os.Stat(p)
	if err != nil {
		return err
	}
	if info.IsDir() || !info.Mode().IsRegular() {
		return fmt.Errorf("%s: not a regular file", p)
	}
	if info.Mode()&0o111 == 0 {
		return fmt.Errorf("%s: %w", p, fs.ErrPermission)
	}
	return nil
}

var (
	sigTerm = unix.SIGTERM
	sigKill = unix.SIGKILL
)

// signalName is the conventional name of sig ("SIGKILL"), or its number.
func signalName(sig syscall.Signal) string {
	if n := unix.SignalName(sig); n != "" {
		return n
	}
	return "SIG" + strconv.Itoa(int(sig))
}
