package executor

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agentd/agentd/internal/executor/rpc"
)

// The socket table's spelling of addresses (Linux's /proc/net/tcp, tcp6).
func TestProcAddr(t *testing.T) {
	for _, c := range []struct {
		ap   string
		v6   bool
		want string
	}{
		{"127.0.0.1:7070", false, "0100007F:1B9E"},
		{"127.0.0.1:80", true, "0000000000000000FFFF00000100007F:0050"},
		{"[::1]:7070", true, "00000000000000000000000001000000:1B9E"},
		{"[::1]:7070", false, ""},
	} {
		if got := procAddr(netip.MustParseAddrPort(c.ap), c.v6); got != c.want {
			t.Errorf("procAddr(%s, v6=%v) = %q, want %q", c.ap, c.v6, got, c.want)
		}
	}
}

func TestFindSocketUID(t *testing.T) {
	table := `  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 0100007F:1B9E 00000000:0000 0A 00000000:00000000 00:00000000 00000000  1000        0 100 1 0000000000000000 100 0 0 10 0
   1: 0100007F:D2A4 0100007F:1B9E 01 00000000:00000000 00:00000000 00000000     0        0 101 1 0000000000000000 20 4 30 10 -1
   2: 0100007F:1B9E 0100007F:D2A4 01 00000000:00000000 00:00000000 00000000  1000        0 102 1 0000000000000000 20 4 30 10 -1
   3: 0100007F:D2A5 0100007F:1B9E 01 00000000:00000000 00:00000000 00000000  1234        0 103 1 0000000000000000 20 4 30 10 -1
`
	peer := netip.MustParseAddrPort("127.0.0.1:53924") // D2A4
	srv := netip.MustParseAddrPort("127.0.0.1:7070")
	if uid, err := findSocketUID(strings.NewReader(table), false, peer, srv); err != nil || uid != 0 {
		t.Fatalf("the port-forward's socket: %d %v", uid, err)
	}
	agent := netip.MustParseAddrPort("127.0.0.1:53925") // D2A5
	if uid, err := findSocketUID(strings.NewReader(table), false, agent, srv); err != nil || uid != 1234 {
		t.Fatalf("an agent's socket: %d %v", uid, err)
	}
	gone := netip.MustParseAddrPort("127.0.0.1:53926")
	if _, err := findSocketUID(strings.NewReader(table), false, gone, srv); !errors.Is(err, errNoSocket) {
		t.Fatalf("a socket not in the table: %v", err)
	}
	bad := strings.Replace(table, " 1234 ", " x123 ", 1)
	if _, err := findSocketUID(strings.NewReader(bad), false, agent, srv); err == nil || errors.Is(err, errNoSocket) {
		t.Fatalf("a bad uid column: %v", err)
	}
}

// A real loopback connection: its peer is this process's uid.
func TestLoopbackPeerUID(t *testing.T) {
	for _, addr := range []string{"127.0.0.1:0", "[::1]:0"} {
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			t.Logf("%s: %v", addr, err) // no IPv6 here
			continue
		}
		accepted := make(chan net.Conn, 1)
		go func() {
			c, err := ln.Accept()
			if err != nil {
				close(accepted)
				return
			}
			accepted <- c
		}()
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		sc := <-accepted
		pid, uid, err := peerCred(sc)
		if err != nil || uid != os.Getuid() || pid != -1 {
			t.Errorf("%s: peer pid %d uid %d %v, want -1 %d", addr, pid, uid, err, os.Getuid())
		}
		if err := checkPeer(sc, os.Getuid()+1); !errors.Is(err, ErrPeerRefused) {
			t.Errorf("%s: another uid allowed: %v", addr, err)
		}
		c.Close()
		sc.Close()
		ln.Close()
	}
}

func TestListenLoopbackOnly(t *testing.T) {
	for _, addr := range []string{"0.0.0.0:0", ":0", "example.com:80", "nonsense"} {
		if ln, err := listenLoopback(addr); err == nil {
			ln.Close()
			t.Errorf("%s accepted", addr)
		}
	}
}

