package shell_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/agentd/agentd/agent"
	"github.com/agentd/agentd/agent/agenttest"
	"github.com/agentd/agentd/conversation"
	"github.com/agentd/agentd/internal/agent/shell"
	"github.com/agentd/agentd/internal/sandbox/local"
	"github.com/agentd/agentd/sandbox"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// failingHost's Emit fails for output once armed: an event log whose store
// is full.
type failingHost struct {
	*agenttest.FakeHost
}

var errFull = errors.New("database or disk is full")

func (h failingHost) Emit(ctx context.Context, evs ...conversation.Event) error {
	for _, ev := range evs {
		if ev.Type == conversation.TypeBlockDelta {
			return errFull
		}
	}
	return h.FakeHost.Emit(ctx, evs...)
}

// TestTurnEndsWhenOutputCannotBeRecorded: when the command's output cannot
// be recorded the turn fails with that error, the command is stopped, and
// the turn does not hang waiting for output nobody reads (the chaos test
// found turns "running" forever after a disk-full, seed 1795632774364686802).
func TestTurnEndsWhenOutputCannotBeRecorded(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	env, err := local.New(local.Options{}).Create(ctx, sandbox.Spec{SessionID: "s", Workspace: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer env.Terminate(context.Background())
	h := failingHost{&agenttest.FakeHost{Environment: env}}
	r, err := shell.Architecture{}.Start(ctx, h)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := r.Turn(ctx, agent.Turn{QueryID: "q1", Content: "while :; do echo line; done"})
		done <- err
	}()
	select {
	case err := <-done:
		if !errors.Is(err, errFull) {
			t.Fatalf("turn: %v, want %v", err, errFull)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the turn still runs 20 s after its output could not be recorded")
	}
}

func TestConformance(t *testing.T) {
	agenttest.Run(t, agenttest.Suite{Architecture: shell.Architecture{}, Prompt: "echo hello", Slow: "echo started; exec sleep 60"})
}
