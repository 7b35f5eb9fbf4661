package storetest

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/agentd/agentd/conversation"
	"github.com/agentd/agentd/store"
)

// auditStore opens a store and returns it as a store.AuditStore, skipping
// the test when the store does not implement the optional interface.
func (h harness) auditStore(t *testing.T) (store.Store, store.AuditStore) {
	t.Helper()
	s := h.store(t)
	a, ok := s.(store.AuditStore)
	if !ok {
		t.Skip("the store does not implement store.AuditStore (optional)")
	}
	return s, a
}

func auditRecord(session string, i int) store.AuditRecord {
	r := store.AuditRecord{
		SessionID: session, Time: baseTime.Add(time.Duration(i) * time.Second), Kind: store.AuditExecutor,
		Method: "exec.start", Outcome: store.AuditOK, BytesIn: int64(100 + i), DurationMs: int64(i),
	}
	if i%2 == 1 {
		r.Kind, r.Method, r.Path, r.Provider, r.Model = store.AuditModel, "POST", "/v1/messages", "anthropic", "claude-ünïcode"
		r.Actor, r.Status, r.BytesOut = "api-key", 200, int64(4096+i)
		r.Usage = &conversation.Usage{InputTokens: int64(10 * i), OutputTokens: int64(i), CacheReadInputTokens: 3, CacheCreationInputTokens: 2}
	}
	return r
}

// sameRecord compares a read record to the appended one (ID aside; times
// to the millisecond, location ignored).
func sameRecord(t *testing.T, got, want store.AuditRecord) {
	t.Helper()
	if d := got.Time.Sub(want.Time); d < -time.Millisecond || d > time.Millisecond {
		t.Errorf("record time %v, want %v", got.Time, want.Time)
	}
	got.Time, want.Time = time.Time{}, time.Time{}
	got.ID, want.ID = 0, 0
	if !reflect.DeepEqual(got, want) {
		t.Errorf("record round trip:\n got %+v\nwant %+v", got, want)
	}
}

