package sqlite_test

import (
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agentd/agentd/conversation"
	"github.com/agentd/agentd/store"
	"github.com/agentd/agentd/store/sqlite"
	"github.com/agentd/agentd/store/storetest"
)

// The conformance suite again, with the tail moved after every append: the
// compactor races every read, conflict check and delete the suite makes.
func TestConformanceCompactingEveryAppend(t *testing.T) {
	storetest.Run(t, func(t *testing.T) store.Store { return openTemp(t, sqlite.WithCompactAt(1)) })
}

func evs(session string, from, to int64) []conversation.Event {
	var out []conversation.Event
	for seq := from; seq <= to; seq++ {
		out = append(out, ev(session, seq))
	}
	return out
}

func seqsOf(t *testing.T, s store.Store, session string, after int64, limit int) []int64 {
	t.Helper()
	got, err := s.ReadEvents(t.Context(), session, after, limit)
	if err != nil {
		t.Fatal(err)
	}
	out := make([]int64, len(got))
	for i, e := range got {
		if e.Context.SessionID != session || e.Type != conversation.TypeLog || string(e.Payload) != `{"level":"info","message":"m"}` {
			t.Fatalf("event %d of %s = %+v", i, session, e)
		}
		out[i] = e.Seq
	}
	return out
}

func wantSeqs(t *testing.T, what string, got []int64, from, to int64) {
	t.Helper()
	if int64(len(got)) != to-from+1 {
		t.Fatalf("%s: seqs %v, want %d..%d", what, got, from, to)
	}
	for i, seq := range got {
		if seq != from+int64(i) {
			t.Fatalf("%s: seqs %v, want %d..%d", what, got, from, to)
		}
	}
}

// TestCompactionSplitsReadsAndConflicts: events spread over both tables
// read back merged in seq order, LastSeq sees both, and a seq stored in
// either table is a conflict, wherever it sits in a batch.
func TestCompactionSplitsReadsAndConflicts(t *testing.T) {
	s := openTemp(t, sqlite.WithCompactAt(1<<30)) // only explicit compactions
	defer s.Close()
	ctx := t.Context()
	mustCreate(t, s, "a")
	mustCreate(t, s, "b")
	// a: 8..12 through the tail and compacted, 13..20 straight into events
	// (8 in one batch), 3..7 in the tail; b: 1..40 straight into events.
	if err := s.AppendEvents(ctx, append(evs("a", 8, 12), evs("b", 1, 40)...)); err != nil {
		t.Fatal(err)
	}
	if n := sqlite.TailRows(t, s); n != 5 {
		t.Fatalf("tail holds %d rows, want a's 5", n)
	}
	if n := sqlite.Compact(t, s); n != 5 {
		t.Fatalf("compaction moved %d rows, want 5", n)
	}
	if n := sqlite.TailRows(t, s); n != 0 {
		t.Fatalf("tail holds %d rows after a compaction", n)
	}
	if err := s.AppendEvents(ctx, evs("a", 13, 20)); err != nil {
		t.Fatal(err)
	}
	if err := s.AppendEvents(ctx, evs("a", 3, 7)); err != nil {
		t.Fatal(err)
	}
	if n := sqlite.TailRows(t, s); n != 5 {
		t.Fatalf("tail holds %d rows, want a's 3..7", n)
	}
	wantSeqs(t, "a, all", seqsOf(t, s, "a", 0, 0), 3, 20)
	wantSeqs(t, "a after 5, 10 of them", seqsOf(t, s, "a", 5, 10), 6, 15)
	wantSeqs(t, "b", seqsOf(t, s, "b", 0, 0), 1, 40)
	if n, err := s.LastSeq(ctx, "a"); err != nil || n != 20 {
		t.Fatalf("LastSeq(a) = %d, %v; want 20", n, err)
	}

	bad := map[string][]conversation.Event{
		"compacted seq":                     {ev("a", 21), ev("a", 10)},
		"tail seq":                          {ev("a", 21), ev("a", 5)},
		"seq twice in the batch":            {ev("a", 22), ev("a", 21), ev("a", 22)},
		"direct batch over a tail seq":      append(evs("a", 21, 30), ev("a", 4)),
		"compacted seq in the second chunk": append(evs("a", 21, 60), ev("b", 40)),
		"compacted seq, other session":      {ev("b", 41), ev("b", 1)},
	}
	for name, batch := range bad {
		if err := s.AppendEvents(ctx, batch); !errors.Is(err, store.ErrSeqConflict) {
			t.Errorf("%s: AppendEvents = %v, want ErrSeqConflict", name, err)
		}
	}
	// Nothing of the rejected batches was stored; the gaps can be filled.
	if err := s.AppendEvents(ctx, append(evs("a", 1, 2), evs("a", 21, 21)...)); err != nil {
		t.Fatal(err)
	}
	sqlite.Compact(t, s)
	wantSeqs(t, "a after the second compaction", seqsOf(t, s, "a", 0, 0), 1, 21)
	wantSeqs(t, "b after the second compaction", seqsOf(t, s, "b", 0, 0), 1, 40)

	// A deleted session takes its rows in both tables with it.
	if err := s.AppendEvents(ctx, evs("a", 22, 23)); err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteSession(ctx, "a"); err != nil {
		t.Fatal(err)
	}
	if got := seqsOf(t, s, "a", 0, 0); len(got) != 0 {
		t.Fatalf("deleted session still has events %v", got)
	}
	if n := sqlite.TailRows(t, s); n != 0 {
		t.Fatalf("tail holds %d rows of a deleted session", n)
	}
}

