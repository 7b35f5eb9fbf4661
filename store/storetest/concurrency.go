package storetest

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/agentd/agentd/store"
)

func (h harness) concurrency(t *testing.T) {
	t.Run("AppendsToManySessions", func(t *testing.T) {
		s := h.store(t)
		const (
			writers = 16
			batches = 30
		)
		for w := range writers {
			createSession(t, s, fmt.Sprintf("w%d", w))
		}
		var (
			wg      sync.WaitGroup
			done    atomic.Bool
			readers sync.WaitGroup
		)
		for w := range writers {
			wg.Go(func() {
				id := fmt.Sprintf("w%d", w)
				next := int64(1)
				for b := range batches {
					n := int64(1 + (w+b)%9)
					if err := s.AppendEvents(ctx(t), events(id, next, next+n-1)); err != nil {
						t.Errorf("writer %d, batch %d: %v", w, b, err)
						return
					}
					next += n
				}
			})
		}
		// Readers run alongside: every read is a prefix 1..k of the log,
		// since each writer appends its session's seqs in order.
		for r := range 4 {
			readers.Go(func() {
				for i := 0; !done.Load(); i++ {
					id := fmt.Sprintf("w%d", (r+i)%writers)
					evs, err := s.ReadEvents(ctx(t), id, 0, 0)
					if err != nil {
						t.Errorf("reader: ReadEvents(%q): %v", id, err)
						return
					}
					for j, e := range evs {
						if e.Seq != int64(j+1) {
							t.Errorf("reader: %q read seqs %v: not a prefix of the log", id, seqs(evs))
							return
						}
					}
				}
			})
		}
		wg.Wait()
		done.Store(true)
		readers.Wait()
		if t.Failed() {
			return
		}
		for w := range writers {
			id := fmt.Sprintf("w%d", w)
			var total int64
			for b := range batches {
				total += int64(1 + (w+b)%9)
			}
			checkEvents(t, id, events(id, 1, total), readAll(t, s, id))
			if n := lastSeq(t, s, id); n != total {
				t.Errorf("LastSeq(%q) = %d, want %d", id, n, total)
			}
		}
	})

	t.Run("RacingAppendsOfTheSameSeqs", func(t *testing.T) {
		s := h.store(t)
		createSession(t, s, "s1")
		raceOne(t, store.ErrSeqConflict, "ErrSeqConflict", "racers stored seqs 1..5", func(r int) error {
			batch := events("s1", 1, 5)
			for i := range batch {
				batch[i].Context.ConversationID = fmt.Sprintf("racer-%d", r)
			}
			return s.AppendEvents(ctx(t), batch)
		})
		evs := readAll(t, s, "s1")
		if len(evs) != 5 {
			t.Fatalf("stored %d events, want 5", len(evs))
		}
		for _, e := range evs {
			if e.Context.ConversationID != evs[0].Context.ConversationID {
				t.Fatalf("stored events mix racers' batches: %q and %q", evs[0].Context.ConversationID, e.Context.ConversationID)
			}
		}
	})

	t.Run("RacingCreatesOfOneID", func(t *testing.T) {
		s := h.store(t)
		raceOne(t, store.ErrExists, "ErrExists", "racers created the session", func(r int) error {
			sess := minimalSession("contested", baseTime)
			sess.Name = fmt.Sprintf("racer-%d", r)
			return s.CreateSession(ctx(t), sess)
		})
	})

	t.Run("RacingLeaseHolders", func(t *testing.T) {
		s := h.store(t)
		createSession(t, s, "s1")
		raceOne(t, store.ErrLeaseHeld, "ErrLeaseHeld", "holders got the lease", func(r int) error {
			_, err := s.AcquireLease(ctx(t), "s1", fmt.Sprintf("server-%d", r), longTTL)
			return err
		})
	})
}

// racers is how many goroutines race for one thing.
const racers = 12

// raceOne runs try(0) … try(racers-1) at once: exactly one must succeed
// and every other fail with lose (named loseName in the failure message);
// any other error fails t. won says what the winners did.
func raceOne(t *testing.T, lose error, loseName, won string, try func(r int) error) {
	t.Helper()
	var wg sync.WaitGroup
	var nWon, nLost atomic.Int32
	for r := range racers {
		wg.Go(func() {
			err := try(r)
			switch {
			case err == nil:
				nWon.Add(1)
			case errors.Is(err, lose):
				nLost.Add(1)
			default:
				t.Errorf("racer %d: %v", r, err)
			}
		})
	}
	wg.Wait()
	if nWon.Load() != 1 || nLost.Load() != racers-1 {
		t.Fatalf("%d %s, %d got %s; want exactly 1 and %d", nWon.Load(), won, nLost.Load(), loseName, racers-1)
	}
}
