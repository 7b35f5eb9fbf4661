package bwrap

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/agentd/agentd/internal/sandbox/executor"
	"github.com/agentd/agentd/internal/sandbox/sandboxtest"
	"github.com/agentd/agentd/sandbox"
)

var bg = context.Background()

// The test binary doubles as the agentd binary (an executor) and, with
// BWRAP_TEST_SERVER set, as a server that creates an environment and dies.
func TestMain(m *testing.M) { sandboxtest.Main(m, "BWRAP_TEST_SERVER", dyingServer) }

func needBwrap(t testing.TB) {
	t.Helper()
	if _, err := exec.LookPath("bwrap"); err != nil {
		t.Skip("bubblewrap not installed (scripts/setup.sh installs it)")
	}
}

// testOptions runs a copy of the test binary in dir (any user may run it).
func testOptions(dir string) Options {
	bin, err := sandboxtest.CopyBinary(dir)
	if err != nil {
		panic(err)
	}
	return Options{Options: executor.Options{
		Binary:       bin,
		RunDir:       filepath.Join(dir, "run"),
		ExecutorEnv:  []string{"AGENTD_TEST_EXECUTOR=1"},
		StartTimeout: 20 * time.Second,
		CgroupParent: sandboxtest.CgroupParent(),
		Path:         "/usr/local/bin:/usr/bin:/bin",
	}}
}

func newProvider(t testing.TB, mod func(*Options)) (*Provider, string) {
	t.Helper()
	needBwrap(t)
	dir := sandboxtest.ShortTempDir(t, "bw")
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

func handleOf(t testing.TB, env sandbox.Environment) executor.Handle {
	t.Helper()
	var h executor.Handle
	if err := json.Unmarshal(env.(sandbox.HandleReporter).Handle(), &h); err != nil {
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
	fmt.Println(string(env.(sandbox.HandleReporter).Handle()))
	os.Exit(0)
	return 0
}
