package session_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/agentd/agentd/agent"
	"github.com/agentd/agentd/conversation"
	"github.com/agentd/agentd/internal/eventlog"
	"github.com/agentd/agentd/internal/sandbox/local"
	"github.com/agentd/agentd/internal/session"
	"github.com/agentd/agentd/profile"
	"github.com/agentd/agentd/store/memstore"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// permArch asks for permission to run the tool named by the message and
// reports the decision as an assistant_text block.
type permArch struct{}

func (permArch) Name() string { return "perm" }
func (permArch) Start(ctx context.Context, h agent.Host) (agent.Runner, error) {
	return &permRunner{h: h}, nil
}

type permRunner struct{ h agent.Host }

func (r *permRunner) Turn(ctx context.Context, t agent.Turn) (agent.TurnResult, error) {
	d, err := r.h.RequestPermission(ctx, agent.PermissionRequest{ToolName: t.Content, Input: json.RawMessage(`{"command":"git status"}`)})
	if err != nil {
		return agent.TurnResult{}, err
	}
	text := string(d.Behavior) + ":" + string(d.By) + ":" + d.Message
	return agent.TurnResult{Result: text}, r.h.Emit(ctx, conversation.Upsert(conversation.Block{ID: t.QueryID + "-a", Type: conversation.BlockAssistantText, Content: text}))
}
func (r *permRunner) Interrupt(context.Context) error { return nil }
func (r *permRunner) Close(context.Context) error     { return nil }

type fixture struct {
	m   *session.Manager
	log *eventlog.Log
}

func newFixture(t *testing.T, cfg session.Config) *fixture {
	t.Helper()
	st := memstore.New()
	cfg.Store = st
	if cfg.Profiles == nil {
		cfg.Profiles = session.NewProfiles(st, []profile.Profile{{ID: "gitok", Name: "g", AllowedTools: []string{"Bash(git:*)"}, DisallowedTools: []string{"WebFetch"}}})
	}
	m, lg := startManager(t, cfg, permArch{})
	return &fixture{m: m, log: lg}
}

// startManager makes the manager of cfg with archs registered, starts it,
// and closes it, then its log, when the test ends. cfg.Store is required;
// a nil Log is opened on the store, a nil Sandbox is a local one, an empty
// DataDir a temporary one. The log is closed with the manager even when
// the caller opened it.
func startManager(t *testing.T, cfg session.Config, archs ...agent.Architecture) (*session.Manager, *eventlog.Log) {
	t.Helper()
	if cfg.Log == nil {
		cfg.Log = eventlog.New(cfg.Store, eventlog.Options{})
	}
	lg := cfg.Log
	reg := agent.NewRegistry()
	for _, a := range archs {
		reg.Register(a)
	}
	cfg.Architectures = reg
	if cfg.Sandbox == nil {
		cfg.Sandbox = local.New(local.Options{})
	}
	if cfg.DataDir == "" {
		cfg.DataDir = t.TempDir()
	}
	m, err := session.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		m.Close(ctx)
		lg.Close()
	})
	return m, lg
}

// next waits for the next event of a type.
func next(t *testing.T, sub *eventlog.Subscription, typ conversation.EventType) conversation.Event {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for {
		r, err := sub.Next(ctx)
		if err != nil {
			t.Fatalf("waiting for %s: %v", typ, err)
		}
		if r.Event.Type == typ {
			return r.Event
		}
	}
}

func (f *fixture) start(t *testing.T, profileID, tool string) (*session.Session, *eventlog.Subscription) {
	t.Helper()
	ctx := context.Background()
	rec, err := f.m.Create(ctx, session.CreateRequest{Architecture: "perm", AgentProfileRef: profileID}, "alice")
	if err != nil {
		t.Fatal(err)
	}
	s, _ := f.m.Get(rec.ID)
	sub, _ := f.log.Subscribe(ctx, rec.ID, 0)
	t.Cleanup(sub.Close)
	if _, err := s.Send(ctx, tool, "alice"); err != nil {
		t.Fatal(err)
	}
	return s, sub
}

func result(t *testing.T, sub *eventlog.Subscription) string {
	t.Helper()
	e := next(t, sub, conversation.TypeQueryCompleted)
	var p conversation.QueryCompleted
	json.Unmarshal(e.Payload, &p)
	return p.Result
}

