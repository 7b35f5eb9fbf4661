// Package agentdtest starts real agentd servers, mock model servers and agent
// CLIs for end-to-end tests. It is imported by tests only.
package agentdtest

import (
	"bufio"
	"context"
	"crypto/sha256"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/agentd/agentd"
	"github.com/agentd/agentd/client"
	"github.com/agentd/agentd/internal/mockllm"
)

// RaceEnabled says whether this test binary, and the agentd binary Binary
// builds, run under the race detector (which multiplies memory use and
// slows everything down: memory figures mean nothing then).
const RaceEnabled = raceEnabled

// RepoRoot returns the folder holding go.mod.
func RepoRoot(t testing.TB) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("agentdtest: go.mod not found")
		}
		dir = parent
	}
}

// AgentBin returns the folder with the pinned agent CLIs
// (tools/agents/node_modules/.bin), skipping the test when name is not
// installed there. scripts/setup.sh installs them.
func AgentBin(t testing.TB, name string) string {
	t.Helper()
	bin := filepath.Join(RepoRoot(t), "tools", "agents", "node_modules", ".bin")
	if _, err := os.Stat(filepath.Join(bin, name)); err != nil {
		if os.Getenv("AGENTD_REQUIRE_AGENTS") != "" {
			t.Fatalf("agentdtest: %s not installed in %s (run scripts/setup.sh)", name, bin)
		}
		t.Skipf("agentdtest: %s not installed in %s (run scripts/setup.sh)", name, bin)
	}
	return bin
}

// WithPath prepends dirs to PATH for the rest of the test (t.Setenv:
// tests using it cannot run in parallel).
func WithPath(t testing.TB, dirs ...string) {
	t.Helper()
	t.Setenv("PATH", strings.Join(append(dirs, os.Getenv("PATH")), string(os.PathListSeparator)))
}

// MockLLM starts mock-llm with a script (YAML or JSON text) and returns it
// with its base URL.
func MockLLM(t testing.TB, script string) (*mockllm.Server, string) {
	t.Helper()
	f := filepath.Join(t.TempDir(), "script.yaml")
	if err := os.WriteFile(f, []byte(script), 0o644); err != nil {
		t.Fatal(err)
	}
	sc, err := mockllm.Load(f)
	if err != nil {
		t.Fatalf("agentdtest: mock-llm script: %v", err)
	}
	srv := mockllm.New(sc, mockllm.WithLogger(quietLogger()))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = srv.ServeListener(ctx, ln) }()
	t.Cleanup(func() { cancel(); <-done })
	return srv, "http://" + ln.Addr().String()
}

