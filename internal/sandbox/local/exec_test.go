package local

import (
	"bytes"
	"context"
	"crypto/sha256"
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

	"go.uber.org/goleak"

	"github.com/agentd/agentd/sandbox"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(noZombies{m}) }

// noZombies fails the run if any child of the test process is left
// unreaped.
type noZombies struct{ m *testing.M }

func (z noZombies) Run() int {
	code := z.m.Run()
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		b, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		if st, err := parseStat(b); err == nil && st.PPID == os.Getpid() && st.State == 'Z' {
			fmt.Fprintf(os.Stderr, "zombie child left: %+v\n", st)
			code = 1
		}
	}
	return code
}

// testEnv creates an environment on a fresh workspace, terminated at the
// end of the test.
func testEnv(t testing.TB, opts Options) *Environment {
	t.Helper()
	if opts.KillGrace == 0 {
		opts.KillGrace = 300 * time.Millisecond
	}
	env, err := New(opts).Create(context.Background(), sandbox.Spec{
		SessionID: "s1",
		Workspace: filepath.Join(t.TempDir(), "ws"),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := env.Terminate(context.Background()); err != nil {
			t.Errorf("terminate: %v", err)
		}
	})
	return env.(*Environment)
}

type result struct {
	stdout, stderr []byte
	chunks         []sandbox.Chunk
	status         sandbox.ExitStatus
}

// drain reads all output, checking offsets are contiguous per stream, then
// waits for the process.
func drain(t testing.TB, p sandbox.Process) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var r result
	for {
		select {
		case c, ok := <-p.Output():
			if !ok {
				st, err := p.Wait(ctx)
				if err != nil {
					t.Fatalf("wait: %v", err)
				}
				r.status = st
				return r
			}
			r.chunks = append(r.chunks, c)
			dst := &r.stdout
			if c.Stream == sandbox.Stderr {
				dst = &r.stderr
			}
			if c.Offset != int64(len(*dst)) {
				t.Fatalf("%s chunk at offset %d, want %d", c.Stream, c.Offset, len(*dst))
			}
			*dst = append(*dst, c.Data...)
		case <-ctx.Done():
			t.Fatalf("output not closed; stdout so far %q", r.stdout)
		}
	}
}

func run(t testing.TB, env *Environment, c sandbox.Cmd) result {
	t.Helper()
	p, err := env.Exec(context.Background(), c)
	if err != nil {
		t.Fatalf("exec %v: %v", c.Argv, err)
	}
	return drain(t, p)
}

func sh(script string) sandbox.Cmd { return sandbox.Cmd{Argv: []string{"sh", "-c", script}} }

func TestStreamsWhileRunning(t *testing.T) {
	env := testEnv(t, Options{})
	p, err := env.Exec(t.Context(), sh(`for i in 1 2 3 4 5; do echo line$i; sleep 0.1; done; echo oops >&2`))
	if err != nil {
		t.Fatal(err)
	}
	var times []time.Time
	var out []byte
	for c := range p.Output() {
		if c.Stream == sandbox.Stdout {
			times = append(times, time.Now())
			out = append(out, c.Data...)
		}
	}
	st, err := p.Wait(t.Context())
	if err != nil || !st.Success() {
		t.Fatalf("status %+v, %v", st, err)
	}
	if string(out) != "line1\nline2\nline3\nline4\nline5\n" {
		t.Fatalf("stdout %q", out)
	}
	// No line buffering or batching: one chunk per line, spread over the
	// process's run time.
	if len(times) != 5 {
		t.Fatalf("%d stdout chunks, want 5 (one per line)", len(times))
	}
	if d := times[4].Sub(times[0]); d < 300*time.Millisecond {
		t.Fatalf("chunks arrived within %v: output was held back", d)
	}
}

func TestStdoutStderrOffsets(t *testing.T) {
	env := testEnv(t, Options{})
	r := run(t, env, sh(`echo out1; echo err1 >&2; echo out2; printf err2 >&2`))
	if string(r.stdout) != "out1\nout2\n" || string(r.stderr) != "err1\nerr2" {
		t.Fatalf("stdout %q stderr %q", r.stdout, r.stderr)
	}
}

