// Package natstest gives tests a real NATS server: the one scripts/nats.sh
// started (AGENTD_TEST_NATS), or else a private nats-server process (from
// Debian's nats-server package, installed by scripts/setup.sh) stopped at
// the test's end. Tests get a subject prefix of their own, so tests sharing
// one server do not hear each other.
package natstest

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

const (
	// EnvURL names the variable holding the shared test server's URL.
	EnvURL = "AGENTD_TEST_NATS"
	// EnvRequire, when set, fails tests that find no NATS server instead
	// of skipping them (CI).
	EnvRequire = "AGENTD_REQUIRE_NATS"
)

// Binary returns the nats-server binary, or "" when none is installed.
func Binary() string {
	if p, err := exec.LookPath("nats-server"); err == nil {
		return p
	}
	for _, p := range []string{"/usr/sbin/nats-server", "/usr/local/bin/nats-server", "/usr/local/sbin/nats-server"} {
		if st, err := os.Stat(p); err == nil && !st.IsDir() {
			return p
		}
	}
	return ""
}

// URL returns the shared server's URL (AGENTD_TEST_NATS), or starts a
// private server for this test. Without either it skips the test (fails
// it with AGENTD_REQUIRE_NATS).
func URL(t testing.TB) string {
	t.Helper()
	if u := os.Getenv(EnvURL); u != "" {
		return u
	}
	return Start(t)
}

// Shared returns AGENTD_TEST_NATS, skipping the test without it (failing
// it with AGENTD_REQUIRE_NATS): for packages whose leak checks would see a
// private server's process wait.
func Shared(t testing.TB) string {
	t.Helper()
	u := os.Getenv(EnvURL)
	if u == "" {
		if os.Getenv(EnvRequire) != "" {
			t.Fatalf("%s is not set (eval \"$(scripts/nats.sh start)\")", EnvURL)
		}
		t.Skipf("set %s to run against NATS (eval \"$(scripts/nats.sh start)\")", EnvURL)
	}
	return u
}

// Server is a private nats-server process.
type Server struct {
	URL string
	cmd *exec.Cmd
	dir string
}

// Start runs a private nats-server on a free loopback port until the
// test's end.
func Start(t testing.TB) string {
	t.Helper()
	s, err := StartServer(t.TempDir())
	if err != nil {
		if os.Getenv(EnvRequire) == "" && strings.Contains(err.Error(), "not installed") {
			t.Skip(err)
		}
		t.Fatal(err)
	}
	t.Cleanup(s.Stop)
	return s.URL
}

// StartServer runs nats-server on a free loopback port, with its files in
// dir.
func StartServer(dir string) (*Server, error) { return StartServerOn(dir, "-1") }

// StartServerOn runs nats-server on a given loopback port ("-1": a free
// one), with its files in dir.
func StartServerOn(dir, port string) (*Server, error) {
	bin := Binary()
	if bin == "" {
		return nil, fmt.Errorf("natstest: nats-server is not installed (scripts/setup.sh installs Debian's nats-server)")
	}
	ports := filepath.Join(dir, "ports")
	if err := os.MkdirAll(ports, 0o755); err != nil {
		return nil, err
	}
	logf, err := os.Create(filepath.Join(dir, "nats.log"))
	if err != nil {
		return nil, err
	}
	defer logf.Close()
	cmd := exec.Command(bin, "-a", "127.0.0.1", "-p", port, "--ports_file_dir", ports)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	setDeathSignal(cmd.SysProcAttr, syscall.SIGKILL)
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("natstest: start nats-server: %w", err)
	}
	s := &Server{cmd: cmd, dir: dir}
	file := filepath.Join(ports, fmt.Sprintf("%s_%d.ports", filepath.Base(bin), cmd.Process.Pid))
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if b, err := os.ReadFile(file); err == nil {
			var p struct {
				Nats []string `json:"nats"`
			}
			if json.Unmarshal(b, &p) == nil && len(p.Nats) > 0 {
				s.URL = p.Nats[0]
				return s, nil
			}
		}
		if time.Now().After(deadline) {
			s.Stop()
			log, _ := os.ReadFile(filepath.Join(dir, "nats.log"))
			return nil, fmt.Errorf("natstest: nats-server did not start:\n%s", log)
		}
	}
}

// Stop kills the server and waits for it.
func (s *Server) Stop() {
	if s.cmd == nil {
		return
	}
	_ = s.cmd.Process.Kill()
	_ = s.cmd.Wait()
	s.cmd = nil
}

// Prefix returns a subject prefix no other test uses.
func Prefix(t testing.TB) string {
	t.Helper()
	var b [6]byte
	_, _ = rand.Read(b[:])
	return "t" + hex.EncodeToString(b[:])
}