func quietLogger() *slog.Logger {
	if os.Getenv("AGENTD_TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

// Server is an in-process agentd on a loopback port.
type Server struct {
	t      testing.TB
	Config agentd.Config
	URL    string
	Client *client.Client
	srv    *agentd.Server
	cancel context.CancelFunc
	done   chan error
}

// Start runs agentd in this process with cfg (DataDir defaults to a temp
// folder, Addr to a free loopback port). Stop or the test's end shuts it
// down gracefully.
func Start(t testing.TB, cfg agentd.Config) *Server {
	t.Helper()
	if cfg.DataDir == "" {
		cfg.DataDir = t.TempDir()
	}
	if cfg.Addr == "" {
		cfg.Addr = "127.0.0.1:0"
	}
	if cfg.Logger == nil {
		cfg.Logger = quietLogger()
	}
	s := &Server{t: t, Config: cfg}
	s.start()
	t.Cleanup(s.Stop)
	return s
}

func (s *Server) start() {
	s.t.Helper()
	ctx := context.Background()
	srv, err := agentd.New(ctx, s.Config)
	if err != nil {
		s.t.Fatalf("agentdtest: start agentd: %v", err)
	}
	if err := srv.Listen(); err != nil {
		s.t.Fatal(err)
	}
	// Keep the port across restarts.
	s.Config.Addr = srv.Addr()
	s.URL = "http://" + srv.Addr()
	s.Client, err = client.New(s.URL, client.WithAPIKey(s.Config.APIKey))
	if err != nil {
		s.t.Fatal(err)
	}
	rctx, cancel := context.WithCancel(ctx)
	s.srv, s.cancel, s.done = srv, cancel, make(chan error, 1)
	go func() { s.done <- srv.ListenAndServe(rctx) }()
}

// Stop shuts the server down gracefully (idempotent).
func (s *Server) Stop() {
	if s.cancel == nil {
		return
	}
	s.cancel()
	if err := <-s.done; err != nil {
		s.t.Logf("agentdtest: agentd stopped: %v", err)
	}
	s.cancel = nil
}

// Restart stops the server and starts a new one on the same data folder
// and port.
func (s *Server) Restart() {
	s.t.Helper()
	s.Stop()
	s.start()
}

var (
	buildOnce sync.Once
	buildPath string
	buildErr  error
)

// Binary builds cmd/agentd once per test binary and returns its path. A
// test binary built with -race gets an agentd built with -race: the
// servers and executors that tests start as processes are checked for
// data races too (see StartProcess).
//
// The binary lives in one folder per checkout and flavour
// ($TMPDIR/agentd-bin-<checkout>-<plain|race>/agentd), replaced by each
// test binary's build (go build's cache makes that a link): test binaries
// exit without a hook to remove what they made, and a folder each left a
// 130 MB binary behind per package per run.
func Binary(t testing.TB) string {
	t.Helper()
	buildOnce.Do(func() {
		root := RepoRoot(t)
		flavour := "plain"
		if raceEnabled {
			flavour = "race"
		}
		sum := sha256.Sum256([]byte(root))
		dir := filepath.Join(os.TempDir(), fmt.Sprintf("agentd-bin-%x-%s", sum[:6], flavour))
		if err := os.MkdirAll(dir, 0o755); err != nil {
			buildErr = err
			return
		}
		// Sandboxes running as other uids (bwrap's sandbox uid, a user
		// pool) execute this binary.
		if err := os.Chmod(dir, 0o755); err != nil {
			buildErr = err
			return
		}
		tmp, err := os.CreateTemp(dir, "agentd-*.tmp")
		if err != nil {
			buildErr = err
			return
		}
		_ = tmp.Close()
		defer os.Remove(tmp.Name()) // gone once renamed
		args := []string{"build", "-o", tmp.Name()}
		if raceEnabled {
			args = append(args, "-race")
		}
		cmd := exec.Command("go", append(args, "./cmd/agentd")...)
		cmd.Dir = root
		out, err := cmd.CombinedOutput()
		if err != nil {
			buildErr = fmt.Errorf("go build: %v\n%s", err, out)
			return
		}
		if err := os.Chmod(tmp.Name(), 0o755); err != nil {
			buildErr = err
			return
		}
		// A rename: processes running the previous build keep it.
		buildPath = filepath.Join(dir, "agentd")
		buildErr = os.Rename(tmp.Name(), buildPath)
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return buildPath
}

// Process is agentd serve running as a child process, for tests that kill
// it with SIGKILL.
type Process struct {
	t       testing.TB
	Args    []string
	Env     []string
	URL     string
	Client  *client.Client
	cmd     *exec.Cmd
	raceLog string // GORACE log_path prefix, with -race
	logs    *strings.Builder
	logMu   sync.Mutex
	waitErr chan error
	exited  chan struct{} // closed when the current process has exited
}

// StartProcess runs `agentd serve --addr 127.0.0.1:0 args…` and waits for
// it to listen. The test's end kills it. Under -race, a data race the
// server reports (into files, as it is killed rather than stopped) fails
// the test.
func StartProcess(t testing.TB, env []string, args ...string) *Process {
	t.Helper()
	p := &Process{t: t, Args: args, Env: env, logs: &strings.Builder{}}
	if raceEnabled {
		p.raceLog = filepath.Join(t.TempDir(), "race")
	}
	p.start("127.0.0.1:0")
	t.Cleanup(func() {
		p.Kill()
		if races := p.Races(); races != "" {
			t.Errorf("agentdtest: the agentd server reported data races:\n%s", races)
		}
		if t.Failed() {
			t.Logf("agentd log:\n%s", p.Logs())
		}
	})
	return p
}

// Races returns the data race reports of the server processes started so
// far (with -race; "" without).
func (p *Process) Races() string {
	if p.raceLog == "" {
		return ""
	}
	files, _ := filepath.Glob(p.raceLog + ".*")
	var b strings.Builder
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err == nil && len(data) > 0 {
			fmt.Fprintf(&b, "%s:\n%s\n", filepath.Base(f), data)
		}
	}
	return b.String()
}

func (p *Process) start(addr string) {
	p.t.Helper()
	args := append([]string{"serve", "--addr", addr}, p.Args...)
	cmd := exec.Command(Binary(p.t), args...)
	cmd.Env = append(os.Environ(), p.Env...)
	if p.raceLog != "" {
		// One file per process (<log_path>.<pid>); the run goes on after a
		// report, as the test decides at its end.
		cmd.Env = append(cmd.Env, "GORACE=log_path="+p.raceLog+" halt_on_error=0")
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	stderr, err := cmd.StderrPipe()
	if err != nil {
		p.t.Fatal(err)
	}
	cmd.Stdout = cmd.Stderr
	if err := cmd.Start(); err != nil {
		p.t.Fatal(err)
	}
	p.cmd = cmd
	p.waitErr = make(chan error, 1)
	p.exited = make(chan struct{})
	ready := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			line := sc.Text()
			p.logMu.Lock()
			p.logs.WriteString(line + "\n")
			p.logMu.Unlock()
			if u, ok := strings.CutPrefix(line, "agentd listening on "); ok {
				u, _, _ = strings.Cut(u, " ") // "… (data: DIR)"
				select {
				case ready <- u:
				default:
				}
			}
		}
	}()
	exited := p.exited
	go func() {
		err := cmd.Wait()
		close(exited)
		p.waitErr <- err
	}()
	select {
	case u := <-ready:
		p.URL = u
	case err := <-p.waitErr:
		p.t.Fatalf("agentdtest: agentd exited at start: %v\n%s", err, p.Logs())
	case <-time.After(30 * time.Second):
		p.t.Fatalf("agentdtest: agentd did not start\n%s", p.Logs())
	}
	p.Client, _ = client.New(p.URL)
}

// PID is the process id of the running server (0 after Kill).
func (p *Process) PID() int {
	if p.cmd == nil || p.cmd.Process == nil {
		return 0
	}
	return p.cmd.Process.Pid
}

// Exited reports whether the server process has exited by itself (crashed,
// or stopped on an error) since it was started; Kill does not count.
func (p *Process) Exited() bool {
	if p.cmd == nil {
		return false
	}
	select {
	case <-p.exited:
		return true
	default:
		return false
	}
}

// Logs returns what the process printed so far.
func (p *Process) Logs() string {
	p.logMu.Lock()
	defer p.logMu.Unlock()
	return p.logs.String()
}

// Kill sends SIGKILL to the server process only (not its process group:
// executors it started must survive) and waits for it.
func (p *Process) Kill() {
	if p.cmd == nil || p.cmd.Process == nil {
		return
	}
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.waitErr
	p.cmd = nil
}

// Terminate sends SIGTERM to the server (a graceful stop) and waits for
// it to exit.
func (p *Process) Terminate() {
	if p.cmd == nil || p.cmd.Process == nil {
		return
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	<-p.waitErr
	p.cmd = nil
}

// Restart kills the server with SIGKILL and starts it again on the same
// port with the same arguments.
func (p *Process) Restart() {
	p.t.Helper()
	addr := strings.TrimPrefix(p.URL, "http://")
	p.Kill()
	p.start(addr)
}
