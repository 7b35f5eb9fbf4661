package kubernetes_test

import (
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
	sandboxtest.BenchCreateEach(b, f.provider(nil), benchSpec, nil)
}

// BenchmarkCreateWarm: the same, claimed from a warm pool that had time
// to refill (untimed) before each Create. Target: p50 < 100 ms.
func BenchmarkCreateWarm(b *testing.B) {
	f := newFixture(b)
	sandboxtest.BenchCreateWarm(b, f.provider(func(o *kubernetes.Options) { o.WarmPool = 1 }), benchSpec)
}

// benchSpec is the i-th benchmarked session's.
func benchSpec(i int) sandbox.Spec { return spec(fmt.Sprintf("b%d", i)) }

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
