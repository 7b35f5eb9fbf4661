// Package cgroup puts a sandbox's processes in a control group of their own,
// bounds its memory, process count and CPU, and kills everything in it at
// the end. It supports cgroup v2 (one unified hierarchy) and cgroup v1 (one
// hierarchy per controller: pids, memory, cpu, plus freezer to kill
// reliably), picking whichever provides the controllers on this machine.
//
// A process is started inside its group from its very first instruction, so
// nothing it forks can stay outside: with v2 through CLONE_INTO_CGROUP, with
// v1 by moving the forking thread into the group just before the fork (v1
// places threads individually) and discarding that thread afterwards.
package cgroup

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/agentd/agentd/sandbox"
)

// Version is a cgroup hierarchy kind.
type Version int

const (
	// None: no usable cgroup hierarchy; limits must come from elsewhere.
	None Version = iota
	V1
	V2
)

func (v Version) String() string {
	switch v {
	case V1:
		return "cgroup v1"
	case V2:
		return "cgroup v2"
	}
	return "none"
}

// ErrUnavailable: cgroups cannot be used here (not root, nothing delegated,
// controllers missing). The error wrapping it says why.
var ErrUnavailable = errors.New("cgroup: unavailable")

// The controllers a sandbox needs.
var wanted = []string{"pids", "memory", "cpu"}

// Options configure Detect. The zero value detects everything.
type Options struct {
	// Parent is the group, relative to this process's own group in each
	// hierarchy, that holds the sandboxes' groups. Default "agentd".
	Parent string
	// Version forces a version (None: whichever provides the controllers).
	Version Version
	// MountInfo and SelfCgroup replace /proc/self/mountinfo and
	// /proc/self/cgroup (tests).
	MountInfo, SelfCgroup string
}

// Manager creates groups under one parent. It holds no mutable state: safe
// for concurrent use.
type Manager struct {
	version Version
	// dirs are the parent group's folders: one for v2, one per hierarchy
	// for v1 (each with the controllers it carries).
	dirs []hierarchy
}

type hierarchy struct {
	dir         string   // the parent group's folder in this hierarchy
	controllers []string // controllers of this hierarchy we use
	mount       string   // the hierarchy's mount point
	key         string   // its name in /proc/<pid>/cgroup ("" for v2, "pids", "cpu,cpuacct"…)
}

// Detect finds the hierarchy to use and creates the parent group. Without
// root (or a delegated group), or without the pids/memory/cpu controllers,
// it returns an error wrapping ErrUnavailable.
func Detect(opts Options) (*Manager, error) {
	if opts.Parent == "" {
		opts.Parent = "agentd"
	}
	if filepath.IsAbs(opts.Parent) || strings.Contains(opts.Parent, "..") {
		return nil, fmt.Errorf("cgroup: parent %q must be a relative name", opts.Parent)
	}
	if opts.MountInfo == "" {
		opts.MountInfo = "/proc/self/mountinfo"
	}
	if opts.SelfCgroup == "" {
		opts.SelfCgroup = "/proc/self/cgroup"
	}
	mounts, err := readMounts(opts.MountInfo)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrUnavailable, err)
	}
	own, err := readSelfCgroup(opts.SelfCgroup)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrUnavailable, err)
	}
	var reasons []string
	if opts.Version == None || opts.Version == V2 {
		m, err := detectV2(mounts, own, opts.Parent)
		if err == nil {
			return m, nil
		}
		reasons = append(reasons, err.Error())
	}
	if opts.Version == None || opts.Version == V1 {
		m, err := detectV1(mounts, own, opts.Parent)
		if err == nil {
			return m, nil
		}
		reasons = append(reasons, err.Error())
	}
	return nil, fmt.Errorf("%w: %s", ErrUnavailable, strings.Join(reasons, "; "))
}

