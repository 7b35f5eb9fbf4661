package sqlite_test

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/agentd/agentd/conversation"
	"github.com/agentd/agentd/store"
)

// testdata/schema3.db was written by agentd before fencing (commit dca6832,
// schema version 3) with two sessions of 12 events each (10 in events, 2 in
// the event tail), a transcript, and a ten-year lease of session "running"
// held by node-a. Opening it with this binary migrates it; nothing is lost,
// the held lease is generation 1 and fencing works on it.
func TestUpgradeDatabaseFromBeforeFencing(t *testing.T) {
	src, err := os.ReadFile("testdata/schema3.db")
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "agentd.db")
	if err := os.WriteFile(path, src, 0o600); err != nil {
		t.Fatal(err)
	}
	s := openTemp2(t, path)
	defer s.Close()
	ctx := t.Context()

	for _, id := range []string{"running", "idle"} {
		evs, err := s.ReadEvents(ctx, id, 0, 0)
		if err != nil || len(evs) != 12 || evs[0].Seq != 1 || evs[11].Seq != 12 {
			t.Fatalf("%s: %d events after the upgrade, %v", id, len(evs), err)
		}
	}
	if data, err := s.LoadTranscript(ctx, "running", "t.jsonl"); err != nil || string(data) != "{}\n" {
		t.Fatalf("transcript after the upgrade: %q, %v", data, err)
	}
	if _, err := s.AcquireLease(ctx, "running", "node-b", time.Minute); !errors.Is(err, store.ErrLeaseHeld) {
		t.Fatalf("node-a's lease after the upgrade: AcquireLease by node-b = %v, want ErrLeaseHeld", err)
	}
	gen, err := s.AcquireLease(ctx, "running", "node-a", time.Minute)
	if err != nil || gen != 1 {
		t.Fatalf("node-a renews: generation %d, %v; want 1", gen, err)
	}
	e := conversation.Event{Seq: 13, Type: conversation.TypeLog, Payload: []byte(`{}`),
		Context: conversation.Context{SessionID: "running", ConversationID: "main", Source: conversation.SourceServer, Timestamp: time.Now()}}
	if err := s.AppendEvents(ctx, []conversation.Event{e}, store.Fence{SessionID: "running", Generation: 2}); !errors.Is(err, store.ErrFenced) {
		t.Fatalf("append with a generation never granted = %v, want ErrFenced", err)
	}
	if err := s.AppendEvents(ctx, []conversation.Event{e}, store.Fence{SessionID: "running", Generation: gen}); err != nil {
		t.Fatalf("append by the lease holder: %v", err)
	}
	e.Seq = 12
	if err := s.AppendEvents(ctx, []conversation.Event{e}); !errors.Is(err, store.ErrSeqConflict) {
		t.Fatalf("append of a seq stored before the upgrade (in the tail) = %v, want ErrSeqConflict", err)
	}
	// The never-leased session gets generation 1 from its first holder.
	if gen, err := s.AcquireLease(ctx, "idle", "node-b", time.Minute); err != nil || gen != 1 {
		t.Fatalf("first lease of the idle session: %d, %v", gen, err)
	}
	s.Close()
	// Opened again: nothing to migrate, the same data.
	s2 := openTemp2(t, path)
	defer s2.Close()
	if n, err := s2.LastSeq(ctx, "running"); err != nil || n != 13 {
		t.Fatalf("LastSeq after reopening = %d, %v", n, err)
	}
}
