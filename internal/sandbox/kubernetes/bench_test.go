package kubernetes_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/agentd/agentd/internal/sandbox/kubernetes"
	"github.com/agentd/agentd/internal/sandbox/sandboxtest"
	"github.com/agentd/agentd/sandbox"
)

// BenchmarkCreateCold: Create → ready (pod scheduled and started, its
// executor answered ping through a port-forward, the session's
// environment bound), no warm pool. Target: p50 < 3 s.
func BenchmarkCreateCold(b *testing.B) {
	f := newFixture(b)
	p := f.provider(nil)
	benchCreate(b, p, nil)
}

// BenchmarkCreateWarm: the same, claimed from a warm pool that had time
// to refill (untimed) before each Create. Target: p50 < 100 ms.
func BenchmarkCreateWarm(b *testing.B) {
	f := newFixture(b)
	p := f.provider(func(o *kubernetes.Options) { o.WarmPool = 1 })
	if err := p.Collect(context.Background(), nil); err != nil {
		b.Fatal(err)
	}
	benchCreate(b, p, func() {
		for deadline := time.Now().Add(time.Minute); ; time.Sleep(5 * time.Millisecond) {
			if pools := p.Describe().Pools; len(pools) > 0 && pools[0].Ready > 0 {
				return
			}
			if time.Now().After(deadline) {
				b.Fatalf("pool not refilled: %+v", p.Describe().Pools)
			}
		}
	})
	if pool := p.Describe().Pools[0]; pool.Misses > 0 {
		b.Fatalf("%d creates missed the pool", pool.Misses)
	}
}

func benchCreate(b *testing.B, p *kubernetes.Provider, before func()) {
	var ds []time.Duration
	i := 0
	for b.Loop() {
		b.StopTimer()
		if before != nil {
			before()
		}
		i++
		b.StartTimer()
		t0 := time.Now()
		env, err := p.Create(context.Background(), spec(fmt.Sprintf("b%d", i)))
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
	sandboxtest.ReportPercentiles(b, ds, time.Millisecond, "ms")
}

// BenchmarkExecTrue: Exec of `true` → output closed → Wait, through the
// pod's executor over the API server's port-forward.
func BenchmarkExecTrue(b *testing.B) {
	f := newFixture(b)
	env := sandboxtest.Create(b, f.provider(nil), spec("exec"))
	sandboxtest.BenchExecTrue(b, env, time.Microsecond, "µs")
}

// BenchmarkOutput: `head -c 500M /dev/zero` in the pod, the consumer
// draining Output, through the port-forward.
func BenchmarkOutput(b *testing.B) {
	f := newFixture(b)
	env := sandboxtest.Create(b, f.provider(func(o *kubernetes.Options) { o.Limits = sandbox.Limits{} }), spec("out"))
	sandboxtest.BenchOutput(b, env)
}