func (h harness) audit(t *testing.T) {
	t.Run("AppendRead", func(t *testing.T) {
		s, a := h.auditStore(t)
		createSession(t, s, "s1")
		createSession(t, s, "s2")
		var want []store.AuditRecord
		var batch []store.AuditRecord
		for i := range 6 {
			r := auditRecord("s1", i)
			want = append(want, r)
			batch = append(batch, r, auditRecord("s2", i))
		}
		if err := a.AppendAudit(ctx(t), batch); err != nil {
			t.Fatalf("AppendAudit: %v", err)
		}
		got, err := a.ReadAudit(ctx(t), "s1", 0, 0)
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != len(want) {
			t.Fatalf("ReadAudit returned %d records, want %d", len(got), len(want))
		}
		for i := range got {
			sameRecord(t, got[i], want[i])
			if got[i].ID <= 0 || (i > 0 && got[i].ID <= got[i-1].ID) {
				t.Fatalf("record ids %d then %d: want positive and rising", got[max(i-1, 0)].ID, got[i].ID)
			}
		}
		// Paging by id.
		page, err := a.ReadAudit(ctx(t), "s1", got[1].ID, 2)
		if err != nil || len(page) != 2 || page[0].ID != got[2].ID || page[1].ID != got[3].ID {
			t.Fatalf("ReadAudit(after %d, limit 2) = %v, %v; want records 3 and 4", got[1].ID, auditIDs(page), err)
		}
		if rest, err := a.ReadAudit(ctx(t), "s1", got[len(got)-1].ID, 10); err != nil || len(rest) != 0 {
			t.Fatalf("ReadAudit after the last = %v, %v; want none", auditIDs(rest), err)
		}
		// Another batch gets higher ids.
		if err := a.AppendAudit(ctx(t), []store.AuditRecord{auditRecord("s1", 9)}); err != nil {
			t.Fatal(err)
		}
		more, err := a.ReadAudit(ctx(t), "s1", got[len(got)-1].ID, 0)
		if err != nil || len(more) != 1 || more[0].ID <= got[len(got)-1].ID {
			t.Fatalf("a later record: %v, %v", auditIDs(more), err)
		}
	})

	t.Run("UnknownSessionDropped", func(t *testing.T) {
		s, a := h.auditStore(t)
		createSession(t, s, "s1")
		if err := a.AppendAudit(ctx(t), []store.AuditRecord{auditRecord("gone", 1), auditRecord("s1", 1)}); err != nil {
			t.Fatalf("AppendAudit with a record of an unknown session: %v (want it dropped, the rest stored)", err)
		}
		if got, err := a.ReadAudit(ctx(t), "s1", 0, 0); err != nil || len(got) != 1 {
			t.Fatalf("s1 has %v, %v; want its one record", auditIDs(got), err)
		}
		if got, err := a.ReadAudit(ctx(t), "gone", 0, 0); err != nil || len(got) != 0 {
			t.Fatalf("unknown session has %v, %v; want none and no error", auditIDs(got), err)
		}
	})

	t.Run("Usage", func(t *testing.T) {
		s, a := h.auditStore(t)
		createSession(t, s, "s1")
		if u, err := a.AuditUsage(ctx(t), "s1"); err != nil || u != (conversation.Usage{}) {
			t.Fatalf("usage with no records = %+v, %v", u, err)
		}
		var want conversation.Usage
		var batch []store.AuditRecord
		for i := range 7 {
			r := auditRecord("s1", i)
			if r.Usage != nil {
				want = want.Add(*r.Usage)
			}
			batch = append(batch, r)
		}
		if err := a.AppendAudit(ctx(t), batch); err != nil {
			t.Fatal(err)
		}
		if u, err := a.AuditUsage(ctx(t), "s1"); err != nil || u != want {
			t.Fatalf("AuditUsage = %+v, %v; want %+v", u, err, want)
		}
		if u, err := a.AuditUsage(ctx(t), "nobody"); err != nil || u != (conversation.Usage{}) {
			t.Fatalf("usage of an unknown session = %+v, %v", u, err)
		}
	})

	t.Run("NotShared", func(t *testing.T) {
		s, a := h.auditStore(t)
		createSession(t, s, "s1")
		r := auditRecord("s1", 1)
		in := []store.AuditRecord{r}
		if err := a.AppendAudit(ctx(t), in); err != nil {
			t.Fatal(err)
		}
		in[0].Usage.InputTokens = 999
		got, err := a.ReadAudit(ctx(t), "s1", 0, 0)
		if err != nil || len(got) != 1 || got[0].Usage.InputTokens != 10 {
			t.Fatalf("changing the appended record changed the stored one: %+v, %v", got, err)
		}
		got[0].Usage.OutputTokens = 999
		again, _ := a.ReadAudit(ctx(t), "s1", 0, 0)
		if again[0].Usage.OutputTokens != 1 {
			t.Fatal("changing a returned record changed the stored one")
		}
	})

	t.Run("DeletedWithSession", func(t *testing.T) {
		s, a := h.auditStore(t)
		createSession(t, s, "s1")
		if err := a.AppendAudit(ctx(t), []store.AuditRecord{auditRecord("s1", 1)}); err != nil {
			t.Fatal(err)
		}
		if err := s.DeleteSession(ctx(t), "s1"); err != nil {
			t.Fatal(err)
		}
		createSession(t, s, "s1")
		if got, err := a.ReadAudit(ctx(t), "s1", 0, 0); err != nil || len(got) != 0 {
			t.Fatalf("a re-created session has the old records %v, %v", auditIDs(got), err)
		}
	})

	t.Run("ConcurrentAppends", func(t *testing.T) {
		s, a := h.auditStore(t)
		createSession(t, s, "s1")
		const writers, each = 4, 25
		var wg sync.WaitGroup
		errs := make(chan error, writers*each)
		for w := range writers {
			wg.Go(func() {
				for i := range each {
					if err := a.AppendAudit(ctx(t), []store.AuditRecord{auditRecord("s1", w*each+i)}); err != nil {
						errs <- err
					}
				}
			})
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatal(err)
		}
		got, err := a.ReadAudit(ctx(t), "s1", 0, 0)
		if err != nil || len(got) != writers*each {
			t.Fatalf("%d records after concurrent appends, %v; want %d", len(got), err, writers*each)
		}
		seen := map[int64]bool{}
		for i, r := range got {
			if seen[r.ID] || (i > 0 && r.ID <= got[i-1].ID) {
				t.Fatalf("ids not unique and rising: %v", auditIDs(got))
			}
			seen[r.ID] = true
		}
	})

	t.Run("Cancelled", func(t *testing.T) {
		s, a := h.auditStore(t)
		createSession(t, s, "s1")
		c, cancel := context.WithCancel(ctx(t))
		cancel()
		if err := a.AppendAudit(c, []store.AuditRecord{auditRecord("s1", 1)}); !errors.Is(err, context.Canceled) {
			t.Fatalf("AppendAudit with a cancelled context = %v, want context.Canceled", err)
		}
		if _, err := a.ReadAudit(c, "s1", 0, 0); !errors.Is(err, context.Canceled) {
			t.Fatalf("ReadAudit with a cancelled context = %v, want context.Canceled", err)
		}
		if got, _ := a.ReadAudit(ctx(t), "s1", 0, 0); len(got) != 0 {
			t.Fatal("a cancelled AppendAudit stored its record")
		}
	})
}

