package bwrap

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/agentd/agentd/internal/sandbox/executor"
	"github.com/agentd/agentd/internal/sandbox/sandboxtest"
	"github.com/agentd/agentd/sandbox"
)

func TestWrapCommandLine(t *testing.T) {
	dir := sandboxtest.ShortTempDir(t, "bw") // other users may pass
	bin := filepath.Join(dir, "bin", "agentd")
	tools := filepath.Join(dir, "tools")
	data := filepath.Join(dir, "data")
	for _, d := range []string{filepath.Dir(bin), filepath.Join(tools, "node_modules", ".bin"), filepath.Join(data, "workspaces", "s1")} {
		os.MkdirAll(d, 0o755)
	}
	os.WriteFile(bin, nil, 0o755)
	w := &wrapper{bwrap: "/usr/bin/bwrap", root: true, tmpSize: 1 << 20, readOnly: []string{tools, "relative", data, "/nonexistent"}}
	ws := filepath.Join(data, "workspaces", "s1")
	l := executor.Launch{
		Argv:      []string{bin, "executor", "--listen-fd", "3"},
		Workspace: ws, RunDir: "/run/agentd-test/s1-x", ModelProxyDir: "/run/agentd-test/s1-x.mp",
		Path: "/usr/bin:" + filepath.Join(tools, "node_modules", ".bin") + ":relative:" + data + ":/:" + ws + "/bin:/opt/none-such",
	}
	args, err := w.Wrap(l)
	if err != nil {
		t.Fatal(err)
	}
	line := strings.Join(args, " ")
	for _, want := range []string{
		"--unshare-pid --unshare-net", "--unshare-user --disable-userns", "--cap-drop ALL", "--new-session",
		"--ro-bind /usr /usr", "--perms 0755 --dir /etc --ro-bind /etc/passwd /etc/passwd",
		"--size 1048576 --perms 1777 --tmpfs /tmp", "--perms 0755 --dir /var --perms 1777 --tmpfs /var/tmp",
		"--ro-bind " + bin + " " + bin,
		"--ro-bind " + filepath.Join(tools, "node_modules") + " ",
		"--ro-bind " + tools + " " + tools,
		"--bind " + ws + " " + ws, "--perms 0755 --dir /run --perms 0755 --dir /run/agentd-test --bind /run/agentd-test/s1-x /run/agentd-test/s1-x",
		"--ro-bind /run/agentd-test/s1-x.mp /run/agentd-test/s1-x.mp",
		"--remount-ro / -- " + bin + " executor --listen-fd 3",
	} {
		if !strings.Contains(line, want) {
			t.Errorf("missing %q in\n%s", want, line)
		}
	}
	for _, bad := range []string{"--die-with-parent", "--ro-bind " + data + " ", "--ro-bind / /", "relative", "--share-net", "CAP_SETUID", "/nonexistent"} {
		if strings.Contains(line, bad) {
			t.Errorf("unexpected %q in\n%s", bad, line)
		}
	}
	// The tmpfs mounts come before the binds (the workspace may live
	// under /tmp on the host).
	if strings.Index(line, "--tmpfs /tmp") > strings.Index(line, "--bind "+ws) {
		t.Error("workspace bound before /tmp is mounted")
	}
	if w.PeerUID(l) != os.Getuid() {
		t.Errorf("peer uid %d", w.PeerUID(l))
	}
	// Started as the sandbox's uid by a root server: its root is that uid,
	// and the server is the overflow uid inside.
	l.UID, l.GID = DefaultSandboxUID, DefaultSandboxUID
	args, err = w.Wrap(l)
	line = strings.Join(args, " ")
	if err != nil || !strings.Contains(line, "--unshare-user --disable-userns --uid 0 --gid 0 --cap-drop ALL") {
		t.Fatalf("mapped root: %v %s", err, line)
	}
	// What that uid cannot reach is not shown.
	closed := filepath.Join(dir, "closed")
	os.MkdirAll(filepath.Join(closed, "bin"), 0o755)
	os.Chmod(closed, 0o700)
	l.Path += ":" + filepath.Join(closed, "bin")
	if args, err = w.Wrap(l); err != nil || strings.Contains(strings.Join(args, " "), closed) {
		t.Fatalf("unreachable PATH folder shown: %v %s", err, args)
	}
	bl := l
	bl.Argv = append([]string{filepath.Join(closed, "bin", "agentd")}, l.Argv[1:]...)
	os.WriteFile(bl.Argv[0], nil, 0o755)
	if _, err := w.Wrap(bl); err == nil || !strings.Contains(err.Error(), "cannot reach the agentd binary") {
		t.Fatalf("unreachable binary: %v", err)
	}
	if w.PeerUID(l) != overflowUID() || overflowUID() == 0 {
		t.Errorf("peer uid %d (overflow uid %d)", w.PeerUID(l), overflowUID())
	}
	// Switching users inside: no user namespace, the two capabilities.
	l.SwitchUser = true
	args, _ = w.Wrap(l)
	line = strings.Join(args, " ")
	if strings.Contains(line, "--unshare-user") || strings.Contains(line, "--uid") || !strings.Contains(line, "--cap-drop ALL --cap-add CAP_SETUID --cap-add CAP_SETGID") {
		t.Fatalf("switch user: %s", line)
	}
	if w.PeerUID(l) != os.Getuid() {
		t.Errorf("peer uid %d", w.PeerUID(l))
	}
	if _, err := w.Wrap(executor.Launch{Argv: []string{"agentd"}, Workspace: "/w", RunDir: "/r"}); err == nil {
		t.Fatal("relative binary accepted")
	}
	if _, err := w.Wrap(executor.Launch{Argv: []string{"/agentd"}}); err == nil {
		t.Fatal("launch without workspace accepted")
	}
}