func TestPermissionAnsweredByClient(t *testing.T) {
	f := newFixture(t, session.Config{})
	s, sub := f.start(t, "", "Bash")
	req := next(t, sub, conversation.TypePermissionRequest)
	var p conversation.PermissionRequested
	json.Unmarshal(req.Payload, &p)
	if p.ToolName != "Bash" || p.ExpiresAt.Before(time.Now().Add(4*time.Minute)) {
		t.Fatalf("request %+v", p)
	}
	ctx := context.Background()
	if err := s.Answer(ctx, p.RequestID, agent.PermissionDecision{Behavior: conversation.Deny, Message: "no"}, "bob"); err != nil {
		t.Fatal(err)
	}
	res := next(t, sub, conversation.TypePermissionResolved)
	if *res.Context.Actor != "bob" {
		t.Fatalf("resolution actor %v", *res.Context.Actor)
	}
	if got := result(t, sub); got != "deny:user:no" {
		t.Fatalf("runner saw %q", got)
	}
	if err := s.Answer(ctx, p.RequestID, agent.PermissionDecision{Behavior: conversation.Allow}, "bob"); !errors.Is(err, session.ErrPermissionResolved) {
		t.Fatalf("late answer: %v", err)
	}
	if err := s.Answer(ctx, "perm-unknown", agent.PermissionDecision{Behavior: conversation.Allow}, "bob"); !errors.Is(err, session.ErrPermissionNotFound) {
		t.Fatalf("unknown request: %v", err)
	}
}

func TestPermissionTimeoutDenies(t *testing.T) {
	f := newFixture(t, session.Config{PermissionTimeout: 150 * time.Millisecond})
	s, sub := f.start(t, "", "Write")
	req := next(t, sub, conversation.TypePermissionRequest)
	res := next(t, sub, conversation.TypePermissionResolved)
	var p conversation.PermissionResolved
	json.Unmarshal(res.Payload, &p)
	if p.By != conversation.ByTimeout || p.Behavior != conversation.Deny {
		t.Fatalf("resolution %+v", p)
	}
	if got := result(t, sub); got[:12] != "deny:timeout" {
		t.Fatalf("runner saw %q", got)
	}
	var rq conversation.PermissionRequested
	json.Unmarshal(req.Payload, &rq)
	if err := s.Answer(context.Background(), rq.RequestID, agent.PermissionDecision{Behavior: conversation.Allow}, "x"); !errors.Is(err, session.ErrPermissionResolved) {
		t.Fatalf("answer after timeout: %v", err)
	}
}

func TestPermissionPolicyFromProfile(t *testing.T) {
	f := newFixture(t, session.Config{})
	_, sub := f.start(t, "gitok", "Bash")
	if got := result(t, sub); got != "allow:policy:" {
		t.Fatalf("allowed tool: %q", got)
	}
	_, sub = f.start(t, "gitok", "WebFetch")
	if got := result(t, sub); got != "deny:policy:WebFetch is not allowed by the agent profile" {
		t.Fatalf("disallowed tool: %q", got)
	}
}

func TestInterruptWhileWaitingForPermission(t *testing.T) {
	f := newFixture(t, session.Config{InterruptGrace: 100 * time.Millisecond})
	s, sub := f.start(t, "", "Bash")
	next(t, sub, conversation.TypePermissionRequest)
	if err := s.Interrupt(context.Background(), "alice"); err != nil {
		t.Fatal(err)
	}
	res := next(t, sub, conversation.TypePermissionResolved)
	var p conversation.PermissionResolved
	json.Unmarshal(res.Payload, &p)
	if p.By != conversation.ByInterrupt {
		t.Fatalf("resolution %+v", p)
	}
	end := next(t, sub, conversation.TypeQueryCompleted)
	var q conversation.QueryCompleted
	json.Unmarshal(end.Payload, &q)
	if !q.Interrupted {
		t.Fatalf("turn end %s", end.Payload)
	}
	if err := s.Interrupt(context.Background(), "alice"); !errors.Is(err, session.ErrNoActiveTurn) {
		t.Fatalf("second interrupt: %v", err)
	}
}

func TestUnknownArchitectureAndProfile(t *testing.T) {
	f := newFixture(t, session.Config{})
	ctx := context.Background()
	if _, err := f.m.Create(ctx, session.CreateRequest{Architecture: "nope"}, "a"); !errors.Is(err, session.ErrUnknownArchitecture) {
		t.Fatal(err)
	}
	if _, err := f.m.Create(ctx, session.CreateRequest{Architecture: "perm", AgentProfileRef: "ghost"}, "a"); !errors.Is(err, session.ErrProfileNotFound) {
		t.Fatal(err)
	}
	if _, err := f.m.Get("missing"); !errors.Is(err, session.ErrNotFound) {
		t.Fatal(err)
	}
}

func TestWatchSessions(t *testing.T) {
	f := newFixture(t, session.Config{})
	ctx, cancel := context.WithCancel(context.Background())
	w := f.m.WatchSessions(ctx)
	rec, _ := f.m.Create(context.Background(), session.CreateRequest{Architecture: "perm"}, "a")
	select {
	case s := <-w:
		if s.SessionID != rec.ID || s.Status != conversation.SessionCreated {
			t.Fatalf("summary %+v", s)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no notification")
	}
	cancel()
	for range w {
	}
}
