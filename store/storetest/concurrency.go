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
		const racers = 12
		var wg sync.WaitGroup
		var won, lost atomic.Int32
		for r := range racers {
			wg.Go(func() {
				batch := events("s1", 1, 5)
				for i := range batch {
					batch[i].Context.ConversationID = fmt.Sprintf("racer-%d", r)
				}
				err := s.AppendEvents(ctx(t), batch)
				switch {
				case err == nil:
					won.Add(1)
				case errors.Is(err, store.ErrSeqConflict):
					lost.Add(1)
				default:
					t.Errorf("racer %d: %v", r, err)
				}
			})
		}
		wg.Wait()
		if won.Load() != 1 || lost.Load() != racers-1 {
			t.Fatalf("%d racers stored seqs 1..5, %d got ErrSeqConflict; want exactly 1 and %d", won.Load(), lost.Load(), racers-1)
		}
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
		const racers = 12
		var wg sync.WaitGroup
		var won, lost atomic.Int32
		for r := range racers {
			wg.Go(func() {
				sess := minimalSession("contested", baseTime)
				sess.Name = fmt.Sprintf("racer-%d", r)
				err := s.CreateSession(ctx(t), sess)
				switch {
				case err == nil:
					won.Add(1)
				case errors.Is(err, store.ErrExists):
					lost.Add(1)
				default:
					t.Errorf("racer %d: %v", r, err)
				}
			})
		}
		wg.Wait()
		if won.Load() != 1 || lost.Load() != racers-1 {
			t.Fatalf("%d racers created the session, %d got ErrExists; want exactly 1 and %d", won.Load(), lost.Load(), racers-1)
		}
	})

	t.Run("RacingLeaseHolders", func(t *testing.T) {
		s := h.store(t)
		createSession(t, s, "s1")
		const racers = 12
		var wg sync.WaitGroup
		var won, lost atomic.Int32
		for r := range racers {
			wg.Go(func() {
				err := s.AcquireLease(ctx(t), "s1", fmt.Sprintf("server-%d", r), longTTL)
				switch {
				case err == nil:
					won.Add(1)
				case errors.Is(err, store.ErrLeaseHeld):
					lost.Add(1)
				default:
					t.Errorf("racer %d: %v", r, err)
				}
			})
		}
		wg.Wait()
		if won.Load() != 1 || lost.Load() != racers-1 {
			t.Fatalf("%d holders got the lease, %d got ErrLeaseHeld; want exactly 1 and %d", won.Load(), lost.Load(), racers-1)
		}
	})
}
