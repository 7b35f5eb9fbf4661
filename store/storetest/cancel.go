package storetest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/agentd/agentd/profile"
	"github.com/agentd/agentd/store"
)

func (h harness) cancellation(t *testing.T) {
	t.Run("CancelledContextFailsWithoutEffect", func(t *testing.T) {
		s := h.store(t)
		createSession(t, s, "s1")
		if err := s.AppendEvents(ctx(t), events("s1", 1, 2)); err != nil {
			t.Fatal(err)
		}
		if _, err := s.AcquireLease(ctx(t), "s1", "holder", longTTL); err != nil {
			t.Fatal(err)
		}
		file := store.WorkspaceFile{Path: "f", Content: []byte("f"), Mode: 0o644, UpdatedAt: baseTime}
		if err := s.SaveWorkspaceFile(ctx(t), "s1", file); err != nil {
			t.Fatal(err)
		}

		cctx, cancel := context.WithCancel(ctx(t))
		cancel()
		calls := []struct {
			name string
			call func(context.Context) error
		}{
			{"ListSessions", func(c context.Context) error { _, err := s.ListSessions(c); return err }},
			{"LoadSession", func(c context.Context) error { _, err := s.LoadSession(c, "s1"); return err }},
			{"CreateSession", func(c context.Context) error { return s.CreateSession(c, minimalSession("new", baseTime)) }},
			{"UpdateSession", func(c context.Context) error { return s.UpdateSession(c, fullSession("s1", baseTime)) }},
			{"DeleteSession", func(c context.Context) error { return s.DeleteSession(c, "s1") }},
			{"AppendEvents", func(c context.Context) error { return s.AppendEvents(c, events("s1", 3, 4)) }},
			{"ReadEvents", func(c context.Context) error { _, err := s.ReadEvents(c, "s1", 0, 0); return err }},
			{"LastSeq", func(c context.Context) error { _, err := s.LastSeq(c, "s1"); return err }},
			{"SaveTranscript", func(c context.Context) error { return s.SaveTranscript(c, "s1", "t", []byte("t")) }},
			{"LoadTranscript", func(c context.Context) error { _, err := s.LoadTranscript(c, "s1", "t"); return err }},
			{"ListTranscripts", func(c context.Context) error { _, err := s.ListTranscripts(c, "s1"); return err }},
			{"SaveWorkspaceFile", func(c context.Context) error {
				return s.SaveWorkspaceFile(c, "s1", store.WorkspaceFile{Path: "g", UpdatedAt: baseTime})
			}},
			{"DeleteSessionFile", func(c context.Context) error { return s.DeleteSessionFile(c, "s1", "f") }},
			{"ListWorkspaceFiles", func(c context.Context) error { _, err := s.ListWorkspaceFiles(c, "s1"); return err }},
			{"ListAgentProfiles", func(c context.Context) error { _, err := s.ListAgentProfiles(c); return err }},
			{"LoadAgentProfile", func(c context.Context) error { _, err := s.LoadAgentProfile(c, "p"); return err }},
			{"SaveAgentProfile", func(c context.Context) error { return s.SaveAgentProfile(c, profile.Profile{ID: "p", Name: "P"}) }},
			{"AcquireLease", func(c context.Context) error { _, err := s.AcquireLease(c, "s1", "other", longTTL); return err }},
			{"ReleaseLease", func(c context.Context) error { return s.ReleaseLease(c, "s1", "holder") }},
		}
		for _, c := range calls {
			if err := callWithin(c.call, cctx); !errors.Is(err, context.Canceled) {
				t.Errorf("%s with a cancelled context: got %v, want an error matching context.Canceled", c.name, err)
			}
		}

		// Nothing changed, and the store still works.
		got, err := s.LoadSession(ctx(t), "s1")
		if err != nil {
			t.Fatalf("LoadSession after cancelled calls: %v", err)
		}
		if d := diffSession(minimalSession("s1", baseTime), got); len(d) > 0 {
			t.Errorf("a cancelled UpdateSession changed the session:\n  %v", d)
		}
		if _, err := s.LoadSession(ctx(t), "new"); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("a cancelled CreateSession created the session: LoadSession = %v", err)
		}
		checkEvents(t, "events after a cancelled append", events("s1", 1, 2), readAll(t, s, "s1"))
		checkTranscriptNames(t, s, "s1", nil)
		checkFiles(t, s, "s1", []store.WorkspaceFile{file})
		if _, err := s.LoadAgentProfile(ctx(t), "p"); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("a cancelled SaveAgentProfile saved the profile: LoadAgentProfile = %v", err)
		}
		if _, err := s.AcquireLease(ctx(t), "s1", "other", longTTL); !errors.Is(err, store.ErrLeaseHeld) {
			t.Errorf("a cancelled ReleaseLease released the lease: AcquireLease = %v", err)
		}
	})

	t.Run("ExpiredDeadline", func(t *testing.T) {
		s := h.store(t)
		createSession(t, s, "s1")
		dctx, cancel := context.WithDeadline(ctx(t), time.Now().Add(-time.Second))
		defer cancel()
		if err := callWithin(func(c context.Context) error { return s.AppendEvents(c, events("s1", 1, 3)) }, dctx); !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("AppendEvents past its deadline: got %v, want an error matching context.DeadlineExceeded", err)
		}
		if err := callWithin(func(c context.Context) error { _, err := s.ReadEvents(c, "s1", 0, 0); return err }, dctx); !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("ReadEvents past its deadline: got %v, want an error matching context.DeadlineExceeded", err)
		}
		checkEvents(t, "events after an expired append", nil, readAll(t, s, "s1"))
	})

	t.Run("CancelDuringAppendsIsAllOrNothing", func(t *testing.T) {
		s := h.store(t)
		const (
			writers   = 8
			batchSize = 25
		)
		for w := range writers {
			createSession(t, s, fmt.Sprintf("w%d", w))
		}
		cctx, cancel := context.WithCancel(ctx(t))
		stored := make([]int64, writers) // seqs each writer saw stored
		var wg sync.WaitGroup
		start := make(chan struct{})
		for w := range writers {
			wg.Go(func() {
				id := fmt.Sprintf("w%d", w)
				<-start
				for next := int64(1); ; next += batchSize {
					cancelledBefore := cctx.Err() != nil
					err := s.AppendEvents(cctx, events(id, next, next+batchSize-1))
					if err == nil && cancelledBefore {
						stored[w] = next + batchSize - 1
						t.Errorf("writer %d: AppendEvents with a cancelled context stored its batch", w)
						return
					}
					if err != nil {
						if !errors.Is(err, context.Canceled) {
							t.Errorf("writer %d: AppendEvents after cancel: got %v, want an error matching context.Canceled", w, err)
						}
						return
					}
					stored[w] = next + batchSize - 1
				}
			})
		}
		close(start)
		// Let some batches through, then cancel while others are in flight.
		eventually(t, func() error {
			for w := range writers {
				if n, err := s.LastSeq(ctx(t), fmt.Sprintf("w%d", w)); err != nil || n < 2*batchSize {
					return fmt.Errorf("writer %d has stored %d events", w, n)
				}
			}
			return nil
		})
		cancel()
		wg.Wait()
		for w := range writers {
			id := fmt.Sprintf("w%d", w)
			checkEvents(t, id+" after cancellation (only batches AppendEvents reported stored)",
				events(id, 1, stored[w]), readAll(t, s, id))
		}
	})
}

// callWithin runs call(ctx) and fails fast instead of hanging when call
// ignores its context: a store that blocks for a minute on a cancelled
// context is broken.
func callWithin(call func(context.Context) error, c context.Context) error {
	done := make(chan error, 1)
	go func() { done <- call(c) }()
	select {
	case err := <-done:
		return err
	case <-time.After(time.Minute):
		return errors.New("call did not return within a minute of its context ending")
	}
}