func TestPathDirs(t *testing.T) {
	dir := t.TempDir()
	nm := filepath.Join(dir, "tools", "node_modules", ".bin")
	os.MkdirAll(nm, 0o755)
	os.MkdirAll(filepath.Join(dir, "bin"), 0o755)
	got := pathDirs(strings.Join([]string{"/usr/bin", nm, filepath.Join(dir, "bin"), dir, "rel", "", "/nonexistent"}, ":"),
		[]string{filepath.Join(dir, "ws")})
	want := []string{filepath.Join(dir, "tools", "node_modules"), filepath.Join(dir, "bin")}
	if !slices.Equal(got, want) {
		t.Fatalf("got %q want %q", got, want)
	}
}

func FuzzPathDirs(f *testing.F) {
	f.Add("/usr/bin:/tmp:/:relative::/tmp/x/node_modules/.bin", "/tmp/x")
	f.Fuzz(func(t *testing.T, path, private string) {
		for _, d := range pathDirs(path, []string{private}) {
			if !filepath.IsAbs(d) || d == "/" || underSystem(d) || (filepath.IsAbs(private) && covers(d, []string{private})) {
				t.Fatalf("path %q private %q gave %q", path, private, d)
			}
		}
	})
}

func TestNewWithoutBwrap(t *testing.T) {
	if _, err := New(Options{Bwrap: "/nonexistent/bwrap"}); err == nil {
		t.Fatal("missing bwrap accepted")
	}
	dir := t.TempDir()
	fake := filepath.Join(dir, "bwrap")
	os.WriteFile(fake, []byte("#!/bin/sh\necho 'bwrap: No permissions to create new namespace' >&2\nexit 1\n"), 0o755)
	_, err := New(Options{Bwrap: fake})
	if err == nil || !strings.Contains(err.Error(), "No permissions") {
		t.Fatalf("broken bwrap: %v", err)
	}
}

// hostHTTP is a server on the host's loopback, which the sandbox must not
// reach.
func hostHTTP(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "host reached") })}
	done := make(chan struct{})
	go func() { defer close(done); srv.Serve(ln) }()
	t.Cleanup(func() { srv.Close(); <-done })
	return ln.Addr().String()
}

