package sandboxtest

import (
	"context"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/agentd/agentd/sandbox"
)

// ReportPercentiles adds p50 and p99 of ds, in unit, to the benchmark's
// output as p50-<name> and p99-<name>. It sorts ds.
func ReportPercentiles(b *testing.B, ds []time.Duration, unit time.Duration, name string) {
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

// BenchCreate measures Create → ready with spec (Terminate untimed) and
// reports the percentiles in ms.
func BenchCreate(b *testing.B, p sandbox.Provider, spec sandbox.Spec) {
	BenchCreateEach(b, p, func(int) sandbox.Spec { return spec }, nil)
}

// BenchCreateWarm is BenchCreateEach claiming from p's warm pool (of one,
// filled by Collect), which has time to refill (untimed) before each
// Create; a Create that misses the pool fails the benchmark.
func BenchCreateWarm(b *testing.B, p ContainerProvider, spec func(i int) sandbox.Spec) {
	if err := p.Collect(context.Background(), nil); err != nil {
		b.Fatal(err)
	}
	BenchCreateEach(b, p, spec, func() {
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

// BenchCreateEach measures Create → ready with spec(i) for the i-th
// environment (from 1; Terminate and before, when set, untimed, before
// runs first) and reports the percentiles in ms.
func BenchCreateEach(b *testing.B, p sandbox.Provider, spec func(i int) sandbox.Spec, before func()) {
	var ds []time.Duration
	i := 0
	for b.Loop() {
		b.StopTimer()
		if before != nil {
			before()
		}
		i++
		sp := spec(i)
		b.StartTimer()
		t0 := time.Now()
		env, err := p.Create(context.Background(), sp)
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
	ReportPercentiles(b, ds, time.Millisecond, "ms")
}

// BenchExecTrue measures Exec of `true` → output closed → Wait (which also
// releases it) and reports the percentiles in unit, named name.
func BenchExecTrue(b *testing.B, env sandbox.Environment, unit time.Duration, name string) {
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
	ReportPercentiles(b, ds, unit, name)
}

// BenchOutput measures `head -c 500M /dev/zero`, the consumer draining
// Output, as bytes per second.
func BenchOutput(b *testing.B, env sandbox.Environment) {
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
