package session_test

import (
	"context"
	"encoding/json"
	"errors"
	"maps"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentd/agentd/agent"
	"github.com/agentd/agentd/conversation"
	"github.com/agentd/agentd/internal/eventlog"
	"github.com/agentd/agentd/internal/session"
	"github.com/agentd/agentd/profile"
	"github.com/agentd/agentd/sandbox"
	"github.com/agentd/agentd/store/memstore"
)

// envArch's runner answers "show" with $KEY as the sandbox sees it, and
// "block" by waiting until it is interrupted.
type envArch struct{}

func (envArch) Name() string { return "envarch" }
func (envArch) Start(ctx context.Context, h agent.Host) (agent.Runner, error) {
	return &envRunner{h: h, stop: make(chan struct{}, 1)}, nil
}

type envRunner struct {
	h    agent.Host
	stop chan struct{}
}

func (r *envRunner) Turn(ctx context.Context, t agent.Turn) (agent.TurnResult, error) {
	if t.Content == "block" {
		select {
		case <-r.stop:
			return agent.TurnResult{}, agent.ErrInterrupted
		case <-ctx.Done():
			return agent.TurnResult{}, ctx.Err()
		}
	}
	p, err := r.h.Env().Exec(ctx, sandbox.Cmd{Argv: []string{"sh", "-c", `printf %s "$KEY"`}})
	if err != nil {
		return agent.TurnResult{}, err
	}
	var out strings.Builder
	for c := range p.Output() {
		out.Write(c.Data)
	}
	_, _ = p.Wait(ctx)
	return agent.TurnResult{Result: out.String()}, nil
}
func (r *envRunner) Interrupt(context.Context) error {
	select {
	case r.stop <- struct{}{}:
	default:
	}
	return nil
}
func (r *envRunner) Close(context.Context) error { return nil }

// fakeCreds records calls; Issue replaces KEY.
type fakeCreds struct {
	mu       sync.Mutex
	issued   []map[string]string
	revoked  []string
	issueErr error
}

func (c *fakeCreds) Issue(ctx context.Context, id string, env map[string]string) (map[string]string, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.issued = append(c.issued, maps.Clone(env))
	if c.issueErr != nil {
		return nil, c.issueErr
	}
	out := maps.Clone(env)
	out["KEY"] = "token-for-" + id
	return out, nil
}

func (c *fakeCreds) Revoke(ctx context.Context, id string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.revoked = append(c.revoked, id)
	return nil
}

func (c *fakeCreds) counts() (int, []string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.issued), append([]string(nil), c.revoked...)
}

type credFixture struct {
	m     *session.Manager
	log   *eventlog.Log
	creds *fakeCreds
}

func newCredFixture(t *testing.T, sb sandbox.Provider) *credFixture {
	t.Helper()
	st := memstore.New()
	f := &credFixture{creds: &fakeCreds{}}
	f.m, f.log = startManager(t, session.Config{
		Store: st, Sandbox: sb,
		Env:         map[string]string{"KEY": "the-real-key", "SERVER": "1"},
		Profiles:    session.NewProfiles(st, []profile.Profile{{ID: "p", Name: "p", EnvironmentVariables: map[string]string{"PROFILE": "2"}}}),
		Credentials: f.creds, InterruptGrace: 5 * time.Second,
	}, envArch{})
	return f
}

