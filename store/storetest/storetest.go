// Package storetest is the conformance suite for store.Store
// implementations. A store that passes Run can back an agentd server.
//
// An application embedding agentd with its own store runs the suite from a
// test in its own module:
//
//	func TestConformance(t *testing.T) {
//		storetest.Run(t, func(t *testing.T) store.Store {
//			s, err := mystore.Open(t.Context(), freshEmptyDatabase(t))
//			if err != nil {
//				t.Fatal(err)
//			}
//			return s
//		})
//	}
//
//	func BenchmarkStore(b *testing.B) {
//		storetest.Bench(b, func(b *testing.B) store.Store { … })
//	}
//
// open is called once per subtest and must return a new, empty store (no
// sessions, events, files, profiles or leases). Run closes every store it
// opens, exactly once, when the subtest ends; open must not close it too.
// Subtests do not run in parallel with each other.
//
// Beyond the method comments in package store, the suite pins down these
// details, which callers rely on:
//
//   - Times (session times, event timestamps, file UpdatedAt) keep their
//     instant to within a millisecond; the location need not survive. A zero
//     time stays zero.
//   - Event payloads round-trip byte for byte (formatting included); the
//     session's JSON fields (SessionOptions, SandboxState, AgentState) need
//     only round-trip as equal JSON values.
//   - Context.Actor nil and non-nil are distinct after a round trip.
//   - Transcript names and workspace paths sort by byte order (Go's
//     sort.Strings), not a locale collation.
//   - A zero-length transcript or workspace file exists: it is listed and
//     loads without ErrNotFound.
//   - Data passed in or returned is not shared with the store: changing a
//     slice after AppendEvents/SaveWorkspaceFile, or changing a returned
//     slice, does not change what is stored.
//   - A call whose context is already cancelled returns an error matching
//     context.Canceled and has no effect. A cancelled AppendEvents stores its
//     whole batch or none of it, and returns nil only if it stored it.
//   - The suite creates a session before storing anything for it, so a store
//     may refuse events, files, transcripts or leases of unknown sessions.
//   - Fencing (store.Fence): a lease's generation grows exactly when the
//     lease passes to another holder; a fenced AppendEvents or UpdateSession
//     whose generation is stale stores nothing and fails with a
//     *store.FencedError naming every stale session of the call, checked
//     before seq conflicts.
//   - Identity (store.IdentityStore, optional): a session's Owner and Tenant
//     round-trip through Create, Load, List and Update; users are unique by
//     id and by (Issuer, Subject) when Subject is set; a revoked token keeps
//     its first revocation time and a use never moves LastUsedAt back;
//     DeleteSession removes the session's shares; usage is counted per UTC
//     day and adds up.
package storetest

import (
	"context"
	"testing"

	"github.com/agentd/agentd/store"
)

// Run runs the conformance suite against stores made by open.
func Run(t *testing.T, open func(t *testing.T) store.Store) {
	t.Helper()
	h := harness{open: open}
	t.Run("Sessions", h.sessions)
	t.Run("Events", h.events)
	t.Run("Transcripts", h.transcripts)
	t.Run("WorkspaceFiles", h.workspaceFiles)
	t.Run("Profiles", h.profiles)
	t.Run("Leases", h.leases)
	t.Run("OrphanedSessions", h.orphans)
	t.Run("Fencing", h.fencing)
	t.Run("DeleteSession", h.deleteSession)
	t.Run("Concurrency", h.concurrency)
	t.Run("Cancellation", h.cancellation)
	// Optional interfaces (audit.go): skipped for stores without them.
	t.Run("Audit", h.audit)
	t.Run("ModelTokens", h.modelTokens)
	// Users, tokens, shares, provider keys, budgets, usage, the access log
	// and session owners (identity.go): skipped for stores without
	// store.IdentityStore.
	t.Run("Identity", h.identity)
	// store.ArtifactStore (artifacts.go): skipped for stores without it.
	// Quotas have their own entry point, RunArtifactQuota.
	t.Run("Artifacts", h.artifacts)
}

// harness carries the open function to the subtests.
type harness struct {
	open func(t *testing.T) store.Store
}

// store opens a fresh store for t and closes it when t ends.
func (h harness) store(t *testing.T) store.Store {
	t.Helper()
	s := h.open(t)
	if s == nil {
		t.Fatal("open returned a nil store")
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return s
}

// ctx is the context for store calls made by t.
func ctx(t *testing.T) context.Context { return t.Context() }
