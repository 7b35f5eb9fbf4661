package executor

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
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
	"github.com/agentd/agentd/sandbox"
)

// testExecutor is an executor served in-process on a local environment.
type testExecutor struct {
	e         *Executor
	socket    string
	workspace string
	served    chan error
	cancel    context.CancelFunc
}

func startExecutor(t testing.TB, mod func(*Config)) *testExecutor {
	t.Helper()
	dir := shortTempDir(t)
	ws := filepath.Join(dir, "ws")
	env, err := local.New(local.Options{KillGrace: 500 * time.Millisecond}).Create(context.Background(), sandbox.Spec{SessionID: "t", Workspace: ws})
	if err != nil {
		t.Fatal(err)
	}
	cfg := Config{SocketPath: filepath.Join(dir, "s"), Env: env, Workspace: ws, PeerUID: os.Getuid(), SpoolDir: dir}
	if mod != nil {
		mod(&cfg)
	}
	e, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	te := &testExecutor{e: e, socket: cfg.SocketPath, workspace: env.WorkDir(), served: make(chan error, 1), cancel: cancel}
	go func() { te.served <- e.Serve(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case <-te.served:
		case <-time.After(20 * time.Second):
			t.Error("executor did not stop")
		}
	})
	return te
}

// recorder is the test's server side: it collects what the executor sends.
type recorder struct {
	t       testing.TB
	mu      sync.Mutex
	out     map[string]*[2]bytes.Buffer
	next    map[string]*[2]int64
	gaps    []string
	exits   map[string]rpc.ExecExitParams
	exitCh  chan string
	events  chan rpc.FSEventParams
	secrets map[string]string
	chunks  int
}

func newRecorder(t testing.TB) *recorder {
	return &recorder{
		t: t, out: map[string]*[2]bytes.Buffer{}, next: map[string]*[2]int64{},
		exits: map[string]rpc.ExecExitParams{}, exitCh: make(chan string, 100),
		events: make(chan rpc.FSEventParams, 1000), secrets: map[string]string{},
	}
}

func (r *recorder) HandleCall(ctx context.Context, c *rpc.Conn, req *rpc.Request) (any, error) {
	switch req.Method {
	case rpc.MethodSecretsGet:
		var p rpc.SecretsGetParams
		if err := req.Decode(&p); err != nil {
			return nil, err
		}
		r.mu.Lock()
		v, ok := r.secrets[p.Name]
		r.mu.Unlock()
		if !ok {
			return nil, rpc.Errorf(rpc.CodeSecretDenied, "no secret %q", p.Name)
		}
		return rpc.SecretsGetResult{Value: v}, nil
	case rpc.MethodPermissionRq:
		var p rpc.PermissionParams
		if err := req.Decode(&p); err != nil {
			return nil, err
		}
		return rpc.PermissionResult{Behavior: "deny", Message: "no " + p.ToolName}, nil
	}
	return nil, rpc.Errorf(rpc.CodeMethodNotFound, "method not found: %q", req.Method)
}

func (r *recorder) HandleNotify(c *rpc.Conn, method string, params json.RawMessage) {
	switch method {
	case rpc.MethodExecOutput:
		var p rpc.ExecOutputParams
		if err := json.Unmarshal(params, &p); err != nil {
			r.t.Errorf("bad exec.output: %v", err)
			return
		}
		r.HandleOutput(c, p)
	case rpc.MethodExecExit:
		var p rpc.ExecExitParams
		if err := json.Unmarshal(params, &p); err != nil {
			r.t.Errorf("bad exec.exit: %v", err)
			return
		}
		r.mu.Lock()
		r.exits[p.Tag] = p
		r.mu.Unlock()
		r.exitCh <- p.Tag
	case rpc.MethodFSEvent:
		var p rpc.FSEventParams
		if err := json.Unmarshal(params, &p); err == nil {
			r.events <- p
		}
	}
}

func (r *recorder) HandleOutput(c *rpc.Conn, p rpc.ExecOutputParams) {
	r.mu.Lock()
	defer r.mu.Unlock()
	i := streamIndex(p.Stream)
	if r.out[p.Tag] == nil {
		r.out[p.Tag] = &[2]bytes.Buffer{}
		r.next[p.Tag] = &[2]int64{-1, -1}
	}
	next := &r.next[p.Tag][i]
	if *next >= 0 && p.Offset != *next {
		r.gaps = append(r.gaps, fmt.Sprintf("%s/%s: expected %d got %d", p.Tag, p.Stream, *next, p.Offset))
	}
	*next = p.Offset + int64(len(p.Data))
	r.out[p.Tag][i].Write(p.Data)
	r.chunks++
}

