// Package sandboxtest holds test support shared by the sandbox backends
// that run the agentd executor (internal/sandbox/executor and
// internal/sandbox/bwrap): a TestMain for test binaries that double as
// the executor, the cgroup parent of the tests' environments, short
// temporary folders, a copy of the test binary other users may run,
// running a command to its end, a fake model proxy and benchmark helpers.
// Only tests import it.
package sandboxtest

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/agentd/agentd/internal/executor"
	"github.com/agentd/agentd/internal/sandbox/executor/cgroup"
	"github.com/agentd/agentd/sandbox"
)

// Main is TestMain for a test binary that doubles as the agentd binary:
// run with AGENTD_TEST_EXECUTOR=1 (which executors' ExecutorEnv must set) as `<test binary> executor …` it is an
// executor, and with the variable serverVar set it runs server (given the
// variable's value, a folder) and exits with what it returns: a server
// that starts something and dies. Otherwise it runs the tests (logs
// discarded unless AGENTD_TEST_LOG is set), removes the tests' parent
// cgroup and, when they passed, fails on leaked goroutines. It never
// returns.
func Main(m *testing.M, serverVar string, server func(dir string) int) {
	if os.Getenv("AGENTD_TEST_EXECUTOR") == "1" && len(os.Args) > 1 && os.Args[1] == "executor" {
		if err := executor.Main(context.Background(), os.Args[2:]); err != nil {
			fmt.Fprintln(os.Stderr, "executor:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	if dir := os.Getenv(serverVar); dir != "" {
		os.Exit(server(dir))
	}
	if os.Getenv("AGENTD_TEST_LOG") == "" {
		slog.SetDefault(slog.New(slog.DiscardHandler))
	}
	code := m.Run()
	// The tests' parent cgroup (their own groups are gone with them).
	if cg, err := cgroup.Detect(cgroup.Options{Parent: cgroupParent}); err == nil {
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

// cgroupParent is set at init, before any test or child process starts, so
// that children (executors, played servers) inherit it.
var cgroupParent = func() string {
	if v := os.Getenv("AGENTD_TEST_CGROUP_PARENT"); v != "" {
		return v
	}
	v := fmt.Sprintf("agentd-test-%d", os.Getpid())
	os.Setenv("AGENTD_TEST_CGROUP_PARENT", v)
	return v
}()

// CgroupParent is the cgroup holding the groups of this test process's
// environments (and of its children's, which inherit it).
func CgroupParent() string { return cgroupParent }

// ShortTempDir is a temporary folder with a short path (socket paths are
// limited to 107 bytes) that other users may traverse, removed at the
// test's end.
func ShortTempDir(t testing.TB, prefix string) string {
	t.Helper()
	d, err := os.MkdirTemp("", prefix)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(d, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(d) })
	return d
}

// UserBinary copies the test binary into dir, where any user may run it
// (the build folder is the server's only), once per folder.
func UserBinary(t testing.TB, dir string) string {
	t.Helper()
	bin, err := CopyBinary(dir)
	if err != nil {
		t.Fatal(err)
	}
	return bin
}

// CopyBinary is UserBinary for code without a test (a played server).
func CopyBinary(dir string) (string, error) {
	bin := filepath.Join(dir, "agentd.test")
	if _, err := os.Stat(bin); err == nil {
		return bin, nil
	}
	b, err := os.ReadFile(os.Args[0])
	if err != nil {
		return "", err
	}
	if err := os.WriteFile(bin, b, 0o755); err != nil {
		return "", err
	}
	return bin, nil
}

// Create creates an environment of p, terminated (within 30 s, its error
// not checked) at the test's end.
func Create(t testing.TB, p sandbox.Provider, spec sandbox.Spec) sandbox.Environment {
	t.Helper()
	env, err := p.Create(context.Background(), spec)
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

// Collect drains a process's output, failing the test when a chunk's
// offset is not where the previous one ended or the output is not closed
// within a minute.
func Collect(t testing.TB, p sandbox.Process) (stdout, stderr string) {
	t.Helper()
	return CollectFrom(t, p, sandbox.Offsets{})
}

// CollectFrom is Collect for output attached at from.
func CollectFrom(t testing.TB, p sandbox.Process, from sandbox.Offsets) (stdout, stderr string) {
	t.Helper()
	var o, e bytes.Buffer
	next := map[sandbox.Stream]int64{sandbox.Stdout: from.Stdout, sandbox.Stderr: from.Stderr}
	timeout := time.After(60 * time.Second)
	for {
		select {
		case c, ok := <-p.Output():
			if !ok {
				return o.String(), e.String()
			}
			s := c.Stream
			if s != sandbox.Stderr {
				s = sandbox.Stdout
			}
			if c.Offset != next[s] {
				t.Errorf("%s: chunk at %d, expected %d", c.Stream, c.Offset, next[s])
			}
			next[s] = c.Offset + int64(len(c.Data))
			if s == sandbox.Stdout {
				o.Write(c.Data)
			} else {
				e.Write(c.Data)
			}
		case <-timeout:
			t.Fatal("output not closed")
		}
	}
}

// Run runs cmd in env to its end and returns its output and exit status.
func Run(t testing.TB, env sandbox.Environment, cmd sandbox.Cmd) (stdout, stderr string, st sandbox.ExitStatus) {
	t.Helper()
	ctx := context.Background()
	p, err := env.Exec(ctx, cmd)
	if err != nil {
		t.Fatal(err)
	}
	o, e := Collect(t, p)
	st, err = p.Wait(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return o, e, st
}