// startTunnels runs a tunnel pool allowing peer.
func startTunnels(t *testing.T, peer int) *TunnelPool {
	t.Helper()
	tp, err := NewTunnelPool("127.0.0.1:0", peer, nil)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { defer close(done); tp.Serve() }()
	t.Cleanup(func() { tp.Close(); <-done })
	return tp
}

func waitIdle(t *testing.T, tp *TunnelPool, n int) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); tp.Idle() != n; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d idle tunnels, want %d", tp.Idle(), n)
		}
	}
}

// The server's end of tunnels: it waits for the header, then serves
// what comes as an echo prefixed with tag.
func serverTunnel(t *testing.T, addr, tag string) (net.Conn, chan error) {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		var b [1]byte
		if _, err := io.ReadFull(c, b[:]); err != nil || string(b[:]) != rpc.TunnelHeader {
			done <- fmt.Errorf("header %q %v", b, err)
			return
		}
		r := bufio.NewReader(c)
		line, err := r.ReadString('\n')
		if err != nil {
			done <- err
			return
		}
		_, err = fmt.Fprintf(c, "%s:%s", tag, line)
		done <- err
	}()
	return c, done
}

func TestTunnelPool(t *testing.T) {
	tp := startTunnels(t, os.Getuid())
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	a, doneA := serverTunnel(t, tp.Addr().String(), "a")
	defer a.Close()
	waitIdle(t, tp, 1)
	// A tunnel that ends while idle is dropped.
	b, err := net.Dial("tcp", tp.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	waitIdle(t, tp, 2)
	b.Close()
	waitIdle(t, tp, 1)
	// Take hands out the live one; the server end answers through it.
	c, err := tp.Take(ctx)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(c, "hello\n")
	got, _ := bufio.NewReader(c).ReadString('\n')
	if got != "a:hello\n" {
		t.Fatalf("through the tunnel: %q", got)
	}
	if err := <-doneA; err != nil {
		t.Fatal(err)
	}
	c.Close()
	// With none idle, Take waits for the next one.
	took := make(chan net.Conn, 1)
	go func() {
		c, err := tp.Take(ctx)
		if err != nil {
			t.Error(err)
		}
		took <- c
	}()
	time.Sleep(20 * time.Millisecond)
	d, doneD := serverTunnel(t, tp.Addr().String(), "d")
	defer d.Close()
	c = <-took
	fmt.Fprintf(c, "again\n")
	if got, _ := bufio.NewReader(c).ReadString('\n'); got != "d:again\n" {
		t.Fatalf("through the second tunnel: %q", got)
	}
	if err := <-doneD; err != nil {
		t.Fatal(err)
	}
	c.Close()
	// Take gives up with its context.
	sctx, scancel := context.WithTimeout(ctx, 30*time.Millisecond)
	defer scancel()
	if _, err := tp.Take(sctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("take with no tunnel: %v", err)
	}
}

// Tunnels from another uid (the pod's agents) are refused.
func TestTunnelPoolRefusesOthers(t *testing.T) {
	tp := startTunnels(t, os.Getuid()+1)
	c, err := net.Dial("tcp", tp.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	b, _ := io.ReadAll(c)
	if !strings.Contains(string(b), `"code":-32006`) {
		t.Fatalf("refusal %q", b)
	}
	if tp.Idle() != 0 {
		t.Fatal("a refused tunnel is idle")
	}
}

// Agents' connections to the forwarder go through tunnels to the
// server, which relays them to the model proxy (here an HTTP server on a
// Unix socket).
func TestForwarderThroughTunnels(t *testing.T) {
	dir := shortTempDir(t)
	sock := unixHTTP(t, dir, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "%s %s key=%s", r.Method, r.URL.Path, r.Header.Get("x-api-key"))
	}))
	tp := startTunnels(t, os.Getuid())
	f, err := NewForwarderTo("127.0.0.1:0", "tunnels", tp.Take, 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(startForwarder(f, f.log))
	// The server's side: keep two tunnels open, relay each used one.
	ctx, cancel := context.WithCancel(context.Background())
	relays := make(chan struct{}, 16)
	defer func() { cancel(); tp.Close() }()
	open := func() {
		c, err := net.Dial("tcp", tp.Addr().String())
		if err != nil {
			return
		}
		go func() {
			defer func() { relays <- struct{}{} }()
			defer c.Close()
			var b [1]byte
			if _, err := io.ReadFull(c, b[:]); err != nil {
				return
			}
			up, err := net.Dial("unix", sock)
			if err != nil {
				return
			}
			defer up.Close()
			go func() { <-ctx.Done(); up.Close(); c.Close() }()
			go func() { io.Copy(up, c); up.(*net.UnixConn).CloseWrite() }()
			io.Copy(c, up)
		}()
	}
	open()
	open()
	tr := &http.Transport{DisableKeepAlives: true}
	defer tr.CloseIdleConnections()
	for i := range 5 {
		req, _ := http.NewRequest("GET", fmt.Sprintf("http://%s/v1/m%d", f.Addr(), i), nil)
		req.Header.Set("x-api-key", "tok")
		resp, err := (&http.Client{Transport: tr, Timeout: 10 * time.Second}).Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if want := fmt.Sprintf("GET /v1/m%d key=tok", i); string(b) != want {
			t.Fatalf("response %q, want %q", b, want)
		}
		<-relays
		open() // the server replaces each tunnel used
	}
}