func (r *recorder) output(tag string, s sandbox.Stream) string {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.out[tag] == nil {
		return ""
	}
	return r.out[tag][streamIndex(s)].String()
}

func (r *recorder) waitExit(t testing.TB, tag string) rpc.ExecExitParams {
	t.Helper()
	timeout := time.After(20 * time.Second)
	for {
		r.mu.Lock()
		x, ok := r.exits[tag]
		r.mu.Unlock()
		if ok {
			return x
		}
		select {
		case <-r.exitCh:
		case <-timeout:
			t.Fatalf("no exec.exit for %s", tag)
		}
	}
}

func dialTest(t testing.TB, socket string, h rpc.Handler) *rpc.Client {
	t.Helper()
	c, err := rpc.Dial(context.Background(), socket, h, rpc.ConnOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close(); c.Wait() })
	return c
}

// rawResponse is a JSON-RPC response as read off the socket by hand.
type rawResponse struct {
	JSONRPC string          `json:"jsonrpc"`
	ID      json.RawMessage `json:"id"`
	Result  json.RawMessage `json:"result"`
	Error   *rpc.Error      `json:"error"`
}

func wantCode(t testing.TB, err error, code int) {
	t.Helper()
	var pe *rpc.Error
	if !errors.As(err, &pe) {
		t.Fatalf("want error code %d, got %v", code, err)
	}
	if pe.Code != code {
		t.Fatalf("want error code %d, got %d (%s)", code, pe.Code, pe.Message)
	}
}

var bg = context.Background()

func TestExecOutputExitListRelease(t *testing.T) {
	te := startExecutor(t, nil)
	r := newRecorder(t)
	c := dialTest(t, te.socket, r)
	ping, err := c.Ping(bg)
	if err != nil || ping.ProtocolVersion != rpc.ProtocolVersion || ping.PID != os.Getpid() || ping.UID != os.Getuid() {
		t.Fatalf("ping %+v %v", ping, err)
	}
	res, err := c.ExecStart(bg, rpc.ExecStartParams{Tag: "a", Argv: []string{"sh", "-c", "echo out; echo err >&2; exit 3"}})
	if err != nil || res.Tag != "a" {
		t.Fatalf("start: %+v %v", res, err)
	}
	x := r.waitExit(t, "a")
	if x.Code != 3 || x.Signal != "" || x.End.Stdout != 4 || x.End.Stderr != 4 {
		t.Fatalf("exit %+v", x)
	}
	if o, e := r.output("a", sandbox.Stdout), r.output("a", sandbox.Stderr); o != "out\n" || e != "err\n" {
		t.Fatalf("output %q %q", o, e)
	}
	list, err := c.ExecList(bg)
	if err != nil || len(list) != 1 || list[0].Running || list[0].Exit == nil || list[0].Exit.Code != 3 || list[0].End.Stdout != 4 {
		t.Fatalf("list %+v %v", list, err)
	}
	wantCode(t, c.ExecRelease(bg, "b"), rpc.CodeNotFound)
	if err := c.ExecRelease(bg, "a"); err != nil {
		t.Fatal(err)
	}
	wantCode(t, c.ExecRelease(bg, "a"), rpc.CodeNotFound)
	if list, _ := c.ExecList(bg); len(list) != 0 {
		t.Fatalf("list after release %+v", list)
	}
	// The tag of an exited process may be reused (that releases it).
	if _, err := c.ExecStart(bg, rpc.ExecStartParams{Tag: "c", Argv: []string{"true"}}); err != nil {
		t.Fatal(err)
	}
	r.waitExit(t, "c")
	r.mu.Lock()
	delete(r.exits, "c")
	r.mu.Unlock()
	if _, err := c.ExecStart(bg, rpc.ExecStartParams{Tag: "c", Argv: []string{"echo", "again"}}); err != nil {
		t.Fatalf("reuse of an exited tag: %v", err)
	}
	r.waitExit(t, "c")
	// The executor picks a tag when none is given.
	res, err = c.ExecStart(bg, rpc.ExecStartParams{Argv: []string{"true"}})
	if err != nil || res.Tag == "" {
		t.Fatalf("untagged start: %+v %v", res, err)
	}
	if x := r.waitExit(t, res.Tag); x.Code != 0 {
		t.Fatalf("true: %+v", x)
	}
}

