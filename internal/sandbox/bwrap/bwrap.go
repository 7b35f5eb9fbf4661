// Package bwrap is the sandbox backend that runs each environment's
// executor inside bubblewrap: its own mount, pid, network, IPC, UTS and
// cgroup namespaces; the system read-only; the workspace the only
// writable place on disk (plus a private /tmp); no network but a loopback
// relay to the model proxy; and, through the executor backend it wraps,
// limits, a user per session and re-attachment after a server restart.
//
// Nothing ties the sandbox to the server's life: bubblewrap runs without
// --die-with-parent in a session of its own (the executor backend starts
// it with setsid), so when the server dies bubblewrap is re-parented to
// init, and the namespace lives as long as the executor inside it, whose
// socket the restarted server dials again (Recover).
package bwrap

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/agentd/agentd/internal/sandbox"
	"github.com/agentd/agentd/internal/sandbox/executor"
)

// Name is the backend name given to --sandbox.
const Name = "bwrap"

// Options configure a Provider.
type Options struct {
	// Options are the executor backend's: binary, run folder, user or
	// user pool, limits, model proxy… New sets Wrapper and
	// SwitchUserInside.
	executor.Options
	// Bwrap is the bubblewrap binary (default: bwrap in PATH).
	Bwrap string
	// ReadOnly are more host paths shown read-only at the same place
	// (e.g. /opt/toolchains). Missing ones are skipped.
	ReadOnly []string
	// TmpSize bounds the private /tmp in bytes (0: the tmpfs default,
	// half the RAM; its pages count against the memory limit anyway).
	TmpSize int64
}

// Provider creates bubblewrap environments. Safe for concurrent use.
type Provider struct {
	*executor.Provider
}

var (
	_ sandbox.Provider  = (*Provider)(nil)
	_ sandbox.Recoverer = (*Provider)(nil)
)

// New checks that bubblewrap works here and returns a Provider.
func New(opts Options) (*Provider, error) {
	bin := opts.Bwrap
	if bin == "" {
		var err error
		if bin, err = exec.LookPath("bwrap"); err != nil {
			return nil, fmt.Errorf("bwrap backend: bubblewrap not found (apt-get install bubblewrap): %w", err)
		}
	}
	w := &wrapper{bwrap: bin, readOnly: opts.ReadOnly, tmpSize: opts.TmpSize, root: os.Getuid() == 0}
	if err := w.probe(); err != nil {
		return nil, fmt.Errorf("bwrap backend: %w", err)
	}
	eo := opts.Options
	eo.Wrapper = w
	// As root, bubblewrap builds the sandbox without a user namespace and
	// the executor drops to the session's user itself: the executor's
	// peer check then sees the server's real uid, and no user namespace
	// is needed for users (some distributions restrict them).
	eo.SwitchUserInside = w.root
	if eo.Logger != nil {
		eo.Logger = eo.Logger.With("wrapper", Name)
	}
	p, err := executor.New(eo)
	if err != nil {
		return nil, fmt.Errorf("bwrap backend: %w", err)
	}
	return &Provider{Provider: p}, nil
}

// Name returns "bwrap".
func (p *Provider) Name() string { return Name }

// wrapper builds bubblewrap command lines. It holds no mutable state.
type wrapper struct {
	bwrap    string
	readOnly []string
	tmpSize  int64
	root     bool // the server runs as root
}

// systemDirs are shown read-only (or as the same symlink).
var systemDirs = []string{"/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"}

// etcFiles are the pieces of /etc programs need: users and groups for
// names, the dynamic linker's cache, certificates, alternatives (Debian's
// /usr/bin/awk and friends point there), time zone, shell defaults.
var etcFiles = []string{
	"/etc/passwd", "/etc/group", "/etc/nsswitch.conf", "/etc/hosts", "/etc/host.conf", "/etc/resolv.conf",
	"/etc/gai.conf", "/etc/services", "/etc/protocols", "/etc/localtime", "/etc/timezone",
	"/etc/ld.so.cache", "/etc/ld.so.conf", "/etc/ld.so.conf.d", "/etc/alternatives",
	"/etc/ssl", "/etc/ca-certificates", "/etc/ca-certificates.conf", "/etc/pki",
	"/etc/os-release", "/etc/profile", "/etc/profile.d", "/etc/bash.bashrc", "/etc/inputrc",
	"/etc/terminfo", "/etc/mime.types", "/etc/gitconfig", "/etc/npmrc", "/etc/environment",
}