// TestSandboxView: what a process inside sees and can do.
func TestSandboxView(t *testing.T) {
	fp := &sandboxtest.FakeProxy{}
	defer fp.Close()
	p, dir := newProvider(t, func(o *Options) { o.ModelProxy = fp })
	// The server's data next to the workspace: invisible inside.
	data := filepath.Join(dir, "data")
	os.MkdirAll(filepath.Join(data, "workspaces"), 0o755)
	os.WriteFile(filepath.Join(data, "agentd.db"), []byte("DATABASE"), 0o644)
	os.MkdirAll(filepath.Join(data, "workspaces", "other"), 0o755)
	os.WriteFile(filepath.Join(data, "workspaces", "other", "f"), []byte("OTHER SESSION"), 0o644)
	ws := filepath.Join(data, "workspaces", "me")
	host := hostHTTP(t)
	env := sandboxtest.Create(t, p, sandbox.Spec{SessionID: "view", Workspace: ws, Env: map[string]string{"ANTHROPIC_API_KEY": "sk-ant-REAL-1"}})
	if env.WorkDir() != ws {
		t.Fatalf("workdir %q", env.WorkDir())
	}
	script := fmt.Sprintf(`
cd %[1]s
touch /data-test 2>/dev/null && echo "WROTE ROOT"
echo "pwd=$(pwd)"
for f in /usr/x /etc/x /x /home/x %[2]s/x %[3]s/other/x; do touch $f 2>/dev/null && echo "WROTE $f"; done
touch ok /tmp/ok && echo "wrote workspace and tmp"
cat %[2]s/agentd.db 2>/dev/null && echo "READ DB"
cat %[3]s/other/f 2>/dev/null && echo "READ OTHER"
ls %[3]s 2>/dev/null | tr '\n' ' '; echo "<- workspaces seen"
echo "procs=$(ls /proc | grep -c '^[0-9]')"
curl -s -m 3 http://%[4]s/ && echo "HOST REACHED"
curl -s -m 3 http://1.1.1.1/ >/dev/null && echo "INTERNET REACHED"
echo "proxy=$(curl -s -m 5 -H "x-api-key: $ANTHROPIC_API_KEY" "$ANTHROPIC_BASE_URL/v1/messages")"
env | grep -c REAL
grep -E '^(CapEff|NoNewPrivs)' /proc/self/status | tr '\t\n' '  '; echo
unshare -U true 2>/dev/null && echo "NESTED USERNS"
hostname
`, ws, data, filepath.Join(data, "workspaces"), host)
	o, e, _ := sandboxtest.Run(t, env, sandbox.Cmd{Argv: []string{"sh", "-c", script}})
	t.Logf("inside:\n%s%s", o, e)
	// The data folder is under /tmp here: inside, that is the private
	// /tmp (writable, gone with the sandbox), never the host's.
	if _, err := os.Stat(filepath.Join(data, "x")); err == nil {
		t.Error("sandbox wrote into the host's data folder")
	}
	o = strings.ReplaceAll(o, "WROTE "+data+"/x\n", "")
	for _, bad := range []string{"WROTE", "READ DB", "READ OTHER", "other", "HOST REACHED", "INTERNET REACHED", "NESTED USERNS"} {
		if strings.Contains(o, bad) {
			t.Errorf("sandbox could: %s", bad)
		}
	}
	for _, want := range []string{"pwd=" + ws, "wrote workspace and tmp", "me <- workspaces seen", "proxy=proxy for view: GET /v1/messages key=tok-view",
		"\n0\n", "CapEff: 0000000000000000", "NoNewPrivs: 1", "agentd\n"} {
		if !strings.Contains(o, want) {
			t.Errorf("missing %q", want)
		}
	}
	if n := procsLine(o); n < 1 || n > 6 {
		t.Errorf("sees %d processes", n)
	}
	// Files written inside are on the host, the rest vanished with it.
	if _, err := os.Stat(filepath.Join(ws, "ok")); err != nil {
		t.Fatal(err)
	}
	// A terminal works (own /dev/pts).
	o, _, st := sandboxtest.Run(t, env, sandbox.Cmd{Argv: []string{"tty"}, PTY: &sandbox.WindowSize{Rows: 24, Cols: 80}})
	if !st.Success() || !strings.HasPrefix(o, "/dev/pts/") {
		t.Fatalf("tty: %q %+v", o, st)
	}
	// The handle names the wrapper's pid and the executor's own.
	h := handleOf(t, env)
	if h.InnerPID == 0 || h.InnerPID == h.PID {
		t.Fatalf("handle %+v", h)
	}
}

