package storetest

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/agentd/agentd/conversation"
	"github.com/agentd/agentd/store"
)

// shortTTL is a lease lifetime the suite waits out; long is one it never
// reaches.
const (
	shortTTL = 50 * time.Millisecond
	longTTL  = time.Hour
)

func (h harness) leases(t *testing.T) {
	t.Run("AcquireRenewHeld", func(t *testing.T) {
		s := h.store(t)
		createSession(t, s, "s1")
		if _, err := s.AcquireLease(ctx(t), "s1", "server-a", longTTL); err != nil {
			t.Fatalf("AcquireLease: %v", err)
		}
		if _, err := s.AcquireLease(ctx(t), "s1", "server-a", longTTL); err != nil {
			t.Fatalf("renewing by the same holder: %v", err)
		}
		if _, err := s.AcquireLease(ctx(t), "s1", "server-b", longTTL); !errors.Is(err, store.ErrLeaseHeld) {
			t.Fatalf("AcquireLease by another holder: got %v, want ErrLeaseHeld", err)
		}
		// Still held by a after b's failed attempt.
		if _, err := s.AcquireLease(ctx(t), "s1", "server-a", longTTL); err != nil {
			t.Fatalf("renewing after another holder's failed attempt: %v", err)
		}
	})

	t.Run("LeasesArePerSession", func(t *testing.T) {
		s := h.store(t)
		createSession(t, s, "s1")
		createSession(t, s, "s2")
		if _, err := s.AcquireLease(ctx(t), "s1", "server-a", longTTL); err != nil {
			t.Fatal(err)
		}
		if _, err := s.AcquireLease(ctx(t), "s2", "server-b", longTTL); err != nil {
			t.Fatalf("lease on another session: %v", err)
		}
		if _, err := s.AcquireLease(ctx(t), "s2", "server-a", longTTL); !errors.Is(err, store.ErrLeaseHeld) {
			t.Fatalf("AcquireLease of s2 by a: got %v, want ErrLeaseHeld", err)
		}
	})

	t.Run("ExpiresAfterTTL", func(t *testing.T) {
		s := h.store(t)
		createSession(t, s, "s1")
		if _, err := s.AcquireLease(ctx(t), "s1", "server-a", shortTTL); err != nil {
			t.Fatal(err)
		}
		time.Sleep(shortTTL)
		eventually(t, func() error { _, err := s.AcquireLease(ctx(t), "s1", "server-b", longTTL); return err })
		// The takeover is a real lease: a cannot renew its expired one.
		if _, err := s.AcquireLease(ctx(t), "s1", "server-a", longTTL); !errors.Is(err, store.ErrLeaseHeld) {
			t.Fatalf("renewal by the expired holder: got %v, want ErrLeaseHeld", err)
		}
		// And a's release after the takeover changes nothing.
		if err := s.ReleaseLease(ctx(t), "s1", "server-a"); err != nil {
			t.Fatalf("ReleaseLease by the former holder: %v", err)
		}
		if _, err := s.AcquireLease(ctx(t), "s1", "server-c", longTTL); !errors.Is(err, store.ErrLeaseHeld) {
			t.Fatalf("after the former holder's release: got %v, want ErrLeaseHeld", err)
		}
	})

	t.Run("RenewExtends", func(t *testing.T) {
		s := h.store(t)
		createSession(t, s, "s1")
		if _, err := s.AcquireLease(ctx(t), "s1", "server-a", shortTTL); err != nil {
			t.Fatal(err)
		}
		if _, err := s.AcquireLease(ctx(t), "s1", "server-a", longTTL); err != nil {
			t.Fatal(err)
		}
		time.Sleep(3 * shortTTL)
		if _, err := s.AcquireLease(ctx(t), "s1", "server-b", longTTL); !errors.Is(err, store.ErrLeaseHeld) {
			t.Fatalf("after renewal past the first ttl: got %v, want ErrLeaseHeld", err)
		}
	})

	t.Run("Release", func(t *testing.T) {
		s := h.store(t)
		createSession(t, s, "s1")
		if _, err := s.AcquireLease(ctx(t), "s1", "server-a", longTTL); err != nil {
			t.Fatal(err)
		}
		if err := s.ReleaseLease(ctx(t), "s1", "server-b"); err != nil {
			t.Fatalf("ReleaseLease by a non-holder: %v", err)
		}
		if _, err := s.AcquireLease(ctx(t), "s1", "server-b", longTTL); !errors.Is(err, store.ErrLeaseHeld) {
			t.Fatalf("release by a non-holder freed the lease: AcquireLease = %v", err)
		}
		if err := s.ReleaseLease(ctx(t), "s1", "server-a"); err != nil {
			t.Fatalf("ReleaseLease by the holder: %v", err)
		}
		if _, err := s.AcquireLease(ctx(t), "s1", "server-b", longTTL); err != nil {
			t.Fatalf("AcquireLease after release: %v", err)
		}
		if err := s.ReleaseLease(ctx(t), "s1", "server-b"); err != nil {
			t.Fatal(err)
		}
		if err := s.ReleaseLease(ctx(t), "s1", "server-b"); err != nil {
			t.Fatalf("releasing twice: %v", err)
		}
		if err := s.ReleaseLease(ctx(t), "never-created", "server-a"); err != nil {
			t.Fatalf("ReleaseLease of an unknown session: %v", err)
		}
	})
}

