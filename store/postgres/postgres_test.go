package postgres_test

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"strings"
	"sync"
	"testing"

	"go.uber.org/goleak"

	"github.com/agentd/agentd/conversation"
	"github.com/agentd/agentd/store"
	"github.com/agentd/agentd/store/postgres"
	"github.com/agentd/agentd/store/postgres/pgtest"
	"github.com/agentd/agentd/store/storetest"
)

func TestMain(m *testing.M) {
	code := m.Run()
	pgtest.Stop()
	if code == 0 {
		if err := goleak.Find(); err != nil {
			os.Stderr.WriteString("goleak: " + err.Error() + "\n")
			code = 1
		}
	}
	os.Exit(code)
}

var quiet = slog.New(slog.DiscardHandler)

// open opens a store on a new schema of the test server.
func open(t testing.TB) *postgres.Store {
	t.Helper()
	s, err := postgres.Open(context.Background(), pgtest.Schema(t), postgres.WithLogger(quiet))
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	return s
}

func TestConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T) store.Store { return open(t) })
}

func BenchmarkStore(b *testing.B) {
	storetest.Bench(b, func(b *testing.B) store.Store { return open(b) })
}

// Servers starting together on one empty schema migrate it once.
func TestConcurrentOpensMigrateOnce(t *testing.T) {
	dsn := pgtest.Schema(t)
	var wg sync.WaitGroup
	stores := make([]*postgres.Store, 6)
	errs := make([]error, len(stores))
	for i := range stores {
		wg.Go(func() { stores[i], errs[i] = postgres.Open(t.Context(), dsn, postgres.WithLogger(quiet)) })
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("Open %d: %v", i, err)
		}
		defer stores[i].Close()
	}
	var n int
	if err := stores[0].Pool().QueryRow(t.Context(), `SELECT count(*) FROM schema_migrations`).Scan(&n); err != nil || n != 3 {
		t.Fatalf("schema_migrations has %d rows, %v; want 3 (one per migration, once)", n, err)
	}
}

func TestOpenRefusesNewerSchema(t *testing.T) {
	dsn := pgtest.Schema(t)
	s, err := postgres.Open(t.Context(), dsn, postgres.WithLogger(quiet))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Pool().Exec(t.Context(), `INSERT INTO schema_migrations VALUES (99, '0099_future.sql', 0)`); err != nil {
		t.Fatal(err)
	}
	s.Close()
	if _, err := postgres.Open(t.Context(), dsn, postgres.WithLogger(quiet)); !errors.Is(err, postgres.ErrSchemaTooNew) {
		t.Fatalf("Open of a newer schema = %v, want ErrSchemaTooNew", err)
	}
}

func TestOpenBadURL(t *testing.T) {
	for _, url := range []string{"postgres://u:hunter2@[bad", "postgres://127.0.0.1:1/x?connect_timeout=1&password=hunter2"} {
		_, err := postgres.Open(t.Context(), url, postgres.WithLogger(quiet))
		if err == nil {
			t.Fatalf("Open(%q) succeeded", url)
		}
		if strings.Contains(err.Error(), "hunter2") {
			t.Fatalf("Open(%q) error shows the password: %v", url, err)
		}
	}
}