func procsLine(o string) int {
	for _, l := range strings.Split(o, "\n") {
		if v, ok := strings.CutPrefix(l, "procs="); ok {
			n, _ := strconv.Atoi(v)
			return n
		}
	}
	return -1
}

// TestPoolUsers: with a user pool (root), each sandbox runs as its own
// user, sees no other workspace, and cannot read its init's environment.
func TestPoolUsers(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("a user pool needs root")
	}
	p, dir := newProvider(t, func(o *Options) { o.UserPool = []string{"59980-59981"} })
	ws1, ws2 := filepath.Join(dir, "ws1"), filepath.Join(dir, "ws2")
	e1 := sandboxtest.Create(t, p, sandbox.Spec{SessionID: "u1", Workspace: ws1})
	e2 := sandboxtest.Create(t, p, sandbox.Spec{SessionID: "u2", Workspace: ws2})
	if err := e1.WriteFile(bg, "mine.txt", []byte("1"), 0); err != nil {
		t.Fatal(err)
	}
	script := `id -u; cat /proc/1/environ >/dev/null 2>&1 && echo "READ INIT ENV"; grep CapEff /proc/self/status; touch /tmp/t && echo tmp ok; ls ` + ws1 + ` 2>&1 | head -1`
	o1, _, _ := sandboxtest.Run(t, e1, sandbox.Cmd{Argv: []string{"sh", "-c", script}})
	o2, _, _ := sandboxtest.Run(t, e2, sandbox.Cmd{Argv: []string{"sh", "-c", script}})
	if !strings.HasPrefix(o1, "5998") || !strings.HasPrefix(o2, "5998") || o1[:5] == o2[:5] {
		t.Fatalf("uids:\n%s\n%s", o1, o2)
	}
	for _, o := range []string{o1, o2} {
		if strings.Contains(o, "READ INIT ENV") || !strings.Contains(o, "CapEff:\t0000000000000000") || !strings.Contains(o, "tmp ok") {
			t.Errorf("inside:\n%s", o)
		}
	}
	if !strings.Contains(o1, "mine.txt") || !strings.Contains(o2, "No such file") {
		t.Fatalf("workspace 1 from 1: %q, from 2: %q", o1, o2)
	}
	var st syscall.Stat_t
	syscall.Stat(filepath.Join(ws1, "mine.txt"), &st)
	if st.Uid < 59980 || st.Uid > 59981 {
		t.Fatalf("file owned by %d", st.Uid)
	}
}

