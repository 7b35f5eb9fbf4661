package session_test

import (
	"context"
	"encoding/json"
	"io/fs"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/agentd/agentd/conversation"
	"github.com/agentd/agentd/internal/sandbox/local"
	"github.com/agentd/agentd/internal/session"
	"github.com/agentd/agentd/sandbox"
)

// mortalProvider makes local environments that the test can "kill": every
// call then fails with sandbox.ErrGone and Running reports false, as an
// executor environment whose executor died — except that its watch stays
// open, so that the session can only learn of the death from a call.
type mortalProvider struct {
	*local.Provider
	mu   sync.Mutex
	envs []*mortalEnv
}

func (p *mortalProvider) Create(ctx context.Context, spec sandbox.Spec) (sandbox.Environment, error) {
	e, err := p.Provider.Create(ctx, spec)
	if err != nil {
		return nil, err
	}
	m := &mortalEnv{Environment: e}
	p.mu.Lock()
	p.envs = append(p.envs, m)
	p.mu.Unlock()
	return m, nil
}

func (p *mortalProvider) last() *mortalEnv {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.envs[len(p.envs)-1]
}

type mortalEnv struct {
	sandbox.Environment
	dead atomic.Bool
}

func (e *mortalEnv) gone() error {
	if e.dead.Load() {
		return sandbox.ErrGone
	}
	return nil
}

func (e *mortalEnv) Running() bool { return !e.dead.Load() && e.Environment.Running() }
func (e *mortalEnv) Exec(ctx context.Context, c sandbox.Cmd) (sandbox.Process, error) {
	if err := e.gone(); err != nil {
		return nil, err
	}
	return e.Environment.Exec(ctx, c)
}
func (e *mortalEnv) ReadFile(ctx context.Context, p string) ([]byte, error) {
	if err := e.gone(); err != nil {
		return nil, err
	}
	return e.Environment.ReadFile(ctx, p)
}
func (e *mortalEnv) WriteFile(ctx context.Context, p string, b []byte, m fs.FileMode) error {
	if err := e.gone(); err != nil {
		return err
	}
	return e.Environment.WriteFile(ctx, p, b, m)
}
func (e *mortalEnv) List(ctx context.Context, dir string, rec bool) ([]sandbox.FileInfo, error) {
	if err := e.gone(); err != nil {
		return nil, err
	}
	return e.Environment.List(ctx, dir, rec)
}

// A files call that finds the environment dead has the session drop it
// (error event ENVIRONMENT_GONE, status terminated) and answers from the
// workspace folder; the environment is started again when next needed.
func TestFilesCallOnDeadEnvironment(t *testing.T) {
	prov := &mortalProvider{Provider: local.New(local.Options{})}
	m, lg := shellManager(t, prov)
	ctx := context.Background()
	rec, err := m.Create(ctx, session.CreateRequest{Architecture: "shell"}, "alice")
	if err != nil {
		t.Fatal(err)
	}
	s, _ := m.Get(rec.ID)
	sub, _ := lg.Subscribe(ctx, rec.ID, 0)
	defer sub.Close()
	if _, err := s.Send(ctx, "echo hi > a.txt", "alice"); err != nil {
		t.Fatal(err)
	}
	next(t, sub, conversation.TypeSessionIdle)

	dead := prov.last()
	dead.dead.Store(true)
	files, err := m.ListFiles(ctx, rec.ID)
	if err != nil {
		t.Fatalf("ListFiles on a dead environment: %v", err)
	}
	if len(files) != 1 || files[0].Path != "a.txt" {
		t.Fatalf("files %+v", files)
	}
	e := next(t, sub, conversation.TypeError)
	var p conversation.ErrorEvent
	json.Unmarshal(e.Payload, &p)
	if p.Code != "ENVIRONMENT_GONE" {
		t.Fatalf("error event %s", e.Payload)
	}
	for {
		st := next(t, sub, conversation.TypeStatus)
		var sc conversation.StatusChange
		json.Unmarshal(st.Payload, &sc)
		if sc.Status == conversation.SessionTerminated {
			break
		}
	}

	env, err := s.EnsureEnv(ctx, "alice")
	if err != nil {
		t.Fatal(err)
	}
	if env == sandbox.Environment(dead) || !env.Running() {
		t.Fatal("EnsureEnv gave the dead environment back")
	}
	if _, err := s.Send(ctx, "cat a.txt", "alice"); err != nil {
		t.Fatal(err)
	}
	end := next(t, sub, conversation.TypeQueryCompleted)
	var q conversation.QueryCompleted
	json.Unmarshal(end.Payload, &q)
	if q.QueryID != "q2" {
		t.Fatalf("completed %s", end.Payload)
	}
}

// A message to a session whose environment died while it was idle (and
// whose watch did not tell) starts a new environment instead of failing.
func TestSendAfterIdleEnvironmentDied(t *testing.T) {
	prov := &mortalProvider{Provider: local.New(local.Options{})}
	m, lg := shellManager(t, prov)
	ctx := context.Background()
	rec, err := m.Create(ctx, session.CreateRequest{Architecture: "shell"}, "alice")
	if err != nil {
		t.Fatal(err)
	}
	s, _ := m.Get(rec.ID)
	sub, _ := lg.Subscribe(ctx, rec.ID, 0)
	defer sub.Close()
	if _, err := s.Send(ctx, "echo hi > a.txt", "alice"); err != nil {
		t.Fatal(err)
	}
	next(t, sub, conversation.TypeSessionIdle)
	prov.last().dead.Store(true)
	if _, err := s.Send(ctx, "cat a.txt", "alice"); err != nil {
		t.Fatal(err)
	}
	next(t, sub, conversation.TypeError)
	end := next(t, sub, conversation.TypeQueryCompleted)
	var q conversation.QueryCompleted
	json.Unmarshal(end.Payload, &q)
	if q.QueryID != "q2" {
		t.Fatalf("completed %s", end.Payload)
	}
}
