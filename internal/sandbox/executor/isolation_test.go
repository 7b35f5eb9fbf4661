package executor

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/agentd/agentd/internal/sandbox/sandboxtest"
	"github.com/agentd/agentd/sandbox"
)

func needRoot(t testing.TB) {
	t.Helper()
	if os.Getuid() != 0 {
		t.Skip("needs root (other users, cgroups)")
	}
}

// testUIDs are uids without a passwd entry, for pools.
const testUIDBase = 59990

func poolProvider(t *testing.T, dir string, size int, mod func(*Options)) *Provider {
	t.Helper()
	opts := testOptions(filepath.Join(dir, "run"))
	opts.Binary = sandboxtest.UserBinary(t, dir)
	opts.UserPool = []string{fmt.Sprintf("%d-%d", testUIDBase, testUIDBase+size-1)}
	opts.CgroupParent = sandboxtest.CgroupParent()
	if mod != nil {
		mod(&opts)
	}
	p, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func createSpec(t *testing.T, p *Provider, spec sandbox.Spec) *Environment {
	t.Helper()
	return sandboxtest.Create(t, p, spec).(*Environment)
}

func owner(t *testing.T, p string) (uint32, os.FileMode) {
	t.Helper()
	fi, err := os.Lstat(p)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Sys().(*syscall.Stat_t).Uid, fi.Mode().Perm()
}

// TestUserPool: each environment gets a user of its own, which cannot
// enter another's workspace; the pool runs out; Terminate takes the
// workspace back and frees the user; a second provider on the same run
// folder (a restarted server) does not hand out a user still in use.
func TestUserPool(t *testing.T) {
	needRoot(t)
	dir := sandboxtest.ShortTempDir(t, "sx")
	p := poolProvider(t, dir, 2, nil)
	ws1, ws2 := filepath.Join(dir, "ws1"), filepath.Join(dir, "ws2")
	e1 := createSpec(t, p, sandbox.Spec{SessionID: "s1", Workspace: ws1})
	e2 := createSpec(t, p, sandbox.Spec{SessionID: "s2", Workspace: ws2})
	if e1.ping.UID == e2.ping.UID || e1.ping.UID < testUIDBase || e2.ping.UID < testUIDBase {
		t.Fatalf("uids %d and %d", e1.ping.UID, e2.ping.UID)
	}
	if uid, mode := owner(t, ws1); uid != uint32(e1.ping.UID) || mode != 0o700 {
		t.Fatalf("workspace 1 owned by %d mode %v", uid, mode)
	}
	if err := e1.WriteFile(bg, "secret.txt", []byte("s1 only"), 0o644); err != nil {
		t.Fatal(err)
	}
	o, _, st := sandboxtest.Run(t, e2, sandbox.Cmd{Argv: []string{"sh", "-c", "cat " + ws1 + "/secret.txt 2>&1; ls " + ws1 + " 2>&1"}})
	if st.Success() || strings.Contains(o, "s1 only") || !strings.Contains(o, "Permission denied") {
		t.Fatalf("session 2 read session 1's workspace: %q %+v", o, st)
	}
	// Both users are taken.
	if _, err := p.Create(bg, sandbox.Spec{SessionID: "s3", Workspace: filepath.Join(dir, "ws3")}); !errors.Is(err, ErrNoFreeUser) {
		t.Fatalf("third environment on a pool of 2: %v", err)
	}
	// A restarted server (same run folder) sees them taken too.
	p2 := poolProvider(t, dir, 2, nil)
	if _, err := p2.Create(bg, sandbox.Spec{SessionID: "s3", Workspace: filepath.Join(dir, "ws3")}); !errors.Is(err, ErrNoFreeUser) {
		t.Fatalf("restarted server reused a user: %v", err)
	}
	uid1 := e1.ping.UID
	if err := e1.Terminate(bg); err != nil {
		t.Fatal(err)
	}
	if uid, mode := owner(t, ws1); uid != 0 || mode != 0o700 {
		t.Fatalf("workspace 1 after Terminate: owner %d mode %v", uid, mode)
	}
	if uid, _ := owner(t, filepath.Join(ws1, "secret.txt")); uid != uint32(uid1) {
		t.Fatalf("contents rechowned: %d", uid)
	}
	e3 := createSpec(t, p2, sandbox.Spec{SessionID: "s3", Workspace: filepath.Join(dir, "ws3")})
	if e3.ping.UID != uid1 {
		t.Fatalf("freed uid %d not reused: got %d", uid1, e3.ping.UID)
	}
	// The next session with that uid cannot reach session 1's files.
	o, _, _ = sandboxtest.Run(t, e3, sandbox.Cmd{Argv: []string{"sh", "-c", "cat " + ws1 + "/secret.txt 2>&1"}})
	if strings.Contains(o, "s1 only") {
		t.Fatalf("the uid's next session read the old workspace: %q", o)
	}
	// Session 1 comes back with whatever user is free, and owns its files.
	if err := e3.Terminate(bg); err != nil {
		t.Fatal(err)
	}
	e1b := createSpec(t, p, sandbox.Spec{SessionID: "s1", Workspace: ws1})
	if o, _, st := sandboxtest.Run(t, e1b, sandbox.Cmd{Argv: []string{"cat", "secret.txt"}}); o != "s1 only" || !st.Success() {
		t.Fatalf("session 1 back: %q %+v", o, st)
	}
}

// A user that still runs processes (left by an executor that died) is not
// handed out.
func TestUserPoolSkipsBusyUser(t *testing.T) {
	needRoot(t)
	dir := sandboxtest.ShortTempDir(t, "sx")
	uid := testUIDBase + 5
	cmd := execAs(uint32(uid), "sleep", "30")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	p := poolProvider(t, dir, 1, func(o *Options) { o.UserPool = []string{strconv.Itoa(uid)} })
	_, err := p.Create(bg, sandbox.Spec{SessionID: "s", Workspace: filepath.Join(dir, "ws")})
	if !errors.Is(err, ErrNoFreeUser) || !strings.Contains(err.Error(), "still run processes") {
		t.Fatalf("busy user: %v", err)
	}
}

func TestParseUserPool(t *testing.T) {
	us, err := parseUserPool([]string{"59990-59992", " 59991 ", "", "nobody"})
	if err != nil {
		t.Fatal(err)
	}
	if len(us) != 4 || us[0].uid != 59990 || us[0].gid != 59990 || us[3].name != "nobody" {
		t.Fatalf("%+v", us)
	}
	for _, bad := range [][]string{{"root"}, {"0"}, {"5-3"}, {"1-999999"}, {"no-such-user-xyz"}, {}, {"99999999999"}} {
		if _, err := parseUserPool(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

// TestLimitsCgroup: a loop of forks beyond the pids limit fails, the
// executor survives it, and Terminate kills a process that left its
// process group and session (it would outlive a plain executor).
func TestLimitsCgroup(t *testing.T) {
	needRoot(t)
	dir := sandboxtest.ShortTempDir(t, "sx")
	p, _ := newTestProvider(t, func(o *Options) {
		o.CgroupParent = sandboxtest.CgroupParent()
		o.Limits = sandbox.Limits{Pids: 48, MemoryBytes: 512 << 20}
	})
	if p.cg == nil {
		t.Skipf("no cgroups: %s", p.LimitsEnforcement())
	}
	t.Logf("limits: %s", p.LimitsEnforcement())
	e := createSpec(t, p, sandbox.Spec{SessionID: "lim", Workspace: filepath.Join(dir, "ws"), Limits: sandbox.Limits{Pids: 40}})
	var h Handle
	json.Unmarshal(e.Handle(), &h)
	if h.Cgroup == "" {
		t.Fatal("no cgroup in the handle")
	}
	// The storm's processes stay in its process group: kill 0 (a shell
	// builtin, no fork needed) ends them.
	o, _, st := sandboxtest.Run(t, e, sandbox.Cmd{Argv: []string{"sh", "-c", `( i=0; while [ $i -lt 100 ]; do sleep 60 >/dev/null 2>&1 & i=$((i+1)); done; echo spawned $i ); echo rc=$?; cat /proc/self/cgroup >/dev/null; kill -9 0`}})
	if strings.Contains(o, "spawned 100") || !strings.Contains(o, "rc=2") {
		t.Fatalf("100 forks under pids 40: %q %+v", o, st)
	}
	// The executor still serves after the group was full.
	if _, err := e.client.Ping(bg); err != nil {
		t.Fatalf("executor after the fork storm: %v", err)
	}
	if pids, mem := e.group.Usage(); pids > 40 || pids < 1 || mem <= 0 {
		t.Fatalf("usage: %d pids, %d bytes", pids, mem)
	}
	// Killed orphans are reaped by init, not at once.
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if pids, _ := e.group.Usage(); pids < 30 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the storm's processes are still there")
		}
	}
	// A daemon: own session, parent gone.
	o, se, _ := sandboxtest.Run(t, e, sandbox.Cmd{Argv: []string{"sh", "-c", `setsid sh -c 'sleep 300 >/dev/null 2>&1 & echo $!' </dev/null`}})
	daemon, err := strconv.Atoi(strings.TrimSpace(o))
	if err != nil {
		t.Fatalf("daemon pid %q %q", o, se)
	}
	if !pidAlive(daemon) {
		t.Fatal("daemon not running")
	}
	if err := e.Terminate(bg); err != nil {
		t.Fatal(err)
	}
	if pidAlive(daemon) {
		t.Fatal("a daemon outlived Terminate")
	}
	if _, err := os.Stat(filepath.Join("/sys/fs/cgroup/pids", sandboxtest.CgroupParent(), h.Cgroup)); err == nil {
		t.Fatal("cgroup left")
	}
}

// TestRecoverGoneCleansUp: an executor that died while the server was
// away (killed) leaves a daemon in its group; Recover reports it gone and
// removes what it left: the daemon, the group, the run folder, the
// workspace's grant to its user.
func TestRecoverGoneCleansUp(t *testing.T) {
	needRoot(t)
	dir := sandboxtest.ShortTempDir(t, "sx")
	p := poolProvider(t, dir, 1, nil)
	if p.cg == nil {
		t.Skip("no cgroups")
	}
	spec := sandbox.Spec{SessionID: "gone", Workspace: filepath.Join(dir, "ws")}
	e := createSpec(t, p, spec)
	o, _, _ := sandboxtest.Run(t, e, sandbox.Cmd{Argv: []string{"sh", "-c", `setsid sh -c 'sleep 300 >/dev/null 2>&1 & echo $!' </dev/null`}})
	daemon, err := strconv.Atoi(strings.TrimSpace(o))
	if err != nil {
		t.Fatalf("daemon %q", o)
	}
	h := e.handle
	syscall.Kill(-h.PID, syscall.SIGKILL)
	<-e.reaped
	if !pidAlive(daemon) {
		t.Fatal("the daemon died with the executor: nothing to clean")
	}
	p2 := poolProvider(t, dir, 1, nil)
	if _, err := p2.Recover(bg, spec, e.Handle()); !errors.Is(err, sandbox.ErrGone) {
		t.Fatalf("recover: %v", err)
	}
	if pidAlive(daemon) {
		t.Fatal("daemon left running")
	}
	if _, err := os.Stat(filepath.Join("/sys/fs/cgroup/pids", sandboxtest.CgroupParent(), h.Cgroup)); err == nil {
		t.Fatal("cgroup left")
	}
	if uid, mode := owner(t, spec.Workspace); uid != 0 || mode != 0o700 {
		t.Fatalf("workspace still granted: %d %v", uid, mode)
	}
	if _, err := os.Stat(h.Dir); err == nil {
		t.Fatal("run folder left")
	}
}

// TestRecoverKilledWhileConnecting: an executor found alive that dies
// before Recover reaches it (killed just as a restarted server connected:
// the chaos test left its cgroup behind this way) is reported gone, and
// what it left is removed as for one found dead.
func TestRecoverKilledWhileConnecting(t *testing.T) {
	needRoot(t)
	p, dir := newTestProvider(t, nil)
	if p.cg == nil {
		t.Skip("no cgroups")
	}
	spec := sandbox.Spec{SessionID: "dying", Workspace: filepath.Join(dir, "ws")}
	e := createSpec(t, p, spec)
	h := e.handle
	testHookRecoverConnect = func(Handle) {
		syscall.Kill(-h.PID, syscall.SIGKILL)
		<-e.reaped
	}
	t.Cleanup(func() { testHookRecoverConnect = nil })
	p2, err := New(p.opts)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p2.Recover(bg, spec, e.Handle()); !errors.Is(err, sandbox.ErrGone) {
		t.Fatalf("recover: %v", err)
	}
	if _, err := os.Stat(filepath.Join("/sys/fs/cgroup/pids", sandboxtest.CgroupParent(), h.Cgroup)); err == nil {
		t.Fatal("cgroup left")
	}
	if _, err := os.Stat(h.Dir); err == nil {
		t.Fatal("run folder left")
	}
}

// TestRecoverUnstarted: a server killed while it created an environment
// (after Spec.Record, before the environment's own handle was recorded)
// leaves a handle without a pid. Recover stops the executor that was
// started and removes its group, run folder and socket (the chaos test
// found such executors left running: seed 1795631677736846914). Record
// runs before anything starts, and Create fails when it does.
func TestRecoverUnstarted(t *testing.T) {
	p, dir := newTestProvider(t, nil)
	var recorded json.RawMessage
	spec := sandbox.Spec{SessionID: "unstarted", Workspace: filepath.Join(dir, "ws")}
	spec.Record = func(_ context.Context, raw json.RawMessage) error {
		var h Handle
		_ = json.Unmarshal(raw, &h)
		if _, err := os.Stat(h.Socket); h.PID != 0 || err == nil {
			t.Errorf("recorded after the executor started: %s (socket: %v)", raw, err)
		}
		recorded = append(json.RawMessage(nil), raw...)
		return nil
	}
	env, err := p.Create(bg, spec)
	if err != nil {
		t.Fatal(err)
	}
	e := env.(*Environment)
	h := e.handle
	// The server dies here, before recording env.Handle(); a new one
	// recovers from what was recorded.
	p2, err := New(p.opts)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p2.Recover(bg, spec, recorded); !errors.Is(err, sandbox.ErrGone) {
		t.Fatalf("recover: %v", err)
	}
	select {
	case <-e.reaped:
	case <-time.After(10 * time.Second):
		t.Fatal("the executor still runs")
	}
	if p.cg != nil {
		if _, err := os.Stat(filepath.Join("/sys/fs/cgroup/pids", sandboxtest.CgroupParent(), h.Cgroup)); err == nil {
			t.Error("cgroup left")
		}
	}
	for _, left := range []string{h.Dir, h.Socket} {
		if _, err := os.Stat(left); err == nil {
			t.Errorf("%s left", left)
		}
	}
	if err := e.Terminate(bg); err != nil {
		t.Fatal(err)
	}

	// Record failing fails Create, and nothing starts.
	spec.SessionID = "unrecorded"
	spec.Record = func(_ context.Context, raw json.RawMessage) error {
		recorded = append(json.RawMessage(nil), raw...)
		return errors.New("store down")
	}
	if _, err := p.Create(bg, spec); err == nil || !strings.Contains(err.Error(), "store down") {
		t.Fatalf("create with a failing Record: %v", err)
	}
	if _, err := p2.Recover(bg, spec, recorded); !errors.Is(err, sandbox.ErrGone) {
		t.Fatalf("recover: %v", err)
	}
	_ = json.Unmarshal(recorded, &h)
	if _, err := os.Stat(h.Dir); err == nil {
		t.Error("run folder left")
	}
}

// TestModelProxy: with a model proxy, the real keys passed by the server
// never reach a process; the relay does, with the session's token; after a
// restart (Recover) the same holds.
func TestModelProxy(t *testing.T) {
	fp := &sandboxtest.FakeProxy{}
	defer fp.Close()
	p, dir := newTestProvider(t, func(o *Options) { o.ModelProxy = fp })
	spec := sandbox.Spec{SessionID: "mp", Workspace: filepath.Join(dir, "ws"), Env: map[string]string{
		"ANTHROPIC_API_KEY": "sk-ant-REAL", "OPENAI_API_KEY": "sk-REAL", "GOOGLE_API_KEY": "g-REAL", "OTHER": "kept",
	}}
	e := createSpec(t, p, spec)
	o, _, st := sandboxtest.Run(t, e, sandbox.Cmd{Argv: []string{"sh", "-c", `env | sort; curl -s -H "x-api-key: $ANTHROPIC_API_KEY" "$ANTHROPIC_BASE_URL/v1/messages"`},
		Env: map[string]string{"ANTHROPIC_AUTH_TOKEN": "sk-ant-REAL2"}})
	if !st.Success() || strings.Contains(o, "REAL") {
		t.Fatalf("a real key reached the process: %q %+v", o, st)
	}
	for _, want := range []string{"ANTHROPIC_API_KEY=tok-mp", "OPENAI_API_KEY=tok-mp", "GEMINI_API_KEY=tok-mp", "OTHER=kept",
		"ANTHROPIC_BASE_URL=http://" + e.ping.ModelProxyAddr, "OPENAI_BASE_URL=http://" + e.ping.ModelProxyAddr + "/v1",
		"proxy for mp: GET /v1/messages key=tok-mp"} {
		if !strings.Contains(o, want) {
			t.Errorf("missing %q in\n%s", want, o)
		}
	}
	// The socket is the environment's user's only.
	sock := filepath.Join(proxyDir(e.handle.Dir), modelSocketName)
	if uid, mode := owner(t, sock); uid != uint32(os.Getuid()) || mode != 0o600 {
		t.Fatalf("socket owner %d mode %v", uid, mode)
	}
	// A restarted server recovers the environment and serves it again.
	p2, err := New(p.opts)
	if err != nil {
		t.Fatal(err)
	}
	env2, err := p2.Recover(bg, spec, e.Handle())
	if err != nil {
		t.Fatal(err)
	}
	e.closeConn()
	r := env2.(*Environment)
	if fp.Calls() != 2 || r.token != "tok-mp" {
		t.Fatalf("recover: %d ServeSession calls, token %q", fp.Calls(), r.token)
	}
	o, _, _ = sandboxtest.Run(t, r, sandbox.Cmd{Argv: []string{"sh", "-c", `curl -s -H "x-api-key: $ANTHROPIC_API_KEY" "$ANTHROPIC_BASE_URL/v1/messages"`}})
	if o != "proxy for mp: GET /v1/messages key=tok-mp" {
		t.Fatalf("after recover: %q", o)
	}
	if err := r.Terminate(bg); err != nil {
		t.Fatal(err)
	}
	if fp.Serving() != 0 {
		t.Fatal("proxy still serves a terminated environment")
	}
	if _, err := os.Stat(proxyDir(e.handle.Dir)); !errors.Is(err, os.ErrNotExist) {
		t.Fatal("proxy folder left")
	}
}

type failingProxy struct{}

func (failingProxy) ServeSession(context.Context, string, string) (string, error) {
	return "", errors.New("proxy down")
}
func (failingProxy) StopSession(string) {}

func TestModelProxyFailure(t *testing.T) {
	p, dir := newTestProvider(t, func(o *Options) { o.ModelProxy = failingProxy{} })
	_, err := p.Create(bg, sandbox.Spec{SessionID: "x", Workspace: filepath.Join(dir, "ws")})
	if err == nil || !strings.Contains(err.Error(), "proxy down") {
		t.Fatalf("%v", err)
	}
	if left, _ := os.ReadDir(filepath.Join(dir, "run")); len(left) != 0 {
		t.Fatalf("left behind: %v", left)
	}
}

// chownTree does not follow links out of the workspace, and leaves a
// hard link to a server file alone.
func TestChownTreeStaysInside(t *testing.T) {
	needRoot(t)
	dir := sandboxtest.ShortTempDir(t, "sx")
	outside := filepath.Join(dir, "outside.txt")
	os.WriteFile(outside, []byte("server"), 0o600)
	ws := filepath.Join(dir, "ws")
	os.MkdirAll(filepath.Join(ws, "sub"), 0o755)
	os.WriteFile(filepath.Join(ws, "sub", "f"), []byte("x"), 0o644)
	os.Symlink(outside, filepath.Join(ws, "link"))
	os.Symlink(dir, filepath.Join(ws, "dirlink"))
	if err := os.Link(outside, filepath.Join(ws, "hard")); err != nil {
		t.Fatal(err)
	}
	if err := chownTree(ws, testUIDBase, testUIDBase); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{ws, filepath.Join(ws, "sub"), filepath.Join(ws, "sub", "f"), filepath.Join(ws, "link"), filepath.Join(ws, "dirlink")} {
		if uid, _ := owner(t, p); uid != testUIDBase {
			t.Errorf("%s owned by %d", p, uid)
		}
	}
	if uid, _ := owner(t, outside); uid != 0 {
		t.Fatalf("followed a link out: outside file owned by %d", uid)
	}
	if uid, _ := owner(t, dir); uid != 0 {
		t.Fatalf("followed a folder link out: %d", uid)
	}
	if err := chownTree(filepath.Join(dir, "missing"), 1, 1); err == nil {
		t.Fatal("missing workspace accepted")
	}
}

func TestLimitModes(t *testing.T) {
	for _, s := range []string{"", "auto", "cgroup", "rlimit", "off"} {
		if _, err := ParseLimitMode(s); err != nil {
			t.Errorf("%q: %v", s, err)
		}
	}
	if _, err := ParseLimitMode("cgroups"); err == nil {
		t.Fatal("bad mode accepted")
	}
	p, _ := newTestProvider(t, func(o *Options) { o.LimitMode = LimitsOff })
	if p.cg != nil || !strings.HasPrefix(p.LimitsEnforcement(), "none") {
		t.Fatalf("off: %v %q", p.cg, p.LimitsEnforcement())
	}
	p, _ = newTestProvider(t, func(o *Options) { o.LimitMode = LimitsRlimit })
	if p.cg != nil || !strings.Contains(p.LimitsEnforcement(), "user pool") {
		t.Fatalf("rlimit without pool: %q", p.LimitsEnforcement())
	}
	if os.Getuid() != 0 {
		if _, err := New(Options{LimitMode: LimitsCgroup, RunDir: t.TempDir()}); err == nil {
			t.Fatal("cgroup mode without cgroups accepted")
		}
	}
	l := (&Provider{opts: Options{Limits: sandbox.Limits{MemoryBytes: 1, Pids: 2, CPUPercent: 3}}}).limits(sandbox.Spec{Limits: sandbox.Limits{Pids: 9}})
	if l != (sandbox.Limits{MemoryBytes: 1, Pids: 9, CPUPercent: 3}) {
		t.Fatalf("limits %+v", l)
	}
}

// TestRlimitPool: without cgroups, a pool user's RLIMIT_NPROC bounds its
// processes.
func TestRlimitPool(t *testing.T) {
	needRoot(t)
	dir := sandboxtest.ShortTempDir(t, "sx")
	p := poolProvider(t, dir, 1, func(o *Options) {
		o.UserPool = []string{strconv.Itoa(testUIDBase + 7)}
		o.LimitMode = LimitsRlimit
		o.Limits = sandbox.Limits{Pids: 40}
	})
	e := createSpec(t, p, sandbox.Spec{SessionID: "rl", Workspace: filepath.Join(dir, "ws")})
	o, se, st := sandboxtest.Run(t, e, sandbox.Cmd{Argv: []string{"sh", "-c", `grep processes /proc/self/limits; ( i=0; while [ $i -lt 100 ]; do sleep 60 >/dev/null 2>&1 & i=$((i+1)); done; echo spawned $i ); echo rc=$?; kill -9 0`}})
	if !strings.Contains(o, "Max processes             40                   40") || strings.Contains(o, "spawned 100") || !strings.Contains(o, "rc=2") {
		t.Fatalf("%q %q %+v", o, se, st)
	}
	if _, err := e.client.Ping(bg); err != nil {
		t.Fatalf("executor after the fork storm: %v", err)
	}
}

// The Wrapper gets what it needs to build a sandbox around the executor.
type recordingWrapper struct {
	mu   sync.Mutex
	seen []Launch
}

func (w *recordingWrapper) Wrap(l Launch) ([]string, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.seen = append(w.seen, l)
	if l.Spec.SessionID == "refuse" {
		return nil, errors.New("no sandbox for you")
	}
	return append([]string{"/usr/bin/env", "WRAPPED=1"}, l.Argv...), nil
}

func TestWrapper(t *testing.T) {
	w := &recordingWrapper{}
	fp := &sandboxtest.FakeProxy{}
	defer fp.Close()
	p, dir := newTestProvider(t, func(o *Options) { o.Wrapper = w; o.ModelProxy = fp })
	e := createSpec(t, p, sandbox.Spec{SessionID: "w", Workspace: filepath.Join(dir, "ws")})
	if o, _, _ := sandboxtest.Run(t, e, sandbox.Cmd{Argv: []string{"echo", "hi"}}); o != "hi\n" {
		t.Fatalf("%q", o)
	}
	l := w.seen[0]
	if l.Workspace != filepath.Join(dir, "ws") || l.RunDir != e.handle.Dir || l.ModelProxyDir != proxyDir(e.handle.Dir) ||
		l.UID != os.Getuid() || l.SwitchUser || l.Argv[1] != "executor" || l.Path == "" {
		t.Fatalf("launch %+v", l)
	}
	_, err := p.Create(bg, sandbox.Spec{SessionID: "refuse", Workspace: filepath.Join(dir, "ws2")})
	if err == nil || !strings.Contains(err.Error(), "no sandbox for you") {
		t.Fatalf("%v", err)
	}
}

// execAs is a command run as uid (gid = uid).
func execAs(uid uint32, name string, args ...string) *exec.Cmd {
	cmd := exec.Command(name, args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uid, Gid: uid}}
	return cmd
}

func FuzzParseUserPool(f *testing.F) {
	f.Add("59990-59992,nobody")
	f.Add("1-0")
	f.Add("4294967295")
	f.Add("-,--1,0-")
	f.Fuzz(func(t *testing.T, spec string) {
		users, err := parseUserPool(strings.Split(spec, ","))
		if err != nil {
			return
		}
		if len(users) == 0 || len(users) > maxPoolSize {
			t.Fatalf("%q: %d users", spec, len(users))
		}
		seen := map[uint32]bool{}
		for _, u := range users {
			if u.uid == 0 || seen[u.uid] {
				t.Fatalf("%q: uid %d (root or twice)", spec, u.uid)
			}
			seen[u.uid] = true
		}
	})
}