// eventually retries f until it succeeds, failing t after ten seconds. It
// absorbs clock granularity in stores, never a timing assertion.
func eventually(t *testing.T, f func() error) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		err := f()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("still failing after 10s: %v", err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// orphans checks store.OrphanLister, for stores that have it: active
// sessions without an unexpired lease are listed, and only those.
func (h harness) orphans(t *testing.T) {
	s := h.store(t)
	ol, ok := s.(store.OrphanLister)
	if !ok {
		t.Skip("the store has no OrphanedSessions")
	}
	set := func(id string, st conversation.SessionStatus) {
		t.Helper()
		rec, err := s.LoadSession(ctx(t), id)
		if err != nil {
			t.Fatal(err)
		}
		rec.Status = st
		if err := s.UpdateSession(ctx(t), rec); err != nil {
			t.Fatal(err)
		}
	}
	for _, id := range []string{"created", "running-unleased", "idle-held", "ready-expiring", "terminated-unleased", "starting-released"} {
		createSession(t, s, id)
	}
	set("running-unleased", conversation.SessionRunning)
	set("idle-held", conversation.SessionIdle)
	set("ready-expiring", conversation.SessionReady)
	set("terminated-unleased", conversation.SessionTerminated)
	set("starting-released", conversation.SessionStarting)
	for id, ttl := range map[string]time.Duration{"idle-held": longTTL, "ready-expiring": shortTTL, "starting-released": longTTL} {
		if _, err := s.AcquireLease(ctx(t), id, "server-a", ttl); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.ReleaseLease(ctx(t), "starting-released", "server-a"); err != nil {
		t.Fatal(err)
	}
	time.Sleep(shortTTL)
	want := "[ready-expiring running-unleased starting-released]"
	eventually(t, func() error {
		ids, err := ol.OrphanedSessions(ctx(t))
		if err != nil {
			return err
		}
		if got := fmt.Sprint(ids); got != want {
			return fmt.Errorf("OrphanedSessions = %s, want %s", got, want)
		}
		return nil
	})
	// Taking one over takes it off the list.
	if _, err := s.AcquireLease(ctx(t), "running-unleased", "server-b", longTTL); err != nil {
		t.Fatal(err)
	}
	ids, err := ol.OrphanedSessions(ctx(t))
	if err != nil || fmt.Sprint(ids) != "[ready-expiring starting-released]" {
		t.Fatalf("after a take-over: OrphanedSessions = %v, %v", ids, err)
	}
}