func TestStdinEcho(t *testing.T) {
	env := testEnv(t, Options{})
	p, err := env.Exec(t.Context(), sandbox.Cmd{Argv: []string{"cat"}, Stdin: true})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.Write([]byte("hello\n")); err != nil {
		t.Fatal(err)
	}
	// The echo arrives before stdin is closed: cat is interactive.
	c := <-p.Output()
	if string(c.Data) != "hello\n" {
		t.Fatalf("echo %q", c.Data)
	}
	if _, err := p.Write([]byte("world")); err != nil {
		t.Fatal(err)
	}
	if err := p.CloseStdin(); err != nil {
		t.Fatal(err)
	}
	var rest []byte
	for c := range p.Output() {
		if c.Offset != int64(6+len(rest)) {
			t.Fatalf("offset %d after %d bytes", c.Offset, 6+len(rest))
		}
		rest = append(rest, c.Data...)
	}
	st, err := p.Wait(t.Context())
	if string(rest) != "world" || err != nil || !st.Success() {
		t.Fatalf("rest %q status %+v %v", rest, st, err)
	}
	if _, err := p.Write([]byte("late")); err == nil {
		t.Fatal("write after exit succeeded")
	}
}

func TestNoStdinIsDevNull(t *testing.T) {
	env := testEnv(t, Options{})
	p, err := env.Exec(t.Context(), sandbox.Cmd{Argv: []string{"cat"}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.Write([]byte("x")); !errors.Is(err, ErrNoInput) {
		t.Fatalf("Write without stdin: %v", err)
	}
	if err := p.CloseStdin(); !errors.Is(err, ErrNoInput) {
		t.Fatalf("CloseStdin without stdin: %v", err)
	}
	if err := p.Resize(sandbox.WindowSize{Rows: 1, Cols: 1}); !errors.Is(err, ErrNotTerminal) {
		t.Fatalf("Resize without pty: %v", err)
	}
	r := drain(t, p) // cat reads EOF at once
	if len(r.stdout) != 0 || !r.status.Success() {
		t.Fatalf("cat </dev/null: %q %+v", r.stdout, r.status)
	}
}

func TestExitStatus(t *testing.T) {
	env := testEnv(t, Options{})
	cases := []struct {
		script string
		want   sandbox.ExitStatus
	}{
		{"exit 0", sandbox.ExitStatus{Code: 0}},
		{"exit 3", sandbox.ExitStatus{Code: 3}},
		{"exit 255", sandbox.ExitStatus{Code: 255}},
		{"kill -TERM $$", sandbox.ExitStatus{Code: -1, Signal: "SIGTERM"}},
		{"kill -KILL $$", sandbox.ExitStatus{Code: -1, Signal: "SIGKILL"}},
	}
	for _, c := range cases {
		if got := run(t, env, sh(c.script)).status; got != c.want {
			t.Errorf("%s: status %+v, want %+v", c.script, got, c.want)
		}
	}
}

// groupAlive lists the live processes of process group pgid.
func groupAlive(pgid int) []procStat {
	return processes(func(st procStat) bool { return st.PGID == pgid })
}

// noneLeft waits (boundedly) until list reports no process: a SIGKILLed
// process takes a moment to finish exiting after its pipes closed.
func noneLeft(t *testing.T, what string, list func() []procStat) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		left := list()
		if len(left) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: processes left: %+v", what, left)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func waitGroupSize(t *testing.T, pgid, n int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for len(groupAlive(pgid)) < n {
		if time.Now().After(deadline) {
			t.Fatalf("group %d has %d processes, want %d", pgid, len(groupAlive(pgid)), n)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestKillGroupWithGrandchildren(t *testing.T) {
	env := testEnv(t, Options{})
	p, err := env.Exec(t.Context(), sh(`sleep 100 & sleep 100`))
	if err != nil {
		t.Fatal(err)
	}
	pid := p.(*process).pid
	waitGroupSize(t, pid, 3)
	if err := p.Kill(); err != nil {
		t.Fatal(err)
	}
	r := drain(t, p)
	if r.status != (sandbox.ExitStatus{Code: -1, Signal: "SIGKILL"}) {
		t.Fatalf("status %+v", r.status)
	}
	noneLeft(t, "group after Kill", func() []procStat { return groupAlive(pid) })
	if err := p.Kill(); err != nil {
		t.Fatalf("Kill after exit: %v", err)
	}
	if err := p.Signal(syscall.SIGTERM); !errors.Is(err, os.ErrProcessDone) {
		t.Fatalf("Signal after exit: %v", err)
	}
}

func TestSignalGroup(t *testing.T) {
	env := testEnv(t, Options{})
	p, err := env.Exec(t.Context(), sh(`trap 'echo got-int; exit 7' INT; sleep 100 & wait`))
	if err != nil {
		t.Fatal(err)
	}
	waitGroupSize(t, p.(*process).pid, 2)
	if err := p.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	r := drain(t, p)
	if string(r.stdout) != "got-int\n" || r.status.Code != 7 {
		t.Fatalf("stdout %q status %+v", r.stdout, r.status)
	}
	if err := p.Signal(os.Interrupt); !errors.Is(err, os.ErrProcessDone) {
		t.Fatalf("Signal after exit: %v", err)
	}
}

// A background job that keeps the pipes open must not hold Wait: it is
// killed with the rest of the group when the command exits.
func TestBackgroundJobDoesNotHoldWait(t *testing.T) {
	env := testEnv(t, Options{})
	p, err := env.Exec(t.Context(), sh(`echo start; sleep 100 & echo bg`))
	if err != nil {
		t.Fatal(err)
	}
	r := drain(t, p)
	if string(r.stdout) != "start\nbg\n" || !r.status.Success() {
		t.Fatalf("stdout %q status %+v", r.stdout, r.status)
	}
	noneLeft(t, "group after its command exited", func() []procStat { return groupAlive(p.(*process).pid) })
}

// A process that left the group (setsid) but holds stdout open ends the
// stream after DrainTimeout instead of hanging Wait.
func TestEscapedHolderBoundedByDrainTimeout(t *testing.T) {
	env := testEnv(t, Options{DrainTimeout: 200 * time.Millisecond})
	// The pause lets setsid run before the command exits and its group
	// is killed.
	p, err := env.Exec(t.Context(), sh(`setsid sleep 100 & echo $!; sleep 0.2`))
	if err != nil {
		t.Fatal(err)
	}
	r := drain(t, p)
	pid, err := strconv.Atoi(strings.TrimSpace(string(r.stdout)))
	if err != nil {
		t.Fatalf("stdout %q", r.stdout)
	}
	t.Cleanup(func() { _ = syscall.Kill(pid, syscall.SIGKILL) })
	if !r.status.Success() {
		t.Fatalf("status %+v", r.status)
	}
	// The escapee is still alive: Wait returned without it closing stdout.
	if alive := processes(func(st procStat) bool { return st.PID == pid }); len(alive) != 1 || alive[0].SID != pid {
		t.Fatalf("escaped process %d: %+v", pid, alive)
	}
}

// An escaped process that keeps writing can't hold Wait either.
func TestChattyEscapeeBounded(t *testing.T) {
	env := testEnv(t, Options{DrainTimeout: 200 * time.Millisecond})
	p, err := env.Exec(t.Context(), sh(`setsid sh -c 'while :; do echo spam; sleep 0.01; done' & echo $!; sleep 0.2`))
	if err != nil {
		t.Fatal(err)
	}
	var out []byte
	for c := range p.Output() {
		out = append(out, c.Data...)
	}
	pid := 0
	for _, line := range strings.Fields(string(out)) {
		if n, err := strconv.Atoi(line); err == nil {
			pid = n
			break
		}
	}
	if pid == 0 {
		t.Fatalf("no pid in output %q", out)
	}
	t.Cleanup(func() { _ = syscall.Kill(-pid, syscall.SIGKILL) })
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	if st, err := p.Wait(ctx); err != nil || !st.Success() {
		t.Fatalf("status %+v %v", st, err)
	}
}

// Output buffered when the command exits is all delivered to a slow
// consumer, even past DrainTimeout.
func TestSlowConsumerGetsEverythingAfterExit(t *testing.T) {
	env := testEnv(t, Options{DrainTimeout: 50 * time.Millisecond})
	p, err := env.Exec(t.Context(), sh(`head -c 600000 /dev/zero`))
	if err != nil {
		t.Fatal(err)
	}
	var n int
	for c := range p.Output() {
		n += len(c.Data)
		time.Sleep(20 * time.Millisecond) // slower than DrainTimeout overall
	}
	if n != 600000 {
		t.Fatalf("got %d of 600000 bytes", n)
	}
}

func TestMissingBinary(t *testing.T) {
	env := testEnv(t, Options{})
	for _, name := range []string{"agentd-no-such-program", "./no-such-script", "/nonexistent/bin/x"} {
		_, err := env.Exec(t.Context(), sandbox.Cmd{Argv: []string{name}})
		if !errors.Is(err, exec.ErrNotFound) || !strings.Contains(err.Error(), name) {
			t.Errorf("exec %s: %v", name, err)
		}
	}
	// Found in the PATH the child gets, not in this process's.
	bin := filepath.Join(env.WorkDir(), "bin")
	if err := env.WriteFile(t.Context(), "bin/hello", []byte("#!/bin/sh\necho hi from $0\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	r := run(t, env, sandbox.Cmd{Argv: []string{"hello"}, Env: map[string]string{"PATH": bin + ":/usr/bin:/bin"}})
	if string(r.stdout) != "hi from "+bin+"/hello\n" {
		t.Fatalf("stdout %q", r.stdout)
	}
	r = run(t, env, sandbox.Cmd{Argv: []string{"./hello"}, Dir: "bin"})
	if !r.status.Success() {
		t.Fatalf("relative program: %+v %q", r.status, r.stderr)
	}
	if err := env.WriteFile(t.Context(), "noexec", []byte("#!/bin/sh\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := env.Exec(t.Context(), sandbox.Cmd{Argv: []string{"./noexec"}}); err == nil {
		t.Fatal("exec of a non-executable file succeeded")
	}
	if _, err := env.Exec(t.Context(), sandbox.Cmd{}); err == nil {
		t.Fatal("exec of an empty argv succeeded")
	}
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if _, err := env.Exec(ctx, sh("true")); !errors.Is(err, context.Canceled) {
		t.Fatalf("exec with a cancelled ctx: %v", err)
	}
}

func TestEnvironmentIsMinimal(t *testing.T) {
	t.Setenv("AGENTD_SERVER_SECRET", "leak")
	p := New(Options{Path: "/usr/bin:/bin"})
	ws := filepath.Join(t.TempDir(), "ws")
	e, err := p.Create(t.Context(), sandbox.Spec{
		Workspace: ws,
		Env:       map[string]string{"ANTHROPIC_API_KEY": "k", "FROM_SPEC": "spec", "LANG": "en_US.UTF-8"},
	})
	if err != nil {
		t.Fatal(err)
	}
	env := e.(*Environment)
	defer env.Terminate(context.Background())
	r := run(t, env, sandbox.Cmd{Argv: []string{"env"}, Env: map[string]string{"FROM_SPEC": "cmd", "X": "y"}})
	got := strings.Split(strings.TrimSpace(string(r.stdout)), "\n")
	want := []string{
		"ANTHROPIC_API_KEY=k",
		"FROM_SPEC=cmd",
		"HOME=" + env.WorkDir(),
		"LANG=en_US.UTF-8",
		"PATH=/usr/bin:/bin",
		"PWD=" + env.WorkDir(),
		"TERM=dumb",
		"X=y",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("environment:\n%s\nwant:\n%s", r.stdout, strings.Join(want, "\n"))
	}
	r = run(t, env, sandbox.Cmd{Argv: []string{"sh", "-c", "echo $HOME"}, Env: map[string]string{"HOME": "/elsewhere"}})
	if string(r.stdout) != "/elsewhere\n" {
		t.Fatalf("HOME override: %q", r.stdout)
	}
	if _, err := env.Exec(t.Context(), sandbox.Cmd{Argv: []string{"true"}, Env: map[string]string{"A=B": "c"}}); err == nil {
		t.Fatal("invalid variable name accepted")
	}
}

func TestWorkingFolder(t *testing.T) {
	env := testEnv(t, Options{})
	if err := env.WriteFile(t.Context(), "sub/deeper/f", nil, 0); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("sub", filepath.Join(env.WorkDir(), "link")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/etc", filepath.Join(env.WorkDir(), "etc")); err != nil {
		t.Fatal(err)
	}
	for dir, want := range map[string]string{"": env.WorkDir(), "sub/deeper": env.WorkDir() + "/sub/deeper", "link": env.WorkDir() + "/sub"} {
		r := run(t, env, sandbox.Cmd{Argv: []string{"pwd", "-P"}, Dir: dir})
		if strings.TrimSpace(string(r.stdout)) != want {
			t.Errorf("Dir %q: pwd %q, want %q", dir, r.stdout, want)
		}
	}
	for dir, want := range map[string]error{
		"../":       sandbox.ErrInvalidPath,
		"/tmp":      sandbox.ErrInvalidPath,
		"etc":       sandbox.ErrInvalidPath,
		"missing":   sandbox.ErrNotFound,
		"sub/../..": sandbox.ErrInvalidPath,
	} {
		if _, err := env.Exec(t.Context(), sandbox.Cmd{Argv: []string{"true"}, Dir: dir}); !errors.Is(err, want) {
			t.Errorf("Dir %q: %v, want %v", dir, err, want)
		}
	}
	if _, err := env.Exec(t.Context(), sandbox.Cmd{Argv: []string{"true"}, Dir: "sub/deeper/f"}); !errors.Is(err, sandbox.ErrInvalidPath) {
		t.Errorf("Dir on a file: %v", err)
	}
}

func TestPTY(t *testing.T) {
	env := testEnv(t, Options{})
	r := run(t, env, sandbox.Cmd{Argv: []string{"stty", "size"}, PTY: &sandbox.WindowSize{Rows: 40, Cols: 100}})
	if strings.TrimSpace(string(r.stdout)) != "40 100" || len(r.stderr) != 0 {
		t.Fatalf("stty size: %q / %q", r.stdout, r.stderr)
	}
	r = run(t, env, sandbox.Cmd{Argv: []string{"tty"}, PTY: &sandbox.WindowSize{Rows: 24, Cols: 80}})
	if !r.status.Success() || !strings.HasPrefix(string(r.stdout), "/dev/pts/") {
		t.Fatalf("tty: %q %+v", r.stdout, r.status)
	}
	r = run(t, env, sandbox.Cmd{Argv: []string{"sh", "-c", "echo $TERM"}, PTY: &sandbox.WindowSize{Rows: 24, Cols: 80}})
	if strings.TrimSpace(string(r.stdout)) != "xterm-256color" {
		t.Fatalf("TERM on a pty: %q", r.stdout)
	}
}

func TestPTYResizeAndInput(t *testing.T) {
	env := testEnv(t, Options{})
	p, err := env.Exec(t.Context(), sandbox.Cmd{
		Argv: []string{"sh", "-c", "stty size; read x; echo got:$x; stty size"},
		PTY:  &sandbox.WindowSize{Rows: 40, Cols: 100},
	})
	if err != nil {
		t.Fatal(err)
	}
	var out []byte
	readUntil := func(s string) {
		t.Helper()
		for !bytes.Contains(out, []byte(s)) {
			c, ok := <-p.Output()
			if !ok {
				t.Fatalf("output ended before %q: %q", s, out)
			}
			if c.Stream != sandbox.Stdout {
				t.Fatalf("pty output on %s", c.Stream)
			}
			out = append(out, c.Data...)
		}
	}
	readUntil("40 100")
	if err := p.Resize(sandbox.WindowSize{Rows: 50, Cols: 120}); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Write([]byte("abc\n")); err != nil {
		t.Fatal(err)
	}
	readUntil("50 120")
	if !bytes.Contains(out, []byte("got:abc")) {
		t.Fatalf("input not read: %q", out)
	}
	// The rest (the last line's end may come in a chunk of its own on a
	// busy machine), continuing from what was read, then the exit.
	for c := range p.Output() {
		if c.Offset != int64(len(out)) {
			t.Fatalf("chunk at offset %d after %d bytes", c.Offset, len(out))
		}
		out = append(out, c.Data...)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	if st, err := p.Wait(ctx); err != nil || !st.Success() {
		t.Fatalf("status %+v, %v", st, err)
	}
}

// A PTY shell with job control puts background jobs in their own groups;
// Kill still reaches them through the session.
func TestPTYKillReachesOtherGroups(t *testing.T) {
	env := testEnv(t, Options{})
	p, err := env.Exec(t.Context(), sandbox.Cmd{
		Argv: []string{"bash", "--norc", "-i"},
		PTY:  &sandbox.WindowSize{Rows: 24, Cols: 80},
	})
	if err != nil {
		t.Fatal(err)
	}
	go func() { // keep the terminal drained
		for range p.Output() {
		}
	}()
	sid := p.(*process).pid
	if _, err := p.Write([]byte("sleep 100 &\nsleep 101 &\n")); err != nil {
		t.Fatal(err)
	}
	inSession := func() []procStat {
		return processes(func(st procStat) bool { return st.SID == sid })
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		groups := map[int]bool{}
		for _, st := range inSession() {
			groups[st.PGID] = true
		}
		if len(groups) >= 3 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("background jobs did not start in groups of their own: %+v", inSession())
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err := p.Kill(); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Wait(t.Context()); err != nil {
		t.Fatal(err)
	}
	noneLeft(t, "session after Kill", inSession)
}

// Nothing is dropped when the consumer is slower than the producer.
func TestBackPressureLosesNothing(t *testing.T) {
	env := testEnv(t, Options{})
	p, err := env.Exec(t.Context(), sh(`head -c 4000000 /dev/urandom | tee /dev/stderr | sha256sum >&2`))
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(200 * time.Millisecond) // let the pipes fill up
	r := drain(t, p)
	if len(r.stdout) != 0 || len(r.stderr) != 4000000+68 {
		t.Fatalf("stdout %d bytes, stderr %d bytes", len(r.stdout), len(r.stderr))
	}
	data, sum := r.stderr[:4000000], strings.Fields(string(r.stderr[4000000:]))[0]
	if got := fmt.Sprintf("%x", sha256.Sum256(data)); got != sum {
		t.Fatalf("data corrupted: sha256 %s, producer says %s", got, sum)
	}
}

func TestTags(t *testing.T) {
	env := testEnv(t, Options{})
	p1, err := env.Exec(t.Context(), sandbox.Cmd{Argv: []string{"sleep", "100"}, Tag: "agent"})
	if err != nil {
		t.Fatal(err)
	}
	if p1.Tag() != "agent" {
		t.Fatalf("tag %q", p1.Tag())
	}
	if _, err := env.Exec(t.Context(), sandbox.Cmd{Argv: []string{"true"}, Tag: "agent"}); !errors.Is(err, ErrTagInUse) {
		t.Fatalf("duplicate tag: %v", err)
	}
	var mu sync.Mutex
	tags := map[string]bool{}
	var wg sync.WaitGroup
	for range 20 {
		wg.Go(func() {
			p, err := env.Exec(context.Background(), sandbox.Cmd{Argv: []string{"true"}})
			if err != nil {
				t.Error(err)
				return
			}
			mu.Lock()
			dup := tags[p.Tag()]
			tags[p.Tag()] = true
			mu.Unlock()
			if dup || p.Tag() == "" {
				t.Errorf("tag %q assigned twice", p.Tag())
			}
			for range p.Output() {
			}
			if _, err := p.Wait(context.Background()); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	// Racing Execs with one explicit tag: exactly one wins.
	var won sync.Map
	for range 8 {
		wg.Go(func() {
			p, err := env.Exec(context.Background(), sandbox.Cmd{Argv: []string{"sleep", "100"}, Tag: "same"})
			switch {
			case err == nil:
				won.Store(p, true)
			case !errors.Is(err, ErrTagInUse):
				t.Error(err)
			}
		})
	}
	wg.Wait()
	n := 0
	won.Range(func(k, _ any) bool {
		n++
		p := k.(sandbox.Process)
		_ = p.Kill()
		for range p.Output() {
		}
		return true
	})
	if n != 1 {
		t.Fatalf("%d processes started with the same tag", n)
	}
	_ = p1.Kill()
	drain(t, p1)
	// The tag is free again once the process ended.
	run(t, env, sandbox.Cmd{Argv: []string{"true"}, Tag: "agent"})
}

func TestTerminateKillsEverything(t *testing.T) {
	env := testEnv(t, Options{KillGrace: 200 * time.Millisecond})
	var procs []sandbox.Process
	for _, c := range []sandbox.Cmd{
		sh(`sleep 100 & sleep 100`),
		sh(`trap "" TERM; : > trapped; while :; do sleep 0.05; done`), // needs SIGKILL
		{Argv: []string{"yes"}},                                       // nobody reads its output
		{Argv: []string{"sh"}, PTY: &sandbox.WindowSize{Rows: 24, Cols: 80}},
	} {
		p, err := env.Exec(t.Context(), c)
		if err != nil {
			t.Fatal(err)
		}
		procs = append(procs, p)
	}
	waitGroupSize(t, procs[0].(*process).pid, 3)
	// Only once its trap is set does the second one need SIGKILL (on a busy
	// machine the TERM could otherwise arrive before the trap).
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		if _, err := os.Stat(filepath.Join(env.WorkDir(), "trapped")); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the TERM-ignoring process never set its trap")
		}
	}
	if err := env.Terminate(t.Context()); err != nil {
		t.Fatal(err)
	}
	if env.Running() {
		t.Fatal("Running after Terminate")
	}
	for _, p := range procs {
		st, err := p.Wait(t.Context())
		if err != nil || st.Signal == "" {
			t.Fatalf("%s after Terminate: %+v %v", p.Tag(), st, err)
		}
		noneLeft(t, p.Tag(), func() []procStat { return groupAlive(p.(*process).pid) })
		for range p.Output() { // closed
		}
	}
	if st, _ := procs[1].Wait(t.Context()); st.Signal != "SIGKILL" {
		t.Fatalf("TERM-ignoring process ended with %+v", st)
	}
	if err := env.Terminate(t.Context()); err != nil {
		t.Fatalf("second Terminate: %v", err)
	}
	if _, err := env.Exec(t.Context(), sh("true")); !errors.Is(err, sandbox.ErrTerminated) {
		t.Fatalf("Exec after Terminate: %v", err)
	}
	if _, err := env.ReadFile(t.Context(), "x"); !errors.Is(err, sandbox.ErrTerminated) {
		t.Fatalf("ReadFile after Terminate: %v", err)
	}
	if _, err := env.Watch(t.Context()); !errors.Is(err, sandbox.ErrTerminated) {
		t.Fatalf("Watch after Terminate: %v", err)
	}
	if _, err := os.Stat(env.WorkDir()); err != nil {
		t.Fatalf("workspace gone after Terminate: %v", err)
	}
}
