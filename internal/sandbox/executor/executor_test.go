package executor

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/agentd/agentd/internal/executor/rpc"
	"github.com/agentd/agentd/internal/sandbox/local"
	"github.com/agentd/agentd/internal/sandbox/sandboxtest"
	"github.com/agentd/agentd/sandbox"
)

var bg = context.Background()

func TestCreateExecFilesTerminate(t *testing.T) {
	var mu sync.Mutex
	var calls []string
	p, dir := newTestProvider(t, func(o *Options) {
		o.OnCall = func(sid, m string, n int, err error, d time.Duration) {
			mu.Lock()
			calls = append(calls, sid+" "+m)
			mu.Unlock()
		}
	})
	env, spec := createEnv(t, p, dir)
	if p.Name() != "executor" || !env.Running() {
		t.Fatal("not running")
	}
	var h Handle
	if err := json.Unmarshal(env.Handle(), &h); err != nil {
		t.Fatal(err)
	}
	if h.PID <= 0 || h.PID == os.Getpid() || h.ProtocolVersion != rpc.ProtocolVersion || h.StartedAt.IsZero() || !strings.HasSuffix(h.Socket, ".sock") {
		t.Fatalf("handle %+v", h)
	}
	fi, err := os.Stat(h.Socket)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("socket %v %v", fi, err)
	}
	// The executor leads its own session (so its own process group).
	if sid, err := unixGetsid(h.PID); err != nil || sid != h.PID {
		t.Fatalf("executor session %d %v, want %d", sid, err, h.PID)
	}
	ws, _ := filepath.EvalSymlinks(spec.Workspace)
	if env.WorkDir() != ws {
		t.Fatalf("workdir %q want %q", env.WorkDir(), ws)
	}

	o, e, st := sandboxtest.Run(t, env, sandbox.Cmd{Argv: []string{"sh", "-c", `echo "$FROM_SPEC $FROM_CMD $PWD"; echo err >&2; exit 2`}, Env: map[string]string{"FROM_CMD": "too"}})
	if o != "yes too "+ws+"\n" || e != "err\n" || st.Code != 2 {
		t.Fatalf("run: %q %q %+v", o, e, st)
	}
	// Nothing of the server's environment leaks in.
	t.Setenv("SERVER_ONLY", "secret")
	if o, _, _ := sandboxtest.Run(t, env, sandbox.Cmd{Argv: []string{"sh", "-c", `echo "[$SERVER_ONLY][$AGENTD_TEST_EXECUTOR]"`}}); o != "[][]\n" {
		t.Fatalf("leaked environment: %q", o)
	}

	if err := env.WriteFiles(bg, []sandbox.File{{Path: "a.txt", Content: []byte("A")}, {Path: "d/b.txt", Content: []byte("B"), Mode: 0o600}}); err != nil {
		t.Fatal(err)
	}
	if err := env.WriteFile(bg, "empty", nil, 0); err != nil {
		t.Fatal(err)
	}
	if b, err := env.ReadFile(bg, "d/b.txt"); err != nil || string(b) != "B" {
		t.Fatalf("read %q %v", b, err)
	}
	if b, err := env.ReadFile(bg, "empty"); err != nil || b == nil || len(b) != 0 {
		t.Fatalf("empty file %v %v", b, err)
	}
	if _, err := env.ReadFile(bg, "missing"); !errors.Is(err, sandbox.ErrNotFound) || !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("missing: %v", err)
	}
	if _, err := env.ReadFile(bg, "../../etc/passwd"); !errors.Is(err, sandbox.ErrInvalidPath) {
		t.Fatalf("escape: %v", err)
	}
	list, err := env.List(bg, "", true)
	if err != nil || len(list) != 4 || list[0].Path != "a.txt" || list[2].Path != "d/b.txt" {
		t.Fatalf("list %+v %v", list, err)
	}
	if err := env.Remove(bg, "d"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(ws, "d")); !errors.Is(err, os.ErrNotExist) {
		t.Fatal("not removed")
	}

	if err := env.Terminate(bg); err != nil {
		t.Fatal(err)
	}
	if env.Running() {
		t.Fatal("running after terminate")
	}
	if pidAlive(h.PID) {
		t.Fatal("executor alive after terminate")
	}
	if _, err := os.Stat(h.Socket); !errors.Is(err, os.ErrNotExist) {
		t.Fatal("socket left")
	}
	if _, err := os.Stat(h.Dir); !errors.Is(err, os.ErrNotExist) {
		t.Fatal("run folder left")
	}
	if _, err := os.Stat(filepath.Join(ws, "a.txt")); err != nil {
		t.Fatal("workspace contents gone")
	}
	if _, err := env.Exec(bg, sandbox.Cmd{Argv: []string{"true"}}); !errors.Is(err, sandbox.ErrTerminated) {
		t.Fatalf("exec after terminate: %v", err)
	}
	if _, err := env.ReadFile(bg, "a.txt"); !errors.Is(err, sandbox.ErrTerminated) {
		t.Fatalf("read after terminate: %v", err)
	}
	if err := env.Terminate(bg); err != nil {
		t.Fatalf("second terminate: %v", err)
	}
	// A terminated environment cannot be recovered.
	if _, err := p.Recover(bg, spec, env.Handle()); !errors.Is(err, sandbox.ErrGone) {
		t.Fatalf("recover terminated: %v", err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(calls) == 0 || calls[0] != "sess-1 ping" || !strings.Contains(strings.Join(calls, ","), "sess-1 exec.start") {
		t.Fatalf("OnCall saw %q", calls)
	}
}

func unixGetsid(pid int) (int, error) {
	sid, _, errno := syscall.RawSyscall(syscall.SYS_GETSID, uintptr(pid), 0, 0)
	if errno != 0 {
		return 0, errno
	}
	return int(sid), nil
}

func TestExecErrorsKeepServing(t *testing.T) {
	p, dir := newTestProvider(t, nil)
	env, _ := createEnv(t, p, dir)
	_, err := env.Exec(bg, sandbox.Cmd{Argv: []string{"no-such-agent-cli"}})
	if !errors.Is(err, exec.ErrNotFound) || !strings.Contains(err.Error(), "no-such-agent-cli") {
		t.Fatalf("missing program: %v", err)
	}
	if _, err := env.Exec(bg, sandbox.Cmd{Argv: []string{"true"}, Dir: "../.."}); !errors.Is(err, sandbox.ErrInvalidPath) {
		t.Fatalf("bad dir: %v", err)
	}
	if _, err := env.Exec(bg, sandbox.Cmd{}); err == nil {
		t.Fatal("empty argv accepted")
	}
	if _, err := env.Attach(bg, "never-started", sandbox.Offsets{}); !errors.Is(err, sandbox.ErrNotFound) {
		t.Fatalf("attach unknown: %v", err)
	}
	if o, _, st := sandboxtest.Run(t, env, sandbox.Cmd{Argv: []string{"echo", "still here"}}); o != "still here\n" || !st.Success() {
		t.Fatalf("after errors: %q %+v", o, st)
	}
}

func TestStdinSignalPTY(t *testing.T) {
	p, dir := newTestProvider(t, nil)
	env, _ := createEnv(t, p, dir)

	proc, err := env.Exec(bg, sandbox.Cmd{Argv: []string{"cat"}, Stdin: true})
	if err != nil {
		t.Fatal(err)
	}
	big := bytes.Repeat([]byte("0123456789"), 1<<20) // over one exec.input call
	go func() {
		if _, err := proc.Write(big); err != nil {
			t.Error(err)
		}
		if err := proc.CloseStdin(); err != nil {
			t.Error(err)
		}
	}()
	o, _ := sandboxtest.Collect(t, proc)
	if st, err := proc.Wait(bg); err != nil || !st.Success() || o != string(big) {
		t.Fatalf("cat: %+v %v, %d bytes", st, err, len(o))
	}

	proc, err = env.Exec(bg, sandbox.Cmd{Argv: []string{"sleep", "30"}})
	if err != nil {
		t.Fatal(err)
	}
	if err := proc.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	sandboxtest.Collect(t, proc)
	if st, err := proc.Wait(bg); err != nil || st.Signal != "SIGTERM" {
		t.Fatalf("sleep: %+v %v", st, err)
	}
	if err := proc.Kill(); err != nil {
		t.Fatalf("kill after exit: %v", err)
	}

	proc, err = env.Exec(bg, sandbox.Cmd{Argv: []string{"sh", "-c", "stty size; read x; stty size"}, PTY: &sandbox.WindowSize{Rows: 30, Cols: 90}})
	if err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	for c := range proc.Output() {
		out.Write(c.Data)
		if strings.Contains(out.String(), "30 90") && !strings.Contains(out.String(), "resized") {
			if err := proc.Resize(sandbox.WindowSize{Rows: 50, Cols: 120}); err != nil {
				t.Fatal(err)
			}
			if _, err := proc.Write([]byte("resized\n")); err != nil {
				t.Fatal(err)
			}
		}
	}
	if st, err := proc.Wait(bg); err != nil || !st.Success() || !strings.Contains(out.String(), "50 120") {
		t.Fatalf("pty: %+v %v %q", st, err, out.String())
	}
}

func TestWatchSecretsPermissions(t *testing.T) {
	secrets := secretMap{"anthropic": "sk-test"}
	p, dir := newTestProvider(t, func(o *Options) {
		o.SecretEnv = map[string]string{"ANTHROPIC_API_KEY": "anthropic"}
		o.Secrets = secrets
	})
	env, _ := createEnv(t, p, dir)
	ctx, cancel := context.WithCancel(bg)
	events, err := env.Watch(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := env.WriteFile(bg, "new.txt", []byte("x"), 0); err != nil {
		t.Fatal(err)
	}
	select {
	case ev := <-events:
		if ev.Op != sandbox.Created || ev.Path != "new.txt" || ev.Size != 1 {
			t.Fatalf("event %+v", ev)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("no event")
	}
	cancel()
	for range events {
	}

	// The secret comes from Secrets, not from the (server's) Spec.Env.
	o, _, _ := sandboxtest.Run(t, env, sandbox.Cmd{Argv: []string{"sh", "-c", `printf %s "$ANTHROPIC_API_KEY"`}, Env: map[string]string{"ANTHROPIC_API_KEY": "from-env"}})
	if o != "sk-test" {
		t.Fatalf("secret %q", o)
	}
	delete(secrets, "anthropic")
	if _, err := env.Exec(bg, sandbox.Cmd{Argv: []string{"true"}}); err == nil || !strings.Contains(err.Error(), "anthropic") {
		t.Fatalf("exec with a refused secret: %v", err)
	}
}

type secretMap map[string]string

func (m secretMap) Secret(ctx context.Context, sessionID, name string) (string, error) {
	if v, ok := m[name]; ok && sessionID == "sess-1" {
		return v, nil
	}
	return "", fmt.Errorf("no secret %q for %q", name, sessionID)
}

// The connection drops mid-stream (the server's side goes away): the
// process keeps running in the executor; Recover + Attach from the offset
// consumed delivers every line exactly once, in order.
func TestRecoverAttachAfterDisconnect(t *testing.T) {
	p, dir := newTestProvider(t, nil)
	env, spec := createEnv(t, p, dir)
	proc, err := env.Exec(bg, sandbox.Cmd{Tag: "count", Argv: []string{"sh", "-c", countScript}})
	if err != nil {
		t.Fatal(err)
	}
	var consumed []byte
	deadline := time.After(time.Second)
loop:
	for {
		select {
		case c := <-proc.Output():
			consumed = append(consumed, c.Data...)
		case <-deadline:
			break loop
		}
	}
	if len(consumed) == 0 {
		t.Fatal("nothing in the first second")
	}
	env.closeConn() // the server "dies": no Terminate
	if _, err := proc.Wait(bg); !errors.Is(err, sandbox.ErrGone) {
		t.Fatalf("wait across the lost connection: %v", err)
	}
	if env.Running() {
		t.Fatal("running without a connection")
	}
	time.Sleep(500 * time.Millisecond) // on purpose: output while no server is connected

	env2, err := p.Recover(bg, spec, env.Handle())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { env2.Terminate(bg) })
	proc2, err := env2.(sandbox.Attacher).Attach(bg, "count", sandbox.Offsets{Stdout: int64(len(consumed))})
	if err != nil {
		t.Fatal(err)
	}
	rest, _ := sandboxtest.CollectFrom(t, proc2, sandbox.Offsets{Stdout: int64(len(consumed))})
	st, err := proc2.Wait(bg)
	if err != nil || !st.Success() {
		t.Fatalf("wait: %+v %v", st, err)
	}
	checkLines(t, string(consumed)+rest)
	// Released after Wait (in the background): the executor forgets it.
	relDeadline := time.Now().Add(10 * time.Second)
	for {
		l, err := env2.(*Environment).client.ExecList(bg)
		if err != nil {
			t.Fatal(err)
		}
		if len(l) == 0 {
			break
		}
		if time.Now().After(relDeadline) {
			t.Fatalf("not released: %+v", l)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func checkLines(t testing.TB, all string) {
	t.Helper()
	var want strings.Builder
	for i := 1; i <= 30; i++ {
		fmt.Fprintf(&want, "line %d\n", i)
	}
	if all != want.String() {
		t.Fatalf("lines (each exactly once, in order) differ:\n%s", all)
	}
}

// A real server restart: another process creates the environment, starts
// the command, consumes about a second of output and exits without
// cleaning up. The executor survives it; this process recovers it from the
// handle and attaches from the offset the dead server had consumed.
func TestRecoverAfterServerExit(t *testing.T) {
	dir := sandboxtest.ShortTempDir(t, "sx")
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "AGENTD_TEST_SERVER="+dir)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("server: %v: %s", err, stderr.String())
	}
	var rep serverReport
	if err := json.Unmarshal(out, &rep); err != nil {
		t.Fatalf("server report %q: %v", out, err)
	}
	var h Handle
	_ = json.Unmarshal(rep.Handle, &h)
	if !pidAlive(h.PID) {
		t.Fatalf("executor %d died with its server", h.PID)
	}
	time.Sleep(500 * time.Millisecond) // output while no server is connected

	p, err := New(testOptions(filepath.Join(dir, "run")))
	if err != nil {
		t.Fatal(err)
	}
	env, err := p.Recover(bg, rep.Spec, rep.Handle)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := env.Terminate(bg); err != nil {
			t.Error(err)
		}
		if pidAlive(h.PID) {
			t.Error("executor alive after terminate")
		}
	}()
	proc, err := env.(sandbox.Attacher).Attach(bg, rep.Tag, rep.Offsets)
	if err != nil {
		t.Fatal(err)
	}
	rest, _ := sandboxtest.CollectFrom(t, proc, rep.Offsets)
	if st, err := proc.Wait(bg); err != nil || !st.Success() {
		t.Fatalf("wait %+v %v", st, err)
	}
	checkLines(t, rep.Consumed+rest)
}

func TestRecoverGone(t *testing.T) {
	p, dir := newTestProvider(t, nil)
	spec := sandbox.Spec{SessionID: "x", Workspace: filepath.Join(dir, "ws")}
	for name, h := range map[string]string{
		"dead pid":       `{"socket":"/nonexistent.sock","pid":2147483000,"protocolVersion":1}`,
		"missing socket": fmt.Sprintf(`{"socket":%q,"pid":%d,"protocolVersion":1}`, filepath.Join(dir, "none.sock"), os.Getpid()),
	} {
		if _, err := p.Recover(bg, spec, json.RawMessage(h)); !errors.Is(err, sandbox.ErrGone) {
			t.Errorf("%s: %v", name, err)
		}
	}
	for name, h := range map[string]string{
		"not json":    `{`,
		"no socket":   `{"pid":1}`,
		"old version": `{"socket":"/x","pid":1,"protocolVersion":999}`,
	} {
		_, err := p.Recover(bg, spec, json.RawMessage(h))
		if err == nil || errors.Is(err, sandbox.ErrGone) {
			t.Errorf("%s: %v", name, err)
		}
	}
	// The executor killed under us: processes fail with ErrGone, Recover
	// says gone, Terminate still cleans up.
	env, spec := createEnv(t, p, dir)
	proc, err := env.Exec(bg, sandbox.Cmd{Argv: []string{"sleep", "30"}})
	if err != nil {
		t.Fatal(err)
	}
	var h Handle
	_ = json.Unmarshal(env.Handle(), &h)
	if err := syscall.Kill(h.PID, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if _, err := proc.Wait(bg); !errors.Is(err, sandbox.ErrGone) {
		t.Fatalf("wait after executor death: %v", err)
	}
	if _, err := p.Recover(bg, spec, env.Handle()); !errors.Is(err, sandbox.ErrGone) {
		t.Fatalf("recover dead: %v", err)
	}
	if _, err := env.ReadFile(bg, "x"); !errors.Is(err, sandbox.ErrGone) {
		t.Fatalf("read after death: %v", err)
	}
}

func TestRunAsUser(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("RunAsUser needs root")
	}
	const name = "agentd-test1"
	if _, err := user.Lookup(name); err != nil {
		if out, err := exec.Command("useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", name).CombinedOutput(); err != nil {
			t.Skipf("useradd: %v: %s", err, out)
		}
	}
	u, err := user.Lookup(name)
	if err != nil {
		t.Fatal(err)
	}
	dir := sandboxtest.ShortTempDir(t, "sx")
	// The user must be able to run the binary: copy it out of the build
	// folder.
	bin := filepath.Join(dir, "agentd.test")
	b, err := os.ReadFile(os.Args[0])
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bin, b, 0o755); err != nil {
		t.Fatal(err)
	}
	opts := testOptions(filepath.Join(dir, "run"))
	opts.Binary, opts.RunAsUser = bin, name
	p, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(dir, "ws"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "ws", "pre.txt"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	env, _ := createEnv(t, p, dir)
	o, _, st := sandboxtest.Run(t, env, sandbox.Cmd{Argv: []string{"id", "-u"}})
	if !st.Success() || strings.TrimSpace(o) != u.Uid {
		t.Fatalf("id -u: %q %+v, want %s", o, st, u.Uid)
	}
	if err := env.WriteFile(bg, "made.txt", []byte("y"), 0); err != nil {
		t.Fatal(err)
	}
	uid, _ := strconv.Atoi(u.Uid)
	for _, f := range []string{"pre.txt", "made.txt"} {
		fi, err := os.Stat(filepath.Join(dir, "ws", f))
		if err != nil {
			t.Fatal(err)
		}
		if got := int(fi.Sys().(*syscall.Stat_t).Uid); got != uid {
			t.Errorf("%s owned by %d, want %d", f, got, uid)
		}
	}
	// The socket stays the server's: the agent's user cannot use it.
	var h Handle
	_ = json.Unmarshal(env.Handle(), &h)
	fi, err := os.Stat(h.Socket)
	if err != nil || fi.Sys().(*syscall.Stat_t).Uid != 0 || fi.Mode().Perm() != 0o600 {
		t.Fatalf("socket %v %v", fi, err)
	}
	o, _, _ = sandboxtest.Run(t, env, sandbox.Cmd{Argv: []string{"sh", "-c", "cat " + h.Socket + " 2>&1; echo rc=$?"}})
	if !strings.Contains(o, "rc=1") {
		t.Fatalf("agent user reached the socket: %q", o)
	}
}

func TestCreateFailures(t *testing.T) {
	dir := sandboxtest.ShortTempDir(t, "sx")
	// An "agentd" that dies at once: Create says why, from its log.
	bad := filepath.Join(dir, "bad-agentd")
	if err := os.WriteFile(bad, []byte("#!/bin/sh\necho boom: cannot start >&2\nexit 3\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	opts := testOptions(filepath.Join(dir, "run"))
	opts.Binary = bad
	p, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	_, err = p.Create(bg, sandbox.Spec{SessionID: "s", Workspace: filepath.Join(dir, "ws")})
	if err == nil || !strings.Contains(err.Error(), "boom: cannot start") {
		t.Fatalf("create with a failing binary: %v", err)
	}
	if left, _ := os.ReadDir(filepath.Join(dir, "run")); len(left) != 0 {
		t.Fatalf("run folder not cleaned: %v", left)
	}
	// A binary that does not exist.
	opts.Binary = filepath.Join(dir, "missing")
	p, _ = New(opts)
	if _, err := p.Create(bg, sandbox.Spec{SessionID: "s", Workspace: filepath.Join(dir, "ws")}); err == nil {
		t.Fatal("create with a missing binary succeeded")
	}
	// A run folder too deep for a socket path.
	opts = testOptions(filepath.Join(dir, strings.Repeat("d", 100)))
	p, _ = New(opts)
	if _, err := p.Create(bg, sandbox.Spec{SessionID: "s", Workspace: filepath.Join(dir, "ws")}); err == nil || !strings.Contains(err.Error(), "socket path") {
		t.Fatalf("long socket path: %v", err)
	}
	if _, err := p.Create(bg, sandbox.Spec{SessionID: "s"}); err == nil {
		t.Fatal("create without a workspace succeeded")
	}
	if _, err := New(Options{RunAsUser: "no-such-user-xyz"}); err == nil {
		t.Fatal("unknown RunAsUser accepted")
	}
}

// Wrap prefixes the executor's command line (as the bwrap backend will).
func TestWrap(t *testing.T) {
	var wrapped []string
	p, dir := newTestProvider(t, func(o *Options) {
		o.Wrap = func(argv []string) []string {
			wrapped = argv
			return append([]string{"/usr/bin/env", "WRAPPED_BY=test"}, argv...)
		}
	})
	env, _ := createEnv(t, p, dir)
	if len(wrapped) < 3 || wrapped[1] != "executor" || wrapped[2] != "--listen-fd" {
		t.Fatalf("argv given to Wrap: %q", wrapped)
	}
	var h Handle
	_ = json.Unmarshal(env.Handle(), &h)
	environ, err := os.ReadFile("/proc/" + strconv.Itoa(h.PID) + "/environ")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(environ, []byte("WRAPPED_BY=test\x00")) {
		t.Fatalf("executor not started through the wrapper: %q", environ)
	}
	if o, _, st := sandboxtest.Run(t, env, sandbox.Cmd{Argv: []string{"echo", "ok"}}); o != "ok\n" || !st.Success() {
		t.Fatalf("%q %+v", o, st)
	}
}

// Options.Nice reaches the executor (--nice), which lowers the priority of
// the processes it starts but not its own.
func TestNice(t *testing.T) {
	p, dir := newTestProvider(t, func(o *Options) { o.Nice = 7 })
	env, _ := createEnv(t, p, dir)
	o, _, st := sandboxtest.Run(t, env, sandbox.Cmd{Argv: []string{"sh", "-c", "sleep 0.5; cut -d' ' -f19 /proc/self/stat"}})
	own, err := local.Nice(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if !st.Success() || strings.TrimSpace(o) != strconv.Itoa(min(own+7, 19)) {
		t.Fatalf("a command's child runs at niceness %q (exit %+v), want %d", o, st, min(own+7, 19))
	}
	var h Handle
	_ = json.Unmarshal(env.Handle(), &h)
	if got, err := local.Nice(h.PID); err != nil || got != own {
		t.Fatalf("the executor runs at niceness %d (%v), want the server's %d", got, err, own)
	}
}

// SyncWatch goes through fs.sync: the changes a command made come on the
// Watch channel before the marker, which comes promptly.
func TestSyncWatch(t *testing.T) {
	p, dir := newTestProvider(t, nil)
	env, _ := createEnv(t, p, dir)
	ctx, cancel := context.WithCancel(bg)
	events, err := env.Watch(ctx)
	if err != nil {
		t.Fatal(err)
	}
	sandboxtest.Run(t, env, sandbox.Cmd{Argv: []string{"sh", "-c", "mkdir d && echo a > a.txt && echo b > d/b.txt"}})
	if err := env.SyncWatch(bg, "marker-1"); err != nil {
		t.Fatal(err)
	}
	defer func() {
		cancel()
		for range events {
		}
	}()
	var got []string
	deadline := time.After(20 * time.Second)
	for {
		select {
		case ev, ok := <-events:
			if !ok {
				t.Fatalf("watch ended after %q", got)
			}
			if ev.Op == sandbox.Sync {
				if ev.Path != "marker-1" {
					t.Fatalf("marker %q", ev.Path)
				}
				slices.Sort(got)
				if want := []string{"created a.txt", "created d/b.txt"}; !slices.Equal(got, want) {
					t.Fatalf("before the marker %q, want %q", got, want)
				}
				return
			}
			got = append(got, string(ev.Op)+" "+ev.Path)
		case <-deadline:
			t.Fatalf("no marker; got %q", got)
		}
	}
}
