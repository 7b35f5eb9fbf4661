package session_test

import (
	"context"
	"encoding/json"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentd/agentd/agent"
	"github.com/agentd/agentd/conversation"
	"github.com/agentd/agentd/internal/agent/shell"
	"github.com/agentd/agentd/internal/eventlog"
	"github.com/agentd/agentd/internal/sandbox/local"
	"github.com/agentd/agentd/internal/session"
	"github.com/agentd/agentd/sandbox"
	"github.com/agentd/agentd/store/memstore"
)

// gatedRecoverer is the local sandbox made re-attachable: its environments
// have a handle, and Recover gives a new one for the same workspace once
// gate is closed (it stands for a slow re-attach: a container's executor
// answering late).
type gatedRecoverer struct {
	sandbox.Provider
	gate      chan struct{}
	called    chan struct{} // closed when Recover starts
	closeOnce sync.Once
	mu        sync.Mutex
	envs      []sandbox.Environment // every one made, to terminate at the end
}

func (g *gatedRecoverer) terminateAll() {
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, e := range g.envs {
		_ = e.Terminate(context.Background())
	}
}

type handleEnv struct{ sandbox.Environment }

func (handleEnv) Handle() json.RawMessage { return json.RawMessage(`{"test":true}`) }

func (g *gatedRecoverer) Create(ctx context.Context, spec sandbox.Spec) (sandbox.Environment, error) {
	e, err := g.Provider.Create(ctx, spec)
	if err != nil {
		return nil, err
	}
	g.mu.Lock()
	g.envs = append(g.envs, e)
	g.mu.Unlock()
	return handleEnv{e}, nil
}