func TestExecErrors(t *testing.T) {
	te := startExecutor(t, nil)
	r := newRecorder(t)
	c := dialTest(t, te.socket, r)

	_, err := c.ExecStart(bg, rpc.ExecStartParams{Tag: "m", Argv: []string{"no-such-program-xyz"}})
	wantCode(t, err, rpc.CodeNoProgram)
	if !strings.Contains(err.Error(), "no-such-program-xyz") || !errors.Is(err, exec.ErrNotFound) {
		t.Fatalf("error does not name the program or map to exec.ErrNotFound: %v", err)
	}
	_, err = c.ExecStart(bg, rpc.ExecStartParams{Tag: "m", Argv: []string{"/nonexistent/bin"}})
	wantCode(t, err, rpc.CodeNoProgram)
	// A working folder that is a file: the start fails for another reason.
	if err := c.WriteFile(bg, rpc.FSFile{Path: "f", Data: []byte("x")}); err != nil {
		t.Fatal(err)
	}
	_, err = c.ExecStart(bg, rpc.ExecStartParams{Tag: "m", Argv: []string{"true"}, Cwd: "f"})
	if err == nil {
		t.Fatal("start in a file as working folder succeeded")
	}
	_, err = c.ExecStart(bg, rpc.ExecStartParams{Tag: "m", Argv: nil})
	wantCode(t, err, rpc.CodeInvalidParams)
	_, err = c.ExecStart(bg, rpc.ExecStartParams{Tag: "m", Argv: []string{"true"}, Cwd: "../out"})
	wantCode(t, err, rpc.CodeInvalidPath)
	_, err = c.ExecStart(bg, rpc.ExecStartParams{Tag: "m", Argv: []string{"true"}, PTY: &rpc.WindowSize{}})
	wantCode(t, err, rpc.CodeInvalidParams)

	// The failed starts left nothing behind and the tag is free.
	if _, err := c.ExecStart(bg, rpc.ExecStartParams{Tag: "m", Argv: []string{"sleep", "30"}}); err != nil {
		t.Fatal(err)
	}
	_, err = c.ExecStart(bg, rpc.ExecStartParams{Tag: "m", Argv: []string{"true"}})
	wantCode(t, err, rpc.CodeExists)
	wantCode(t, c.ExecRelease(bg, "m"), rpc.CodeRunning)
	wantCode(t, c.ExecInput(bg, "m", []byte("x"), false), rpc.CodeUnsupported)
	wantCode(t, c.ExecResize(bg, "m", sandbox.WindowSize{Rows: 1, Cols: 1}), rpc.CodeUnsupported)
	wantCode(t, c.ExecSignal(bg, "m", "NOPE"), rpc.CodeInvalidParams)
	wantCode(t, c.ExecSignal(bg, "zz", "TERM"), rpc.CodeNotFound)
	wantCode(t, c.ExecInput(bg, "zz", nil, true), rpc.CodeNotFound)
	_, err = c.ExecAttach(bg, rpc.ExecAttachParams{Tag: "zz"})
	wantCode(t, err, rpc.CodeNotFound)
	_, err = c.ExecAttach(bg, rpc.ExecAttachParams{Tag: "m", FromOffset: sandbox.Offsets{Stdout: 10}})
	wantCode(t, err, rpc.CodeInvalidParams)
	wantCode(t, c.Call(bg, "exec.bogus", nil, nil), rpc.CodeMethodNotFound)
	wantCode(t, c.Call(bg, rpc.MethodExecStart, []int{1}, nil), rpc.CodeInvalidParams)

	if err := c.ExecSignal(bg, "m", "SIGKILL"); err != nil {
		t.Fatal(err)
	}
	if x := r.waitExit(t, "m"); x.Signal != "SIGKILL" {
		t.Fatalf("exit %+v", x)
	}
	// Signalling an exited process is a no-op.
	if err := c.ExecSignal(bg, "m", "9"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Ping(bg); err != nil {
		t.Fatal(err)
	}
}

func TestExecStdinSignalPTY(t *testing.T) {
	te := startExecutor(t, nil)
	r := newRecorder(t)
	c := dialTest(t, te.socket, r)

	if _, err := c.ExecStart(bg, rpc.ExecStartParams{Tag: "cat", Argv: []string{"cat"}, Stdin: true}); err != nil {
		t.Fatal(err)
	}
	if err := c.ExecInput(bg, "cat", []byte("hello "), false); err != nil {
		t.Fatal(err)
	}
	text := "world"
	if err := c.Call(bg, rpc.MethodExecInput, rpc.ExecInputParams{Tag: "cat", Text: &text, EOF: true}, nil); err != nil {
		t.Fatal(err)
	}
	if x := r.waitExit(t, "cat"); x.Code != 0 || r.output("cat", sandbox.Stdout) != "hello world" {
		t.Fatalf("cat: %+v %q", x, r.output("cat", sandbox.Stdout))
	}

	if _, err := c.ExecStart(bg, rpc.ExecStartParams{Tag: "sl", Argv: []string{"sleep", "30"}}); err != nil {
		t.Fatal(err)
	}
	if err := c.ExecSignal(bg, "sl", "term"); err != nil {
		t.Fatal(err)
	}
	if x := r.waitExit(t, "sl"); x.Signal != "SIGTERM" {
		t.Fatalf("sleep: %+v", x)
	}

	script := `stty size; read l; stty size`
	if _, err := c.ExecStart(bg, rpc.ExecStartParams{Tag: "tty", Argv: []string{"sh", "-c", script}, PTY: &rpc.WindowSize{Rows: 24, Cols: 80}}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool { return strings.Contains(r.output("tty", sandbox.Stdout), "24 80") })
	if err := c.ExecResize(bg, "tty", sandbox.WindowSize{Rows: 40, Cols: 100}); err != nil {
		t.Fatal(err)
	}
	if err := c.ExecInput(bg, "tty", []byte("go\n"), false); err != nil {
		t.Fatal(err)
	}
	r.waitExit(t, "tty")
	if out := r.output("tty", sandbox.Stdout); !strings.Contains(out, "40 100") {
		t.Fatalf("pty output %q", out)
	}
}

func waitFor(t testing.TB, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met in time")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// A client that goes away mid-stream: the process keeps running, its output
// is spooled, and a new client attaching from the offset it had consumed
// gets the rest exactly once, in order.
func TestReattachAfterDisconnect(t *testing.T) {
	te := startExecutor(t, nil)
	r1 := newRecorder(t)
	c1, err := rpc.Dial(bg, te.socket, r1, rpc.ConnOptions{})
	if err != nil {
		t.Fatal(err)
	}
	script := `i=1; while [ $i -le 300 ]; do echo "line $i"; i=$((i+1)); sleep 0.002; done; echo done >&2`
	if _, err := c1.ExecStart(bg, rpc.ExecStartParams{Tag: "n", Argv: []string{"sh", "-c", script}}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool { return strings.Count(r1.output("n", sandbox.Stdout), "\n") >= 20 })
	c1.Close()
	c1.Wait()
	first := r1.output("n", sandbox.Stdout)
	// Consume only whole lines, as a server would have persisted them.
	first = first[:strings.LastIndexByte(first, '\n')+1]

	time.Sleep(100 * time.Millisecond) // output produced while nobody is connected
	r2 := newRecorder(t)
	c2 := dialTest(t, te.socket, r2)
	list, err := c2.ExecList(bg)
	if err != nil || len(list) != 1 || list[0].Tag != "n" || list[0].Attached {
		t.Fatalf("list %+v %v", list, err)
	}
	ar, err := c2.ExecAttach(bg, rpc.ExecAttachParams{Tag: "n", FromOffset: sandbox.Offsets{Stdout: int64(len(first))}})
	if err != nil || ar.First.Stdout != 0 {
		t.Fatalf("attach %+v %v", ar, err)
	}
	r2.waitExit(t, "n")
	all := first + r2.output("n", sandbox.Stdout)
	var want strings.Builder
	for i := 1; i <= 300; i++ {
		fmt.Fprintf(&want, "line %d\n", i)
	}
	if all != want.String() {
		t.Fatalf("lines differ:\n%q", all)
	}
	if e := r2.output("n", sandbox.Stderr); e != "done\n" {
		t.Fatalf("stderr %q", e)
	}
	if len(r2.gaps) != 0 {
		t.Fatalf("gaps %q", r2.gaps)
	}
	// Attaching again replays from any offset still spooled.
	r3 := newRecorder(t)
	c3 := dialTest(t, te.socket, r3)
	if _, err := c3.ExecAttach(bg, rpc.ExecAttachParams{Tag: "n", FromOffset: sandbox.Offsets{Stdout: 7}}); err != nil {
		t.Fatal(err)
	}
	r3.waitExit(t, "n")
	if got := r3.output("n", sandbox.Stdout); got != want.String()[7:] {
		t.Fatalf("replay from 7: %q", got)
	}
}

// With a small spool and nobody connected, the oldest output is dropped
// (the process is never blocked), and attach reports where the spool now
// starts.
func TestSpoolFullDropsOldest(t *testing.T) {
	const spool = 64 << 10
	te := startExecutor(t, func(c *Config) { c.SpoolBytes = spool })
	r1 := newRecorder(t)
	c1, err := rpc.Dial(bg, te.socket, r1, rpc.ConnOptions{})
	if err != nil {
		t.Fatal(err)
	}
	c1.Close()
	c1.Wait()
	r := newRecorder(t)
	c := dialTest(t, te.socket, r)
	// Start on a connection that goes away at once.
	c2, err := rpc.Dial(bg, te.socket, newRecorder(t), rpc.ConnOptions{})
	if err != nil {
		t.Fatal(err)
	}
	const total = 1 << 20
	if _, err := c2.ExecStart(bg, rpc.ExecStartParams{Tag: "z", Argv: []string{"head", "-c", strconv.Itoa(total), "/dev/zero"}}); err != nil {
		t.Fatal(err)
	}
	c2.Close()
	c2.Wait()
	waitFor(t, func() bool {
		l, _ := c.ExecList(bg)
		return len(l) == 1 && !l[0].Running
	})
	ar, err := c.ExecAttach(bg, rpc.ExecAttachParams{Tag: "z"})
	if err != nil {
		t.Fatal(err)
	}
	if ar.Running || ar.End.Stdout != total || ar.First.Stdout != total-spool {
		t.Fatalf("attach %+v", ar)
	}
	x := r.waitExit(t, "z")
	if x.Code != 0 || len(r.output("z", sandbox.Stdout)) != spool {
		t.Fatalf("exit %+v, got %d bytes", x, len(r.output("z", sandbox.Stdout)))
	}
}

func TestFlowControlWindow(t *testing.T) {
	te := startExecutor(t, nil)
	r := newRecorder(t)
	c := dialTest(t, te.socket, r)
	const total = 1 << 20
	if _, err := c.ExecStart(bg, rpc.ExecStartParams{Tag: "w", Argv: []string{"head", "-c", strconv.Itoa(total), "/dev/zero"}, Window: minWindow}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool {
		l, _ := c.ExecList(bg)
		return len(l) == 1 && !l[0].Running
	})
	waitFor(t, func() bool { return len(r.output("w", sandbox.Stdout)) >= minWindow })
	// Give the sender a chance to overshoot, then check it did not.
	time.Sleep(50 * time.Millisecond)
	if _, err := c.Ping(bg); err != nil {
		t.Fatal(err)
	}
	if n := len(r.output("w", sandbox.Stdout)); n != minWindow {
		t.Fatalf("received %d bytes without acks, window %d", n, minWindow)
	}
	for {
		n := int64(len(r.output("w", sandbox.Stdout)))
		if err := c.ExecAck("w", sandbox.Offsets{Stdout: n}); err != nil {
			t.Fatal(err)
		}
		if n == total {
			break
		}
		waitFor(t, func() bool { return int64(len(r.output("w", sandbox.Stdout))) > n })
	}
	if x := r.waitExit(t, "w"); x.End.Stdout != total {
		t.Fatalf("exit %+v", x)
	}
}

func TestGarbageAndHugeMessages(t *testing.T) {
	te := startExecutor(t, func(c *Config) { c.MaxLine = 1 << 20 })
	nc, err := net.Dial("unix", te.socket)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	br := bufio.NewReader(nc)
	read := func() rawResponse {
		_ = nc.SetReadDeadline(time.Now().Add(10 * time.Second))
		line, err := br.ReadBytes('\n')
		if err != nil {
			t.Fatal(err)
		}
		var r rawResponse
		if err := json.Unmarshal(line, &r); err != nil {
			t.Fatalf("%q: %v", line, err)
		}
		return r
	}
	go func() {
		_, _ = nc.Write([]byte("\x00\x01garbage\xff\n"))
		_, _ = nc.Write(append(bytes.Repeat([]byte("x"), 3<<20), '\n'))
		_, _ = nc.Write([]byte(`{"jsonrpc":"2.0","id":1,"method":"fs.read","params":{"path":"../etc/passwd"}}` + "\n"))
		_, _ = nc.Write([]byte(`{"jsonrpc":"2.0","id":2,"method":"ping"}` + "\n"))
	}()
	for _, want := range []int{rpc.CodeParseError, rpc.CodeTooLarge} {
		if r := read(); r.Error == nil || r.Error.Code != want || string(r.ID) != "null" {
			t.Fatalf("want %d, got %+v", want, r)
		}
	}
	// Requests are answered concurrently: match by id.
	byID := map[string]rawResponse{}
	for range 2 {
		r := read()
		byID[string(r.ID)] = r
	}
	if r := byID["1"]; r.Error == nil || r.Error.Code != rpc.CodeInvalidPath {
		t.Fatalf("fs.read outside: %+v", r)
	}
	if r := byID["2"]; r.Error != nil || r.Result == nil {
		t.Fatalf("ping after garbage: %+v", r)
	}
	// Another client is unaffected.
	c := dialTest(t, te.socket, newRecorder(t))
	if _, err := c.Ping(bg); err != nil {
		t.Fatal(err)
	}
}

func TestFileOperations(t *testing.T) {
	te := startExecutor(t, nil)
	r := newRecorder(t)
	c := dialTest(t, te.socket, r)
	id, err := c.Watch(bg)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.WriteFile(bg, rpc.FSFile{Path: "a/b.txt", Data: []byte("hi"), Mode: 0o600}); err != nil {
		t.Fatal(err)
	}
	if err := c.WriteFiles(bg, []rpc.FSFile{{Path: "c.txt", Data: []byte("")}, {Path: "d/e.txt", Data: []byte("e")}}); err != nil {
		t.Fatal(err)
	}
	data, err := c.ReadFile(bg, "a/b.txt")
	if err != nil || string(data) != "hi" {
		t.Fatalf("read %q %v", data, err)
	}
	if data, err := c.ReadFile(bg, "c.txt"); err != nil || len(data) != 0 {
		t.Fatalf("empty file %q %v", data, err)
	}
	_, err = c.ReadFile(bg, "nope")
	wantCode(t, err, rpc.CodeNotFound)
	if !errors.Is(err, sandbox.ErrNotFound) || !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("not found does not map to the sentinels: %v", err)
	}
	_, err = c.ReadFile(bg, "/etc/passwd")
	wantCode(t, err, rpc.CodeInvalidPath)
	if !errors.Is(err, sandbox.ErrInvalidPath) {
		t.Fatal("invalid path does not map")
	}
	wantCode(t, c.WriteFile(bg, rpc.FSFile{Path: "../x", Data: nil}), rpc.CodeInvalidPath)
	list, err := c.List(bg, "", true)
	if err != nil {
		t.Fatal(err)
	}
	var paths []string
	for _, e := range list {
		paths = append(paths, e.Path)
	}
	if strings.Join(paths, ",") != "a,a/b.txt,c.txt,d,d/e.txt" {
		t.Fatalf("list %q", paths)
	}
	if list[1].Mode.Perm() != 0o600 || list[1].Size != 2 {
		t.Fatalf("entry %+v", list[1])
	}
	seen := map[string]bool{}
	waitEvents := func(done func() bool) {
		t.Helper()
		timeout := time.After(20 * time.Second)
		for !done() {
			select {
			case ev := <-r.events:
				if ev.WatchID != id {
					t.Fatalf("event of watch %q", ev.WatchID)
				}
				seen[string(ev.Op)+" "+ev.Path] = true
			case <-timeout:
				t.Fatalf("events seen: %v", seen)
			}
		}
	}
	waitEvents(func() bool { return seen["created a/b.txt"] && seen["created d/e.txt"] && seen["created c.txt"] })
	if err := c.Remove(bg, "d"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(te.workspace, "d")); !errors.Is(err, os.ErrNotExist) {
		t.Fatal("d not removed")
	}
	waitEvents(func() bool { return seen["deleted d/e.txt"] || seen["deleted d"] })
	if err := c.Unwatch(bg, id); err != nil {
		t.Fatal(err)
	}
	wantCode(t, c.Unwatch(bg, id), rpc.CodeNotFound)
}

func TestSecretsAndPermissionCallbacks(t *testing.T) {
	te := startExecutor(t, nil)
	// No server connected yet: callbacks cannot be answered.
	_, err := te.e.RequestSecret(bg, "x")
	wantCode(t, err, rpc.CodeUnavailable)

	r := newRecorder(t)
	r.secrets["api"] = "s3cret"
	c := dialTest(t, te.socket, r)
	if _, err := c.ExecStart(bg, rpc.ExecStartParams{Tag: "s", Argv: []string{"sh", "-c", `printf %s "$TOKEN"`}, SecretEnv: map[string]string{"TOKEN": "api"}}); err != nil {
		t.Fatal(err)
	}
	r.waitExit(t, "s")
	if got := r.output("s", sandbox.Stdout); got != "s3cret" {
		t.Fatalf("secret env %q", got)
	}
	_, err = c.ExecStart(bg, rpc.ExecStartParams{Tag: "s2", Argv: []string{"true"}, SecretEnv: map[string]string{"TOKEN": "missing"}})
	wantCode(t, err, rpc.CodeSecretDenied)

	v, err := te.e.RequestSecret(bg, "api")
	if err != nil || v != "s3cret" {
		t.Fatalf("secret %q %v", v, err)
	}
	pr, err := te.e.RequestPermission(bg, rpc.PermissionParams{ToolName: "Bash", Input: json.RawMessage(`{"command":"ls"}`)})
	if err != nil || pr.Behavior != "deny" || pr.Message != "no Bash" {
		t.Fatalf("permission %+v %v", pr, err)
	}
}

func TestShutdownKillsEverything(t *testing.T) {
	te := startExecutor(t, nil)
	r := newRecorder(t)
	c := dialTest(t, te.socket, r)
	if _, err := c.ExecStart(bg, rpc.ExecStartParams{Tag: "s", Argv: []string{"sh", "-c", "echo $$ > pid; exec sleep 60"}}); err != nil {
		t.Fatal(err)
	}
	var pid int
	waitFor(t, func() bool {
		b, err := os.ReadFile(filepath.Join(te.workspace, "pid"))
		pid, _ = strconv.Atoi(strings.TrimSpace(string(b)))
		return err == nil && pid > 0
	})
	if err := c.Shutdown(bg); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-te.served:
		te.served <- err
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("Serve did not return after shutdown")
	}
	if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
		t.Fatalf("process %d still there after shutdown: %v", pid, err)
	}
	if _, err := os.Stat(te.socket); !errors.Is(err, os.ErrNotExist) {
		t.Fatal("socket file left behind")
	}
	<-c.Done()
}