// pod-init writes passwd and group with the sandbox's user, replacing
// entries of its uid or name.
func TestWriteEtc(t *testing.T) {
	src, dst := t.TempDir(), t.TempDir()
	os.WriteFile(filepath.Join(src, "passwd"), []byte("root:x:0:0:root:/root:/bin/bash\nagent:x:10001:10001::/home/agent:/bin/bash\nold:x:4242:4242::/:/bin/sh\n"), 0o644)
	os.WriteFile(filepath.Join(src, "group"), []byte("root:x:0:\nagent:x:10001:\n"), 0o644)
	if err := writeEtc(dst, src, 4242, 4243, "agent", "/workspace"); err != nil {
		t.Fatal(err)
	}
	pw, _ := os.ReadFile(filepath.Join(dst, "passwd"))
	gr, _ := os.ReadFile(filepath.Join(dst, "group"))
	if !strings.HasPrefix(string(pw), "root:x:0:0:root:/root:/bin/bash\nagent:x:4242:4243:agentd sandbox:/workspace:/bin/") || strings.Contains(string(pw), "old:") || strings.Contains(string(pw), "10001") {
		t.Fatalf("passwd:\n%s", pw)
	}
	if string(gr) != "root:x:0:\nagent:x:4243:\n" {
		t.Fatalf("group:\n%s", gr)
	}
	if err := writeEtc(dst, src, 4242, 4242, "a:b", "/w"); err == nil {
		t.Fatal("a user name with a colon was accepted")
	}
	if err := PodInit([]string{"--etc", dst}); err == nil {
		t.Fatal("--etc without --uid was accepted")
	}
	if err := PodInit([]string{"extra"}); err == nil {
		t.Fatal("an argument was accepted")
	}
}

// netOffForTest is the body of the re-run test binary of TestNetworkOff.
func netOffForTest() {
	for _, args := range [][]string{
		{"link", "set", "lo", "up"},
		{"link", "add", "a0", "type", "veth", "peer", "name", "a1"},
		{"link", "set", "a0", "up"}, {"link", "set", "a1", "up"},
	} {
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			fmt.Printf("ip %v: %v %s\n", args, err, out)
			os.Exit(1)
		}
	}
	if err := PodInit([]string{"--network-off"}); err != nil {
		fmt.Println("pod-init:", err)
		os.Exit(1)
	}
	ifs, _ := net.Interfaces()
	for _, it := range ifs {
		if it.Flags&net.FlagUp != 0 && it.Flags&net.FlagLoopback == 0 {
			fmt.Println("still up:", it.Name)
			os.Exit(1)
		}
		if it.Flags&net.FlagLoopback != 0 && it.Flags&net.FlagUp == 0 {
			fmt.Println("loopback taken down")
			os.Exit(1)
		}
	}
	fmt.Println("netoff: ok")
	os.Exit(0)
}
