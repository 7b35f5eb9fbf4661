package session_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/agentd/agentd/agent"
	"github.com/agentd/agentd/conversation"
	"github.com/agentd/agentd/internal/bus"
	"github.com/agentd/agentd/internal/bus/natstest"
	"github.com/agentd/agentd/internal/eventlog"
	"github.com/agentd/agentd/internal/session"
	"github.com/agentd/agentd/store"
	"github.com/agentd/agentd/store/memstore"
)

// busCluster is the bus as a session.Cluster (as agentd wires it).
type busCluster struct{ *bus.Bus }

func (c busCluster) Request(ctx context.Context, id string, req []byte) ([]byte, error) {
	rep, err := c.Bus.Request(ctx, id, req)
	if errors.Is(err, bus.ErrNoResponder) {
		return nil, fmt.Errorf("%w: %v", session.ErrNoHolder, err)
	}
	return rep, err
}

// fleetNode is a session manager of a fleet: a shared store, a bus to a
// real NATS server.
type fleetNode struct {
	m   *session.Manager
	log *eventlog.Log
}

func newFleetNode(t *testing.T, st store.Store, url, prefix, holder string) *fleetNode {
	t.Helper()
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	b, err := bus.Open(context.Background(), bus.Options{URL: url, Prefix: prefix, Name: holder, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close) // after the manager and the log
	m, lg := startManager(t, session.Config{
		Store: st, Log: eventlog.New(st, eventlog.Options{Peers: b}),
		Holder: holder, LeaseTTL: 2 * time.Second, Cluster: busCluster{b}, Logger: quiet, InterruptGrace: 100 * time.Millisecond,
	}, permArch{})
	return &fleetNode{m: m, log: lg}
}

// A permission request of a turn running on A is answered through B: the
// answer is forwarded to A and acts there; the errors B answers are A's
// (an unknown request, one already resolved). Session watchers on B hear
// of the session A created.
func TestClusterForwardsPermissionAnswers(t *testing.T) {
	url := natstest.URL(t)
	prefix := natstest.Prefix(t)
	st := memstore.New()
	a := newFleetNode(t, st, url, prefix, "A")
	b := newFleetNode(t, st, url, prefix, "B")
	ctx := context.Background()
	wctx, wcancel := context.WithCancel(ctx)
	defer wcancel()
	watched := b.m.WatchSessions(wctx)

	rec, err := a.m.Create(ctx, session.CreateRequest{Architecture: "perm"}, "alice")
	if err != nil {
		t.Fatal(err)
	}
	select {
	case sum := <-watched:
		if sum.SessionID != rec.ID {
			t.Fatalf("B's watcher heard of %+v", sum)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("B's watcher did not hear of the session A created")
	}
	// B knows the session from the store.
	sb, err := b.m.Get(rec.ID)
	if err != nil {
		t.Fatal(err)
	}
	sub, err := b.log.Subscribe(ctx, rec.ID, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	sa, _ := a.m.Get(rec.ID)
	if _, err := sa.Send(ctx, "Bash", "alice"); err != nil {
		t.Fatal(err)
	}
	req := next(t, sub, conversation.TypePermissionRequest)
	var p conversation.PermissionRequested
	if err := json.Unmarshal(req.Payload, &p); err != nil {
		t.Fatal(err)
	}
	if err := sb.Answer(ctx, "perm-nope", agent.PermissionDecision{Behavior: conversation.Allow}, "bob"); !errors.Is(err, session.ErrPermissionNotFound) {
		t.Fatalf("answer of an unknown request through B = %v, want ErrPermissionNotFound", err)
	}
	if err := sb.Answer(ctx, p.RequestID, agent.PermissionDecision{Behavior: conversation.Allow, Message: "ok"}, "bob"); err != nil {
		t.Fatal(err)
	}
	if got := result(t, sub); got != "allow:user:ok" {
		t.Fatalf("the turn saw %q", got)
	}
	if err := sb.Answer(ctx, p.RequestID, agent.PermissionDecision{Behavior: conversation.Deny}, "bob"); !errors.Is(err, session.ErrPermissionResolved) {
		t.Fatalf("a second answer through B = %v, want ErrPermissionResolved", err)
	}
	// A busy turn start is answered busy through B too.
	if _, err := sa.Send(ctx, "Bash", "alice"); err != nil {
		t.Fatal(err)
	}
	next(t, sub, conversation.TypePermissionRequest)
	if _, err := sb.Send(ctx, "again", "bob"); !errors.Is(err, session.ErrBusy) {
		t.Fatalf("a message through B while A runs a turn = %v, want ErrBusy", err)
	}
	if err := sb.Interrupt(ctx, "bob"); err != nil {
		t.Fatal(err)
	}
	next(t, sub, conversation.TypeQueryCompleted)
}