func TestOrphanTimeout(t *testing.T) {
	te := startExecutor(t, func(c *Config) { c.OrphanTimeout = 300 * time.Millisecond })
	c, err := rpc.Dial(bg, te.socket, newRecorder(t), rpc.ConnOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Ping(bg); err != nil {
		t.Fatal(err)
	}
	// Connected: it stays up beyond the timeout.
	select {
	case err := <-te.served:
		t.Fatalf("executor stopped while a server was connected: %v", err)
	case <-time.After(800 * time.Millisecond):
	}
	c.Close()
	c.Wait()
	select {
	case err := <-te.served:
		te.served <- err
	case <-time.After(20 * time.Second):
		t.Fatal("orphaned executor did not stop")
	}
}

func TestPeerUIDRefused(t *testing.T) {
	if err := checkUID(1000, 1000); err != nil {
		t.Fatal(err)
	}
	if err := checkUID(1001, 1000); !errors.Is(err, ErrPeerRefused) {
		t.Fatalf("checkUID: %v", err)
	}
	te := startExecutor(t, func(c *Config) { c.PeerUID = os.Getuid() + 4242 })
	nc, err := net.Dial("unix", te.socket)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	_ = nc.SetReadDeadline(time.Now().Add(10 * time.Second))
	br := bufio.NewReader(nc)
	line, err := br.ReadBytes('\n')
	if err != nil {
		t.Fatal(err)
	}
	var r rawResponse
	if err := json.Unmarshal(line, &r); err != nil || r.Error == nil || r.Error.Code != rpc.CodeDenied {
		t.Fatalf("refusal %q", line)
	}
	if _, err := br.ReadBytes('\n'); err == nil {
		t.Fatal("connection still open after refusal")
	}
}

// The same refusal, from a client really running as another user (nobody),
// through a socket whose mode would let it in.
func TestPeerUIDRefusedOtherUser(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("needs root to run a client as another uid")
	}
	te := startExecutor(t, nil)
	if err := os.Chmod(filepath.Dir(te.socket), 0o711); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(te.socket, 0o666); err != nil {
		t.Fatal(err)
	}
	// The test binary lives in a folder only root may enter: copy it.
	bin := filepath.Join(filepath.Dir(te.socket), "client.test")
	if err := copyFile(os.Args[0], bin, 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "-test.run=^$")
	cmd.Env = append(os.Environ(), "EXECUTOR_TEST_DIAL="+te.socket)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("client as nobody: %v: %s", err, out)
	}
	if !strings.Contains(string(out), fmt.Sprintf(`"code":%d`, rpc.CodeDenied)) || !strings.Contains(string(out), "uid 65534") {
		t.Fatalf("client as nobody got %s", out)
	}
}