func (g *gatedRecoverer) Recover(ctx context.Context, spec sandbox.Spec, _ json.RawMessage) (sandbox.Environment, error) {
	g.closeOnce.Do(func() { close(g.called) })
	select {
	case <-g.gate:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	return g.Create(ctx, spec)
}

// TestMessageDuringReattachWaits: a message sent to a restarted server
// while it re-attaches the session's environment waits for the re-attach
// and starts its turn, instead of failing UNAVAILABLE (a single server is
// never "being taken over").
func TestMessageDuringReattachWaits(t *testing.T) {
	st := memstore.New()
	dataDir := t.TempDir()
	start := func(sb sandbox.Provider) (*session.Manager, *eventlog.Log) {
		lg := eventlog.New(st, eventlog.Options{})
		archs := agent.NewRegistry()
		archs.Register(shell.Architecture{})
		m, err := session.New(session.Config{Store: st, Log: lg, Sandbox: sb, Architectures: archs,
			DataDir: dataDir, Holder: "node-1", InterruptGrace: 2 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		if err := m.Start(context.Background()); err != nil {
			t.Fatal(err)
		}
		return m, lg
	}
	stop := func(m *session.Manager, lg *eventlog.Log) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		m.Close(ctx)
		lg.Close()
	}
	ctx := context.Background()

	// First server: a turn runs and ends; the environment stays up and is
	// left running when the server stops (a Recoverer's).
	g1 := &gatedRecoverer{Provider: local.New(local.Options{}), gate: make(chan struct{}), called: make(chan struct{})}
	m1, lg1 := start(g1)
	defer g1.terminateAll() // left running by the first server
	rec, err := m1.Create(ctx, session.CreateRequest{Architecture: "shell"}, "alice")
	if err != nil {
		t.Fatal(err)
	}
	sub, err := lg1.Subscribe(ctx, rec.ID, 0)
	if err != nil {
		t.Fatal(err)
	}
	s1, _ := m1.Get(rec.ID)
	if _, err := s1.Send(ctx, "echo first", "alice"); err != nil {
		t.Fatal(err)
	}
	until(t, sub, conversation.TypeQueryCompleted, 1)
	sub.Close()
	stop(m1, lg1)

	// Second server: the re-attach hangs until the gate opens.
	g2 := &gatedRecoverer{Provider: local.New(local.Options{}), gate: make(chan struct{}), called: make(chan struct{})}
	defer g2.terminateAll() // after the second server stops, leaving it running
	m2, lg2 := start(g2)
	defer stop(m2, lg2)
	select {
	case <-g2.called:
	case <-time.After(20 * time.Second):
		t.Fatal("the restarted server did not re-attach the session's environment")
	}
	s2, err := m2.Get(rec.ID)
	if err != nil {
		t.Fatal(err)
	}
	type result struct {
		qid string
		err error
	}
	sent := make(chan result, 1)
	go func() {
		qid, err := s2.Send(ctx, "echo second", "alice")
		sent <- result{qid, err}
	}()
	// The send waits for the re-attach (its answer must not come first).
	select {
	case r := <-sent:
		t.Fatalf("the message was answered while the environment was being re-attached: %q, %v", r.qid, r.err)
	case <-time.After(300 * time.Millisecond):
	}
	close(g2.gate)
	var r result
	select {
	case r = <-sent:
	case <-time.After(20 * time.Second):
		t.Fatal("the message was not answered after the re-attach")
	}
	if r.err != nil || r.qid == "" {
		t.Fatalf("a message sent during the re-attach: %q, %v; want a turn", r.qid, r.err)
	}
	sub2, err := lg2.Subscribe(ctx, rec.ID, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer sub2.Close()
	evs := until(t, sub2, conversation.TypeQueryCompleted, 2)
	var out string
	for _, ev := range evs {
		out += string(ev.Payload)
	}
	if !strings.Contains(out, "second") {
		t.Fatalf("the second turn's output is not in the log: %s", out)
	}
}

// TestMessageThatTakesOverWaits: the first message to a session whose
// lease a stopped server still held (so start-up recovery left it alone)
// takes the session over itself; when that starts a re-attach, the
// message waits for it and runs its turn instead of failing UNAVAILABLE
// "being taken over" (chaos seed 1795662007466969677 found it).
func TestMessageThatTakesOverWaits(t *testing.T) {
	st := memstore.New()
	dataDir := t.TempDir()
	const ttl = time.Second
	// No take-over sweep: it would take the session over as soon as the
	// lease expires, before the message can.
	start := func(sb sandbox.Provider, holder string) (*session.Manager, *eventlog.Log) {
		lg := eventlog.New(st, eventlog.Options{})
		archs := agent.NewRegistry()
		archs.Register(shell.Architecture{})
		m, err := session.New(session.WithoutSweep(session.Config{Store: st, Log: lg, Sandbox: sb, Architectures: archs,
			DataDir: dataDir, Holder: holder, LeaseTTL: ttl, InterruptGrace: 2 * time.Second}))
		if err != nil {
			t.Fatal(err)
		}
		if err := m.Start(context.Background()); err != nil {
			t.Fatal(err)
		}
		return m, lg
	}
	stop := func(m *session.Manager, lg *eventlog.Log) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		m.Close(ctx)
		lg.Close()
	}
	ctx := context.Background()

	g1 := &gatedRecoverer{Provider: local.New(local.Options{}), gate: make(chan struct{}), called: make(chan struct{})}
	defer g1.terminateAll()
	m1, lg1 := start(g1, "node-1")
	rec, err := m1.Create(ctx, session.CreateRequest{Architecture: "shell"}, "alice")
	if err != nil {
		t.Fatal(err)
	}
	sub, err := lg1.Subscribe(ctx, rec.ID, 0)
	if err != nil {
		t.Fatal(err)
	}
	s1, _ := m1.Get(rec.ID)
	if _, err := s1.Send(ctx, "echo first", "alice"); err != nil {
		t.Fatal(err)
	}
	until(t, sub, conversation.TypeQueryCompleted, 1)
	sub.Close()
	stop(m1, lg1)
	// node-1 stopped without handing the lease over (as when it is
	// killed): it still holds it for a ttl.
	if _, err := st.AcquireLease(ctx, rec.ID, "node-1", ttl); err != nil {
		t.Fatal(err)
	}

	g2 := &gatedRecoverer{Provider: local.New(local.Options{}), gate: make(chan struct{}), called: make(chan struct{})}
	defer g2.terminateAll()
	m2, lg2 := start(g2, "node-2")
	defer stop(m2, lg2)
	// Wait out node-1's lease; nothing may have re-attached meanwhile, so
	// that the message is what takes the session over.
	time.Sleep(ttl + 200*time.Millisecond)
	select {
	case <-g2.called:
		t.Fatal("the session was re-attached before any message: the test would not cover the take-over by a message")
	default:
	}
	s2, err := m2.Get(rec.ID)
	if err != nil {
		t.Fatal(err)
	}
	type result struct {
		qid string
		err error
	}
	sent := make(chan result, 1)
	go func() {
		qid, err := s2.Send(ctx, "echo second", "alice")
		sent <- result{qid, err}
	}()
	select {
	case <-g2.called:
	case r := <-sent:
		t.Fatalf("the message was answered before the re-attach was done: %q, %v", r.qid, r.err)
	case <-time.After(20 * time.Second):
		t.Fatal("the message did not take the session over")
	}
	select {
	case r := <-sent:
		t.Fatalf("the message was answered while the environment was being re-attached: %q, %v", r.qid, r.err)
	case <-time.After(300 * time.Millisecond):
	}
	close(g2.gate)
	var r result
	select {
	case r = <-sent:
	case <-time.After(20 * time.Second):
		t.Fatal("the message was not answered after the re-attach")
	}
	if r.err != nil || r.qid == "" {
		t.Fatalf("a message that took the session over: %q, %v; want a turn", r.qid, r.err)
	}
	sub2, err := lg2.Subscribe(ctx, rec.ID, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer sub2.Close()
	evs := until(t, sub2, conversation.TypeQueryCompleted, 2)
	var out string
	for _, ev := range evs {
		out += string(ev.Payload)
	}
	if !strings.Contains(out, "second") {
		t.Fatalf("the second turn's output is not in the log: %s", out)
	}
}
