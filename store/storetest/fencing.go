package storetest

import (
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/agentd/agentd/conversation"
	"github.com/agentd/agentd/store"
)

// acquire takes the lease on session for holder or fails t, returning its
// generation.
func acquire(t *testing.T, s store.Store, session, holder string, ttl time.Duration) int64 {
	t.Helper()
	gen, err := s.AcquireLease(ctx(t), session, holder, ttl)
	if err != nil {
		t.Fatalf("AcquireLease(%q, %q): %v", session, holder, err)
	}
	if gen <= 0 {
		t.Fatalf("AcquireLease(%q, %q) = generation %d, want > 0", session, holder, gen)
	}
	return gen
}

// takeOver waits out holder's short lease on session and takes it for
// newHolder, returning the new generation.
func takeOver(t *testing.T, s store.Store, session, newHolder string) int64 {
	t.Helper()
	time.Sleep(shortTTL)
	var gen int64
	eventually(t, func() (err error) {
		gen, err = s.AcquireLease(ctx(t), session, newHolder, shortTTL)
		return err
	})
	return gen
}

// wantFenced fails t unless err is a *store.FencedError matching
// store.ErrFenced and naming exactly sessions (in any order).
func wantFenced(t *testing.T, what string, err error, sessions ...string) {
	t.Helper()
	if !errors.Is(err, store.ErrFenced) {
		t.Fatalf("%s: got %v, want an error matching store.ErrFenced", what, err)
	}
	var fe *store.FencedError
	if !errors.As(err, &fe) {
		t.Fatalf("%s: %v is not a *store.FencedError", what, err)
	}
	got := slices.Clone(fe.Sessions)
	slices.Sort(got)
	want := slices.Clone(sessions)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Fatalf("%s: FencedError names sessions %q, want %q", what, fe.Sessions, sessions)
	}
}

