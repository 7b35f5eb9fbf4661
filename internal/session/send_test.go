package session_test

import (
	"context"
	"encoding/json"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentd/agentd/conversation"
	"github.com/agentd/agentd/internal/eventlog"
	"github.com/agentd/agentd/internal/session"
	"github.com/agentd/agentd/profile"
	"github.com/agentd/agentd/store"
	"github.com/agentd/agentd/store/memstore"
)

// hookStore is a memstore whose session updates can run a hook and whose
// event appends can be made to fail.
type hookStore struct {
	*memstore.Store
	onUpdate   atomic.Pointer[func(store.Session)]
	failEvents atomic.Bool
}

func (h *hookStore) UpdateSession(ctx context.Context, rec store.Session, fence ...store.Fence) error {
	err := h.Store.UpdateSession(ctx, rec, fence...)
	if f := h.onUpdate.Load(); f != nil {
		(*f)(rec)
	}
	return err
}

func (h *hookStore) AppendEvents(ctx context.Context, evs []conversation.Event, fence ...store.Fence) error {
	if h.failEvents.Load() {
		return errors.New("disk on fire")
	}
	return h.Store.AppendEvents(ctx, evs, fence...)
}

func hookFixture(t *testing.T) (*hookStore, *session.Manager, *eventlog.Log) {
	t.Helper()
	st := &hookStore{Store: memstore.New()}
	m, lg := startManager(t, session.Config{
		Store:    st,
		Profiles: session.NewProfiles(st, []profile.Profile{{ID: "gitok", Name: "g", AllowedTools: []string{"Bash(git:*)"}}}),
		Holder:   "me",
	}, permArch{})
	return st, m, lg
}

// advertised returns the active query ids that status events of the log
// name, and the query ids that have a query:started.
func advertised(t *testing.T, lg *eventlog.Log, id string) (active, started map[string]bool) {
	t.Helper()
	evs, err := lg.Read(context.Background(), id, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	active, started = map[string]bool{}, map[string]bool{}
	for _, e := range evs {
		p, err := e.Decode()
		if err != nil {
			t.Fatal(err)
		}
		switch p := p.(type) {
		case *conversation.StatusChange:
			if p.Runtime.ActiveQueryID != "" {
				active[p.Runtime.ActiveQueryID] = true
			}
		case *conversation.QueryStarted:
			started[p.QueryID] = true
		}
	}
	return active, started
}

// checkNoPhantomTurn fails if the session's record or status events name a
// turn the log never started.
func checkNoPhantomTurn(t *testing.T, st *hookStore, m *session.Manager, lg *eventlog.Log, id string) {
	t.Helper()
	active, started := advertised(t, lg, id)
	for q := range active {
		if !started[q] {
			t.Errorf("a status event advertises turn %s, which never started", q)
		}
	}
	rec, _, err := m.State(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	stored, err := st.LoadSession(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range []store.Session{rec, stored} {
		if q := r.Runtime.ActiveQueryID; q != "" && !started[q] {
			t.Errorf("the session record names active turn %s, which never started", q)
		}
		if r.Turns != int64(len(started)) {
			t.Errorf("the session record counts %d turns; the log started %d", r.Turns, len(started))
		}
	}
}

// A client that disconnects right after the session record was updated
// (Turns++, ActiveQueryID, lease) must not leave a turn half started: the
// owner used the request's context for the rest, so the user message was
// never recorded while the record kept advertising the turn. Now a turn
// the owner began is carried through whatever the client does.
func TestSendOutlivesTheRequestContext(t *testing.T) {
	st, m, lg := hookFixture(t)
	ctx := context.Background()
	rec, err := m.Create(ctx, session.CreateRequest{Architecture: "perm", AgentProfileRef: "gitok"}, "alice")
	if err != nil {
		t.Fatal(err)
	}
	s, _ := m.Get(rec.ID)
	sub, _ := lg.Subscribe(ctx, rec.ID, 0)
	defer sub.Close()

	reqCtx, disconnect := context.WithCancel(ctx)
	hook := func(r store.Session) {
		if r.Runtime.ActiveQueryID == "q1" {
			disconnect() // the client goes away once the turn is numbered
		}
	}
	st.onUpdate.Store(&hook)
	_, sendErr := s.Send(reqCtx, "Bash", "alice")
	st.onUpdate.Store(nil)

	// Send may have returned the request's end before the owner finished
	// starting the turn: wait for the turn itself.
	t.Logf("Send: %v", sendErr)
	end := next(t, sub, conversation.TypeQueryCompleted)
	var p conversation.QueryCompleted
	json.Unmarshal(end.Payload, &p)
	if p.QueryID != "q1" {
		t.Fatalf("completed %s, want q1", p.QueryID)
	}
	next(t, sub, conversation.TypeSessionIdle)
	checkNoPhantomTurn(t, st, m, lg, rec.ID)
	if q := mustRecord(t, m, rec.ID).Runtime.ActiveQueryID; q != "" {
		t.Fatalf("active query %q after the turn ended", q)
	}
}

// A request whose context ended before the owner took it up starts
// nothing.
func TestSendWithEndedContextStartsNothing(t *testing.T) {
	st, m, lg := hookFixture(t)
	ctx := context.Background()
	rec, err := m.Create(ctx, session.CreateRequest{Architecture: "perm", AgentProfileRef: "gitok"}, "alice")
	if err != nil {
		t.Fatal(err)
	}
	s, _ := m.Get(rec.ID)
	gone, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := s.Send(gone, "Bash", "alice"); !errors.Is(err, context.Canceled) {
		t.Fatalf("Send with an ended context: %v", err)
	}
	checkNoPhantomTurn(t, st, m, lg, rec.ID)
	if _, err := st.AcquireLease(ctx, rec.ID, "other", time.Minute); err != nil {
		t.Fatalf("lease left held: %v", err)
	}
}

// When recording the user message fails, the turn is rolled back: the
// record does not count or advertise it, the lease is given back, and the
// next message is the session's turn q1.
func TestSendRollsBackWhenTheMessageIsNotRecorded(t *testing.T) {
	st, m, lg := hookFixture(t)
	ctx := context.Background()
	rec, err := m.Create(ctx, session.CreateRequest{Architecture: "perm", AgentProfileRef: "gitok"}, "alice")
	if err != nil {
		t.Fatal(err)
	}
	s, _ := m.Get(rec.ID)
	st.failEvents.Store(true)
	if _, err := s.Send(ctx, "Bash", "alice"); err == nil {
		t.Fatal("Send succeeded with a failing event store")
	}
	st.failEvents.Store(false)
	checkNoPhantomTurn(t, st, m, lg, rec.ID)
	if _, err := st.AcquireLease(ctx, rec.ID, "other", time.Minute); err != nil {
		t.Fatalf("lease left held after the rolled back turn: %v", err)
	}
	if err := st.ReleaseLease(ctx, rec.ID, "other"); err != nil {
		t.Fatal(err)
	}

	sub, _ := lg.Subscribe(ctx, rec.ID, 0)
	defer sub.Close()
	q, err := s.Send(ctx, "Bash", "alice")
	if err != nil || q != "q1" {
		t.Fatalf("next message: %q %v, want q1", q, err)
	}
	next(t, sub, conversation.TypeSessionIdle)
	checkNoPhantomTurn(t, st, m, lg, rec.ID)
}

func mustRecord(t *testing.T, m *session.Manager, id string) store.Session {
	t.Helper()
	rec, _, err := m.State(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	return rec
}