// namespaces are the flags that isolate: everything but, for a root server
// starting the executor as root to switch users, the user namespace (see
// New).
func (w *wrapper) namespaces(switchUser bool) []string {
	args := []string{
		"--unshare-pid", "--unshare-net", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try",
		"--hostname", "agentd",
		// Own session: no TIOCSTI into a terminal of ours.
		"--new-session",
	}
	if !switchUser {
		// A user namespace whose only uid is the sandbox's, and no
		// further ones inside (less kernel surface for the agent).
		args = append(args, "--unshare-user", "--disable-userns")
	}
	if w.root {
		args = append(args, "--cap-drop", "ALL")
		if switchUser {
			args = append(args, "--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID")
		}
	}
	return args
}

// probe runs a trivial sandbox, so that a machine where bubblewrap cannot
// work (no user namespaces for a non-root server, seccomp of a container)
// fails at start with bubblewrap's own words.
func (w *wrapper) probe() error {
	b := newBuilder(w.bwrap)
	b.add(w.namespaces(false)...)
	w.system(b)
	b.add("--proc", "/proc", "--dev", "/dev", "--", "true")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, b.args[0], b.args[1:]...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("bubblewrap does not work here: %v: %s", err, strings.TrimSpace(string(out)))
	}
	return nil
}

// builder assembles a bubblewrap command line. Bubblewrap creates the
// missing parents of a mount point 0700, which a sandbox user could not
// pass: builder creates them 0755 first.
type builder struct {
	args   []string
	mounts map[string]bool // mount point → shows host content (its subfolders exist)
	made   map[string]bool // folders created with --dir
}

func newBuilder(bwrap string) *builder {
	return &builder{args: []string{bwrap}, mounts: map[string]bool{}, made: map[string]bool{}}
}

func (b *builder) add(args ...string) { b.args = append(b.args, args...) }

// parents creates dest's missing parents.
func (b *builder) parents(dest string) {
	var todo []string
	for d := filepath.Dir(dest); d != "/" && d != "."; d = filepath.Dir(d) {
		if host, ok := b.mounts[d]; ok {
			if host {
				todo = nil // everything below a host folder exists
			}
			break
		}
		if b.made[d] {
			break
		}
		todo = append(todo, d)
	}
	for i := len(todo) - 1; i >= 0; i-- {
		b.made[todo[i]] = true
		b.add("--perms", "0755", "--dir", todo[i])
	}
}

// mount adds a mount op ("--ro-bind", "--tmpfs"…) of src (none if "") at
// dest, preceded by extra options; host says dest shows host content.
func (b *builder) mount(op, src, dest string, host bool, extra ...string) {
	b.parents(dest)
	b.add(extra...)
	if src == "" {
		b.add(op, dest)
	} else {
		b.add(op, src, dest)
	}
	b.mounts[dest] = host
}

// system is the read-only view of the system.
func (w *wrapper) system(b *builder) {
	for _, d := range systemDirs {
		fi, err := os.Lstat(d)
		if err != nil {
			continue
		}
		if fi.Mode()&os.ModeSymlink != 0 {
			if target, err := os.Readlink(d); err == nil {
				b.add("--symlink", target, d)
			}
			continue
		}
		b.mount("--ro-bind", d, d, true)
	}
	for _, f := range etcFiles {
		if _, err := os.Stat(f); err == nil {
			b.mount("--ro-bind", f, f, true)
		}
	}
}

