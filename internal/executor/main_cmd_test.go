package executor

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agentd/agentd/internal/executor/rpc"
)

func TestMainFlagErrors(t *testing.T) {
	dir := shortTempDir(t)
	for _, args := range [][]string{
		{"--socket", filepath.Join(dir, "s")},
		{"--workspace", dir},
		{"--workspace", dir, "--socket", filepath.Join(dir, "s"), "--listen-fd", "3"},
		{"--workspace", dir, "--socket", filepath.Join(dir, "s"), "--log-level", "loud"},
		{"--workspace", dir, "--socket", filepath.Join(dir, "s"), "--bogus"},
		{"--workspace", dir, "--socket", filepath.Join(dir, "s"), "extra"},
		{"--workspace", dir, "--listen-fd", "99"},
		{"--workspace", dir, "--socket", filepath.Join(dir, "s"), "--nice", "-1"},
		{"--workspace", dir, "--socket", filepath.Join(dir, "s"), "--nice", "20"},
	} {
		if err := Main(context.Background(), args); err == nil {
			t.Errorf("%q: no error", args)
		}
	}
}

func TestMainServesSocket(t *testing.T) {
	dir := shortTempDir(t)
	sock := filepath.Join(dir, "s")
	done := make(chan error, 1)
	go func() {
		done <- Main(context.Background(), []string{
			"--socket", sock, "--group", "0", "--workspace", filepath.Join(dir, "ws"),
			"--spool-dir", dir, "--log-level", "error", "--orphan-timeout", "1h",
		})
	}()
	deadline := time.Now().Add(10 * time.Second)
	var c *rpc.Client
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
	fi, err := os.Stat(sock)
	if err != nil || fi.Mode().Perm() != 0o660 {
		t.Fatalf("socket mode %v %v", fi, err)
	}
	p, err := c.Ping(bg)
	if err != nil || !strings.HasSuffix(p.Workspace, "/ws") {
		t.Fatalf("ping %+v %v", p, err)
	}
	// A second executor on the same socket is refused while this one lives.
	if err := Main(context.Background(), []string{"--socket", sock, "--workspace", dir}); err == nil || !strings.Contains(err.Error(), "listening") {
		t.Fatalf("second executor: %v", err)
	}
	if err := c.Shutdown(bg); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("Main did not return")
	}
	if _, err := os.Stat(sock); !os.IsNotExist(err) {
		t.Fatal("socket left behind")
	}
}
