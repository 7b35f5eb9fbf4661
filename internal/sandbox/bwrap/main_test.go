package bwrap

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"go.uber.org/goleak"

	rpc "github.com/agentd/agentd/internal/executor"
	"github.com/agentd/agentd/internal/sandbox"
	"github.com/agentd/agentd/internal/sandbox/executor"
	"github.com/agentd/agentd/internal/sandbox/executor/cgroup"
)

var bg = context.Background()

// The test binary doubles as the agentd binary (`<test binary> executor
// …` with AGENTD_TEST_EXECUTOR=1) and, with BWRAP_TEST_SERVER set, as a
// server that creates an environment and dies.
func TestMain(m *testing.M) {
	if os.Getenv("AGENTD_TEST_EXECUTOR") == "1" && len(os.Args) > 1 && os.Args[1] == "executor" {
		if err := rpc.Main(context.Background(), os.Args[2:]); err != nil {
			fmt.Fprintln(os.Stderr, "executor:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	if dir := os.Getenv("BWRAP_TEST_SERVER"); dir != "" {
		os.Exit(dyingServer(dir))
	}
	if os.Getenv("AGENTD_TEST_LOG") == "" {
		slog.SetDefault(slog.New(slog.DiscardHandler))
	}
	code := m.Run()
	// The tests' parent cgroup (their own groups are gone with them).
	if cg, err := cgroup.Detect(cgroup.Options{Parent: testCgroupParent}); err == nil {
		cg.RemoveParent()
	}
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	os.Exit(code)
}

// testCgroupParent holds the cgroups of this test process's environments
// (and of its children's, which inherit it).
var testCgroupParent = func() string {
	if v := os.Getenv("AGENTD_TEST_CGROUP_PARENT"); v != "" {
		return v
	}
	v := fmt.Sprintf("agentd-test-%d", os.Getpid())
	os.Setenv("AGENTD_TEST_CGROUP_PARENT", v)
	return v
}()

func needBwrap(t testing.TB) {
	t.Helper()
	if _, err := exec.LookPath("bwrap"); err != nil {
		t.Skip("bubblewrap not installed (scripts/setup.sh installs it)")
	}
}

// shortTempDir is a temporary folder with a short path (socket paths are
// limited) that other users may pass through.
func shortTempDir(t testing.TB) string {
	t.Helper()
	d, err := os.MkdirTemp("", "bw")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(d, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(d) })
	return d
}

// userBinary copies the test binary where any user may run it (once per
// folder).
func userBinary(dir string) string {
	bin := filepath.Join(dir, "agentd.test")
	if _, err := os.Stat(bin); err == nil {
		return bin
	}
	b, err := os.ReadFile(os.Args[0])
	if err != nil {
		panic(err)
	}
	if err := os.WriteFile(bin, b, 0o755); err != nil {
		panic(err)
	}
	return bin
}

func testOptions(dir string) Options {
	return Options{Options: executor.Options{
		Binary:       userBinary(dir),
		RunDir:       filepath.Join(dir, "run"),
		ExecutorEnv:  []string{"AGENTD_TEST_EXECUTOR=1"},
		StartTimeout: 20 * time.Second,
		CgroupParent: testCgroupParent,
		Path:         "/usr/local/bin:/usr/bin:/bin",
	}}
}

func newProvider(t testing.TB, mod func(*Options)) (*Provider, string) {
	t.Helper()
	needBwrap(t)
	dir := shortTempDir(t)
	opts := testOptions(dir)
	if mod != nil {
		mod(&opts)
	}
	p, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	return p, dir
}

func create(t testing.TB, p *Provider, spec sandbox.Spec) sandbox.Environment {
	t.Helper()
	env, err := p.Create(bg, spec)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		env.Terminate(ctx)
	})
	return env
}

// run runs cmd to its end and returns its output.
func run(t testing.TB, env sandbox.Environment, cmd sandbox.Cmd) (stdout, stderr string, st sandbox.ExitStatus) {
	t.Helper()
	p, err := env.Exec(bg, cmd)
	if err != nil {
		t.Fatal(err)
	}
	var o, e bytes.Buffer
	timeout := time.After(60 * time.Second)
	for done := false; !done; {
		select {
		case c, ok := <-p.Output():
			if !ok {
				done = true
				break
			}
			if c.Stream == sandbox.Stderr {
				e.Write(c.Data)
			} else {
				o.Write(c.Data)
			}
		case <-timeout:
			t.Fatal("output not closed")
		}
	}
	st, err = p.Wait(bg)
	if err != nil {
		t.Fatal(err)
	}
	return o.String(), e.String(), st
}

func handleOf(t testing.TB, env sandbox.Environment) executor.Handle {
	t.Helper()
	var h executor.Handle
	if err := json.Unmarshal(env.(sandbox.Handler).Handle(), &h); err != nil {
		t.Fatal(err)
	}
	return h
}

// dyingServer creates an environment running a counter, prints its handle
// and exits without terminating it: a crashed server.
func dyingServer(dir string) int {
	opts := testOptions(dir)
	p, err := New(opts)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	spec := sandbox.Spec{SessionID: "dying", Workspace: filepath.Join(dir, "ws")}
	env, err := p.Create(context.Background(), spec)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	if _, err := env.Exec(context.Background(), sandbox.Cmd{Tag: "count", Argv: []string{"sh", "-c", `for i in $(seq 1 40); do echo line $i; sleep 0.05; done`}}); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	fmt.Println(string(env.(sandbox.Handler).Handle()))
	os.Exit(0)
	return 0
}
