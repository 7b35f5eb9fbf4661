package agenttest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/agentd/agentd/agent"
	"github.com/agentd/agentd/conversation"
	"github.com/agentd/agentd/sandbox"
)

// Suite describes an architecture for Run.
type Suite struct {
	// Architecture is the architecture under test.
	Architecture agent.Architecture
	// Prompt is a message the agent answers and ends its turn on, with
	// at least one block.
	Prompt string
	// Slow, when set, is a message the agent works on until interrupted
	// (for at least Timeout), streaming some output (a block:delta) once
	// at work: the suite then checks Interrupt and cancellation, sent
	// after that first delta.
	Slow string
	// Host, when set, prepares each test's host (a profile, options, a
	// permission policy) before its environment is made.
	Host func(t testing.TB, h *FakeHost)
	// Env, when set, makes each test's environment (terminated by the
	// suite when the test ends); by default a local one on a temporary
	// folder, with nothing of this process's environment but PATH.
	Env func(t testing.TB) sandbox.Environment
	// Timeout bounds each turn and each wait (default 30s).
	Timeout time.Duration
}

// Run checks what the server relies on from an architecture, as
// sub-tests: a runner starts on a fake host, runs turns one after the
// other, each ending with its blocks settled and events the reducer
// accepts; with Slow, Interrupt ends a running turn with ErrInterrupted
// and a turn after it works; a turn whose context ends returns; Close
// returns and the runner leaves nothing running behind. The test binary
// should check for leaked goroutines (goleak) in its TestMain.
func Run(t *testing.T, s Suite) {
	if s.Architecture == nil {
		t.Fatal("agenttest: Suite.Architecture is nil")
	}
	if s.Prompt == "" {
		t.Fatal("agenttest: Suite.Prompt is empty")
	}
	if s.Timeout <= 0 {
		s.Timeout = 30 * time.Second
	}
	t.Run("Name", func(t *testing.T) {
		a, b := s.Architecture.Name(), s.Architecture.Name()
		if a == "" || a != b {
			t.Fatalf("Name() = %q then %q: want one non-empty name", a, b)
		}
	})
	t.Run("Turns", func(t *testing.T) {
		h, r := s.start(t)
		for i, q := range []string{"q1", "q2"} {
			before := len(h.Events())
			ctx, cancel := context.WithTimeout(context.Background(), s.Timeout)
			_, err := r.Turn(ctx, agent.Turn{QueryID: q, Content: s.Prompt})
			cancel()
			if err != nil {
				t.Fatalf("turn %d: %v", i+1, err)
			}
			evs := h.Events()
			if len(evs) == before {
				t.Fatalf("turn %d emitted no event", i+1)
			}
			st := CheckEvents(t, evs)
			if len(st.Blocks) == 0 {
				t.Fatalf("turn %d: no block in the conversation", i+1)
			}
			NoPending(t, st.Blocks)
		}
	})
	t.Run("Interrupt", func(t *testing.T) {
		if s.Slow == "" {
			t.Skip("no Suite.Slow message")
		}
		h, r := s.start(t)
		ctx, cancel := context.WithTimeout(context.Background(), s.Timeout)
		defer cancel()
		done := make(chan error, 1)
		go func() {
			_, err := r.Turn(ctx, agent.Turn{QueryID: "q1", Content: s.Slow})
			done <- err
		}()
		s.waitWorking(t, h)
		select {
		case err := <-done:
			t.Fatalf("the slow turn ended by itself: %v", err)
		default:
		}
		if err := r.Interrupt(ctx); err != nil {
			t.Fatalf("interrupt: %v", err)
		}
		select {
		case err := <-done:
			if !errors.Is(err, agent.ErrInterrupted) {
				t.Fatalf("interrupted turn returned %v, want agent.ErrInterrupted", err)
			}
		case <-time.After(s.Timeout):
			t.Fatalf("the turn did not return within %v of Interrupt", s.Timeout)
		}
		NoPending(t, CheckEvents(t, h.Events()).Blocks)
		tctx, tcancel := context.WithTimeout(context.Background(), s.Timeout)
		defer tcancel()
		if _, err := r.Turn(tctx, agent.Turn{QueryID: "q2", Content: s.Prompt}); err != nil {
			t.Fatalf("turn after an interrupt: %v", err)
		}
	})
	t.Run("CancelledTurn", func(t *testing.T) {
		if s.Slow == "" {
			t.Skip("no Suite.Slow message")
		}
		h, r := s.start(t)
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() {
			_, err := r.Turn(ctx, agent.Turn{QueryID: "q1", Content: s.Slow})
			done <- err
		}()
		s.waitWorking(t, h)
		cancel()
		select {
		case err := <-done:
			if err == nil {
				t.Fatal("a turn whose context ended returned no error")
			}
		case <-time.After(s.Timeout):
			t.Fatalf("the turn did not return within %v of its context's end", s.Timeout)
		}
	})
	t.Run("CloseWithoutTurn", func(t *testing.T) {
		s.start(t) // closed at the end of the test
	})
	t.Run("Emitted", func(t *testing.T) {
		h, r := s.start(t)
		ctx, cancel := context.WithTimeout(context.Background(), s.Timeout)
		defer cancel()
		if _, err := r.Turn(ctx, agent.Turn{QueryID: "q1", Content: s.Prompt}); err != nil {
			t.Fatal(err)
		}
		for i, e := range h.Events() {
			switch e.Type {
			case conversation.TypeQueryStarted, conversation.TypeQueryCompleted, conversation.TypeQueryFailed:
				// The session writes a turn's start and end, not the runner.
				t.Fatalf("event %d: the runner emitted %s", i, e.Type)
			}
		}
	})
}

// start makes a host with its environment, starts a runner on it and
// closes the runner (checking the error) when the test ends.
func (s Suite) start(t *testing.T) (*FakeHost, agent.Runner) {
	t.Helper()
	h := &FakeHost{}
	if s.Host != nil {
		s.Host(t, h)
	}
	if s.Env != nil {
		env := s.Env(t)
		t.Cleanup(func() { _ = env.Terminate(context.Background()) })
		h.Environment = env
	} else {
		LocalEnv(t, h)
	}
	ctx, cancel := context.WithTimeout(context.Background(), s.Timeout)
	defer cancel()
	r, err := s.Architecture.Start(ctx, h)
	if err != nil {
		t.Fatalf("start: %v", err)
	}
	if r == nil {
		t.Fatal("start returned no runner and no error")
	}
	CloseAtEnd(t, r)
	return h, r
}

// waitWorking waits for the slow turn's first output.
func (s Suite) waitWorking(t *testing.T, h *FakeHost) {
	t.Helper()
	WaitFor(t, s.Timeout, "the slow turn's first block:delta", func() bool {
		return len(h.Find(conversation.TypeBlockDelta)) > 0
	})
}