// TestLimits: a fork storm beyond the pids limit fails inside the sandbox;
// the executor keeps serving.
func TestLimits(t *testing.T) {
	p, dir := newProvider(t, func(o *Options) { o.Limits = sandbox.Limits{Pids: 48} })
	if strings.HasPrefix(p.LimitsEnforcement(), "none") {
		t.Skipf("no limits here: %s", p.LimitsEnforcement())
	}
	t.Logf("limits: %s", p.LimitsEnforcement())
	env := sandboxtest.Create(t, p, sandbox.Spec{SessionID: "lim", Workspace: filepath.Join(dir, "ws")})
	o, _, _ := sandboxtest.Run(t, env, sandbox.Cmd{Argv: []string{"sh", "-c", `( i=0; while [ $i -lt 100 ]; do sleep 60 >/dev/null 2>&1 & i=$((i+1)); done; echo spawned $i ); echo rc=$?; kill -9 0`}})
	if strings.Contains(o, "spawned 100") || !strings.Contains(o, "rc=2") {
		t.Fatalf("fork storm: %q", o)
	}
	// The killed storm is reaped by the sandbox's init: soon room again.
	deadline := time.Now().Add(10 * time.Second)
	for {
		o, _, st := sandboxtest.Run(t, env, sandbox.Cmd{Argv: []string{"echo", "alive"}})
		if st.Success() && o == "alive\n" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no room after the storm: %q %+v", o, st)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestRecover: a second provider (a restarted server) re-attaches to a
// running sandbox and resumes a process's output, then terminates it for
// good.
func TestRecover(t *testing.T) {
	p, dir := newProvider(t, nil)
	spec := sandbox.Spec{SessionID: "rec", Workspace: filepath.Join(dir, "ws")}
	env := sandboxtest.Create(t, p, spec)
	if _, err := env.Exec(bg, sandbox.Cmd{Tag: "count", Argv: []string{"sh", "-c", `for i in 1 2 3 4 5; do echo line $i; sleep 0.1; done`}}); err != nil {
		t.Fatal(err)
	}
	h := handleOf(t, env)
	p2, err := New(testOptions(dir))
	if err != nil {
		t.Fatal(err)
	}
	env2, err := p2.Recover(bg, spec, env.(sandbox.HandleReporter).Handle())
	if err != nil {
		t.Fatal(err)
	}
	proc, err := env2.(sandbox.Attacher).Attach(bg, "count", sandbox.Offsets{})
	if err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	for c := range proc.Output() {
		out.Write(c.Data)
	}
	if st, err := proc.Wait(bg); err != nil || !st.Success() || out.String() != "line 1\nline 2\nline 3\nline 4\nline 5\n" {
		t.Fatalf("%q %+v %v", out.String(), st, err)
	}
	if err := env2.Terminate(bg); err != nil {
		t.Fatal(err)
	}
	if alive(h.PID) {
		t.Fatal("bubblewrap still running after Terminate")
	}
	// Recovering a terminated sandbox says it is gone.
	if _, err := p2.Recover(bg, spec, env.(sandbox.HandleReporter).Handle()); !errors.Is(err, sandbox.ErrGone) {
		t.Fatalf("recover after terminate: %v", err)
	}
}

// TestSurvivesServerDeath: the server that created the sandbox exits; the
// sandbox, its executor and its process live on, and a new server takes
// them back.
func TestSurvivesServerDeath(t *testing.T) {
	needBwrap(t)
	dir := sandboxtest.ShortTempDir(t, "bw")
	sandboxtest.UserBinary(t, dir)
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "BWRAP_TEST_SERVER="+dir)
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("server: %v %s", err, out)
	}
	handle := []byte(strings.TrimSpace(string(out)))
	p, err := New(testOptions(dir))
	if err != nil {
		t.Fatal(err)
	}
	spec := sandbox.Spec{SessionID: "dying", Workspace: filepath.Join(dir, "ws")}
	env, err := p.Recover(bg, spec, handle)
	if err != nil {
		t.Fatalf("recover after the server died: %v", err)
	}
	defer env.Terminate(bg)
	proc, err := env.(sandbox.Attacher).Attach(bg, "count", sandbox.Offsets{})
	if err != nil {
		t.Fatal(err)
	}
	var got strings.Builder
	for c := range proc.Output() {
		got.Write(c.Data)
	}
	if st, err := proc.Wait(bg); err != nil || !st.Success() || !strings.HasSuffix(got.String(), "line 40\n") || !strings.HasPrefix(got.String(), "line 1\n") {
		t.Fatalf("%q %+v %v", got.String(), st, err)
	}
}

func alive(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	i := strings.LastIndexByte(string(b), ')')
	return i > 0 && i+2 < len(b) && b[i+2] != 'Z'
}