func (h harness) modelTokens(t *testing.T) {
	open := func(t *testing.T) (store.Store, store.ModelTokenStore) {
		s := h.store(t)
		m, ok := s.(store.ModelTokenStore)
		if !ok {
			t.Skip("the store does not implement store.ModelTokenStore (optional)")
		}
		return s, m
	}
	t.Run("SaveLookupDelete", func(t *testing.T) {
		s, m := open(t)
		createSession(t, s, "s1")
		createSession(t, s, "s2")
		tok := store.ModelToken{Hash: "h1", SessionID: "s1", Budget: 5000, CreatedAt: baseTime}
		if err := m.SaveModelToken(ctx(t), tok); err != nil {
			t.Fatal(err)
		}
		if err := m.SaveModelToken(ctx(t), store.ModelToken{Hash: "h2", SessionID: "s1", CreatedAt: baseTime}); err != nil {
			t.Fatal(err)
		}
		if err := m.SaveModelToken(ctx(t), store.ModelToken{Hash: "h3", SessionID: "s2", CreatedAt: baseTime}); err != nil {
			t.Fatal(err)
		}
		got, err := m.LookupModelToken(ctx(t), "h1")
		if err != nil || got.SessionID != "s1" || got.Budget != 5000 || got.CreatedAt.Sub(baseTime).Abs() > time.Millisecond {
			t.Fatalf("LookupModelToken = %+v, %v", got, err)
		}
		if err := m.SaveModelToken(ctx(t), store.ModelToken{Hash: "h1", SessionID: "s2"}); !errors.Is(err, store.ErrExists) {
			t.Fatalf("saving a taken hash = %v, want ErrExists", err)
		}
		if err := m.SaveModelToken(ctx(t), store.ModelToken{Hash: "h9", SessionID: "nobody"}); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("a token of an unknown session = %v, want ErrNotFound", err)
		}
		if _, err := m.LookupModelToken(ctx(t), "nope"); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("unknown hash = %v, want ErrNotFound", err)
		}
		if err := m.DeleteModelTokens(ctx(t), "s1"); err != nil {
			t.Fatal(err)
		}
		for _, h := range []string{"h1", "h2"} {
			if _, err := m.LookupModelToken(ctx(t), h); !errors.Is(err, store.ErrNotFound) {
				t.Fatalf("%s after DeleteModelTokens = %v, want ErrNotFound", h, err)
			}
		}
		if _, err := m.LookupModelToken(ctx(t), "h3"); err != nil {
			t.Fatalf("another session's token went too: %v", err)
		}
		if err := m.DeleteModelTokens(ctx(t), "s1"); err != nil {
			t.Fatalf("deleting no tokens: %v", err)
		}
	})
	t.Run("DeletedWithSession", func(t *testing.T) {
		s, m := open(t)
		createSession(t, s, "s1")
		if err := m.SaveModelToken(ctx(t), store.ModelToken{Hash: "h1", SessionID: "s1", CreatedAt: baseTime}); err != nil {
			t.Fatal(err)
		}
		if err := s.DeleteSession(ctx(t), "s1"); err != nil {
			t.Fatal(err)
		}
		if _, err := m.LookupModelToken(ctx(t), "h1"); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("token of a deleted session = %v, want ErrNotFound", err)
		}
	})
}

func auditIDs(rs []store.AuditRecord) string {
	out := make([]int64, len(rs))
	for i, r := range rs {
		out[i] = r.ID
	}
	return fmt.Sprint(out)
}
