package storetest

import (
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/agentd/agentd/conversation"
	"github.com/agentd/agentd/store"
)

func (h harness) sessions(t *testing.T) {
	t.Run("CreateLoadRoundTrip", func(t *testing.T) {
		s := h.store(t)
		for _, want := range []store.Session{fullSession("full", baseTime), minimalSession("minimal", baseTime)} {
			if err := s.CreateSession(ctx(t), want); err != nil {
				t.Fatalf("CreateSession(%q): %v", want.ID, err)
			}
			got, err := s.LoadSession(ctx(t), want.ID)
			if err != nil {
				t.Fatalf("LoadSession(%q): %v", want.ID, err)
			}
			if d := diffSession(want, got); len(d) > 0 {
				t.Errorf("session %q after round trip:\n  %v", want.ID, d)
			}
		}
	})

	t.Run("CreateTakenIDIsErrExists", func(t *testing.T) {
		s := h.store(t)
		orig := fullSession("s1", baseTime)
		if err := s.CreateSession(ctx(t), orig); err != nil {
			t.Fatal(err)
		}
		dup := minimalSession("s1", baseTime.Add(time.Hour))
		if err := s.CreateSession(ctx(t), dup); !errors.Is(err, store.ErrExists) {
			t.Fatalf("CreateSession of a taken id: got %v, want ErrExists", err)
		}
		got, err := s.LoadSession(ctx(t), "s1")
		if err != nil {
			t.Fatal(err)
		}
		if d := diffSession(orig, got); len(d) > 0 {
			t.Errorf("failed CreateSession changed the stored record:\n  %v", d)
		}
	})

	t.Run("LoadMissingIsErrNotFound", func(t *testing.T) {
		s := h.store(t)
		createSession(t, s, "present")
		if _, err := s.LoadSession(ctx(t), "absent"); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("LoadSession of a missing id: got %v, want ErrNotFound", err)
		}
	})

	t.Run("UpdateReplacesRecord", func(t *testing.T) {
		s := h.store(t)
		if err := s.CreateSession(ctx(t), minimalSession("s1", baseTime)); err != nil {
			t.Fatal(err)
		}
		want := fullSession("s1", baseTime.Add(-time.Minute))
		if err := s.UpdateSession(ctx(t), want); err != nil {
			t.Fatalf("UpdateSession: %v", err)
		}
		got, err := s.LoadSession(ctx(t), "s1")
		if err != nil {
			t.Fatal(err)
		}
		if d := diffSession(want, got); len(d) > 0 {
			t.Errorf("after UpdateSession:\n  %v", d)
		}

		// Replacing clears fields the new record leaves empty.
		back := minimalSession("s1", baseTime)
		back.Status = conversation.SessionTerminated
		if err := s.UpdateSession(ctx(t), back); err != nil {
			t.Fatalf("UpdateSession: %v", err)
		}
		got, err = s.LoadSession(ctx(t), "s1")
		if err != nil {
			t.Fatal(err)
		}
		if d := diffSession(back, got); len(d) > 0 {
			t.Errorf("after UpdateSession to a sparser record:\n  %v", d)
		}
	})

	t.Run("UpdateMissingIsErrNotFound", func(t *testing.T) {
		s := h.store(t)
		createSession(t, s, "other")
		if err := s.UpdateSession(ctx(t), fullSession("ghost", baseTime)); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("UpdateSession of a missing id: got %v, want ErrNotFound", err)
		}
		if _, err := s.LoadSession(ctx(t), "ghost"); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("UpdateSession of a missing id created it: LoadSession = %v", err)
		}
		list, err := s.ListSessions(ctx(t))
		if err != nil {
			t.Fatal(err)
		}
		if len(list) != 1 || list[0].ID != "other" {
			t.Fatalf("ListSessions after a failed update: %v", ids(list))
		}
	})

	t.Run("ListEmpty", func(t *testing.T) {
		s := h.store(t)
		list, err := s.ListSessions(ctx(t))
		if err != nil {
			t.Fatalf("ListSessions on an empty store: %v", err)
		}
		if len(list) != 0 {
			t.Fatalf("ListSessions on an empty store: %v", ids(list))
		}
	})

	t.Run("ListNewestFirst", func(t *testing.T) {
		s := h.store(t)
		// Created out of order, so insertion order and creation time disagree.
		offsets := map[string]time.Duration{
			"b": 2 * time.Hour, "d": 4 * time.Hour, "a": time.Hour, "e": 5 * time.Hour, "c": 3 * time.Hour,
		}
		for _, id := range []string{"b", "d", "a", "e", "c"} {
			sess := fullSession(id, baseTime.Add(offsets[id]))
			sess.Name = "session " + id
			if err := s.CreateSession(ctx(t), sess); err != nil {
				t.Fatal(err)
			}
		}
		list, err := s.ListSessions(ctx(t))
		if err != nil {
			t.Fatal(err)
		}
		got := ids(list)
		want := []string{"e", "d", "c", "b", "a"}
		if !equalStrings(got, want) {
			t.Fatalf("ListSessions order: got %v, want %v (newest CreatedAt first)", got, want)
		}
		for _, sess := range list {
			want := fullSession(sess.ID, baseTime.Add(offsets[sess.ID]))
			want.Name = "session " + sess.ID
			if d := diffSession(want, sess); len(d) > 0 {
				t.Errorf("listed session %q:\n  %v", sess.ID, d)
			}
		}

		// Updating a session's activity does not move it: the order is by
		// creation.
		upd := fullSession("a", baseTime.Add(time.Hour))
		upd.Name = "session a"
		upd.LastActivity = baseTime.Add(10 * time.Hour)
		if err := s.UpdateSession(ctx(t), upd); err != nil {
			t.Fatal(err)
		}
		list, err = s.ListSessions(ctx(t))
		if err != nil {
			t.Fatal(err)
		}
		if got := ids(list); !equalStrings(got, want) {
			t.Fatalf("ListSessions order after an update: got %v, want %v", got, want)
		}
	})

	t.Run("ReturnedRecordIsACopy", func(t *testing.T) {
		s := h.store(t)
		want := fullSession("s1", baseTime)
		in := fullSession("s1", baseTime)
		if err := s.CreateSession(ctx(t), in); err != nil {
			t.Fatal(err)
		}
		scribble(in.SessionOptions)
		got, err := s.LoadSession(ctx(t), "s1")
		if err != nil {
			t.Fatal(err)
		}
		scribble(got.SandboxState)
		got, err = s.LoadSession(ctx(t), "s1")
		if err != nil {
			t.Fatal(err)
		}
		if d := diffSession(want, got); len(d) > 0 {
			t.Errorf("stored session changed through a caller's slice:\n  %v", d)
		}
	})

	t.Run("DeleteMissingIsErrNotFound", func(t *testing.T) {
		s := h.store(t)
		createSession(t, s, "present")
		if err := s.DeleteSession(ctx(t), "absent"); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("DeleteSession of a missing id: got %v, want ErrNotFound", err)
		}
		if _, err := s.LoadSession(ctx(t), "present"); err != nil {
			t.Fatalf("another session is gone after a failed delete: %v", err)
		}
	})

	t.Run("RawJSONFieldsKeepTheirValues", func(t *testing.T) {
		s := h.store(t)
		sess := minimalSession("s1", baseTime)
		sess.SessionOptions = json.RawMessage(`{"big":12345678901234567890,"s":"\u00e9\n","arr":[]}`)
		sess.AgentState = json.RawMessage(`"just a string"`)
		sess.SandboxState = json.RawMessage(`[1,{"x":true}]`)
		if err := s.CreateSession(ctx(t), sess); err != nil {
			t.Fatal(err)
		}
		got, err := s.LoadSession(ctx(t), "s1")
		if err != nil {
			t.Fatal(err)
		}
		if d := diffSession(sess, got); len(d) > 0 {
			t.Errorf("JSON fields after round trip:\n  %v", d)
		}
		// Numbers beyond float64 precision survive as written.
		var opts struct {
			Big json.Number `json:"big"`
		}
		if err := json.Unmarshal(got.SessionOptions, &opts); err != nil {
			t.Fatal(err)
		}
		if opts.Big.String() != "12345678901234567890" {
			t.Errorf("large number in SessionOptions: got %s", opts.Big)
		}
	})
}

func ids(list []store.Session) []string {
	out := make([]string, len(list))
	for i, s := range list {
		out[i] = s.ID
	}
	return out
}

func equalStrings(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// scribble overwrites b in place, to detect a store that kept a caller's
// slice.
func scribble(b []byte) {
	for i := range b {
		b[i] = 'X'
	}
}