func (h harness) fencing(t *testing.T) {
	t.Run("GenerationGrowsOnlyWhenTheHolderChanges", func(t *testing.T) {
		s := h.store(t)
		createSession(t, s, "s1")
		g1 := acquire(t, s, "s1", "server-a", shortTTL)
		if g := acquire(t, s, "s1", "server-a", shortTTL); g != g1 {
			t.Fatalf("renewal changed the generation: %d, then %d", g1, g)
		}
		// a's lease expires with nobody taking it: a takes it back at the
		// same generation.
		time.Sleep(2 * shortTTL)
		if g := acquire(t, s, "s1", "server-a", shortTTL); g != g1 {
			t.Fatalf("the same holder after its lease expired: generation %d, want %d", g, g1)
		}
		g2 := takeOver(t, s, "s1", "server-b")
		if g2 <= g1 {
			t.Fatalf("take-over by another holder: generation %d, want > %d", g2, g1)
		}
		if g := acquire(t, s, "s1", "server-b", longTTL); g != g2 {
			t.Fatalf("renewal by the new holder: generation %d, want %d", g, g2)
		}
		// Released, then taken by another holder: higher again. Released
		// and taken back by the same holder: unchanged.
		if err := s.ReleaseLease(ctx(t), "s1", "server-b"); err != nil {
			t.Fatal(err)
		}
		g3 := acquire(t, s, "s1", "server-a", longTTL)
		if g3 <= g2 {
			t.Fatalf("after a release, another holder: generation %d, want > %d", g3, g2)
		}
		if err := s.ReleaseLease(ctx(t), "s1", "server-a"); err != nil {
			t.Fatal(err)
		}
		if g := acquire(t, s, "s1", "server-a", longTTL); g != g3 {
			t.Fatalf("after its own release, the same holder: generation %d, want %d", g, g3)
		}
		// A failed attempt changes nothing.
		if _, err := s.AcquireLease(ctx(t), "s1", "server-c", longTTL); !errors.Is(err, store.ErrLeaseHeld) {
			t.Fatalf("AcquireLease of a held lease: %v", err)
		}
		if g := acquire(t, s, "s1", "server-a", longTTL); g != g3 {
			t.Fatalf("after another holder's failed attempt: generation %d, want %d", g, g3)
		}
	})

	t.Run("StaleAppendRefused", func(t *testing.T) {
		s := h.store(t)
		createSession(t, s, "s1")
		ga := acquire(t, s, "s1", "server-a", shortTTL)
		fa := store.Fence{SessionID: "s1", Generation: ga}
		if err := s.AppendEvents(ctx(t), events("s1", 1, 2), fa); err != nil {
			t.Fatalf("fenced AppendEvents by the holder: %v", err)
		}
		gb := takeOver(t, s, "s1", "server-b")
		fb := store.Fence{SessionID: "s1", Generation: gb}
		wantFenced(t, "AppendEvents by the former holder", s.AppendEvents(ctx(t), events("s1", 3, 4), fa), "s1")
		if err := s.AppendEvents(ctx(t), events("s1", 3, 3), fb); err != nil {
			t.Fatalf("fenced AppendEvents by the new holder: %v", err)
		}
		// The former holder's seqs now conflict too: the fence decides
		// first, so its appender learns it lost the lease.
		wantFenced(t, "AppendEvents by the former holder of a stored seq", s.AppendEvents(ctx(t), events("s1", 3, 4), fa), "s1")
		checkEvents(t, "events", events("s1", 1, 3), readAll(t, s, "s1"))
		// Unfenced writes (the API's) are not affected.
		if err := s.AppendEvents(ctx(t), events("s1", 4, 4)); err != nil {
			t.Fatalf("unfenced AppendEvents: %v", err)
		}
	})

	t.Run("GroupCommitNamesEveryStaleSession", func(t *testing.T) {
		s := h.store(t)
		for _, id := range []string{"a", "b", "c", "d"} {
			createSession(t, s, id)
		}
		old := map[string]int64{}
		for _, id := range []string{"a", "b", "c"} {
			old[id] = acquire(t, s, id, "server-1", shortTTL)
		}
		time.Sleep(shortTTL)
		cur := map[string]int64{}
		for _, id := range []string{"a", "c"} {
			cur[id] = takeOver(t, s, id, "server-2")
		}
		cur["b"] = acquire(t, s, "b", "server-1", longTTL) // still server-1's
		fence := func(id string, gen int64) store.Fence { return store.Fence{SessionID: id, Generation: gen} }
		batch := []conversation.Event{event("a", 1), event("b", 1), event("c", 1), event("d", 1), event("b", 2), event("a", 2)}
		err := s.AppendEvents(ctx(t), batch, fence("a", old["a"]), fence("b", old["b"]), fence("c", old["c"]), fence("a", old["a"]))
		wantFenced(t, "a batch with two stale sessions (one fenced twice)", err, "a", "c")
		for _, id := range []string{"a", "b", "c", "d"} {
			checkEvents(t, "after the refused batch, session "+id, nil, readAll(t, s, id))
		}
		// The group commit stores the rest again, without a and c.
		rest := []conversation.Event{event("b", 1), event("d", 1), event("b", 2)}
		if err := s.AppendEvents(ctx(t), rest, fence("b", old["b"])); err != nil {
			t.Fatalf("the batch without the stale sessions: %v", err)
		}
		checkEvents(t, "b", events("b", 1, 2), readAll(t, s, "b"))
		checkEvents(t, "d", events("d", 1, 1), readAll(t, s, "d"))
		checkEvents(t, "a", nil, readAll(t, s, "a"))
	})

	t.Run("FenceWithoutLease", func(t *testing.T) {
		s := h.store(t)
		createSession(t, s, "s1")
		wantFenced(t, "a fence of a session never leased", s.AppendEvents(ctx(t), events("s1", 1, 1), store.Fence{SessionID: "s1", Generation: 1}), "s1")
		wantFenced(t, "a fence of an unknown session", s.AppendEvents(ctx(t), events("s1", 1, 1), store.Fence{SessionID: "ghost", Generation: 1}), "ghost")
		g := acquire(t, s, "s1", "server-a", longTTL)
		if err := s.AppendEvents(ctx(t), nil, store.Fence{SessionID: "s1", Generation: g}); err != nil {
			t.Fatalf("an empty batch with a current fence: %v", err)
		}
		wantFenced(t, "an empty batch with a stale fence", s.AppendEvents(ctx(t), nil, store.Fence{SessionID: "s1", Generation: g + 1}), "s1")
		// Deleting the session ends its lease: a fence of the old session
		// does not pass on a new one of the same id.
		if err := s.DeleteSession(ctx(t), "s1"); err != nil {
			t.Fatal(err)
		}
		createSession(t, s, "s1")
		wantFenced(t, "a fence of a deleted session", s.AppendEvents(ctx(t), events("s1", 1, 1), store.Fence{SessionID: "s1", Generation: g}), "s1")
		checkEvents(t, "events", nil, readAll(t, s, "s1"))
	})

	t.Run("MalformedFenceRejected", func(t *testing.T) {
		s := h.store(t)
		createSession(t, s, "s1")
		g := acquire(t, s, "s1", "server-a", longTTL)
		for name, f := range map[string]store.Fence{
			"no session":          {Generation: g},
			"generation 0":        {SessionID: "s1"},
			"negative generation": {SessionID: "s1", Generation: -1},
		} {
			err := s.AppendEvents(ctx(t), events("s1", 1, 1), f)
			if err == nil || errors.Is(err, store.ErrFenced) {
				t.Errorf("AppendEvents with a fence with %s: got %v, want an error other than ErrFenced", name, err)
			}
		}
		err := s.UpdateSession(ctx(t), minimalSession("s1", baseTime), store.Fence{SessionID: "other", Generation: g})
		if err == nil || errors.Is(err, store.ErrFenced) {
			t.Errorf("UpdateSession with another session's fence: got %v, want an error other than ErrFenced", err)
		}
		checkEvents(t, "events", nil, readAll(t, s, "s1"))
	})

	t.Run("FencedUpdateSession", func(t *testing.T) {
		s := h.store(t)
		createSession(t, s, "s1")
		ga := acquire(t, s, "s1", "server-a", shortTTL)
		fa := store.Fence{SessionID: "s1", Generation: ga}
		running := minimalSession("s1", baseTime)
		running.Status = conversation.SessionRunning
		if err := s.UpdateSession(ctx(t), running, fa); err != nil {
			t.Fatalf("fenced UpdateSession by the holder: %v", err)
		}
		gb := takeOver(t, s, "s1", "server-b")
		stale := minimalSession("s1", baseTime)
		stale.Status = conversation.SessionTerminated
		if err := s.UpdateSession(ctx(t), stale, fa); !errors.Is(err, store.ErrFenced) {
			t.Fatalf("UpdateSession by the former holder: got %v, want ErrFenced", err)
		}
		got, err := s.LoadSession(ctx(t), "s1")
		if err != nil {
			t.Fatal(err)
		}
		if d := diffSession(running, got); len(d) > 0 {
			t.Fatalf("a refused UpdateSession changed the record:\n  %v", d)
		}
		if err := s.UpdateSession(ctx(t), stale, store.Fence{SessionID: "s1", Generation: gb}); err != nil {
			t.Fatalf("fenced UpdateSession by the new holder: %v", err)
		}
		if err := s.UpdateSession(ctx(t), running); err != nil {
			t.Fatalf("unfenced UpdateSession: %v", err)
		}
	})

	t.Run("RacingTakeOversGetOneNewGeneration", func(t *testing.T) {
		s := h.store(t)
		createSession(t, s, "s1")
		g0 := acquire(t, s, "s1", "server-old", shortTTL)
		time.Sleep(2 * shortTTL)
		gens := make([]int64, racers)
		raceOne(t, store.ErrLeaseHeld, "ErrLeaseHeld", "holders took the lease over", func(r int) error {
			g, err := s.AcquireLease(ctx(t), "s1", "server-"+string(rune('a'+r)), longTTL)
			gens[r] = g
			return err
		})
		var won int64
		for _, g := range gens {
			won = max(won, g)
		}
		if won <= g0 {
			t.Fatalf("the winner's generation %d, want > %d", won, g0)
		}
		if err := s.AppendEvents(ctx(t), events("s1", 1, 1), store.Fence{SessionID: "s1", Generation: g0}); !errors.Is(err, store.ErrFenced) {
			t.Fatalf("the old holder's append after the race: %v, want ErrFenced", err)
		}
		if err := s.AppendEvents(ctx(t), events("s1", 1, 1), store.Fence{SessionID: "s1", Generation: won}); err != nil {
			t.Fatalf("the winner's append: %v", err)
		}
	})
}
