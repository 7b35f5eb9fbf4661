package session_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/agentd/agentd/agent"
	"github.com/agentd/agentd/conversation"
	"github.com/agentd/agentd/internal/agent/shell"
	"github.com/agentd/agentd/internal/eventlog"
	"github.com/agentd/agentd/internal/session"
	"github.com/agentd/agentd/store"
	"github.com/agentd/agentd/store/memstore"
)

// optsArch reads permissionMode besides model. Its runner answers each
// turn with the options it sees then (as a CLI started per turn would get
// them), and saves a transcript when asked to sync.
type optsArch struct{}

func (optsArch) Name() string { return "opts" }
func (optsArch) Start(ctx context.Context, h agent.Host) (agent.Runner, error) {
	return &optsRunner{h: h, startModel: h.Options().Model}, nil
}
func (optsArch) CheckOption(key string, v json.RawMessage) (bool, error) {
	if key != "permissionMode" {
		return false, nil
	}
	if string(v) != `"plan"` && string(v) != "null" {
		return true, errors.New("only plan")
	}
	return true, nil
}

type optsRunner struct {
	h          agent.Host
	startModel string
	turns      int
}

func (r *optsRunner) Turn(ctx context.Context, t agent.Turn) (agent.TurnResult, error) {
	r.turns++
	return agent.TurnResult{Result: fmt.Sprintf("start=%s now=%s extra=%s", r.startModel, r.h.Options().Model, r.h.Options().Extra)}, nil
}
func (r *optsRunner) Interrupt(context.Context) error { return nil }
func (r *optsRunner) Close(context.Context) error     { return nil }
func (r *optsRunner) Sync(ctx context.Context) error {
	return r.h.SaveTranscript(ctx, "agent.jsonl", fmt.Appendf(nil, "after %d turns\n", r.turns))
}

func optsManager(t *testing.T) (*session.Manager, *eventlog.Log, store.Store) {
	t.Helper()
	st := memstore.New()
	m, lg := startManager(t, session.Config{Store: st, PersistFilesMax: 1 << 10}, shell.Architecture{}, optsArch{})
	return m, lg, st
}

func turn(t *testing.T, m *session.Manager, lg *eventlog.Log, id, content string) string {
	t.Helper()
	ctx := context.Background()
	last, _ := lg.LastSeq(ctx, id)
	sub, err := lg.Subscribe(ctx, id, last)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	s, _ := m.Get(id)
	if _, err := s.Send(ctx, content, "alice"); err != nil {
		t.Fatal(err)
	}
	e := next(t, sub, conversation.TypeQueryCompleted)
	var p conversation.QueryCompleted
	_ = json.Unmarshal(e.Payload, &p)
	return p.Result
}

func TestUpdateOptions(t *testing.T) {
	m, lg, st := optsManager(t)
	ctx := context.Background()
	rec, err := m.Create(ctx, session.CreateRequest{Architecture: "opts", SessionOptions: json.RawMessage(`{"model":"m1","workspace":{"git":""}}`)}, "alice")
	if err != nil {
		t.Fatal(err)
	}
	if got := turn(t, m, lg, rec.ID, "one"); !strings.HasPrefix(got, "start=m1 now=m1") {
		t.Fatalf("first turn: %s", got)
	}

	// Bad changes change nothing.
	for _, c := range []struct {
		patch string
		err   error
	}{
		{`{"temperature":1}`, session.ErrUnknownOption},
		{`{"permissionMode":"auto"}`, session.ErrInvalidRequest},
		{`{"model":5}`, session.ErrInvalidRequest},
		{`[1]`, session.ErrInvalidRequest},
		{`{"workspace":{"git":"https://example.com/r.git"}}`, session.ErrInvalidRequest},
	} {
		if _, err := m.UpdateOptions(ctx, rec.ID, json.RawMessage(c.patch), "bob"); !errors.Is(err, c.err) {
			t.Errorf("%s: %v, want %v", c.patch, err, c.err)
		}
	}
	if _, err := m.UpdateOptions(ctx, "ghost", json.RawMessage(`{}`), "bob"); !errors.Is(err, session.ErrNotFound) {
		t.Errorf("unknown session: %v", err)
	}

	got, err := m.UpdateOptions(ctx, rec.ID, json.RawMessage(`{"model":"m2","permissionMode":"plan","workspace":{"git":""}}`), "bob")
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != `{"model":"m2","permissionMode":"plan","workspace":{"git":""}}` {
		t.Fatalf("options %s", got)
	}
	// Saved, recorded, and read by the runner at its next turn; the agent
	// it started keeps what it started with until the next environment.
	if saved, _ := st.LoadSession(ctx, rec.ID); string(saved.SessionOptions) != string(got) {
		t.Fatalf("stored %s", saved.SessionOptions)
	}
	_, state, _ := m.State(ctx, rec.ID)
	if string(state.SessionOptions) != string(got) {
		t.Fatalf("reduced %s", state.SessionOptions)
	}
	evs, _ := lg.Read(ctx, rec.ID, 0, 0)
	var upd []conversation.Event
	for _, e := range evs {
		if e.Type == conversation.TypeOptionsUpdate {
			upd = append(upd, e)
		}
	}
	var p conversation.OptionsUpdate
	if len(upd) != 1 || json.Unmarshal(upd[0].Payload, &p) != nil || !slices.Equal(p.Changed, []string{"model", "permissionMode"}) || *upd[0].Context.Actor != "bob" {
		t.Fatalf("options:update events %+v", upd)
	}
	if got := turn(t, m, lg, rec.ID, "two"); !strings.HasPrefix(got, "start=m1 now=m2") || !strings.Contains(got, `"permissionMode":"plan"`) {
		t.Fatalf("second turn: %s", got)
	}
	s, _ := m.Get(rec.ID)
	if err := s.Terminate(ctx, "test", "alice"); err != nil {
		t.Fatal(err)
	}
	if got := turn(t, m, lg, rec.ID, "three"); !strings.HasPrefix(got, "start=m2 now=m2") {
		t.Fatalf("after a new environment: %s", got)
	}

	// The same change again records nothing; null removes a key.
	if _, err := m.UpdateOptions(ctx, rec.ID, json.RawMessage(`{"model":"m2"}`), "bob"); err != nil {
		t.Fatal(err)
	}
	got, err = m.UpdateOptions(ctx, rec.ID, json.RawMessage(`{"permissionMode":null}`), "bob")
	if err != nil || string(got) != `{"model":"m2","workspace":{"git":""}}` {
		t.Fatalf("remove: %s %v", got, err)
	}
	evs, _ = lg.Read(ctx, rec.ID, 0, 0)
	n := 0
	for _, e := range evs {
		if e.Type == conversation.TypeOptionsUpdate {
			n++
		}
	}
	if n != 2 {
		t.Fatalf("%d options:update events, want 2", n)
	}
}

