package storetest

import (
	"errors"
	"testing"
	"time"

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