func TestTerminateKillsEverything(t *testing.T) {
	p, dir := newProvider(t, nil)
	env := sandboxtest.Create(t, p, sandbox.Spec{SessionID: "kill", Workspace: filepath.Join(dir, "ws")})
	// A daemon in its own session inside the sandbox.
	o, _, _ := sandboxtest.Run(t, env, sandbox.Cmd{Argv: []string{"sh", "-c", `setsid sh -c 'sleep 300 >/dev/null 2>&1 & echo $!' </dev/null`}})
	if strings.TrimSpace(o) == "" {
		t.Fatal("no daemon")
	}
	h := handleOf(t, env)
	ctx, cancel := context.WithTimeout(bg, 30*time.Second)
	defer cancel()
	if err := env.Terminate(ctx); err != nil {
		t.Fatal(err)
	}
	if alive(h.PID) {
		t.Fatal("bubblewrap alive after Terminate")
	}
	// No sleep 300 of ours is left anywhere.
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		b, _ := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		if string(b) == "sleep\x00300\x00" {
			if env, _ := os.ReadFile("/proc/" + e.Name() + "/environ"); strings.Contains(string(env), h.Dir) || strings.Contains(string(env), "ws") {
				t.Fatalf("daemon %s survived", e.Name())
			}
		}
	}
}

// TestRootSandboxIsNotHostRoot: with a root server and no users, the
// sandbox's root is an unprivileged host uid. An agent that copied a shell
// and made it set-uid used to leave a set-uid-root shell in a workspace
// any local user could reach; now the copy is the sandbox uid's, the
// workspace is closed to other users, and nested user namespaces stay
// refused.
func TestRootSandboxIsNotHostRoot(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("the server's root is what is mapped away")
	}
	p, dir := newProvider(t, nil)
	data := filepath.Join(dir, "data")
	os.MkdirAll(filepath.Join(data, "workspaces"), 0o711)
	ws := filepath.Join(data, "workspaces", "s1")
	env := sandboxtest.Create(t, p, sandbox.Spec{SessionID: "suid", Workspace: ws})
	o, e, st := sandboxtest.Run(t, env, sandbox.Cmd{Argv: []string{"sh", "-c",
		`id -u; cp /usr/bin/bash ./rootsh && chmod 4755 ./rootsh && echo copied; unshare -U true 2>/dev/null && echo NESTED USERNS; grep CapEff /proc/self/status`}})
	if !st.Success() || !strings.HasPrefix(o, "0\n") || !strings.Contains(o, "copied") || strings.Contains(o, "NESTED") || !strings.Contains(o, "CapEff:\t0000000000000000") {
		t.Fatalf("inside: %q %q %+v", o, e, st)
	}
	var fst, wst syscall.Stat_t
	if err := syscall.Stat(filepath.Join(ws, "rootsh"), &fst); err != nil {
		t.Fatal(err)
	}
	if fst.Uid != DefaultSandboxUID || fst.Gid != DefaultSandboxUID {
		t.Fatalf("the sandbox's file is owned by %d:%d on the host, want %d", fst.Uid, fst.Gid, DefaultSandboxUID)
	}
	syscall.Stat(ws, &wst)
	if wst.Uid != DefaultSandboxUID || wst.Mode&0o777 != 0o700 {
		t.Fatalf("workspace %o owned by %d", wst.Mode&0o777, wst.Uid)
	}
	// Another host user gets nowhere near it.
	const other = 59983
	cmd := exec.Command(filepath.Join(ws, "rootsh"), "-p", "-c", "id -u")
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: other, Gid: other, Groups: []uint32{}}}
	if out, err := cmd.CombinedOutput(); err == nil {
		t.Fatalf("another user ran the sandbox's set-uid copy: %q", out)
	}
	// The server still reads and writes the workspace, and takes it back
	// when the environment ends (files keep their owner).
	if err := env.WriteFile(bg, "from-server", []byte("x"), 0); err != nil {
		t.Fatal(err)
	}
	if err := env.Terminate(bg); err != nil {
		t.Fatal(err)
	}
	syscall.Stat(ws, &wst)
	if wst.Uid != 0 || wst.Mode&0o777 != 0o700 {
		t.Fatalf("workspace after Terminate: %o owned by %d", wst.Mode&0o777, wst.Uid)
	}
	// A new environment on it gets it back, with what the server wrote
	// meanwhile (root's file becomes the sandbox uid's).
	if err := os.WriteFile(filepath.Join(ws, "restored"), []byte("r"), 0o644); err != nil {
		t.Fatal(err)
	}
	env2 := sandboxtest.Create(t, p, sandbox.Spec{SessionID: "suid", Workspace: ws})
	o, e, st = sandboxtest.Run(t, env2, sandbox.Cmd{Argv: []string{"sh", "-c", `cat restored && echo more >> restored && stat -c '%u' restored rootsh`}})
	if !st.Success() || o != "r0\n0\n" {
		t.Fatalf("second environment: %q %q %+v", o, e, st)
	}
	for _, f := range []string{"restored", "rootsh"} {
		syscall.Stat(filepath.Join(ws, f), &fst)
		if fst.Uid != DefaultSandboxUID {
			t.Fatalf("%s owned by %d on the host", f, fst.Uid)
		}
	}
}