// dialForTest is the body of the re-executed test binary in
// TestPeerUIDRefusedOtherUser: dial, send a ping, print what comes back.
func dialForTest(socket string) {
	nc, err := net.Dial("unix", socket)
	if err != nil {
		fmt.Println("dial:", err)
		os.Exit(1)
	}
	_, _ = nc.Write([]byte(`{"jsonrpc":"2.0","id":1,"method":"ping"}` + "\n"))
	_ = nc.SetReadDeadline(time.Now().Add(10 * time.Second))
	line, _ := bufio.NewReader(nc).ReadBytes('\n')
	fmt.Printf("%s", line)
	os.Exit(0)
}

func copyFile(from, to string, mode os.FileMode) error {
	b, err := os.ReadFile(from)
	if err != nil {
		return err
	}
	return os.WriteFile(to, b, mode)
}

// While a connection receives the output, a full spool holds the process
// up instead of dropping what was not sent: nothing is lost.
func TestBackpressureWhileAttached(t *testing.T) {
	const spool = 64 << 10
	te := startExecutor(t, func(c *Config) { c.SpoolBytes = spool })
	r := newRecorder(t)
	c := dialTest(t, te.socket, r)
	const total = 4 << 20
	if _, err := c.ExecStart(bg, rpc.ExecStartParams{Tag: "b", Argv: []string{"head", "-c", strconv.Itoa(total), "/dev/zero"}, Window: minWindow}); err != nil {
		t.Fatal(err)
	}
	// Without acks the sender stops at the window and the pump at the
	// spool: the process cannot finish.
	waitFor(t, func() bool { return len(r.output("b", sandbox.Stdout)) >= minWindow })
	time.Sleep(100 * time.Millisecond)
	if l, _ := c.ExecList(bg); len(l) != 1 || !l[0].Running || l[0].End.Stdout > minWindow+spool {
		t.Fatalf("not held up: %+v", l)
	}
	for {
		n := int64(len(r.output("b", sandbox.Stdout)))
		if err := c.ExecAck("b", sandbox.Offsets{Stdout: n}); err != nil {
			t.Fatal(err)
		}
		if n == total {
			break
		}
		waitFor(t, func() bool { return int64(len(r.output("b", sandbox.Stdout))) > n })
	}
	if x := r.waitExit(t, "b"); x.Code != 0 || x.End.Stdout != total {
		t.Fatalf("exit %+v", x)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.gaps) != 0 {
		t.Fatalf("gaps: %q", r.gaps)
	}
}

