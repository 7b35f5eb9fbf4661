package storetest

import (
	"errors"
	"testing"

	"github.com/agentd/agentd/store"
)

func (h harness) deleteSession(t *testing.T) {
	t.Run("RemovesEverythingOfTheSessionOnly", func(t *testing.T) {
		s := h.store(t)
		file := store.WorkspaceFile{Path: "a.txt", Content: []byte("a"), Mode: 0o644, UpdatedAt: baseTime}
		for _, id := range []string{"doomed", "kept"} {
			if err := s.CreateSession(ctx(t), fullSession(id, baseTime)); err != nil {
				t.Fatal(err)
			}
			if err := s.AppendEvents(ctx(t), events(id, 1, 5)); err != nil {
				t.Fatal(err)
			}
			if err := s.SaveTranscript(ctx(t), id, "t.jsonl", []byte(id)); err != nil {
				t.Fatal(err)
			}
			if err := s.SaveWorkspaceFile(ctx(t), id, file); err != nil {
				t.Fatal(err)
			}
			if _, err := s.AcquireLease(ctx(t), id, "holder-"+id, longTTL); err != nil {
				t.Fatal(err)
			}
		}
		if err := s.SaveAgentProfile(ctx(t), fullProfile("p")); err != nil {
			t.Fatal(err)
		}

		if err := s.DeleteSession(ctx(t), "doomed"); err != nil {
			t.Fatalf("DeleteSession: %v", err)
		}

		if _, err := s.LoadSession(ctx(t), "doomed"); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("LoadSession after delete: got %v, want ErrNotFound", err)
		}
		if err := s.DeleteSession(ctx(t), "doomed"); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("second DeleteSession: got %v, want ErrNotFound", err)
		}
		checkEvents(t, "events of the deleted session", nil, readAll(t, s, "doomed"))
		if n := lastSeq(t, s, "doomed"); n != 0 {
			t.Errorf("LastSeq of the deleted session = %d", n)
		}
		checkTranscriptNames(t, s, "doomed", nil)
		if _, err := s.LoadTranscript(ctx(t), "doomed", "t.jsonl"); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("LoadTranscript after delete: got %v, want ErrNotFound", err)
		}
		checkFiles(t, s, "doomed", nil)

		// The id can be reused, and nothing of the old session shows
		// through: no events, and no lease (another holder gets it).
		if err := s.CreateSession(ctx(t), minimalSession("doomed", baseTime)); err != nil {
			t.Fatalf("CreateSession of a deleted id: %v", err)
		}
		if n := lastSeq(t, s, "doomed"); n != 0 {
			t.Errorf("LastSeq of the re-created session = %d", n)
		}
		if err := s.AppendEvents(ctx(t), events("doomed", 1, 2)); err != nil {
			t.Errorf("AppendEvents to the re-created session from seq 1: %v", err)
		}
		if _, err := s.AcquireLease(ctx(t), "doomed", "someone-else", longTTL); err != nil {
			t.Errorf("the deleted session's lease survived: %v", err)
		}
		checkFiles(t, s, "doomed", nil)
		checkTranscriptNames(t, s, "doomed", nil)

		// The other session is untouched.
		got, err := s.LoadSession(ctx(t), "kept")
		if err != nil {
			t.Fatalf("LoadSession of the other session: %v", err)
		}
		if d := diffSession(fullSession("kept", baseTime), got); len(d) > 0 {
			t.Errorf("other session changed:\n  %v", d)
		}
		checkEvents(t, "events of the other session", events("kept", 1, 5), readAll(t, s, "kept"))
		checkTranscript(t, s, "kept", "t.jsonl", []byte("kept"))
		checkFiles(t, s, "kept", []store.WorkspaceFile{file})
		if _, err := s.AcquireLease(ctx(t), "kept", "someone-else", longTTL); !errors.Is(err, store.ErrLeaseHeld) {
			t.Errorf("the other session's lease: AcquireLease = %v, want ErrLeaseHeld", err)
		}
		if _, err := s.LoadAgentProfile(ctx(t), "p"); err != nil {
			t.Errorf("profile gone after a session delete: %v", err)
		}
		list, err := s.ListSessions(ctx(t))
		if err != nil {
			t.Fatal(err)
		}
		if len(list) != 2 {
			t.Errorf("ListSessions = %v, want the re-created and the kept session", ids(list))
		}
	})
}
