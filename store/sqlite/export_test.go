package sqlite

import (
	"context"
	"database/sql"
	"runtime"
	"testing"
	"time"
)

// WriterPragmas reports the writer connection's synchronous and
// foreign_keys settings, and checks that readers are query_only with
// foreign keys on.
func WriterPragmas(t testing.TB, s *Store) (synchronous, foreignKeys int) {
	t.Helper()
	if err := s.w.QueryRowContext(t.Context(), "PRAGMA synchronous").Scan(&synchronous); err != nil {
		t.Fatal(err)
	}
	if err := s.w.QueryRowContext(t.Context(), "PRAGMA foreign_keys").Scan(&foreignKeys); err != nil {
		t.Fatal(err)
	}
	var queryOnly, readerFK int
	if err := s.r.QueryRowContext(t.Context(), "PRAGMA query_only").Scan(&queryOnly); err != nil {
		t.Fatal(err)
	}
	if err := s.r.QueryRowContext(t.Context(), "PRAGMA foreign_keys").Scan(&readerFK); err != nil {
		t.Fatal(err)
	}
	if queryOnly != 1 || readerFK != 1 {
		t.Errorf("reader connection: query_only = %d, foreign_keys = %d; want 1 and 1", queryOnly, readerFK)
	}
	if _, err := s.r.ExecContext(t.Context(), "DELETE FROM sessions"); err == nil {
		t.Error("a reader connection accepted a write")
	}
	return synchronous, foreignKeys
}

// CompactChunks compacts the event tail in transactions of chunk rows and
// returns how many rows it moved and in how many transactions.
func CompactChunks(t testing.TB, s *Store, chunk int) (rows int64, transactions int) {
	t.Helper()
	for {
		n, err := s.compact(t.Context(), chunk)
		if err != nil {
			t.Fatal(err)
		}
		if n == 0 {
			return rows, transactions
		}
		rows += n
		transactions++
	}
}

// CompactChunk is the compactor's chunk.
const CompactChunk = compactChunk

// Compact moves the whole event tail into the per-session table now, as
// the compactor does, and returns how many rows it moved.
func Compact(t testing.TB, s *Store) int64 {
	t.Helper()
	n, _ := CompactChunks(t, s, compactChunk)
	return n
}

// TailRows counts the rows of the event tail.
func TailRows(t testing.TB, s *Store) int {
	t.Helper()
	var n int
	if err := s.r.QueryRowContext(t.Context(), "SELECT count(*) FROM events_tail").Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// SlowAfterAppend makes every append pause after its commit until the test
// ends, so the next append's transaction runs first.
func SlowAfterAppend(t testing.TB, d time.Duration) {
	testHookAppended = func() { time.Sleep(d) }
	t.Cleanup(func() { testHookAppended = nil })
}

// WriteAndCancel runs a writer transaction with a cancellable context
// that inserts a profile row and then cancels the context before write
// commits. It returns how many goroutines more than before the
// transaction were running inside it, and write's error.
func WriteAndCancel(t testing.TB, s *Store, id string) (extraGoroutines int, err error) {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	before := runtime.NumGoroutine()
	err = s.write(ctx, func(tx *sql.Tx) error {
		extraGoroutines = runtime.NumGoroutine() - before
		if _, err := tx.ExecContext(context.WithoutCancel(ctx),
			`INSERT INTO agent_profiles (id, data, updated_at) VALUES (?, X'7B7D', 0)`, id); err != nil {
			return err
		}
		cancel()
		return nil
	})
	return extraGoroutines, err
}

// CountRows counts a table's rows.
func CountRows(ctx context.Context, s *Store, table string) (int, error) {
	var n int
	err := s.r.QueryRowContext(ctx, "SELECT COUNT(*) FROM "+table).Scan(&n)
	return n, err
}