// TestRootSandboxWithoutUserNamespaces: where the sandbox uid may not make
// a user namespace, a root server's sandbox still is not the host's root:
// the executor switches to that uid itself.
func TestRootSandboxWithoutUserNamespaces(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("the server's root is what is mapped away")
	}
	needBwrap(t)
	real, _ := exec.LookPath("bwrap")
	dir := sandboxtest.ShortTempDir(t, "bu")
	fake := filepath.Join(dir, "bwrap")
	script := "#!/bin/sh\nif [ \"$(id -u)\" != 0 ]; then echo 'bwrap: setting up uid map: Permission denied' >&2; exit 1; fi\nexec " + real + " \"$@\"\n"
	if err := os.WriteFile(fake, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	opts := testOptions(dir)
	opts.Bwrap = fake
	p, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	ws := filepath.Join(dir, "ws")
	env := sandboxtest.Create(t, p, sandbox.Spec{SessionID: "nouserns", Workspace: ws})
	o, e, st := sandboxtest.Run(t, env, sandbox.Cmd{Argv: []string{"sh", "-c", `id -u; touch made`}})
	if !st.Success() || o != strconv.Itoa(DefaultSandboxUID)+"\n" {
		t.Fatalf("inside: %q %q %+v", o, e, st)
	}
	var fst syscall.Stat_t
	syscall.Stat(filepath.Join(ws, "made"), &fst)
	if fst.Uid != DefaultSandboxUID {
		t.Fatalf("file owned by %d", fst.Uid)
	}
}

func TestReachable(t *testing.T) {
	dir := sandboxtest.ShortTempDir(t, "br")
	closed := filepath.Join(dir, "closed")
	passable := filepath.Join(dir, "passable")
	os.MkdirAll(filepath.Join(closed, "bin"), 0o755)
	os.MkdirAll(filepath.Join(passable, "bin"), 0o755)
	os.Chmod(closed, 0o700)
	os.Chmod(passable, 0o711)
	os.WriteFile(filepath.Join(passable, "bin", "tool"), nil, 0o755)
	os.WriteFile(filepath.Join(passable, "secret"), nil, 0o600)
	os.Symlink(filepath.Join(closed, "bin"), filepath.Join(passable, "link"))
	const uid = DefaultSandboxUID
	for p, want := range map[string]bool{
		"/usr/bin": true, "/etc/passwd": true,
		filepath.Join(closed, "bin"): false, filepath.Join(passable, "bin"): true,
		filepath.Join(passable, "bin", "tool"): true, filepath.Join(passable, "secret"): false,
		filepath.Join(passable, "link"): false, filepath.Join(dir, "missing"): false,
	} {
		if got := reachable(p, uid, uid); got != want {
			t.Errorf("reachable(%s) = %v, want %v", p, got, want)
		}
	}
}