func TestSync(t *testing.T) {
	m, lg, st := optsManager(t)
	ctx := context.Background()
	rec, err := m.Create(ctx, session.CreateRequest{Architecture: "shell"}, "alice")
	if err != nil {
		t.Fatal(err)
	}
	turn(t, m, lg, rec.ID, "mkdir d && echo one > a.txt && echo two > d/b.txt && : > empty && head -c 2000 /dev/zero > big")
	_, state, _ := m.State(ctx, rec.ID)
	dir := state.Runtime.WorkDir
	if dir == "" {
		t.Fatal("no workdir")
	}
	// The store's copies drift: one lost, one stale, one left from a file
	// that is gone.
	if err := st.DeleteSessionFile(ctx, rec.ID, "a.txt"); err != nil {
		t.Fatal(err)
	}
	_ = st.SaveWorkspaceFile(ctx, rec.ID, store.WorkspaceFile{Path: "d/b.txt", Content: []byte("old\n")})
	_ = st.SaveWorkspaceFile(ctx, rec.ID, store.WorkspaceFile{Path: "gone.txt", Content: []byte("x")})
	res, err := m.Sync(ctx, rec.ID)
	if err != nil {
		t.Fatal(err)
	}
	if res.Saved != 2 || res.Deleted != 1 || res.Unchanged != 1 || res.Skipped != 1 {
		t.Fatalf("first sync: %+v", res)
	}
	files, _ := st.ListWorkspaceFiles(ctx, rec.ID)
	var paths []string
	for _, f := range files {
		paths = append(paths, f.Path+"="+string(f.Content))
	}
	if want := []string{"a.txt=one\n", "d/b.txt=two\n", "empty="}; !slices.Equal(paths, want) {
		t.Fatalf("stored %q, want %q", paths, want)
	}
	// Idempotent.
	if res, err := m.Sync(ctx, rec.ID); err != nil || res.Saved != 0 || res.Deleted != 0 || res.Unchanged != 3 {
		t.Fatalf("second sync: %+v %v", res, err)
	}
	// With the environment down: the folder is read.
	s, _ := m.Get(rec.ID)
	if err := s.Terminate(ctx, "test", "alice"); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "later.txt"), []byte("later"), 0o600); err != nil {
		t.Fatal(err)
	}
	if res, err := m.Sync(ctx, rec.ID); err != nil || res.Saved != 1 {
		t.Fatalf("sync with the environment down: %+v %v", res, err)
	}
	if _, err := m.Sync(ctx, "ghost"); !errors.Is(err, session.ErrNotFound) {
		t.Fatalf("unknown session: %v", err)
	}
}

// The runner's transcript is saved by Sync while its environment is up.
func TestSyncSavesTranscript(t *testing.T) {
	m, lg, st := optsManager(t)
	ctx := context.Background()
	rec, _ := m.Create(ctx, session.CreateRequest{Architecture: "opts"}, "alice")
	turn(t, m, lg, rec.ID, "one")
	res, err := m.Sync(ctx, rec.ID)
	if err != nil || !slices.Equal(res.Transcripts, []string{"agent.jsonl"}) {
		t.Fatalf("sync: %+v %v", res, err)
	}
	if data, _ := st.LoadTranscript(ctx, rec.ID, "agent.jsonl"); string(data) != "after 1 turns\n" {
		t.Fatalf("transcript %q", data)
	}
}
