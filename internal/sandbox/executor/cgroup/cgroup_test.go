package cgroup

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/agentd/agentd/sandbox"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const hybridMountInfo = `31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
32 31 0:29 / /sys/fs/cgroup/cpu,cpuacct rw,relatime shared:9 - cgroup cgroup rw,cpu,cpuacct
35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory
37 31 0:34 / /sys/fs/cgroup/freezer rw,relatime - cgroup cgroup rw,freezer
39 31 0:36 / /sys/fs/cgroup/pids rw,relatime - cgroup cgroup rw,pids
40 31 0:37 / /sys/fs/cgroup/systemd rw,relatime - cgroup cgroup rw,xattr,name=systemd
41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw,nsdelegate
42 31 0:38 / /mnt/with\040space rw,relatime - cgroup2 cgroup2 rw
garbage line
43 31 0:39 / /proc rw - proc proc rw
`

func TestParseMountInfo(t *testing.T) {
	ms := parseMountInfo([]byte(hybridMountInfo))
	if len(ms) != 7 {
		t.Fatalf("%d mounts: %+v", len(ms), ms)
	}
	if ms[0].point != "/sys/fs/cgroup/cpu,cpuacct" || strings.Join(ms[0].controllerKey(), ",") != "cpu,cpuacct" {
		t.Fatalf("cpu mount %+v key %v", ms[0], ms[0].controllerKey())
	}
	if k := strings.Join(ms[4].controllerKey(), ","); k != "name=systemd" {
		t.Fatalf("systemd key %q", k)
	}
	if ms[5].fstype != "cgroup2" || ms[6].point != "/mnt/with space" {
		t.Fatalf("v2 mounts %+v %+v", ms[5], ms[6])
	}
}

func TestParseSelfCgroup(t *testing.T) {
	got := parseSelfCgroup([]byte("9:name=systemd:/\n4:memory:/a/b\n2:cpu,cpuacct:/\n0::/user.slice\nbad\n1:x:relative\n"))
	want := map[string]string{"name=systemd": "/", "memory": "/a/b", "cpu,cpuacct": "/", "": "/user.slice"}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("got %v want %v", got, want)
	}
}

func FuzzParseMountInfo(f *testing.F) {
	f.Add([]byte(hybridMountInfo))
	f.Add([]byte("1 2 3 - cgroup\n- - - - - - cgroup2 x"))
	f.Fuzz(func(t *testing.T, b []byte) {
		for _, m := range parseMountInfo(b) {
			if m.fstype != "cgroup" && m.fstype != "cgroup2" {
				t.Fatalf("non-cgroup mount %+v", m)
			}
			_ = m.controllerKey()
		}
	})
}

func FuzzParseSelfCgroup(f *testing.F) {
	f.Add([]byte("0::/\n4:memory:/x\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		for _, p := range parseSelfCgroup(b) {
			if !strings.HasPrefix(p, "/") {
				t.Fatalf("relative path %q", p)
			}
		}
	})
}

func TestDetectErrors(t *testing.T) {
	dir := t.TempDir()
	mi := filepath.Join(dir, "mountinfo")
	sc := filepath.Join(dir, "cgroup")
	os.WriteFile(mi, []byte("43 31 0:39 / /proc rw - proc proc rw\n"), 0o644)
	os.WriteFile(sc, []byte("0::/\n"), 0o644)
	if _, err := Detect(Options{MountInfo: mi, SelfCgroup: sc}); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("no mounts: %v", err)
	}
	if _, err := Detect(Options{MountInfo: filepath.Join(dir, "missing"), SelfCgroup: sc}); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("missing mountinfo: %v", err)
	}
	if _, err := Detect(Options{Parent: "../escape"}); err == nil || errors.Is(err, ErrUnavailable) {
		t.Fatalf("bad parent: %v", err)
	}
	// A v2 mount whose group offers none of the controllers.
	v2 := filepath.Join(dir, "v2")
	os.MkdirAll(v2, 0o755)
	os.WriteFile(filepath.Join(v2, "cgroup.controllers"), []byte("hugetlb\n"), 0o644)
	os.WriteFile(mi, []byte("41 31 0:38 / "+v2+" rw - cgroup2 cgroup2 rw\n"), 0o644)
	_, err := Detect(Options{MountInfo: mi, SelfCgroup: sc, Version: V2})
	if !errors.Is(err, ErrUnavailable) || !strings.Contains(err.Error(), "none of") {
		t.Fatalf("v2 without controllers: %v", err)
	}
	// Not in the root group: needs a delegated parent.
	os.WriteFile(filepath.Join(v2, "cgroup.controllers"), []byte("pids memory\n"), 0o644)
	os.MkdirAll(filepath.Join(v2, "svc"), 0o755)
	os.WriteFile(filepath.Join(v2, "svc", "cgroup.controllers"), []byte("pids memory\n"), 0o644)
	os.WriteFile(sc, []byte("0::/svc\n"), 0o644)
	if _, err := Detect(Options{MountInfo: mi, SelfCgroup: sc, Version: V2}); !errors.Is(err, ErrUnavailable) || !strings.Contains(err.Error(), "delegated") {
		t.Fatalf("v2 non-root: %v", err)
	}
}

// TestDetectV2Files runs Detect and the limit writing against a fake v2
// tree: which files get which values.
func TestDetectV2Files(t *testing.T) {
	dir := t.TempDir()
	v2 := filepath.Join(dir, "v2")
	os.MkdirAll(v2, 0o755)
	os.WriteFile(filepath.Join(v2, "cgroup.controllers"), []byte("cpuset cpu io memory pids\n"), 0o644)
	os.WriteFile(filepath.Join(v2, "cgroup.subtree_control"), []byte("cpu\n"), 0o644)
	mi := filepath.Join(dir, "mountinfo")
	sc := filepath.Join(dir, "cgroup")
	os.WriteFile(mi, []byte("41 31 0:38 / "+v2+" rw - cgroup2 cgroup2 rw\n"), 0o644)
	os.WriteFile(sc, []byte("0::/\n"), 0o644)
	// The kernel creates these in a new group; the fake tree needs them.
	parent := filepath.Join(v2, "agentd")
	os.MkdirAll(parent, 0o755)
	os.WriteFile(filepath.Join(parent, "cgroup.subtree_control"), nil, 0o644)
	m, err := Detect(Options{MountInfo: mi, SelfCgroup: sc})
	if err != nil {
		t.Fatal(err)
	}
	if m.Version() != V2 || !slices.Equal(m.Controllers(), []string{"pids", "memory", "cpu"}) {
		t.Fatalf("%v %v", m.Version(), m.Controllers())
	}
	if b, _ := os.ReadFile(filepath.Join(v2, "cgroup.subtree_control")); string(b) != "+pids +memory" {
		t.Fatalf("root subtree_control %q", b)
	}
	g := filepath.Join(parent, "s1")
	os.MkdirAll(g, 0o755)
	for _, f := range []string{"memory.max", "memory.swap.max", "pids.max", "cpu.max"} {
		os.WriteFile(filepath.Join(g, f), nil, 0o644)
	}
	if _, err := m.Create("s1", sandbox.Limits{MemoryBytes: 1 << 30, Pids: 64, CPUPercent: 150}); err != nil {
		t.Fatal(err)
	}
	for f, want := range map[string]string{"memory.max": "1073741824", "memory.swap.max": "0", "pids.max": "64", "cpu.max": "150000 100000"} {
		if b, _ := os.ReadFile(filepath.Join(g, f)); string(b) != want {
			t.Errorf("%s = %q, want %q", f, b, want)
		}
	}
	if _, err := m.Create("s1", sandbox.Limits{}); err != nil {
		t.Fatal(err)
	}
	for f, want := range map[string]string{"memory.max": "max", "pids.max": "max", "cpu.max": "max 100000"} {
		if b, _ := os.ReadFile(filepath.Join(g, f)); string(b) != want {
			t.Errorf("unlimited: %s = %q, want %q", f, b, want)
		}
	}
	for _, bad := range []string{"", "a/b", "..", "."} {
		if _, err := m.Create(bad, sandbox.Limits{}); err == nil {
			t.Errorf("name %q accepted", bad)
		}
	}
}

func needRoot(t *testing.T) {
	t.Helper()
	if os.Getuid() != 0 {
		t.Skip("cgroups need root")
	}
}

// ownCgroups is this process's /proc/<pid>/task/*/cgroup, every thread.
func ownCgroups(t *testing.T) map[string]string {
	t.Helper()
	out := map[string]string{}
	tasks, _ := filepath.Glob("/proc/self/task/*/cgroup")
	for _, f := range tasks {
		b, err := os.ReadFile(f)
		if err == nil {
			out[f] = string(b)
		}
	}
	return out
}

// TestLimitsAndKill: on this machine's real hierarchy, a child starts in
// its group, the pids limit stops a loop of forks, the server's threads
// stay where they were, Kill empties the group, Remove deletes it.
func TestLimitsAndKill(t *testing.T) {
	needRoot(t)
	m, err := Detect(Options{Parent: "agentd-test-" + strconv.Itoa(os.Getpid())})
	if errors.Is(err, ErrUnavailable) {
		t.Skipf("no cgroups here: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for _, h := range m.dirs {
			os.Remove(h.dir)
		}
	})
	t.Logf("%v with %v", m.Version(), m.Controllers())
	if !m.has("pids") {
		t.Skip("no pids controller")
	}
	before := ownCgroups(t)
	g, err := m.Create("s1", sandbox.Limits{Pids: 16, MemoryBytes: 256 << 20, CPUPercent: 50})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	defer g.Remove(ctx)

	var out bytes.Buffer
	cmd := exec.Command("sh", "-c", `cat /proc/self/cgroup; i=0; while [ $i -lt 40 ]; do sleep 30 >/dev/null 2>&1 & i=$((i+1)); done; echo spawned $i`)
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := g.Start(cmd); err != nil {
		t.Fatal(err)
	}
	err = cmd.Wait()
	if err == nil || strings.Contains(out.String(), "spawned 40") {
		t.Fatalf("40 forks under pids.max 16 succeeded: %v\n%s", err, out.String())
	}
	if !strings.Contains(out.String(), "/"+filepath.Base(filepath.Dir(g.dirs()[0]))+"/s1") {
		t.Fatalf("child not in the group:\n%s", out.String())
	}
	pids, err := g.Pids()
	if err != nil || len(pids) == 0 || len(pids) > 16 {
		t.Fatalf("group holds %d processes (%v), want 1..16", len(pids), err)
	}
	if n, mem := g.Usage(); n < 1 || mem <= 0 {
		t.Fatalf("usage pids %d mem %d", n, mem)
	}
	// The server's own threads never stay in the group.
	after := ownCgroups(t)
	for f, cg := range after {
		if strings.Contains(cg, "/s1") {
			t.Errorf("server thread %s left in the group: %s", f, cg)
		}
		if b, ok := before[f]; ok && b != cg {
			t.Errorf("server thread %s moved: %s → %s", f, b, cg)
		}
	}
	if err := g.Kill(ctx); err != nil {
		t.Fatal(err)
	}
	if pids, _ := g.Pids(); len(pids) != 0 {
		t.Fatalf("after Kill: %v", pids)
	}
	if err := g.Remove(ctx); err != nil {
		t.Fatal(err)
	}
	for _, d := range g.dirs() {
		if _, err := os.Stat(d); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("%s left", d)
		}
	}
	// Removing a removed group is fine.
	if err := g.Remove(ctx); err != nil {
		t.Fatalf("second Remove: %v", err)
	}
}

// TestKillForkingGroup: Kill empties a group whose members keep forking.
func TestKillForkingGroup(t *testing.T) {
	needRoot(t)
	m, err := Detect(Options{Parent: "agentd-test-" + strconv.Itoa(os.Getpid())})
	if err != nil {
		t.Skipf("no cgroups here: %v", err)
	}
	t.Cleanup(func() {
		for _, h := range m.dirs {
			os.Remove(h.dir)
		}
	})
	g, err := m.Create("bomb", sandbox.Limits{Pids: 64})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.Command("sh", "-c", `f() { f | f & }; f; sleep 60`)
	if err := g.Start(cmd); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	time.Sleep(300 * time.Millisecond) // on purpose: the bomb spreads up to its limit before Remove
	if err := g.Remove(ctx); err != nil {
		t.Fatal(err)
	}
	<-done
}

// TestV2Mechanics: clone-into-group, kill and remove on a cgroup2 mount,
// even one without the limit controllers (hybrid machines).
func TestV2Mechanics(t *testing.T) {
	needRoot(t)
	var mnt string
	for _, m := range mustMounts(t) {
		if m.fstype == "cgroup2" {
			mnt = m.point
			break
		}
	}
	if mnt == "" {
		t.Skip("no cgroup2 mount")
	}
	own := parseSelfCgroup(must(os.ReadFile("/proc/self/cgroup")))[""]
	parent := filepath.Join(mnt, own, "agentd-test-"+strconv.Itoa(os.Getpid()))
	if err := os.Mkdir(parent, 0o755); err != nil {
		t.Skipf("cannot create a v2 group: %v", err)
	}
	t.Cleanup(func() { os.Remove(parent) })
	m := &Manager{version: V2, dirs: []hierarchy{{dir: parent}}}
	g, err := m.Create("s", sandbox.Limits{Pids: 10}) // no pids controller here: nothing written
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var out bytes.Buffer
	cmd := exec.Command("sh", "-c", `cat /proc/self/cgroup; sleep 60 & sleep 60`)
	cmd.Stdout = &out
	if err := g.Start(cmd); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	deadline := time.Now().Add(10 * time.Second)
	for {
		pids, _ := g.Pids()
		if len(pids) >= 3 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("group has %v", pids)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err := g.Remove(ctx); err != nil {
		t.Fatal(err)
	}
	<-done
	if !strings.Contains(out.String(), "0::"+filepath.Join(own, filepath.Base(parent), "s")) {
		t.Fatalf("child's groups:\n%s", out.String())
	}
}

func mustMounts(t *testing.T) []mount {
	ms, err := readMounts("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	return ms
}

func must(b []byte, err error) []byte {
	if err != nil {
		panic(err)
	}
	return b
}