// fs.sync: every watch's events carry the changes made before the call,
// then the marker; a call without a marker, or to an executor whose
// environment cannot flush its watch, is refused with a code.
func TestFSSync(t *testing.T) {
	te := startExecutor(t, nil)
	r := newRecorder(t)
	c := dialTest(t, te.socket, r)
	id, err := c.Watch(bg)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.WriteFiles(bg, []rpc.FSFile{{Path: "x.txt", Data: []byte("x")}, {Path: "d/y.txt", Data: []byte("y")}}); err != nil {
		t.Fatal(err)
	}
	if err := c.Call(bg, rpc.MethodFSSync, rpc.FSSyncParams{Marker: "m1"}, nil); err != nil {
		t.Fatal(err)
	}
	before := untilSync(t, r, id, "m1")
	slices.Sort(before)
	if want := []string{"created d/y.txt", "created x.txt"}; !slices.Equal(before, want) {
		t.Fatalf("before the marker %q, want %q", before, want)
	}
	wantCode(t, c.Call(bg, rpc.MethodFSSync, rpc.FSSyncParams{}, nil), rpc.CodeInvalidParams)

	plain := startExecutor(t, func(cfg *Config) { cfg.Env = noSync{cfg.Env} })
	c2 := dialTest(t, plain.socket, newRecorder(t))
	wantCode(t, c2.Call(bg, rpc.MethodFSSync, rpc.FSSyncParams{Marker: "m"}, nil), rpc.CodeUnsupported)
}

// noSync hides the environment's SyncWatch, as a backend without one.
type noSync struct{ sandbox.Environment }

// untilSync returns the events of watch id received before its marker.
func untilSync(t *testing.T, r *recorder, id, marker string) []string {
	t.Helper()
	var before []string
	timeout := time.After(20 * time.Second)
	for {
		select {
		case ev := <-r.events:
			if ev.WatchID != id {
				t.Fatalf("event of watch %q", ev.WatchID)
			}
			if ev.Op == sandbox.Sync {
				if ev.Path != marker {
					t.Fatalf("marker %q, want %q", ev.Path, marker)
				}
				return before
			}
			before = append(before, string(ev.Op)+" "+ev.Path)
		case <-timeout:
			t.Fatalf("no marker; events %q", before)
		}
	}
}