// TestCompactorRunsAtThreshold: the background compactor empties the tail
// once appends reach the threshold, and counts what an earlier run left.
func TestCompactorRunsAtThreshold(t *testing.T) {
	path := filepath.Join(t.TempDir(), "agentd.db")
	s := openTemp2(t, path, sqlite.WithCompactAt(100))
	mustCreate(t, s, "a")
	for seq := int64(1); seq <= 99; seq++ { // one at a time: through the tail
		if err := s.AppendEvents(t.Context(), evs("a", seq, seq)); err != nil {
			t.Fatal(err)
		}
	}
	// An absence, so a window: a compactor kicked below the threshold
	// (it is not: appended kicks only on crossing it) would run in it.
	time.Sleep(50 * time.Millisecond)
	if n := sqlite.TailRows(t, s); n != 99 {
		t.Fatalf("tail holds %d rows below the threshold, want 99", n)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	// Reopened: 99 left over + 1 reaches the threshold.
	s = openTemp2(t, path, sqlite.WithCompactAt(100))
	defer s.Close()
	if err := s.AppendEvents(t.Context(), evs("a", 100, 100)); err != nil {
		t.Fatal(err)
	}
	waitTail(t, s, 0)
	wantSeqs(t, "a", seqsOf(t, s, "a", 0, 0), 1, 100)
	// Again from empty.
	for i := int64(0); i < 20; i++ {
		if err := s.AppendEvents(t.Context(), evs("a", 101+5*i, 105+5*i)); err != nil {
			t.Fatal(err)
		}
	}
	waitTail(t, s, 0)
	wantSeqs(t, "a", seqsOf(t, s, "a", 0, 0), 1, 200)
}

func waitTail(t *testing.T, s *sqlite.Store, want int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		n := sqlite.TailRows(t, s)
		if n == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("tail holds %d rows, want %d", n, want)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestOptionRejectsCompactAtZero: a threshold below one row is refused.
func TestOptionRejectsCompactAtZero(t *testing.T) {
	_, err := sqlite.Open(t.Context(), filepath.Join(t.TempDir(), "x.db"), sqlite.WithCompactAt(0))
	if err == nil {
		t.Fatal("Open accepted WithCompactAt(0)")
	}
	if want := "compact at 0 rows"; !strings.Contains(err.Error(), want) {
		t.Fatalf("error %q does not say %q", err, want)
	}
}

// TestSeqsStoredByAnotherProcess: a seq another connection stored (as
// another process sharing the file would) is a conflict, in either table,
// although this store had seen the session's seqs before.
func TestSeqsStoredByAnotherProcess(t *testing.T) {
	s := openTemp(t, sqlite.WithCompactAt(1<<30))
	defer s.Close()
	ctx := t.Context()
	mustCreate(t, s, "a")
	if err := s.AppendEvents(ctx, evs("a", 1, 3)); err != nil {
		t.Fatal(err)
	}
	other := raw(t, s.Path())
	for _, q := range []string{
		`INSERT INTO events_tail (session_id, seq, type, conversation_id, source) VALUES ('a', 4, 'log', 'main', 'server')`,
		`INSERT INTO events (session_id, seq, type, conversation_id, source) VALUES ('a', 5, 'log', 'main', 'server')`,
	} {
		if _, err := other.ExecContext(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	for _, seq := range []int64{4, 5} {
		if err := s.AppendEvents(ctx, evs("a", seq, seq)); !errors.Is(err, store.ErrSeqConflict) {
			t.Errorf("seq %d stored by another connection: AppendEvents = %v, want ErrSeqConflict", seq, err)
		}
	}
	if err := s.AppendEvents(ctx, evs("a", 6, 6)); err != nil {
		t.Fatal(err)
	}
	if n, err := s.LastSeq(ctx, "a"); err != nil || n != 6 {
		t.Fatalf("LastSeq = %d, %v; want 6", n, err)
	}
}

// TestRacingAppendsStoreOnce: appenders racing with the same seqs of a
// session new to the store: exactly one wins each round. The seq cache
// must cover a batch before its transaction commits, because the next one
// can start at once; the hook holds each appender after its commit so
// that the next one does.
func TestRacingAppendsStoreOnce(t *testing.T) {
	s := openTemp(t, sqlite.WithCompactAt(1<<30))
	defer s.Close()
	sqlite.SlowAfterAppend(t, time.Millisecond)
	const racers = 4
	for round := range 50 {
		id := fmt.Sprint("r", round)
		mustCreate(t, s, id)
		errs := make(chan error, racers)
		for range racers {
			go func() { errs <- s.AppendEvents(t.Context(), evs(id, 1, 3)) }()
		}
		won := 0
		for range racers {
			switch err := <-errs; {
			case err == nil:
				won++
			case !errors.Is(err, store.ErrSeqConflict):
				t.Fatalf("round %d: %v", round, err)
			}
		}
		if won != 1 {
			t.Fatalf("round %d: %d racers stored seqs 1..3, want 1", round, won)
		}
	}
}

// TestCompactorUnderSustainedAppends: appends that never pause still get
// the tail compacted once it reaches the hard limit (16 × the threshold),
// and everything reads back.
func TestCompactorUnderSustainedAppends(t *testing.T) {
	s := openTemp(t, sqlite.WithCompactAt(10))
	defer s.Close()
	for i := range 4 {
		mustCreate(t, s, fmt.Sprint("s", i))
	}
	const total = 2000
	for seq := int64(1); seq <= total/4; seq++ {
		for i := range 4 {
			if err := s.AppendEvents(t.Context(), evs(fmt.Sprint("s", i), seq, seq)); err != nil {
				t.Fatal(err)
			}
		}
	}
	if n := sqlite.TailRows(t, s); n >= total {
		t.Fatalf("tail holds all %d rows after a stream past the hard limit", n)
	}
	// The pause after the stream compacts the tail below the threshold.
	deadline := time.Now().Add(10 * time.Second)
	for sqlite.TailRows(t, s) >= 10 {
		if time.Now().After(deadline) {
			t.Fatalf("tail holds %d rows after the stream, want fewer than 10", sqlite.TailRows(t, s))
		}
		time.Sleep(5 * time.Millisecond)
	}
	for i := range 4 {
		wantSeqs(t, fmt.Sprint("s", i), seqsOf(t, s, fmt.Sprint("s", i), 0, 0), 1, total/4)
	}
}
