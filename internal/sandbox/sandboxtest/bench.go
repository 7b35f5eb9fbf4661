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
