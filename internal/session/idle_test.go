package session_test

import (
	"context"
	"encoding/json"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentd/agentd/agent"
	"github.com/agentd/agentd/conversation"
	"github.com/agentd/agentd/internal/eventlog"
	"github.com/agentd/agentd/internal/session"
	"github.com/agentd/agentd/store/memstore"
)

// idleArch's turns end at once, except "hold", which waits for release.
type idleArch struct {
	release chan struct{}
	starts  *atomic.Int32 // runners started (one per environment)
}

func (idleArch) Name() string { return "idle" }
func (a idleArch) Start(context.Context, agent.Host) (agent.Runner, error) {
	a.starts.Add(1)
	return idleRunner(a), nil
}

type idleRunner idleArch

func (r idleRunner) Turn(ctx context.Context, t agent.Turn) (agent.TurnResult, error) {
	if t.Content == "hold" {
		select {
		case <-r.release:
		case <-ctx.Done():
			return agent.TurnResult{}, ctx.Err()
		}
	}
	return agent.TurnResult{Result: t.Content}, nil
}
func (idleRunner) Interrupt(context.Context) error { return nil }
func (idleRunner) Close(context.Context) error     { return nil }

// nextStatus waits for the next status change and returns it.
func nextStatus(t *testing.T, sub *eventlog.Subscription) conversation.StatusChange {
	t.Helper()
	var p conversation.StatusChange
	if err := json.Unmarshal(next(t, sub, conversation.TypeStatus).Payload, &p); err != nil {
		t.Fatal(err)
	}
	return p
}

// An environment idle for IdleTimeout after a turn is terminated (reason
// "idle timeout"); the next message starts a new one. A turn that runs
// longer than the timeout is not cut short: the clock runs only while no
// turn does.
func TestIdleTimeoutTerminatesAnIdleEnvironmentOnly(t *testing.T) {
	const idle = 30 * time.Millisecond
	arch := idleArch{release: make(chan struct{}), starts: new(atomic.Int32)}
	m, lg := startManager(t, session.Config{Store: memstore.New(), IdleTimeout: idle}, arch)
	ctx := context.Background()
	rec, err := m.Create(ctx, session.CreateRequest{Architecture: "idle"}, "alice")
	if err != nil {
		t.Fatal(err)
	}
	s, _ := m.Get(rec.ID)
	sub, err := lg.Subscribe(ctx, rec.ID, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()

	// A turn far longer than the timeout ends normally.
	if _, err := s.Send(ctx, "hold", "alice"); err != nil {
		t.Fatal(err)
	}
	next(t, sub, conversation.TypeQueryStarted)
	time.Sleep(10 * idle) // the time that must pass; the outcome is checked below
	close(arch.release)
	if got := result(t, sub); got != "hold" {
		t.Fatalf("the long turn ended with %q", got)
	}
	// Then idle: the environment goes after the timeout.
	for {
		st := nextStatus(t, sub)
		if st.Status == conversation.SessionTerminated {
			if st.Reason != "idle timeout" {
				t.Fatalf("terminated for %q, want idle timeout", st.Reason)
			}
			break
		}
		if st.Status != conversation.SessionIdle {
			t.Fatalf("status %s (%q) before the idle timeout", st.Status, st.Reason)
		}
	}
	if n := arch.starts.Load(); n != 1 {
		t.Fatalf("%d runners started before the timeout, want 1", n)
	}
	// The next message starts a new environment and runner.
	if _, err := s.Send(ctx, "again", "alice"); err != nil {
		t.Fatal(err)
	}
	if got := result(t, sub); got != "again" {
		t.Fatalf("the turn after the timeout ended with %q", got)
	}
	if n := arch.starts.Load(); n != 2 {
		t.Fatalf("%d runners started, want 2 (a new environment after the timeout)", n)
	}
}
