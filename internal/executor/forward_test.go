package executor

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agentd/agentd/internal/executor/rpc"
)

// unixHTTP serves h on a Unix socket in dir and returns its path.
func unixHTTP(t *testing.T, dir string, h http.Handler) string {
	t.Helper()
	sock := filepath.Join(dir, "proxy.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: h}
	done := make(chan struct{})
	go func() { defer close(done); srv.Serve(ln) }()
	t.Cleanup(func() { srv.Close(); <-done })
	return sock
}

func startTestForwarder(t *testing.T, sock string, max int) *Forwarder {
	t.Helper()
	f, err := NewForwarder("127.0.0.1:0", sock, max, nil)
	if err != nil {
		t.Fatal(err)
	}
	stop := startForwarder(f, f.log)
	t.Cleanup(stop)
	return f
}

func TestForwarderHTTP(t *testing.T) {
	dir := shortTempDir(t)
	sock := unixHTTP(t, dir, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		fmt.Fprintf(w, "%s %s key=%s body=%s", r.Method, r.URL.Path, r.Header.Get("x-api-key"), body)
	}))
	f := startTestForwarder(t, sock, 0)
	req, _ := http.NewRequest("POST", "http://"+f.Addr().String()+"/v1/messages", strings.NewReader(`{"x":1}`))
	req.Header.Set("x-api-key", "tok")
	tr := &http.Transport{}
	defer tr.CloseIdleConnections()
	resp, err := (&http.Client{Transport: tr}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if string(b) != `POST /v1/messages key=tok body={"x":1}` {
		t.Fatalf("through the forwarder: %q", b)
	}
}

// A half-closed request still gets its answer: the write side is closed,
// not the connection.
func TestForwarderHalfClose(t *testing.T) {
	dir := shortTempDir(t)
	sock := filepath.Join(dir, "echo.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		b, _ := io.ReadAll(c) // until the client's EOF
		c.Write([]byte("got " + string(b)))
	}()
	defer func() { ln.Close(); <-done }()
	f := startTestForwarder(t, sock, 0)
	c, err := net.Dial("tcp", f.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.Write([]byte("hello"))
	c.(*net.TCPConn).CloseWrite()
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	b, err := io.ReadAll(c)
	if err != nil || string(b) != "got hello" {
		t.Fatalf("%q %v", b, err)
	}
}

// No proxy listening: the agent's connection is closed, nothing hangs, and
// the forwarder keeps serving (the proxy may come back).
func TestForwarderProxyDown(t *testing.T) {
	dir := shortTempDir(t)
	sock := filepath.Join(dir, "later.sock")
	f := startTestForwarder(t, sock, 0)
	c, err := net.Dial("tcp", f.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	if n, err := c.Read(make([]byte, 1)); n != 0 || err == nil {
		t.Fatalf("read %d %v", n, err)
	}
	c.Close()
	unixHTTP(t, dir, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "back") }))
	os.Rename(filepath.Join(dir, "proxy.sock"), sock)
	tr := &http.Transport{}
	defer tr.CloseIdleConnections()
	resp, err := (&http.Client{Transport: tr}).Get("http://" + f.Addr().String() + "/")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if string(b) != "back" {
		t.Fatalf("%q", b)
	}
}

