package bwrap

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/agentd/agentd/internal/sandbox/sandboxtest"
	"github.com/agentd/agentd/sandbox"
)

func benchCreate(b *testing.B, mod func(*Options)) {
	p, dir := newProvider(b, mod)
	b.Logf("limits: %s", p.LimitsEnforcement())
	sandboxtest.BenchCreate(b, p, sandbox.Spec{SessionID: "bench", Workspace: filepath.Join(dir, "ws")})
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
	env := sandboxtest.Create(b, p, sandbox.Spec{SessionID: "bench", Workspace: filepath.Join(dir, "ws")})
	sandboxtest.BenchExecTrue(b, env, time.Millisecond, "ms")
}
