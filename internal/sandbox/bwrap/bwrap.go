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
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/agentd/agentd/internal/sandbox/executor"
	"github.com/agentd/agentd/sandbox"
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
	// SandboxUID is the host uid (and gid) a root server runs sandboxes
	// as when neither RunAsUser nor UserPool is set (0: DefaultSandboxUID).
	// Inside, it is root: the sandbox's user namespace maps its uid 0 to
	// this uid, so nothing the sandbox makes (a set-uid copy of a shell,
	// say) is the host root's.
	SandboxUID uint32
}

// DefaultSandboxUID is Options.SandboxUID's default: a uid no system
// allocates (above the ranges systemd and Debian assign, below 2^31) and
// without a passwd entry.
const DefaultSandboxUID = 2000000000

// Provider creates bubblewrap environments. Safe for concurrent use.
type Provider struct {
	*executor.Provider
}

var (
	_ sandbox.Provider    = (*Provider)(nil)
	_ sandbox.Recoverer   = (*Provider)(nil)
	_ executor.PeerMapper = (*wrapper)(nil)
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
	if err := w.probe(-1, ""); err != nil {
		return nil, fmt.Errorf("bwrap backend: %w", err)
	}
	eo := opts.Options
	eo.Wrapper = w
	if eo.Logger == nil {
		eo.Logger = slog.Default()
	}
	eo.Logger = eo.Logger.With("wrapper", Name)
	// As root with users, bubblewrap builds the sandbox without a user
	// namespace and the executor drops to the session's user itself: the
	// executor's peer check then sees the server's real uid, and no user
	// namespace is needed for users (some distributions restrict them).
	eo.SwitchUserInside = w.root
	if w.root && eo.RunAsUser == "" && len(eo.UserPool) == 0 {
		// Root's sandbox is never the host's root: bubblewrap runs as the
		// sandbox uid, unprivileged, in a user namespace whose uid 0 is
		// that uid (so the sandbox keeps no nested user namespaces). Where
		// such namespaces are not allowed, the executor switches to the
		// uid itself (no user namespace).
		uid := opts.SandboxUID
		if uid == 0 {
			uid = DefaultSandboxUID
		}
		eo.RunAsUser = strconv.FormatUint(uint64(uid), 10)
		if err := w.probe(int(uid), ""); err != nil {
			eo.Logger.Warn("bubblewrap cannot make a user namespace as the sandbox uid: the sandbox runs as that uid without one (no root inside, nested user namespaces possible)",
				"uid", uid, "err", err)
		} else {
			eo.SwitchUserInside = false
			bin := eo.Binary
			if bin == "" {
				bin, _ = os.Executable()
			}
			if err := w.probe(int(uid), bin); err != nil {
				return nil, fmt.Errorf("bwrap backend: the sandbox uid %d cannot reach the agentd binary %s (every folder above it must let other users pass): %w", uid, bin, err)
			}
		}
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

// userMode is how bubblewrap runs and who the sandbox is.
type userMode int

const (
	// asServer: bubblewrap runs as the (non-root) server, in a user
	// namespace whose only uid is the server's.
	asServer userMode = iota
	// switchInside: a root bubblewrap without a user namespace; the
	// executor switches to the session's user itself.
	switchInside
	// mappedRoot: bubblewrap runs as the sandbox's unprivileged host uid,
	// in a user namespace mapping the sandbox's uid 0 to it.
	mappedRoot
)

// mode is the userMode of a launch.
func (w *wrapper) mode(l executor.Launch) userMode {
	switch {
	case l.SwitchUser:
		return switchInside
	case w.root && l.UID != 0:
		return mappedRoot
	}
	return asServer
}

// PeerUID is the server's uid as the executor sees it (executor.PeerMapper):
// in the mappedRoot mode the sandbox's user namespace maps only the sandbox
// uid, so the (root) server is the overflow uid there. Only the server can
// reach the executor's socket (0600, its own, in its run folder), so that
// uid, which every unmapped user shares, admits no one else.
func (w *wrapper) PeerUID(l executor.Launch) int {
	if w.mode(l) != mappedRoot {
		return os.Getuid()
	}
	return overflowUID()
}

// overflowUID is the uid the kernel shows for a uid a user namespace does
// not map.
func overflowUID() int {
	b, err := os.ReadFile("/proc/sys/kernel/overflowuid")
	if err != nil {
		return 65534
	}
	n, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		return 65534
	}
	return n
}

// namespaces are the flags that isolate: everything, and the user
// namespace unless a root bubblewrap leaves the switch of users to the
// executor (see New).
func (w *wrapper) namespaces(m userMode) []string {
	args := []string{
		"--unshare-pid", "--unshare-net", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try",
		"--hostname", "agentd",
		// Own session: no TIOCSTI into a terminal of ours.
		"--new-session",
	}
	if m != switchInside {
		// A user namespace whose only uid is the sandbox's, and no
		// further ones inside (less kernel surface for the agent).
		args = append(args, "--unshare-user", "--disable-userns")
	}
	if m == mappedRoot {
		args = append(args, "--uid", "0", "--gid", "0")
	}
	if w.root {
		args = append(args, "--cap-drop", "ALL")
		if m == switchInside {
			args = append(args, "--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID")
		}
	}
	return args
}

// probe runs a trivial sandbox, so that a machine where bubblewrap cannot
// work (no user namespaces for a non-root server, seccomp of a container)
// fails at start with bubblewrap's own words. With uid >= 0 (a root
// server) bubblewrap runs as that uid, in the mappedRoot mode, and shows
// bin (when set), which the uid must be able to reach.
func (w *wrapper) probe(uid int, bin string) error {
	b := newBuilder(w.bwrap)
	m := asServer
	if uid >= 0 {
		m = mappedRoot
	}
	b.add(w.namespaces(m)...)
	w.system(b)
	b.add("--proc", "/proc", "--dev", "/dev")
	if bin != "" && !underSystem(bin) {
		b.mount("--ro-bind", bin, bin, true)
	}
	b.add("--", "true")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, b.args[0], b.args[1:]...)
	cmd.Dir = "/"
	if uid >= 0 {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(uid), Gid: uint32(uid), Groups: []uint32{}}}
	}
	out, err := cmd.CombinedOutput()
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
	b.add(w.namespaces(w.mode(l))...)
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
	mode := w.mode(l)
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
		// bubblewrap started as the sandbox's uid mounts only what
		// that uid can reach (a PATH folder under /root cannot be).
		if mode == mappedRoot && !reachable(p, uint32(l.UID), uint32(l.GID)) {
			return
		}
		shown = append(shown, p)
		b.mount("--ro-bind", p, p, true)
	}
	if mode == mappedRoot && !reachable(l.Argv[0], uint32(l.UID), uint32(l.GID)) {
		return nil, fmt.Errorf("bwrap: the sandbox uid %d cannot reach the agentd binary %s: every folder above it must let other users pass", l.UID, l.Argv[0])
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

// reachable reports whether uid (with gid as its only group) may read p:
// pass through every folder above it (symlinks resolved) and read it (and
// pass through it, if a folder).
func reachable(p string, uid, gid uint32) bool {
	real, err := filepath.EvalSymlinks(p)
	if err != nil {
		return false
	}
	may := func(path string, want uint32) bool {
		var st syscall.Stat_t
		if err := syscall.Stat(path, &st); err != nil {
			return false
		}
		mode := uint32(st.Mode) // uint16 on macOS
		perm := mode & 0o7
		switch {
		case st.Uid == uid:
			perm = mode >> 6 & 0o7
		case st.Gid == gid:
			perm = mode >> 3 & 0o7
		}
		if want&0o1 != 0 && mode&syscall.S_IFMT != syscall.S_IFDIR {
			want &^= 0o1 // a file need not be executable to be shown
		}
		return perm&want == want
	}
	for d := filepath.Dir(real); ; d = filepath.Dir(d) {
		if !may(d, 0o1) {
			return false
		}
		if d == "/" {
			break
		}
	}
	return may(real, 0o5)
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
