package bwrap

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/agentd/agentd/internal/sandbox"
)

func reportPercentiles(b *testing.B, ds []time.Duration) {
	if len(ds) == 0 {
		return
	}
	slices.Sort(ds)
	pct := func(p float64) float64 { return float64(ds[int(float64(len(ds)-1)*p)]) / float64(time.Millisecond) }
	b.ReportMetric(pct(0.50), "p50-ms")
	b.ReportMetric(pct(0.99), "p99-ms")
}

func benchCreate(b *testing.B, mod func(*Options)) {
	p, dir := newProvider(b, mod)
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
	reportPercentiles(b, ds)
}

// BenchmarkCreate: Create → ready (the executor inside bubblewrap answered
// ping). Targets: p50 < 50 ms, p99 < 150 ms.
func BenchmarkCreate(b *testing.B) {
	benchCreate(b, func(o *Options) { o.Limits = sandbox.Limits{Pids: 1024, MemoryBytes: 1 << 30} })
}

// BenchmarkCreateUserPool: the same with a user of its own (root).
func BenchmarkCreateUserPool(b *testing.B) {
	if os.Getuid() != 0 {
		b.Skip("needs root")
	}
	benchCreate(b, func(o *Options) {
		o.UserPool = []string{"59960-59969"}
		o.Limits = sandbox.Limits{Pids: 1024, MemoryBytes: 1 << 30}
	})
}

// BenchmarkExecTrue: `true` → exit → Wait inside bubblewrap.
func BenchmarkExecTrue(b *testing.B) {
	p, dir := newProvider(b, nil)
	env := create(b, p, sandbox.Spec{SessionID: "bench", Workspace: filepath.Join(dir, "ws")})
	var ds []time.Duration
	for b.Loop() {
		t0 := time.Now()
		if _, _, st := run(b, env, sandbox.Cmd{Argv: []string{"true"}}); !st.Success() {
			b.Fatal(st)
		}
		ds = append(ds, time.Since(t0))
	}
	reportPercentiles(b, ds)
}
