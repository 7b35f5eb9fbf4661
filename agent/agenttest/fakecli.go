package agenttest

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/agentd/agentd/agent"
	"github.com/agentd/agentd/internal/sandbox/local"
	"github.com/agentd/agentd/sandbox"
)

// The runner tests play the agent's CLI with the test binary itself: the
// environment carries key=scenario, and the package's TestMain, seeing the
// key, plays that scenario instead of running the tests.

// FakeEnv creates a local environment for the test whose processes see
// key=scenario, makes it h's environment (terminated when the test ends),
// and returns the test binary's path: the command that plays the CLI.
func FakeEnv(t testing.TB, h *FakeHost, key, scenario string) string {
	t.Helper()
	bin, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	newEnv(t, h, map[string]string{key: scenario})
	return bin
}

// LocalEnv creates a plain local environment for the test (terminated when
// it ends) and makes it h's environment.
func LocalEnv(t testing.TB, h *FakeHost) {
	t.Helper()
	newEnv(t, h, nil)
}

func newEnv(t testing.TB, h *FakeHost, vars map[string]string) {
	t.Helper()
	env, err := local.New(local.Options{}).Create(context.Background(), sandbox.Spec{
		SessionID: "s", Workspace: t.TempDir(), Env: vars})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Terminate(context.Background()) })
	h.Environment = env
}

// Start starts a runner of arch for h, failing the test on an error, and
// returns it as R (the architecture's own runner type, or agent.Runner).
func Start[R agent.Runner](t testing.TB, arch agent.Architecture, h *FakeHost) R {
	t.Helper()
	run, err := arch.Start(context.Background(), h)
	if err != nil {
		t.Fatal(err)
	}
	r, ok := run.(R)
	if !ok {
		t.Fatalf("runner %T, want %T", run, r)
	}
	return r
}

// TurnCtx is the context of one turn in a runner test: 30 seconds at most.
func TurnCtx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// CloseAtEnd closes r when the test ends (10 seconds at most); an error
// fails the test.
func CloseAtEnd(t testing.TB, r agent.Runner) {
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := r.Close(ctx); err != nil {
			t.Errorf("close: %v", err)
		}
	})
}

// BenchTurns runs b.N turns of run, forgetting h's events after each; with
// warmUp a first, untimed turn starts the agent's process.
func BenchTurns(b *testing.B, run agent.Runner, h *FakeHost, warmUp bool) {
	b.Helper()
	ctx := context.Background()
	if warmUp {
		if _, err := run.Turn(ctx, agent.Turn{QueryID: "q0", Content: "warm up"}); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := run.Turn(ctx, agent.Turn{QueryID: fmt.Sprintf("q%d", i+1), Content: "hello"}); err != nil {
			b.Fatal(err)
		}
		h.ResetEvents()
	}
}
