package session_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/agentd/agentd/agent"
	"github.com/agentd/agentd/conversation"
	"github.com/agentd/agentd/internal/session"
	"github.com/agentd/agentd/store"
	"github.com/agentd/agentd/store/memstore"
)

// quickArch's turns end at once.
type quickArch struct{}

func (quickArch) Name() string { return "quick" }
func (quickArch) Start(ctx context.Context, h agent.Host) (agent.Runner, error) {
	return quickRunner{}, nil
}

type quickRunner struct{}

func (quickRunner) Turn(ctx context.Context, t agent.Turn) (agent.TurnResult, error) {
	return agent.TurnResult{Result: "done"}, nil
}
func (quickRunner) Interrupt(context.Context) error { return nil }
func (quickRunner) Close(context.Context) error     { return nil }

// fullStore refuses batches holding a turn's end while full is set, as a
// store on a full disk does.
type fullStore struct {
	*memstore.Store
	mu      sync.Mutex
	full    bool
	refused int
}

func (s *fullStore) AppendEvents(ctx context.Context, evs []conversation.Event, fence ...store.Fence) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, ev := range evs {
		if s.full && (ev.Type == conversation.TypeQueryCompleted || ev.Type == conversation.TypeQueryFailed) {
			s.refused++
			return errors.New("database or disk is full")
		}
	}
	return s.Store.AppendEvents(ctx, evs, fence...)
}

func (s *fullStore) setFull(full bool) (refused int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.full = full
	return s.refused
}

// TestTurnEndSurvivesAFullStore: a turn that ends while the store refuses
// writes gets its end recorded once the store takes writes again (the
// chaos test found turns left running for good in the log after a full
// disk, seed 1795637109271017205).
func TestTurnEndSurvivesAFullStore(t *testing.T) {
	ctx := context.Background()
	st := &fullStore{Store: memstore.New()}
	m, lg := startManager(t, session.Config{Store: st, Profiles: session.NewProfiles(st, nil)}, quickArch{})
	rec, err := m.Create(ctx, session.CreateRequest{Architecture: "quick"}, "alice")
	if err != nil {
		t.Fatal(err)
	}
	s, _ := m.Get(rec.ID)
	sub, _ := lg.Subscribe(ctx, rec.ID, 0)
	t.Cleanup(sub.Close)
	st.setFull(true)
	if _, err := s.Send(ctx, "go", "alice"); err != nil {
		t.Fatal(err)
	}
	// Let the end be refused a few times, then free the store.
	deadline := time.Now().Add(10 * time.Second)
	for n := 0; n < 3; n = st.setFull(true) {
		if time.Now().After(deadline) {
			t.Fatalf("the turn's end was refused %d times, then not tried again", n)
		}
		time.Sleep(10 * time.Millisecond)
	}
	st.setFull(false)
	next(t, sub, conversation.TypeQueryCompleted)
	evs, err := lg.Read(ctx, rec.ID, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	ends := 0
	for _, ev := range evs {
		if ev.Type == conversation.TypeQueryCompleted || ev.Type == conversation.TypeQueryFailed {
			ends++
		}
	}
	if ends != 1 {
		t.Fatalf("%d terminal events, want 1", ends)
	}
}