// Two stores on one schema are two servers of a fleet: a seq one stored
// is a conflict for the other, and a take-over fences the former holder.
func TestTwoServersOneDatabase(t *testing.T) {
	dsn := pgtest.Schema(t)
	a, err := postgres.Open(t.Context(), dsn, postgres.WithLogger(quiet))
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	b, err := postgres.Open(t.Context(), dsn, postgres.WithLogger(quiet))
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	ctx := t.Context()
	if err := a.CreateSession(ctx, store.Session{ID: "s", Architecture: "shell", Status: conversation.SessionCreated}); err != nil {
		t.Fatal(err)
	}
	ga, err := a.AcquireLease(ctx, "s", "node-a", 50_000_000)
	if err != nil {
		t.Fatal(err)
	}
	ev := func(seq int64) []conversation.Event {
		return []conversation.Event{{Seq: seq, Type: conversation.TypeLog, Payload: []byte(`{}`),
			Context: conversation.Context{SessionID: "s", ConversationID: "main", Source: conversation.SourceServer}}}
	}
	if err := a.AppendEvents(ctx, ev(1), store.Fence{SessionID: "s", Generation: ga}); err != nil {
		t.Fatal(err)
	}
	if err := b.AppendEvents(ctx, ev(1)); !errors.Is(err, store.ErrSeqConflict) {
		t.Fatalf("the other server's append of a stored seq = %v, want ErrSeqConflict", err)
	}
	var gb int64
	for {
		gb, err = b.AcquireLease(ctx, "s", "node-b", 1_000_000_000)
		if err == nil {
			break
		}
		if !errors.Is(err, store.ErrLeaseHeld) {
			t.Fatal(err)
		}
	}
	if gb <= ga {
		t.Fatalf("take-over generation %d, want > %d", gb, ga)
	}
	if err := a.AppendEvents(ctx, ev(2), store.Fence{SessionID: "s", Generation: ga}); !errors.Is(err, store.ErrFenced) {
		t.Fatalf("the former holder's append = %v, want ErrFenced", err)
	}
	if err := b.AppendEvents(ctx, ev(2), store.Fence{SessionID: "s", Generation: gb}); err != nil {
		t.Fatal(err)
	}
}

// DeleteSession racing fenced appends and fenced updates of the session:
// no deadlock (sessions' rows are locked before leases' everywhere), the
// writes fail only with ErrFenced or ErrNotFound, and nothing of the
// session survives the delete.
func TestDeleteRacesFencedWrites(t *testing.T) {
	s := open(t)
	defer s.Close()
	ctx := t.Context()
	for round := range 20 {
		id := "s" + string(rune('a'+round))
		rec := store.Session{ID: id, Architecture: "shell", Status: conversation.SessionRunning}
		if err := s.CreateSession(ctx, rec); err != nil {
			t.Fatal(err)
		}
		gen, err := s.AcquireLease(ctx, id, "node", 60_000_000_000)
		if err != nil {
			t.Fatal(err)
		}
		fence := store.Fence{SessionID: id, Generation: gen}
		var wg sync.WaitGroup
		check := func(what string, err error) bool {
			if err == nil {
				return true
			}
			if !errors.Is(err, store.ErrFenced) && !errors.Is(err, store.ErrNotFound) {
				t.Errorf("round %d: %s: %v", round, what, err)
			}
			return false
		}
		wg.Go(func() {
			// Bounded: row locks are not granted in FIFO order, so writers
			// looping without end could keep the delete waiting.
			for seq := int64(1); seq <= 300; seq++ {
				e := conversation.Event{Seq: seq, Type: conversation.TypeLog, Payload: []byte(`{}`),
					Context: conversation.Context{SessionID: id, ConversationID: "main", Source: conversation.SourceRunner}}
				if !check("AppendEvents", s.AppendEvents(ctx, []conversation.Event{e}, fence)) {
					return
				}
			}
		})
		wg.Go(func() {
			for i := 0; i < 300 && check("UpdateSession", s.UpdateSession(ctx, rec, fence)); i++ {
			}
		})
		wg.Go(func() {
			if err := s.DeleteSession(ctx, id); err != nil {
				t.Errorf("round %d: DeleteSession: %v", round, err)
			}
		})
		wg.Wait()
		if n, err := s.LastSeq(ctx, id); err != nil || n != 0 {
			t.Fatalf("round %d: LastSeq after the delete = %d, %v", round, n, err)
		}
		if _, err := s.LoadSession(ctx, id); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("round %d: the session survived: %v", round, err)
		}
	}
}
