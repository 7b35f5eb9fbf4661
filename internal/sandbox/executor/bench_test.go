package executor

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/agentd/agentd/internal/sandbox"
	"github.com/agentd/agentd/internal/sandbox/local"
)

// reportPercentiles adds p50/p99 of ds (in unit) to the benchmark's output.
func reportPercentiles(b *testing.B, ds []time.Duration, unit time.Duration, name string) {
	if len(ds) == 0 {
		return
	}
	slices.Sort(ds)
	pct := func(p float64) float64 {
		i := int(float64(len(ds)-1) * p)
		return float64(ds[i]) / float64(unit)
	}
	b.ReportMetric(pct(0.50), "p50-"+name)
	b.ReportMetric(pct(0.99), "p99-"+name)
}

// BenchmarkCreate: Create → ready (the executor answered ping). Targets:
// p50 < 50 ms, p99 < 150 ms.
func BenchmarkCreate(b *testing.B) {
	p, dir := newTestProvider(b, nil)
	spec := sandbox.Spec{SessionID: "bench", Workspace: filepath.Join(dir, "ws")}
	var ds []time.Duration
	for b.Loop() {
		t0 := time.Now()
		env, err := p.Create(context.Background(), spec)
		if err != nil {
			b.Fatal(err)
		}
		ds = append(ds, time.Since(t0))
		b.StopTimer()
		if err := env.Terminate(context.Background()); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
	}
	reportPercentiles(b, ds, time.Millisecond, "ms")
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
	reportPercentiles(b, ds, time.Microsecond, "µs")
}

// BenchmarkExecTrue: Exec of `true` → output closed → Wait (which also
// releases it), through the executor; BenchmarkExecTrueLocal is the same
// on the local backend. The difference is what the executor adds.
func BenchmarkExecTrue(b *testing.B) {
	p, dir := newTestProvider(b, nil)
	env, _ := createEnv(b, p, dir)
	benchExec(b, env)
}

func BenchmarkExecTrueLocal(b *testing.B) {
	dir := shortTempDir(b)
	env, err := local.New(local.Options{}).Create(context.Background(), sandbox.Spec{SessionID: "l", Workspace: filepath.Join(dir, "ws")})
	if err != nil {
		b.Fatal(err)
	}
	defer env.Terminate(context.Background())
	benchExec(b, env)
}

func benchExec(b *testing.B, env sandbox.Environment) {
	ctx := context.Background()
	var ds []time.Duration
	for b.Loop() {
		t0 := time.Now()
		proc, err := env.Exec(ctx, sandbox.Cmd{Argv: []string{"true"}})
		if err != nil {
			b.Fatal(err)
		}
		for range proc.Output() {
		}
		if st, err := proc.Wait(ctx); err != nil || !st.Success() {
			b.Fatal(st, err)
		}
		ds = append(ds, time.Since(t0))
	}
	reportPercentiles(b, ds, time.Microsecond, "µs")
}

// BenchmarkOutput: `head -c 500M /dev/zero` through the executor, the
// consumer draining Output. Target ≥ 200 MB/s.
func BenchmarkOutput(b *testing.B) {
	p, dir := newTestProvider(b, nil)
	env, _ := createEnv(b, p, dir)
	benchOutput(b, env)
}

func BenchmarkOutputLocal(b *testing.B) {
	dir := shortTempDir(b)
	env, err := local.New(local.Options{}).Create(context.Background(), sandbox.Spec{SessionID: "l", Workspace: filepath.Join(dir, "ws")})
	if err != nil {
		b.Fatal(err)
	}
	defer env.Terminate(context.Background())
	benchOutput(b, env)
}

func benchOutput(b *testing.B, env sandbox.Environment) {
	const total = 500 << 20
	ctx := context.Background()
	b.SetBytes(total)
	for b.Loop() {
		proc, err := env.Exec(ctx, sandbox.Cmd{Argv: []string{"head", "-c", strconv.Itoa(total), "/dev/zero"}})
		if err != nil {
			b.Fatal(err)
		}
		var n int64
		for c := range proc.Output() {
			n += int64(len(c.Data))
		}
		if st, err := proc.Wait(ctx); err != nil || !st.Success() || n != total {
			b.Fatal(st, err, n)
		}
	}
}

// BenchmarkCreateLocal: the same on the local backend (a folder, nothing
// started), for comparison.
func BenchmarkCreateLocal(b *testing.B) {
	dir := shortTempDir(b)
	p := local.New(local.Options{})
	spec := sandbox.Spec{SessionID: "bench", Workspace: filepath.Join(dir, "ws")}
	var ds []time.Duration
	for b.Loop() {
		t0 := time.Now()
		env, err := p.Create(context.Background(), spec)
		if err != nil {
			b.Fatal(err)
		}
		ds = append(ds, time.Since(t0))
		b.StopTimer()
		env.Terminate(context.Background())
		b.StartTimer()
	}
	reportPercentiles(b, ds, time.Millisecond, "ms")
}

// BenchmarkCreateUserPool: Create → ready with a user of its own (root):
// pool lock, process check, workspace chown, cgroup.
func BenchmarkCreateUserPool(b *testing.B) {
	if os.Getuid() != 0 {
		b.Skip("needs root")
	}
	dir := shortTempDir(b)
	opts := testOptions(filepath.Join(dir, "run"))
	opts.Binary = userBinary(b, dir)
	opts.UserPool = []string{"59970-59979"}
	opts.Limits = sandbox.Limits{Pids: 1024, MemoryBytes: 1 << 30}
	p, err := New(opts)
	if err != nil {
		b.Fatal(err)
	}
	b.Logf("limits: %s", p.LimitsEnforcement())
	spec := sandbox.Spec{SessionID: "bench", Workspace: filepath.Join(dir, "ws")}
	var ds []time.Duration
	for b.Loop() {
		t0 := time.Now()
		env, err := p.Create(context.Background(), spec)
		if err != nil {
			b.Fatal(err)
		}
		ds = append(ds, time.Since(t0))
		b.StopTimer()
		if err := env.Terminate(context.Background()); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
	}
	reportPercentiles(b, ds, time.Millisecond, "ms")
}

// BenchmarkCreateNoCgroup: BenchmarkCreate without a cgroup per
// environment (LimitsOff), to see what the group costs.
func BenchmarkCreateNoCgroup(b *testing.B) {
	p, dir := newTestProvider(b, func(o *Options) { o.LimitMode = LimitsOff })
	spec := sandbox.Spec{SessionID: "bench", Workspace: filepath.Join(dir, "ws")}
	var ds []time.Duration
	for b.Loop() {
		t0 := time.Now()
		env, err := p.Create(context.Background(), spec)
		if err != nil {
			b.Fatal(err)
		}
		ds = append(ds, time.Since(t0))
		b.StopTimer()
		env.Terminate(context.Background())
		b.StartTimer()
	}
	reportPercentiles(b, ds, time.Millisecond, "ms")
}
