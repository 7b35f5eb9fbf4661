package session_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"

	"github.com/agentd/agentd/conversation"
	"github.com/agentd/agentd/internal/sandbox/local"
	"github.com/agentd/agentd/internal/session"
	"github.com/agentd/agentd/sandbox"
	"github.com/agentd/agentd/store/memstore"
)

// killedCreate records a handle through Spec.Record, then fails: what a
// server killed while its backend created an environment leaves behind.
type killedCreate struct{ sandbox.Provider }

const earlyHandle = `{"socket":"/run/agentd/x.sock"}`

func (p killedCreate) Create(ctx context.Context, spec sandbox.Spec) (sandbox.Environment, error) {
	if spec.Record == nil {
		return nil, errors.New("no Spec.Record")
	}
	if err := spec.Record(ctx, json.RawMessage(earlyHandle)); err != nil {
		return nil, err
	}
	return nil, errors.New("killed while creating")
}

// TestHandleRecordedBeforeCreateReturns: the session stores the handle a
// backend records before starting its environment, so a restarted server
// can find (and remove) an environment whose creation it did not see end.
func TestHandleRecordedBeforeCreateReturns(t *testing.T) {
	ctx := context.Background()
	st := memstore.New()
	m, lg := startManager(t, session.Config{Store: st, Sandbox: killedCreate{local.New(local.Options{})},
		Profiles: session.NewProfiles(st, nil)}, permArch{})
	rec, err := m.Create(ctx, session.CreateRequest{Architecture: "perm"}, "alice")
	if err != nil {
		t.Fatal(err)
	}
	s, _ := m.Get(rec.ID)
	sub, _ := lg.Subscribe(ctx, rec.ID, 0)
	t.Cleanup(sub.Close)
	if _, err := s.Send(ctx, "Bash", "alice"); err != nil {
		t.Fatal(err)
	}
	next(t, sub, conversation.TypeQueryFailed)
	got, err := st.LoadSession(ctx, rec.ID)
	if err != nil {
		t.Fatal(err)
	}
	if string(got.SandboxState) != earlyHandle {
		t.Fatalf("stored sandbox state %s, want %s", got.SandboxState, earlyHandle)
	}
}