func (f *credFixture) session(t *testing.T) (*session.Session, *eventlog.Subscription) {
	t.Helper()
	rec, err := f.m.Create(context.Background(), session.CreateRequest{Architecture: "envarch", AgentProfileRef: "p"}, "alice")
	if err != nil {
		t.Fatal(err)
	}
	s, _ := f.m.Get(rec.ID)
	sub, err := f.log.Subscribe(context.Background(), rec.ID, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(sub.Close)
	return s, sub
}

func TestCredentialsIssuedAndRevoked(t *testing.T) {
	f := newCredFixture(t, nil)
	s, sub := f.session(t)
	if _, err := s.Send(context.Background(), "show", "alice"); err != nil {
		t.Fatal(err)
	}
	if got := result(t, sub); got != "token-for-"+s.ID() {
		t.Fatalf("the sandbox saw KEY=%q, want the issued credential", got)
	}
	n, revoked := f.creds.counts()
	if n != 1 || len(revoked) != 0 {
		t.Fatalf("%d issues, revoked %v while the environment is up", n, revoked)
	}
	f.creds.mu.Lock()
	given := f.creds.issued[0]
	f.creds.mu.Unlock()
	if given["KEY"] != "the-real-key" || given["SERVER"] != "1" || given["PROFILE"] != "2" {
		t.Fatalf("Issue was given %v; want the server's and the profile's variables", given)
	}
	if err := f.m.Delete(context.Background(), s.ID(), false, "alice"); err != nil {
		t.Fatal(err)
	}
	if _, revoked := f.creds.counts(); len(revoked) != 1 || revoked[0] != s.ID() {
		t.Fatalf("revoked %v after the environment was terminated", revoked)
	}
	// A new environment gets new credentials.
	if _, err := s.Send(context.Background(), "show", "alice"); err != nil {
		t.Fatal(err)
	}
	result(t, sub)
	if n, _ := f.creds.counts(); n != 2 {
		t.Fatalf("%d issues after a second environment start, want 2", n)
	}
}

func TestCredentialsIssueFailureFailsTheStart(t *testing.T) {
	f := newCredFixture(t, nil)
	f.creds.issueErr = errors.New("proxy down")
	s, sub := f.session(t)
	if _, err := s.Send(context.Background(), "show", "alice"); err != nil {
		t.Fatal(err)
	}
	ev := next(t, sub, conversation.TypeQueryFailed)
	var q conversation.QueryFailed
	json.Unmarshal(ev.Payload, &q)
	if q.Code != agent.CodeSandboxError || !strings.Contains(q.Error, "proxy down") {
		t.Fatalf("turn end %+v", q)
	}
}

// failingSandbox fails every Create.
type failingSandbox struct{}

func (failingSandbox) Name() string { return "failing" }
func (failingSandbox) Create(context.Context, sandbox.Spec) (sandbox.Environment, error) {
	return nil, errors.New("no room")
}

func TestCredentialsRevokedWhenTheSandboxFails(t *testing.T) {
	f := newCredFixture(t, failingSandbox{})
	s, sub := f.session(t)
	if _, err := s.Send(context.Background(), "show", "alice"); err != nil {
		t.Fatal(err)
	}
	next(t, sub, conversation.TypeQueryFailed)
	if n, revoked := f.creds.counts(); n != 1 || len(revoked) != 1 {
		t.Fatalf("%d issues, revoked %v: credentials of an environment that never came up must be revoked", n, revoked)
	}
}

func TestFailTurn(t *testing.T) {
	f := newCredFixture(t, nil)
	s, sub := f.session(t)
	ctx := context.Background()
	if got := f.m.TurnActor(s.ID()); got != "" {
		t.Fatalf("TurnActor with no turn = %q", got)
	}
	if _, err := s.Send(ctx, "block", "alice"); err != nil {
		t.Fatal(err)
	}
	next(t, sub, conversation.TypeQueryStarted)
	if got := f.m.TurnActor(s.ID()); got != "alice" {
		t.Fatalf("TurnActor during alice's turn = %q", got)
	}
	cause := agent.Fail(agent.CodeBudgetExceeded, "the budget is used up (12 of 10 tokens)")
	if err := f.m.FailTurn(ctx, s.ID(), cause); err != nil {
		t.Fatal(err)
	}
	if err := f.m.FailTurn(ctx, s.ID(), cause); err != nil { // a retried request: no second error event
		t.Fatal(err)
	}
	var seen []conversation.Event
	for {
		e := nextAny(t, sub)
		seen = append(seen, e)
		if e.Type == conversation.TypeQueryFailed || e.Type == conversation.TypeQueryCompleted {
			break
		}
	}
	var errs []conversation.ErrorEvent
	for _, e := range seen {
		if e.Type == conversation.TypeError {
			var p conversation.ErrorEvent
			json.Unmarshal(e.Payload, &p)
			errs = append(errs, p)
		}
	}
	if len(errs) != 1 || errs[0].Code != agent.CodeBudgetExceeded || !strings.Contains(errs[0].Message, "12 of 10") {
		t.Fatalf("error events %+v, want one BUDGET_EXCEEDED", errs)
	}
	end := seen[len(seen)-1]
	var q conversation.QueryFailed
	json.Unmarshal(end.Payload, &q)
	if end.Type != conversation.TypeQueryFailed || q.Code != agent.CodeBudgetExceeded || q.Interrupted || !strings.Contains(q.Error, "budget") {
		t.Fatalf("turn end %s %s, want query:failed BUDGET_EXCEEDED", end.Type, end.Payload)
	}
	if got := f.m.TurnActor(s.ID()); got != "" {
		t.Fatalf("TurnActor after the turn = %q", got)
	}
	// With no turn running, the error is still reported.
	if err := f.m.FailTurn(ctx, s.ID(), cause); err != nil {
		t.Fatal(err)
	}
	if e := next(t, sub, conversation.TypeError); !strings.Contains(string(e.Payload), agent.CodeBudgetExceeded) {
		t.Fatalf("error event %s", e.Payload)
	}
	if err := f.m.FailTurn(ctx, "nope", cause); !errors.Is(err, session.ErrNotFound) {
		t.Fatalf("FailTurn of an unknown session = %v", err)
	}
}

// nextAny returns the next event of any type.
func nextAny(t *testing.T, sub *eventlog.Subscription) conversation.Event {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	r, err := sub.Next(ctx)
	if err != nil {
		t.Fatalf("next event: %v", err)
	}
	return r.Event
}