func detectV2(mounts []mount, own map[string]string, parent string) (*Manager, error) {
	var mnt *mount
	for i := range mounts {
		if mounts[i].fstype == "cgroup2" {
			mnt = &mounts[i]
			break
		}
	}
	if mnt == nil {
		return nil, errors.New("v2: no cgroup2 mount")
	}
	ownPath, ok := own[""]
	if !ok {
		return nil, errors.New("v2: this process has no v2 group")
	}
	base := filepath.Join(mnt.point, ownPath)
	avail, err := readWords(filepath.Join(base, "cgroup.controllers"))
	if err != nil {
		return nil, fmt.Errorf("v2: %v", err)
	}
	var ctrls []string
	for _, c := range wanted {
		if slices.Contains(avail, c) {
			ctrls = append(ctrls, c)
		}
	}
	if len(ctrls) == 0 {
		return nil, fmt.Errorf("v2: none of %v is available in %s", wanted, base)
	}
	// A non-root v2 group holding processes (this one) cannot hand
	// controllers to children; only the root group or a group delegated
	// to us as a parent can.
	if ownPath != "/" {
		return nil, fmt.Errorf("v2: this process is in %s, not the root group; give a delegated parent group", ownPath)
	}
	if err := enable(base, ctrls); err != nil {
		return nil, fmt.Errorf("v2: %v", err)
	}
	dir := filepath.Join(base, parent)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("v2: %v", err)
	}
	if err := enable(dir, ctrls); err != nil {
		return nil, fmt.Errorf("v2: %v", err)
	}
	return &Manager{version: V2, dirs: []hierarchy{{dir: dir, controllers: ctrls, mount: mnt.point}}}, nil
}

// enable turns controllers on for dir's children.
func enable(dir string, ctrls []string) error {
	have, err := readWords(filepath.Join(dir, "cgroup.subtree_control"))
	if err != nil {
		return err
	}
	var add []string
	for _, c := range ctrls {
		if !slices.Contains(have, c) {
			add = append(add, "+"+c)
		}
	}
	if len(add) == 0 {
		return nil
	}
	return writeFile(filepath.Join(dir, "cgroup.subtree_control"), strings.Join(add, " "))
}

func detectV1(mounts []mount, own map[string]string, parent string) (*Manager, error) {
	m := &Manager{version: V1}
	found := map[string]bool{}
	for _, mt := range mounts {
		if mt.fstype != "cgroup" {
			continue
		}
		var ctrls []string
		for _, c := range append(slices.Clone(wanted), "freezer") {
			if slices.Contains(mt.options, c) && !found[c] {
				ctrls = append(ctrls, c)
			}
		}
		if len(ctrls) == 0 {
			continue
		}
		key := strings.Join(mt.controllerKey(), ",")
		ownPath, ok := own[key]
		if !ok {
			continue
		}
		dir := filepath.Join(mt.point, ownPath, parent)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return nil, fmt.Errorf("v1: %v", err)
		}
		for _, c := range ctrls {
			found[c] = true
		}
		m.dirs = append(m.dirs, hierarchy{dir: dir, controllers: ctrls, mount: mt.point, key: key})
	}
	if !found["pids"] && !found["memory"] && !found["cpu"] {
		return nil, fmt.Errorf("v1: none of %v is mounted", wanted)
	}
	return m, nil
}

