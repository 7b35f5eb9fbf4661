package storetest

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/agentd/agentd/conversation"
	"github.com/agentd/agentd/store"
)

func (h harness) events(t *testing.T) {
	t.Run("RoundTrip", func(t *testing.T) {
		s := h.store(t)
		createSession(t, s, "s1")
		big := `{"blockId":"tool_1","delta":"` + strings.Repeat("0123456789abcdef", 1<<16) + `"}` // 1 MiB
		want := []conversation.Event{
			{Seq: 1, Type: conversation.TypeQueryStarted, Payload: json.RawMessage(`{"queryId":"q1","content":"hi"}`),
				Context: conversation.Context{SessionID: "s1", ConversationID: "main", Source: conversation.SourceClient,
					Timestamp: baseTime, Actor: ptr("alice@example.com")}},
			// Unusual formatting must survive byte for byte.
			{Seq: 2, Type: conversation.TypeBlockUpsert, Payload: json.RawMessage("{ \"block\" :\n\t{\"id\":\"m-0\", \"content\":\"é\\u00e9 ✓\"} }"),
				Context: conversation.Context{SessionID: "s1", ConversationID: "toolu_01ABC", Source: conversation.SourceRunner,
					Timestamp: baseTime.Add(1500 * time.Microsecond)}},
			{Seq: 3, Type: conversation.TypeSessionIdle, Payload: json.RawMessage(`{}`),
				Context: conversation.Context{SessionID: "s1", ConversationID: "main", Source: conversation.SourceServer,
					Timestamp: baseTime.Add(time.Hour).UTC()}},
			{Seq: 4, Type: conversation.TypeBlockDelta, Payload: json.RawMessage(big),
				Context: conversation.Context{SessionID: "s1", ConversationID: "main", Source: conversation.SourceRunner,
					Timestamp: baseTime.Add(2 * time.Hour), Actor: ptr("user-7")}},
		}
		if err := s.AppendEvents(ctx(t), want); err != nil {
			t.Fatalf("AppendEvents: %v", err)
		}
		checkEvents(t, "ReadEvents", want, readAll(t, s, "s1"))
		if n := lastSeq(t, s, "s1"); n != 4 {
			t.Errorf("LastSeq = %d, want 4", n)
		}
	})

	t.Run("EveryEventType", func(t *testing.T) {
		s := h.store(t)
		createSession(t, s, "s1")
		var want []conversation.Event
		for i, typ := range conversation.EventTypes {
			e := event("s1", int64(i+1))
			e.Type = typ
			want = append(want, e)
		}
		if err := s.AppendEvents(ctx(t), want); err != nil {
			t.Fatal(err)
		}
		checkEvents(t, "ReadEvents", want, readAll(t, s, "s1"))
	})

	t.Run("ReadAfterAndLimit", func(t *testing.T) {
		s := h.store(t)
		createSession(t, s, "s1")
		all := events("s1", 1, 10)
		if err := s.AppendEvents(ctx(t), all); err != nil {
			t.Fatal(err)
		}
		cases := []struct {
			after  int64
			limit  int
			wantLo int64 // first seq expected, 0 if none
			wantHi int64
		}{
			{after: 0, limit: 0, wantLo: 1, wantHi: 10},
			{after: 0, limit: -1, wantLo: 1, wantHi: 10},
			{after: -5, limit: 0, wantLo: 1, wantHi: 10},
			{after: 3, limit: 4, wantLo: 4, wantHi: 7},
			{after: 0, limit: 1, wantLo: 1, wantHi: 1},
			{after: 8, limit: 10, wantLo: 9, wantHi: 10},
			{after: 9, limit: 0, wantLo: 10, wantHi: 10},
			{after: 10, limit: 0},
			{after: 10, limit: 5},
			{after: 1000, limit: 0},
		}
		for _, c := range cases {
			got, err := s.ReadEvents(ctx(t), "s1", c.after, c.limit)
			if err != nil {
				t.Fatalf("ReadEvents(after=%d, limit=%d): %v", c.after, c.limit, err)
			}
			var want []conversation.Event
			if c.wantLo > 0 {
				want = all[c.wantLo-1 : c.wantHi]
			}
			checkEvents(t, "ReadEvents(after, limit)", want, got)
		}
	})

	t.Run("SeqOrderRegardlessOfAppendOrder", func(t *testing.T) {
		s := h.store(t)
		createSession(t, s, "s1")
		all := events("s1", 1, 12)
		// Later seqs first, and shuffled inside a batch.
		batches := [][]conversation.Event{
			{all[8], all[11], all[9], all[10]},
			{all[3], all[7], all[5], all[4], all[6]},
			{all[2], all[0], all[1]},
		}
		for _, b := range batches {
			if err := s.AppendEvents(ctx(t), b); err != nil {
				t.Fatalf("AppendEvents(seqs %v): %v", seqs(b), err)
			}
		}
		checkEvents(t, "ReadEvents", all, readAll(t, s, "s1"))
		got, err := s.ReadEvents(ctx(t), "s1", 5, 3)
		if err != nil {
			t.Fatal(err)
		}
		checkEvents(t, "ReadEvents(after=5, limit=3)", all[5:8], got)
	})

	t.Run("SeveralSessionsInOneBatch", func(t *testing.T) {
		s := h.store(t)
		for _, id := range []string{"a", "b", "c"} {
			createSession(t, s, id)
		}
		batch := []conversation.Event{event("a", 1), event("b", 1), event("a", 2), event("b", 2), event("a", 3)}
		if err := s.AppendEvents(ctx(t), batch); err != nil {
			t.Fatal(err)
		}
		checkEvents(t, "session a", events("a", 1, 3), readAll(t, s, "a"))
		checkEvents(t, "session b", events("b", 1, 2), readAll(t, s, "b"))
		checkEvents(t, "session c", nil, readAll(t, s, "c"))
		for id, want := range map[string]int64{"a": 3, "b": 2, "c": 0} {
			if got := lastSeq(t, s, id); got != want {
				t.Errorf("LastSeq(%q) = %d, want %d", id, got, want)
			}
		}
	})

	t.Run("ConflictRejectsWholeBatch", func(t *testing.T) {
		s := h.store(t)
		createSession(t, s, "a")
		createSession(t, s, "b")
		if err := s.AppendEvents(ctx(t), events("a", 1, 3)); err != nil {
			t.Fatal(err)
		}
		bad := map[string][]conversation.Event{
			"conflict in the middle":         {event("a", 4), event("a", 5), event("a", 2), event("a", 6)},
			"conflict first":                 {event("a", 1), event("a", 4)},
			"conflict last":                  {event("a", 4), event("a", 5), event("a", 3)},
			"duplicate inside the batch":     {event("a", 7), event("a", 8), event("a", 7)},
			"other session's events dropped": {event("b", 1), event("b", 2), event("a", 3), event("b", 3)},
		}
		for name, batch := range bad {
			err := s.AppendEvents(ctx(t), batch)
			if !errors.Is(err, store.ErrSeqConflict) {
				t.Errorf("%s: AppendEvents = %v, want ErrSeqConflict", name, err)
			}
		}
		checkEvents(t, "session a after rejected batches", events("a", 1, 3), readAll(t, s, "a"))
		checkEvents(t, "session b after rejected batches", nil, readAll(t, s, "b"))
		if n := lastSeq(t, s, "a"); n != 3 {
			t.Errorf("LastSeq(a) = %d, want 3", n)
		}
		// The log goes on after a rejected batch.
		if err := s.AppendEvents(ctx(t), events("a", 4, 5)); err != nil {
			t.Fatalf("AppendEvents after a conflict: %v", err)
		}
		checkEvents(t, "session a", events("a", 1, 5), readAll(t, s, "a"))
	})

	t.Run("LargeBatches", func(t *testing.T) {
		s := h.store(t)
		createSession(t, s, "a")
		createSession(t, s, "b")
		if err := s.AppendEvents(ctx(t), []conversation.Event{event("a", 250)}); err != nil {
			t.Fatal(err)
		}
		// Conflicts first, deep inside and last in large batches: stores
		// that insert in chunks must still reject all of them.
		base := append(events("a", 1, 249), events("b", 1, 50)...)
		for name, batch := range map[string][]conversation.Event{
			"stored seq last":        append(append([]conversation.Event(nil), base...), event("a", 250)),
			"stored seq first":       append([]conversation.Event{event("a", 250)}, base...),
			"stored seq inside":      append(append(append([]conversation.Event(nil), base[:140]...), event("a", 250)), base[140:]...),
			"duplicate in the batch": append(append([]conversation.Event(nil), base...), event("a", 100)),
		} {
			if err := s.AppendEvents(ctx(t), batch); !errors.Is(err, store.ErrSeqConflict) {
				t.Errorf("large batch, %s: got %v, want ErrSeqConflict", name, err)
			}
		}
		checkEvents(t, "a after rejected large batches", []conversation.Event{event("a", 250)}, readAll(t, s, "a"))
		checkEvents(t, "b after rejected large batches", nil, readAll(t, s, "b"))

		batch := append(events("a", 1, 249), events("a", 251, 1100)...)
		if err := s.AppendEvents(ctx(t), batch); err != nil {
			t.Fatalf("AppendEvents of %d events: %v", len(batch), err)
		}
		checkEvents(t, "a after a large batch", events("a", 1, 1100), readAll(t, s, "a"))
	})

	t.Run("ConflictDoesNotReplaceStoredEvent", func(t *testing.T) {
		s := h.store(t)
		createSession(t, s, "a")
		orig := event("a", 1)
		if err := s.AppendEvents(ctx(t), []conversation.Event{orig}); err != nil {
			t.Fatal(err)
		}
		other := orig
		other.Type = conversation.TypeError
		other.Payload = json.RawMessage(`{"message":"replaced"}`)
		if err := s.AppendEvents(ctx(t), []conversation.Event{other}); !errors.Is(err, store.ErrSeqConflict) {
			t.Fatalf("AppendEvents of a stored seq = %v, want ErrSeqConflict", err)
		}
		checkEvents(t, "ReadEvents", []conversation.Event{orig}, readAll(t, s, "a"))
	})

	t.Run("InvalidEventsRejected", func(t *testing.T) {
		s := h.store(t)
		createSession(t, s, "a")
		zero := event("a", 0)
		negative := event("a", -1)
		noSession := event("", 2)
		for name, batch := range map[string][]conversation.Event{
			"seq 0":             {event("a", 1), zero},
			"negative seq":      {event("a", 1), negative},
			"empty session id":  {event("a", 1), noSession},
			"only invalid":      {zero},
			"invalid then fine": {negative, event("a", 1)},
		} {
			if err := s.AppendEvents(ctx(t), batch); err == nil {
				t.Errorf("%s: AppendEvents accepted the batch", name)
			}
		}
		checkEvents(t, "after invalid batches", nil, readAll(t, s, "a"))
	})

	t.Run("EmptyBatchIsNoOp", func(t *testing.T) {
		s := h.store(t)
		createSession(t, s, "a")
		if err := s.AppendEvents(ctx(t), nil); err != nil {
			t.Errorf("AppendEvents(nil) = %v", err)
		}
		if err := s.AppendEvents(ctx(t), []conversation.Event{}); err != nil {
			t.Errorf("AppendEvents(empty) = %v", err)
		}
		if n := lastSeq(t, s, "a"); n != 0 {
			t.Errorf("LastSeq = %d after empty batches", n)
		}
	})

	t.Run("LastSeq", func(t *testing.T) {
		s := h.store(t)
		createSession(t, s, "a")
		if n := lastSeq(t, s, "a"); n != 0 {
			t.Errorf("LastSeq of a session without events = %d, want 0", n)
		}
		if n := lastSeq(t, s, "never-created"); n != 0 {
			t.Errorf("LastSeq of an unknown session = %d, want 0", n)
		}
		// The store does not require seqs to be contiguous; LastSeq is the
		// highest.
		if err := s.AppendEvents(ctx(t), []conversation.Event{event("a", 10), event("a", 1), event("a", 2)}); err != nil {
			t.Fatal(err)
		}
		if n := lastSeq(t, s, "a"); n != 10 {
			t.Errorf("LastSeq = %d, want 10", n)
		}
	})

	t.Run("ReadUnknownSessionIsEmpty", func(t *testing.T) {
		s := h.store(t)
		got, err := s.ReadEvents(ctx(t), "never-created", 0, 0)
		if err != nil {
			t.Fatalf("ReadEvents of an unknown session: %v", err)
		}
		if len(got) != 0 {
			t.Fatalf("ReadEvents of an unknown session returned %d events", len(got))
		}
	})

	t.Run("PayloadIsCopied", func(t *testing.T) {
		s := h.store(t)
		createSession(t, s, "a")
		in := events("a", 1, 2)
		in[1].Context.Actor = ptr("bob")
		want := events("a", 1, 2)
		want[1].Context.Actor = ptr("bob")
		if err := s.AppendEvents(ctx(t), in); err != nil {
			t.Fatal(err)
		}
		scribble(in[0].Payload)
		*in[1].Context.Actor = "mallory"
		got := readAll(t, s, "a")
		scribble(got[1].Payload)
		checkEvents(t, "after changing the caller's and the returned slices", want, readAll(t, s, "a"))
	})
}
