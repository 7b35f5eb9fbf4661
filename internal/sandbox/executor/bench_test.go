package executor

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/agentd/agentd/internal/sandbox/local"
	"github.com/agentd/agentd/internal/sandbox/sandboxtest"
	"github.com/agentd/agentd/sandbox"
)

// BenchmarkCreate: Create → ready (the executor answered ping). Targets:
// p50 < 50 ms, p99 < 150 ms.
func BenchmarkCreate(b *testing.B) {
	p, dir := newTestProvider(b, nil)
	spec := sandbox.Spec{SessionID: "bench", Workspace: filepath.Join(dir, "ws")}
	sandboxtest.BenchCreate(b, p, spec)
}

// BenchmarkPing: one request/response through the socket.
func BenchmarkPing(b *testing.B) {
	p, dir := newTestProvider(b, nil)
	env, _ := createEnv(b, p, dir)
	var ds []time.Duration
	for b.Loop() {
		t0 := time.Now()
		if _, err := env.client.Ping(context.Background()); err != nil {
			b.Fatal(err)
		}
		ds = append(ds, time.Since(t0))
	}
	sandboxtest.ReportPercentiles(b, ds, time.Microsecond, "µs")
}

// BenchmarkExecTrue: Exec of `true` → output closed → Wait (which also
// releases it), through the executor; BenchmarkExecTrueLocal is the same
// on the local backend. The difference is what the executor adds.
func BenchmarkExecTrue(b *testing.B) {
	p, dir := newTestProvider(b, nil)
	env, _ := createEnv(b, p, dir)
	sandboxtest.BenchExecTrue(b, env, time.Microsecond, "µs")
}

func BenchmarkExecTrueLocal(b *testing.B) {
	dir := sandboxtest.ShortTempDir(b, "sx")
	env, err := local.New(local.Options{}).Create(context.Background(), sandbox.Spec{SessionID: "l", Workspace: filepath.Join(dir, "ws")})
	if err != nil {
		b.Fatal(err)
	}
	defer env.Terminate(context.Background())
	sandboxtest.BenchExecTrue(b, env, time.Microsecond, "µs")
}

// BenchmarkOutput: `head -c 500M /dev/zero` through the executor, the
// consumer draining Output. Target ≥ 200 MB/s.
func BenchmarkOutput(b *testing.B) {
	p, dir := newTestProvider(b, nil)
	env, _ := createEnv(b, p, dir)
	sandboxtest.BenchOutput(b, env)
}

func BenchmarkOutputLocal(b *testing.B) {
	dir := sandboxtest.ShortTempDir(b, "sx")
	env, err := local.New(local.Options{}).Create(context.Background(), sandbox.Spec{SessionID: "l", Workspace: filepath.Join(dir, "ws")})
	if err != nil {
		b.Fatal(err)
	}
	defer env.Terminate(context.Background())
	sandboxtest.BenchOutput(b, env)
}

// BenchmarkCreateLocal: the same on the local backend (a folder, nothing
// started), for comparison.
func BenchmarkCreateLocal(b *testing.B) {
	dir := sandboxtest.ShortTempDir(b, "sx")
	p := local.New(local.Options{})
	spec := sandbox.Spec{SessionID: "bench", Workspace: filepath.Join(dir, "ws")}
	sandboxtest.BenchCreate(b, p, spec)
}

// BenchmarkCreateUserPool: Create → ready with a user of its own (root):
// pool lock, process check, workspace chown, cgroup.
func BenchmarkCreateUserPool(b *testing.B) {
	if os.Getuid() != 0 {
		b.Skip("needs root")
	}
	dir := sandboxtest.ShortTempDir(b, "sx")
	opts := testOptions(filepath.Join(dir, "run"))
	opts.Binary = sandboxtest.UserBinary(b, dir)
	opts.UserPool = []string{"59970-59979"}
	opts.Limits = sandbox.Limits{Pids: 1024, MemoryBytes: 1 << 30}
	p, err := New(opts)
	if err != nil {
		b.Fatal(err)
	}
	b.Logf("limits: %s", p.LimitsEnforcement())
	spec := sandbox.Spec{SessionID: "bench", Workspace: filepath.Join(dir, "ws")}
	sandboxtest.BenchCreate(b, p, spec)
}

// BenchmarkCreateNoCgroup: BenchmarkCreate without a cgroup per
// environment (LimitsOff), to see what the group costs.
func BenchmarkCreateNoCgroup(b *testing.B) {
	p, dir := newTestProvider(b, func(o *Options) { o.LimitMode = LimitsOff })
	spec := sandbox.Spec{SessionID: "bench", Workspace: filepath.Join(dir, "ws")}
	sandboxtest.BenchCreate(b, p, spec)
}