// RemoveParent deletes the parent group if no group is left in it (tests,
// and servers that use a parent of their own).
func (m *Manager) RemoveParent() error {
	var errs []error
	for _, h := range m.dirs {
		if err := unix.Rmdir(h.dir); err != nil && !errors.Is(err, unix.ENOENT) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// Version reports the hierarchy in use.
func (m *Manager) Version() Version { return m.version }

// Controllers lists the controllers enforced (pids, memory, cpu; v1 may add
// freezer, used to kill).
func (m *Manager) Controllers() []string {
	var out []string
	for _, h := range m.dirs {
		out = append(out, h.controllers...)
	}
	return out
}

func (m *Manager) has(c string) bool { return slices.Contains(m.Controllers(), c) }

// Group is one sandbox's group: a folder per hierarchy. Methods are safe
// for concurrent use.
type Group struct {
	m    *Manager
	name string
}

// Create makes the group name (a single path element) with limits (zero
// fields: unlimited). An existing group of that name is reused, its limits
// rewritten.
func (m *Manager) Create(name string, l sandbox.Limits) (*Group, error) {
	if name == "" || strings.ContainsAny(name, "/\x00") || name == "." || name == ".." {
		return nil, fmt.Errorf("cgroup: bad group name %q", name)
	}
	g := &Group{m: m, name: name}
	for _, h := range m.dirs {
		if err := os.Mkdir(filepath.Join(h.dir, name), 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
			g.remove()
			return nil, fmt.Errorf("cgroup: create %s: %w", name, err)
		}
	}
	if err := g.setLimits(l); err != nil {
		g.remove()
		return nil, fmt.Errorf("cgroup: limits of %s: %w", name, err)
	}
	return g, nil
}

// Open returns the existing group name (after a restart), without checking
// that it exists.
func (m *Manager) Open(name string) *Group { return &Group{m: m, name: name} }

// Name is the group's name under the parent.
func (g *Group) Name() string { return g.name }

// dir is the group's folder in the hierarchy carrying controller c ("" if
// none does).
func (g *Group) dir(c string) string {
	for _, h := range g.m.dirs {
		if slices.Contains(h.controllers, c) {
			return filepath.Join(h.dir, g.name)
		}
	}
	return ""
}

func (g *Group) dirs() []string {
	out := make([]string, len(g.m.dirs))
	for i, h := range g.m.dirs {
		out[i] = filepath.Join(h.dir, g.name)
	}
	return out
}

// cpuPeriod is the CFS period the CPU quota is expressed in (100 ms).
const cpuPeriod = 100000

func (g *Group) setLimits(l sandbox.Limits) error {
	type setting struct{ ctrl, file, value string }
	var set []setting
	if g.m.version == V2 {
		mem, pids, cpu := "max", "max", "max "+strconv.Itoa(cpuPeriod)
		if l.MemoryBytes > 0 {
			mem = strconv.FormatInt(l.MemoryBytes, 10)
		}
		if l.Pids > 0 {
			pids = strconv.FormatInt(l.Pids, 10)
		}
		if l.CPUPercent > 0 {
			cpu = strconv.Itoa(l.CPUPercent*cpuPeriod/100) + " " + strconv.Itoa(cpuPeriod)
		}
		set = []setting{
			{"memory", "memory.max", mem},
			// Without this the limit only pushes the excess to swap.
			{"memory", "memory.swap.max", map[bool]string{true: "0", false: "max"}[l.MemoryBytes > 0]},
			{"pids", "pids.max", pids},
			{"cpu", "cpu.max", cpu},
		}
	} else {
		mem, pids, quota := "-1", "max", "-1"
		if l.MemoryBytes > 0 {
			mem = strconv.FormatInt(l.MemoryBytes, 10)
		}
		if l.Pids > 0 {
			pids = strconv.FormatInt(l.Pids, 10)
		}
		if l.CPUPercent > 0 {
			quota = strconv.Itoa(l.CPUPercent * cpuPeriod / 100)
		}
		set = []setting{
			// memsw must stay >= the limit: raise both in the right order.
			{"memory", "memory.memsw.limit_in_bytes", "-1"},
			{"memory", "memory.limit_in_bytes", mem},
			{"memory", "memory.memsw.limit_in_bytes", mem},
			{"pids", "pids.max", pids},
			{"cpu", "cpu.cfs_period_us", strconv.Itoa(cpuPeriod)},
			{"cpu", "cpu.cfs_quota_us", quota},
		}
	}
	for _, s := range set {
		d := g.dir(s.ctrl)
		if d == "" {
			continue
		}
		p := filepath.Join(d, s.file)
		if err := writeFile(p, s.value); err != nil {
			if errors.Is(err, fs.ErrNotExist) && (strings.Contains(s.file, "swap") || strings.Contains(s.file, "memsw")) {
				continue // no swap accounting on this kernel: nothing to bound
			}
			return err
		}
	}
	return nil
}

// Pids lists the processes in the group.
func (g *Group) Pids() ([]int, error) {
	d := g.dirs()[0]
	b, err := os.ReadFile(filepath.Join(d, "cgroup.procs"))
	if err != nil {
		return nil, fmt.Errorf("cgroup: %w", err)
	}
	var pids []int
	for _, f := range strings.Fields(string(b)) {
		if n, err := strconv.Atoi(f); err == nil {
			pids = append(pids, n)
		}
	}
	return pids, nil
}

// Kill kills every process in the group, including those forked while it
// runs, and waits until the group is empty or ctx ends. The group is frozen
// while its members are signalled where the hierarchy allows (v2
// cgroup.kill does that in the kernel; v1 with the freezer controller).
func (g *Group) Kill(ctx context.Context) error {
	if g.m.version == V2 {
		kill := filepath.Join(g.dirs()[0], "cgroup.kill")
		if err := writeFile(kill, "1"); err == nil {
			return g.waitEmpty(ctx)
		}
		freeze := filepath.Join(g.dirs()[0], "cgroup.freeze")
		if writeFile(freeze, "1") == nil {
			defer writeFile(freeze, "0")
		}
	} else if d := g.dir("freezer"); d != "" {
		state := filepath.Join(d, "freezer.state")
		if writeFile(state, "FROZEN") == nil {
			g.waitFrozen(ctx, state)
			defer writeFile(state, "THAWED")
		}
	}
	for {
		pids, err := g.Pids()
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		if err != nil {
			return err
		}
		// One of our threads may be passing through (Start): never
		// ourselves.
		pids = slices.DeleteFunc(pids, func(p int) bool { return p == os.Getpid() })
		if len(pids) == 0 {
			return nil
		}
		for _, pid := range pids {
			_ = unix.Kill(pid, unix.SIGKILL)
		}
		if g.m.version == V1 && g.dir("freezer") != "" {
			// Frozen members die once thawed: thaw, then wait.
			_ = writeFile(filepath.Join(g.dir("freezer"), "freezer.state"), "THAWED")
		}
		if err := sleep(ctx, 2*time.Millisecond); err != nil {
			return fmt.Errorf("cgroup: kill %s: %w", g.name, err)
		}
	}
}

func (g *Group) waitFrozen(ctx context.Context, state string) {
	for range 500 {
		b, err := os.ReadFile(state)
		if err != nil || strings.TrimSpace(string(b)) == "FROZEN" {
			return
		}
		if sleep(ctx, time.Millisecond) != nil {
			return
		}
	}
}

func (g *Group) waitEmpty(ctx context.Context) error {
	for {
		pids, err := g.Pids()
		if errors.Is(err, fs.ErrNotExist) || (err == nil && len(pids) == 0) {
			return nil
		}
		if err != nil {
			return err
		}
		if err := sleep(ctx, 2*time.Millisecond); err != nil {
			return fmt.Errorf("cgroup: kill %s: %w", g.name, err)
		}
	}
}

// Remove kills what is left in the group and deletes it. A group that does
// not exist is not an error.
func (g *Group) Remove(ctx context.Context) error {
	if err := g.Kill(ctx); err != nil {
		return err
	}
	for {
		err := g.remove()
		if err == nil {
			return nil
		}
		// Members that just died may still be leaving the group.
		if !errors.Is(err, unix.EBUSY) {
			return fmt.Errorf("cgroup: remove %s: %w", g.name, err)
		}
		if serr := sleep(ctx, 2*time.Millisecond); serr != nil {
			return fmt.Errorf("cgroup: remove %s: %w", g.name, err)
		}
	}
}

func (g *Group) remove() error {
	var errs []error
	for _, d := range g.dirs() {
		if err := unix.Rmdir(d); err != nil && !errors.Is(err, unix.ENOENT) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// Usage reports the group's current process count and memory use (-1 when
// the controller is not in use).
func (g *Group) Usage() (pids, memoryBytes int64) {
	pids, memoryBytes = -1, -1
	if d := g.dir("pids"); d != "" {
		pids = readInt(filepath.Join(d, "pids.current"))
	}
	if d := g.dir("memory"); d != "" {
		f := "memory.usage_in_bytes"
		if g.m.version == V2 {
			f = "memory.current"
		}
		memoryBytes = readInt(filepath.Join(d, f))
	}
	return pids, memoryBytes
}

func readInt(p string) int64 {
	b, err := os.ReadFile(p)
	if err != nil {
		return -1
	}
	n, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	if err != nil {
		return -1
	}
	return n
}

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

func writeFile(p, v string) error {
	f, err := os.OpenFile(p, os.O_WRONLY|os.O_TRUNC, 0)
	if err != nil {
		return err
	}
	_, werr := f.WriteString(v)
	cerr := f.Close()
	if werr != nil {
		return fmt.Errorf("write %s to %s: %w", v, p, werr)
	}
	return cerr
}

func readWords(p string) ([]string, error) {
	b, err := os.ReadFile(p)
	if err != nil {
		return nil, err
	}
	return strings.Fields(string(b)), nil
}

// mount is a cgroup file system from /proc/self/mountinfo.
type mount struct {
	point   string
	fstype  string   // cgroup or cgroup2
	options []string // super options: controllers for v1
}

// controllerKey is how /proc/self/cgroup names this v1 hierarchy: its
// controllers (and name=… for named ones), in mount option order.
func (m mount) controllerKey() []string {
	var out []string
	for _, o := range m.options {
		switch o {
		case "rw", "ro", "relatime", "noatime", "nosuid", "nodev", "noexec", "clone_children", "noprefix", "xattr", "cpuset_v2_mode":
			continue
		}
		if strings.Contains(o, "=") && !strings.HasPrefix(o, "name=") {
			continue
		}
		out = append(out, o)
	}
	return out
}

// readMounts parses the cgroup mounts of a mountinfo file.
func readMounts(path string) ([]mount, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	return parseMountInfo(b), nil
}

// parseMountInfo returns the cgroup and cgroup2 mounts of a mountinfo text:
// "id parent major:minor root mountpoint options [optional…] - fstype source superoptions".
// Malformed lines are skipped.
func parseMountInfo(b []byte) []mount {
	var out []mount
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		sep := slices.Index(f, "-")
		if sep < 5 || sep+3 > len(f) {
			continue
		}
		fstype := f[sep+1]
		if fstype != "cgroup" && fstype != "cgroup2" {
			continue
		}
		var opts []string
		if sep+3 < len(f) {
			opts = strings.Split(f[sep+3], ",")
		}
		out = append(out, mount{point: unescapeMount(f[4]), fstype: fstype, options: opts})
	}
	return out
}

// unescapeMount undoes mountinfo's octal escapes (\040 for a space…).
func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// readSelfCgroup maps each hierarchy's key ("" for v2, "pids", "cpu,cpuacct",
// "name=systemd"…) to this process's group path in it.
func readSelfCgroup(path string) (map[string]string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	return parseSelfCgroup(b), nil
}

// parseSelfCgroup parses /proc/<pid>/cgroup lines "id:controllers:path".
// Malformed lines are skipped.
func parseSelfCgroup(b []byte) map[string]string {
	out := map[string]string{}
	for _, line := range strings.Split(string(b), "\n") {
		parts := strings.SplitN(line, ":", 3)
		if len(parts) != 3 || !strings.HasPrefix(parts[2], "/") {
			continue
		}
		out[parts[1]] = parts[2]
	}
	return out
}
