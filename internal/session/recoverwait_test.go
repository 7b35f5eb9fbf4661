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

// reattachHarness starts and stops the managers of these tests: each on
// the same store and data folder, as a server restarted on one machine.
type reattachHarness struct {
	t       *testing.T
	st      *memstore.Store
	dataDir string
}

func newReattachHarness(t *testing.T) *reattachHarness {
	return &reattachHarness{t: t, st: memstore.New(), dataDir: t.TempDir()}
}

// start starts a manager named holder over sb; with noSweep it never takes
// sessions over by itself once their lease expires.
func (h *reattachHarness) start(sb sandbox.Provider, holder string, ttl time.Duration, noSweep bool) (*session.Manager, *eventlog.Log) {
	h.t.Helper()
	lg := eventlog.New(h.st, eventlog.Options{})
	archs := agent.NewRegistry()
	archs.Register(shell.Architecture{})
	cfg := session.Config{Store: h.st, Log: lg, Sandbox: sb, Architectures: archs,
		DataDir: h.dataDir, Holder: holder, LeaseTTL: ttl, InterruptGrace: 2 * time.Second}
	if noSweep {
		cfg = session.WithoutSweep(cfg)
	}
	m, err := session.New(cfg)
	if err != nil {
		h.t.Fatal(err)
	}
	if err := m.Start(context.Background()); err != nil {
		h.t.Fatal(err)
	}
	return m, lg
}

func (h *reattachHarness) stop(m *session.Manager, lg *eventlog.Log) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	m.Close(ctx)
	lg.Close()
}

// firstTurn creates a shell session on m, runs one turn to its end and
// returns the session's id.
func (h *reattachHarness) firstTurn(m *session.Manager, lg *eventlog.Log) string {
	h.t.Helper()
	ctx := context.Background()
	rec, err := m.Create(ctx, session.CreateRequest{Architecture: "shell"}, "alice")
	if err != nil {
		h.t.Fatal(err)
	}
	sub, err := lg.Subscribe(ctx, rec.ID, 0)
	if err != nil {
		h.t.Fatal(err)
	}
	defer sub.Close()
	s, _ := m.Get(rec.ID)
	if _, err := s.Send(ctx, "echo first", "alice"); err != nil {
		h.t.Fatal(err)
	}
	until(h.t, sub, conversation.TypeQueryCompleted, 1)
	return rec.ID
}

// sendAcrossReattach sends a message to session id on m while g's
// re-attach hangs (started before the send, or by it), and checks that
// the message is answered only once the gate opens, with a turn whose
// output reaches the log.
func (h *reattachHarness) sendAcrossReattach(m *session.Manager, lg *eventlog.Log, g *gatedRecoverer, id string) {
	t := h.t
	t.Helper()
	ctx := context.Background()
	s, err := m.Get(id)
	if err != nil {
		t.Fatal(err)
	}
	type result struct {
		qid string
		err error
	}
	sent := make(chan result, 1)
	go func() {
		qid, err := s.Send(ctx, "echo second", "alice")
		sent <- result{qid, err}
	}()
	select {
	case <-g.called:
	case r := <-sent:
		t.Fatalf("the message was answered before the environment was re-attached: %q, %v", r.qid, r.err)
	case <-time.After(20 * time.Second):
		t.Fatal("nothing re-attached the session's environment")
	}
	// The send waits for the re-attach (its answer must not come first).
	select {
	case r := <-sent:
		t.Fatalf("the message was answered while the environment was being re-attached: %q, %v", r.qid, r.err)
	case <-time.After(300 * time.Millisecond):
	}
	close(g.gate)
	var r result
	select {
	case r = <-sent:
	case <-time.After(20 * time.Second):
		t.Fatal("the message was not answered after the re-attach")
	}
	if r.err != nil || r.qid == "" {
		t.Fatalf("a message sent across the re-attach: %q, %v; want a turn", r.qid, r.err)
	}
	sub, err := lg.Subscribe(ctx, id, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	evs := until(t, sub, conversation.TypeQueryCompleted, 2)
	var out string
	for _, ev := range evs {
		out += string(ev.Payload)
	}
	if !strings.Contains(out, "second") {
		t.Fatalf("the second turn's output is not in the log: %s", out)
	}
}

func newGatedRecoverer() *gatedRecoverer {
	return &gatedRecoverer{Provider: local.New(local.Options{}), gate: make(chan struct{}), called: make(chan struct{})}
}

// TestMessageDuringReattachWaits: a message sent to a restarted server
// while it re-attaches the session's environment waits for the re-attach
// and starts its turn, instead of failing UNAVAILABLE (a single server is
// never "being taken over").
func TestMessageDuringReattachWaits(t *testing.T) {
	h := newReattachHarness(t)
	// First server: a turn runs and ends; the environment stays up and is
	// left running when the server stops (a Recoverer's).
	g1 := newGatedRecoverer()
	defer g1.terminateAll() // left running by the first server
	m1, lg1 := h.start(g1, "node-1", 0, false)
	id := h.firstTurn(m1, lg1)
	h.stop(m1, lg1)

	// Second server: the re-attach starts with it and hangs until the
	// gate opens.
	g2 := newGatedRecoverer()
	defer g2.terminateAll() // after the second server stops, leaving it running
	m2, lg2 := h.start(g2, "node-1", 0, false)
	defer h.stop(m2, lg2)
	select {
	case <-g2.called:
	case <-time.After(20 * time.Second):
		t.Fatal("the restarted server did not re-attach the session's environment")
	}
	h.sendAcrossReattach(m2, lg2, g2, id)
}

// TestMessageThatTakesOverWaits: the first message to a session whose
// lease a stopped server still held (so start-up recovery left it alone)
// takes the session over itself; when that starts a re-attach, the
// message waits for it and runs its turn instead of failing UNAVAILABLE
// "being taken over" (chaos seed 1795662007466969677 found it).
func TestMessageThatTakesOverWaits(t *testing.T) {
	h := newReattachHarness(t)
	const ttl = time.Second
	g1 := newGatedRecoverer()
	defer g1.terminateAll()
	// No take-over sweep on either server: it would take the session
	// over as soon as the lease expires, before the message can.
	m1, lg1 := h.start(g1, "node-1", ttl, true)
	id := h.firstTurn(m1, lg1)
	h.stop(m1, lg1)
	// node-1 stopped without handing the lease over (as when it is
	// killed): it still holds it for a ttl.
	if _, err := h.st.AcquireLease(context.Background(), id, "node-1", ttl); err != nil {
		t.Fatal(err)
	}

	g2 := newGatedRecoverer()
	defer g2.terminateAll()
	m2, lg2 := h.start(g2, "node-2", ttl, true)
	defer h.stop(m2, lg2)
	// Wait out node-1's lease; nothing may have re-attached meanwhile, so
	// that the message is what takes the session over.
	time.Sleep(ttl + 200*time.Millisecond)
	select {
	case <-g2.called:
		t.Fatal("the session was re-attached before any message: the test would not cover the take-over by a message")
	default:
	}
	h.sendAcrossReattach(m2, lg2, g2, id)
}