// Wrap returns the bubblewrap command line around the executor.
func (w *wrapper) Wrap(l executor.Launch) ([]string, error) {
	if len(l.Argv) == 0 || !filepath.IsAbs(l.Argv[0]) {
		return nil, fmt.Errorf("bwrap: the executor binary must be an absolute path, got %q", l.Argv)
	}
	if l.Workspace == "" || l.RunDir == "" {
		return nil, errors.New("bwrap: no workspace or run folder")
	}
	b := newBuilder(w.bwrap)
	b.add(w.namespaces(l.SwitchUser)...)
	w.system(b)
	b.mount("--proc", "", "/proc", false)
	b.mount("--dev", "", "/dev", false)
	// Private, world-writable (sticky) temporary folders.
	for _, d := range []string{"/tmp", "/var/tmp", "/dev/shm"} {
		extra := []string{"--perms", "1777"}
		if w.tmpSize > 0 && d == "/tmp" {
			extra = append([]string{"--size", strconv.FormatInt(w.tmpSize, 10)}, extra...)
		}
		b.mount("--tmpfs", "", d, false, extra...)
	}
	// Binds come after the tmpfs mounts: the workspace and run folder may
	// live under /tmp on the host.
	private := []string{l.Workspace, l.RunDir}
	if l.ModelProxyDir != "" {
		private = append(private, l.ModelProxyDir)
	}
	var shown []string
	show := func(p string) {
		for _, s := range shown {
			if p == s || strings.HasPrefix(p, s+"/") {
				return
			}
		}
		if _, err := os.Stat(p); err != nil {
			return
		}
		shown = append(shown, p)
		b.mount("--ro-bind", p, p, true)
	}
	show(l.Argv[0])
	for _, d := range pathDirs(l.Path, private) {
		show(d)
	}
	for _, d := range w.readOnly {
		if d = filepath.Clean(d); filepath.IsAbs(d) && !covers(d, private) {
			show(d)
		}
	}
	b.mount("--bind", l.Workspace, l.Workspace, true)
	b.mount("--bind", l.RunDir, l.RunDir, true)
	if l.ModelProxyDir != "" {
		b.mount("--ro-bind", l.ModelProxyDir, l.ModelProxyDir, true)
	}
	// Nothing else on disk is writable: the root (bubblewrap's tmpfs)
	// becomes read-only once everything is mounted. (No --chdir: before
	// the executor switches users, root without capabilities may not
	// enter the user's 0700 workspace; the executor sets each process's
	// folder anyway.)
	b.add("--remount-ro", "/", "--")
	b.add(l.Argv...)
	return b.args, nil
}

// pathDirs are the folders of PATH to show, read-only: not the system ones
// (shown anyway), not relative ones, and none that would expose a private
// folder (the workspace's parents hold the server's data). A
// node_modules/.bin folder is shown with its node_modules, where its
// links point.
func pathDirs(path string, private []string) []string {
	var out []string
	for _, d := range filepath.SplitList(path) {
		if d == "" || !filepath.IsAbs(d) {
			continue
		}
		d = filepath.Clean(d)
		if underSystem(d) {
			continue
		}
		if filepath.Base(d) == ".bin" && filepath.Base(filepath.Dir(d)) == "node_modules" {
			d = filepath.Dir(d)
		}
		if d == "/" || covers(d, private) {
			continue
		}
		if _, err := os.Stat(d); err != nil {
			continue
		}
		out = append(out, d)
	}
	return out
}

func underSystem(d string) bool {
	for _, s := range systemDirs {
		if d == s || strings.HasPrefix(d, s+"/") {
			return true
		}
	}
	return false
}

// covers reports whether d overlaps one of private: showing it would show
// a private folder (d is one of its parents), or it lies inside one (and
// is shown, writable, anyway).
func covers(d string, private []string) bool {
	for _, p := range private {
		if p == d || strings.HasPrefix(p, strings.TrimSuffix(d, "/")+"/") || strings.HasPrefix(d, p+"/") {
			return true
		}
	}
	return false
}