// Close cuts open relays and returns; connections over the bound are
// refused.
func TestForwarderCloseAndBound(t *testing.T) {
	dir := shortTempDir(t)
	sock := filepath.Join(dir, "hold.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	accepted := make(chan net.Conn, 4)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				close(accepted)
				return
			}
			accepted <- c
		}
	}()
	defer func() {
		ln.Close()
		for c := range accepted {
			c.Close()
		}
	}()
	f, err := NewForwarder("127.0.0.1:0", sock, 1, nil)
	if err != nil {
		t.Fatal(err)
	}
	stop := startForwarder(f, f.log)
	c1, err := net.Dial("tcp", f.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c1.Close()
	c1.Write([]byte("x"))
	up := <-accepted
	up.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := up.Read(make([]byte, 1)); err != nil {
		t.Fatal(err)
	}
	// The second is over the bound of 1: closed at once.
	c2, err := net.Dial("tcp", f.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	c2.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := c2.Read(make([]byte, 1)); err == nil {
		t.Fatal("connection over the bound relayed")
	}
	c2.Close()
	stopped := make(chan struct{})
	go func() { stop(); close(stopped) }()
	select {
	case <-stopped:
	case <-time.After(10 * time.Second):
		t.Fatal("Close hangs on an open relay")
	}
	c1.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := c1.Read(make([]byte, 1)); err == nil {
		t.Fatal("relay still open after Close")
	}
	if _, err := NewForwarder("127.0.0.1:0", "", 0, nil); err == nil {
		t.Fatal("no socket accepted")
	}
	if _, err := NewForwarder("256.0.0.1:0", sock, 0, nil); err == nil {
		t.Fatal("bad address accepted")
	}
}

// Main with --model-proxy-socket runs the forwarder and ping reports it.
func TestMainModelProxy(t *testing.T) {
	dir := shortTempDir(t)
	proxy := unixHTTP(t, dir, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "proxied") }))
	sock := filepath.Join(dir, "s")
	done := make(chan error, 1)
	go func() {
		done <- Main(context.Background(), []string{
			"--socket", sock, "--workspace", filepath.Join(dir, "ws"), "--spool-dir", dir,
			"--log-level", "error", "--model-proxy-socket", proxy, "--reserve-threads", "4",
		})
	}()
	var c *rpc.Client
	deadline := time.Now().Add(10 * time.Second)
	for {
		var err error
		if c, err = rpc.Dial(bg, sock, newRecorder(t), rpc.ConnOptions{}); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal(err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	defer func() { c.Close(); c.Wait() }()
	p, err := c.Ping(bg)
	if err != nil || !strings.HasPrefix(p.ModelProxyAddr, "127.0.0.1:") {
		t.Fatalf("ping %+v %v", p, err)
	}
	tr := &http.Transport{}
	resp, err := (&http.Client{Transport: tr}).Get("http://" + p.ModelProxyAddr + "/v1/models")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	tr.CloseIdleConnections()
	if string(b) != "proxied" {
		t.Fatalf("%q", b)
	}
	if err := c.Shutdown(bg); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

func TestReserveThreads(t *testing.T) {
	before := threadCount()
	reserveThreads(before + 8)
	if after := threadCount(); after < before+8 {
		t.Fatalf("threads %d → %d, want ≥ %d", before, after, before+8)
	}
	reserveThreads(0)
}

func TestParseIDs(t *testing.T) {
	ids, err := parseIDs(" 1, 20,,3 ")
	if err != nil || fmt.Sprint(ids) != "[1 20 3]" {
		t.Fatalf("%v %v", ids, err)
	}
	for _, bad := range []string{"x", "1,-2", "1;2"} {
		if _, err := parseIDs(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
	if ids, err := parseIDs(""); err != nil || len(ids) != 0 {
		t.Fatalf("empty: %v %v", ids, err)
	}
}

func TestMainPrivilegeFlagErrors(t *testing.T) {
	dir := shortTempDir(t)
	base := []string{"--workspace", dir, "--socket", filepath.Join(dir, "s")}
	for _, extra := range [][]string{
		{"--uid", "1000"},
		{"--uid", "1000", "--gid", "1000", "--groups", "x"},
		{"--uid", "0", "--gid", "0"},
		{"--hold-fd", "987"},
		{"--model-proxy-socket", filepath.Join(dir, "p"), "--model-proxy-listen", "nope"},
	} {
		if err := Main(context.Background(), append(append([]string(nil), base...), extra...)); err == nil {
			t.Errorf("%q: no error", extra)
		}
	}
}

// switchUser, in a child process (it cannot be undone): every thread ends
// up as the user, and root cannot be regained.
func TestSwitchUser(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("needs root")
	}
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "EXECUTOR_TEST_SWITCH=65534:65534:65534,100")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	if len(lines) < 2 {
		t.Fatalf("output %q", out)
	}
	tasks := 0
	defer func() {
		if tasks < 5 {
			t.Errorf("saw %d threads, want ≥ 5: %s", tasks, out)
		}
	}()
	for _, l := range lines {
		if !strings.HasPrefix(l, "task ") {
			continue
		}
		tasks++
		if !strings.Contains(l, "Uid:\t65534\t65534\t65534\t65534") || !strings.Contains(l, "Groups:\t100 65534") {
			t.Errorf("thread not switched: %s", l)
		}
	}
}

// switchUserForTest is the child of TestSwitchUser.
func switchUserForTest(spec string) {
	parts := strings.SplitN(spec, ":", 3)
	var uid, gid int
	fmt.Sscan(parts[0], &uid)
	fmt.Sscan(parts[1], &gid)
	groups, _ := parseIDs(parts[2])
	reserveThreads(4) // several threads before the switch
	if err := switchUser(uid, gid, groups); err != nil {
		fmt.Println("switch:", err)
		os.Exit(1)
	}
	tasks, _ := filepath.Glob("/proc/self/task/*/status")
	for _, p := range tasks {
		f, err := os.Open(p)
		if err != nil {
			continue
		}
		var uidLine, groupsLine string
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			switch {
			case strings.HasPrefix(sc.Text(), "Uid:"):
				uidLine = sc.Text()
			case strings.HasPrefix(sc.Text(), "Groups:"):
				groupsLine = strings.TrimSpace(sc.Text())
			}
		}
		f.Close()
		fmt.Printf("task %s %s %s\n", p, uidLine, groupsLine)
	}
	os.Exit(0)
}

func FuzzParseIDs(f *testing.F) {
	f.Add("1,2,3")
	f.Add(" 7 ,, 8")
	f.Add("-1")
	f.Fuzz(func(t *testing.T, s string) {
		ids, err := parseIDs(s)
		if err != nil {
			return
		}
		for _, id := range ids {
			if id < 0 {
				t.Fatalf("%q gave %d", s, id)
			}
		}
	})
}
