package docker_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/agentd/agentd/internal/sandbox/docker"
	"github.com/agentd/agentd/internal/sandbox/sandboxtest"
	"github.com/agentd/agentd/sandbox"
)

// BenchmarkCreateCold: Create → ready (container started, its executor
// answered ping, the session's environment bound), no warm pool.
// Target: p50 < 1 s.
func BenchmarkCreateCold(b *testing.B) {
	f := newFixture(b)
	sandboxtest.BenchCreateEach(b, f.provider(nil), f.benchSpec, nil)
}

// BenchmarkCreateWarm: the same, claimed from a warm pool that had time
// to refill (untimed) before each Create. Target: p50 < 100 ms.
func BenchmarkCreateWarm(b *testing.B) {
	f := newFixture(b)
	sandboxtest.BenchCreateWarm(b, f.provider(func(o *docker.Options) { o.WarmPool = 1 }), f.benchSpec)
}

// benchSpec is the i-th benchmarked session's: a workspace of its own.
func (f *fixture) benchSpec(i int) sandbox.Spec { return f.spec(fmt.Sprintf("b%d", i)) }

// BenchmarkExecTrue: Exec of `true` → output closed → Wait, through the
// container's executor.
func BenchmarkExecTrue(b *testing.B) {
	f := newFixture(b)
	env := sandboxtest.Create(b, f.provider(nil), f.spec("exec"))
	sandboxtest.BenchExecTrue(b, env, time.Microsecond, "µs")
}

// BenchmarkOutput: `head -c 500M /dev/zero` in the container, the
// consumer draining Output.
func BenchmarkOutput(b *testing.B) {
	f := newFixture(b)
	env := sandboxtest.Create(b, f.provider(func(o *docker.Options) { o.Limits = sandbox.Limits{} }), f.spec("out"))
	sandboxtest.BenchOutput(b, env)
}
