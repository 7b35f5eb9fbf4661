package sqlite

import (
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
	"testing/fstest"
	"time"

	"github.com/agentd/agentd/conversation"
	"github.com/agentd/agentd/store"
)

// rawDB opens a plain connection to a new database file in t's directory.
func rawDB(t *testing.T) *sql.DB {
	t.Helper()
	db, err := sql.Open("sqlite", filepath.Join(t.TempDir(), "raw.db")+"?_txlock=immediate")
	if err != nil {
		t.Fatal(err)
	}
	db.SetMaxOpenConns(1)
	t.Cleanup(func() { db.Close() })
	return db
}

func TestEmbeddedMigrationsLoad(t *testing.T) {
	ms, err := loadMigrations(embeddedMigrations, "migrations")
	if err != nil {
		t.Fatal(err)
	}
	if ms[0].Version != 1 || ms[0].Name != "0001_init.sql" || !strings.Contains(ms[0].SQL, "CREATE TABLE events") {
		t.Fatalf("first migration = %d %q", ms[0].Version, ms[0].Name)
	}
}

func TestLoadMigrationsRejectsBadSets(t *testing.T) {
	file := func(s string) *fstest.MapFile { return &fstest.MapFile{Data: []byte(s)} }
	cases := map[string]fstest.MapFS{
		"gap":            {"m/0001_a.sql": file("SELECT 1"), "m/0003_c.sql": file("SELECT 1")},
		"repeat":         {"m/0001_a.sql": file("SELECT 1"), "m/001_b.sql": file("SELECT 1")},
		"starts at 2":    {"m/0002_a.sql": file("SELECT 1")},
		"bad name":       {"m/0001_a.sql": file("SELECT 1"), "m/init.sql": file("SELECT 1")},
		"not sql":        {"m/0001_a.txt": file("SELECT 1")},
		"no files":       {"m/sub/x.txt": file("")},
		"missing folder": {"other/0001_a.sql": file("SELECT 1")},
	}
	for name, fsys := range cases {
		if _, err := loadMigrations(fsys, "m"); err == nil {
			t.Errorf("%s: loadMigrations accepted the set", name)
		}
	}
}

func TestParseMigrationName(t *testing.T) {
	good := map[string]int{"0001_init.sql": 1, "0002_audit_log.sql": 2, "12_x.sql": 12}
	for name, want := range good {
		if v, err := parseMigrationName(name); err != nil || v != want {
			t.Errorf("parseMigrationName(%q) = %d, %v; want %d", name, v, err, want)
		}
	}
	for _, name := range []string{"0000_zero.sql", "init.sql", "0001.sql", "0001_.sql", "_x.sql", "+1_x.sql", "0x1_a.sql",
		"0001_a.SQL", "99999999999999999999_a.sql", "-1_a.sql", "1 _a.sql"} {
		if v, err := parseMigrationName(name); err == nil {
			t.Errorf("parseMigrationName(%q) = %d, want an error", name, v)
		}
	}
}

func FuzzParseMigrationName(f *testing.F) {
	for _, s := range []string{"0001_init.sql", "x.sql", "1_a.sql", "0_a.sql"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, name string) {
		v, err := parseMigrationName(name)
		if err != nil {
			return
		}
		if v <= 0 || !strings.HasSuffix(name, ".sql") || !strings.Contains(name, "_") {
			t.Fatalf("parseMigrationName(%q) = %d", name, v)
		}
	})
}

func TestMigrateAppliesInOrderOnce(t *testing.T) {
	db := rawDB(t)
	ms := []migration{
		{Version: 1, Name: "0001_a.sql", SQL: "CREATE TABLE a (x INTEGER); INSERT INTO a VALUES (1);"},
		{Version: 2, Name: "0002_b.sql", SQL: "CREATE TABLE b (y INTEGER); INSERT INTO b SELECT x + 1 FROM a;"},
	}
	applied, err := migrate(t.Context(), db, ms[:1])
	if err != nil || len(applied) != 1 || applied[0] != 1 {
		t.Fatalf("first migrate = %v, %v", applied, err)
	}
	applied, err = migrate(t.Context(), db, ms)
	if err != nil || len(applied) != 1 || applied[0] != 2 {
		t.Fatalf("second migrate = %v, %v; want [2]", applied, err)
	}
	applied, err = migrate(t.Context(), db, ms)
	if err != nil || len(applied) != 0 {
		t.Fatalf("third migrate = %v, %v; want nothing applied", applied, err)
	}
	var y int
	if err := db.QueryRow("SELECT y FROM b").Scan(&y); err != nil || y != 2 {
		t.Fatalf("b.y = %d, %v", y, err)
	}
	rows, err := db.Query("SELECT version, name FROM schema_migrations ORDER BY version")
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var got []string
	for rows.Next() {
		var v int
		var n string
		if err := rows.Scan(&v, &n); err != nil {
			t.Fatal(err)
		}
		got = append(got, n)
	}
	if strings.Join(got, ",") != "0001_a.sql,0002_b.sql" {
		t.Fatalf("schema_migrations = %v", got)
	}
}

func TestMigrateFailureLeavesSchemaUntouched(t *testing.T) {
	db := rawDB(t)
	ms := []migration{
		{Version: 1, Name: "0001_a.sql", SQL: "CREATE TABLE a (x INTEGER);"},
		{Version: 2, Name: "0002_broken.sql", SQL: "CREATE TABLE b (y INTEGER); THIS IS NOT SQL;"},
	}
	if _, err := migrate(t.Context(), db, ms); err == nil || !strings.Contains(err.Error(), "0002_broken.sql") {
		t.Fatalf("migrate with a broken migration = %v, want an error naming it", err)
	}
	var n int
	if err := db.QueryRow("SELECT count(*) FROM sqlite_master WHERE name IN ('a', 'b', 'schema_migrations')").Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 0 {
		t.Fatalf("%d tables exist after a failed migration; want none (one transaction)", n)
	}
}

func TestMigrateRefusesNewerSchema(t *testing.T) {
	db := rawDB(t)
	ms := []migration{{Version: 1, Name: "0001_a.sql", SQL: "CREATE TABLE a (x INTEGER);"}}
	if _, err := migrate(t.Context(), db, ms); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec("INSERT INTO schema_migrations VALUES (7, '0007_future.sql', 0)"); err != nil {
		t.Fatal(err)
	}
	_, err := migrate(t.Context(), db, ms)
	if !errors.Is(err, ErrSchemaTooNew) || !strings.Contains(err.Error(), "version 7") {
		t.Fatalf("migrate of a newer database = %v, want ErrSchemaTooNew naming version 7", err)
	}
}

// TestEventTailMigration: a database of schema 2 (events only in the
// clustered table) opens at schema 3 with its events readable, and its
// sessions take appends, conflicts included.
func TestEventTailMigration(t *testing.T) {
	path := filepath.Join(t.TempDir(), "v2.db")
	db, err := sql.Open("sqlite", path+"?_txlock=immediate&_pragma=foreign_keys(1)")
	if err != nil {
		t.Fatal(err)
	}
	ms, err := loadMigrations(embeddedMigrations, "migrations")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := migrate(t.Context(), db, ms[:2]); err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{
		`INSERT INTO sessions (id, architecture, agent_profile_ref, name, status, runtime, turns) VALUES ('old', 'shell', '', '', 'idle', CAST('{}' AS BLOB), 1)`,
		`INSERT INTO events (session_id, seq, type, payload, conversation_id, source) VALUES ('old', 1, 'log', NULL, 'main', 'server'), ('old', 2, 'log', NULL, 'main', 'server')`,
	} {
		if _, err := db.Exec(q); err != nil {
			t.Fatal(err)
		}
	}
	db.Close()

	s, err := Open(t.Context(), path, WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	evs, err := s.ReadEvents(t.Context(), "old", 0, 0)
	if err != nil || len(evs) != 2 || evs[1].Seq != 2 {
		t.Fatalf("events after the migration = %+v, %v", evs, err)
	}
	e := evs[1] // seq 2
	if err := s.AppendEvents(t.Context(), []conversation.Event{e}); !errors.Is(err, store.ErrSeqConflict) {
		t.Fatalf("appending a migrated seq = %v, want ErrSeqConflict", err)
	}
	e.Seq = 3
	if err := s.AppendEvents(t.Context(), []conversation.Event{e}); err != nil {
		t.Fatal(err)
	}
	if n, err := s.LastSeq(t.Context(), "old"); err != nil || n != 3 {
		t.Fatalf("LastSeq = %d, %v; want 3", n, err)
	}
}

// TestLeaseGenerationMigration: a database made by the binary before
// fencing (schema 3) with a lease held and events stored opens at the
// current schema; the held lease is generation 1, its holder keeps it, a
// take-over raises it, and the former holder's fenced writes are refused.
func TestLeaseGenerationMigration(t *testing.T) {
	path := filepath.Join(t.TempDir(), "v3.db")
	db, err := sql.Open("sqlite", path+"?_txlock=immediate&_pragma=foreign_keys(1)")
	if err != nil {
		t.Fatal(err)
	}
	ms, err := loadMigrations(embeddedMigrations, "migrations")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := migrate(t.Context(), db, ms[:3]); err != nil {
		t.Fatal(err)
	}
	future := time.Now().Add(time.Hour).UnixNano()
	for _, q := range []string{
		`INSERT INTO sessions (id, architecture, agent_profile_ref, name, status, runtime, turns) VALUES ('old', 'shell', '', '', 'running', CAST('{}' AS BLOB), 1)`,
		`INSERT INTO events (session_id, seq, type, payload, conversation_id, source) VALUES ('old', 1, 'log', NULL, 'main', 'server')`,
		`INSERT INTO events_tail (session_id, seq, type, payload, conversation_id, source) VALUES ('old', 2, 'log', NULL, 'main', 'server')`,
		fmt.Sprintf(`INSERT INTO leases (session_id, holder, expires_at) VALUES ('old', 'node-a', %d)`, future),
	} {
		if _, err := db.Exec(q); err != nil {
			t.Fatal(err)
		}
	}
	db.Close()

	s, err := Open(t.Context(), path, WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx := t.Context()
	if _, err := s.AcquireLease(ctx, "old", "node-b", time.Minute); !errors.Is(err, store.ErrLeaseHeld) {
		t.Fatalf("the migrated lease is not held: %v", err)
	}
	gen, err := s.AcquireLease(ctx, "old", "node-a", 10*time.Millisecond)
	if err != nil || gen != 1 {
		t.Fatalf("renewal of the migrated lease = %d, %v; want generation 1", gen, err)
	}
	e := conversation.Event{Seq: 3, Type: conversation.TypeLog, Payload: []byte(`{}`),
		Context: conversation.Context{SessionID: "old", ConversationID: "main", Source: conversation.SourceServer}}
	if err := s.AppendEvents(ctx, []conversation.Event{e}, store.Fence{SessionID: "old", Generation: 1}); err != nil {
		t.Fatal(err)
	}
	// node-a's 10 ms lease expires: node-b takes it over.
	var genB int64
	for deadline := time.Now().Add(10 * time.Second); ; {
		genB, err = s.AcquireLease(ctx, "old", "node-b", time.Minute)
		if !errors.Is(err, store.ErrLeaseHeld) || time.Now().After(deadline) {
			break
		}
		time.Sleep(time.Millisecond) // polling, with the deadline above
	}
	if err != nil || genB != 2 {
		t.Fatalf("take-over = %d, %v; want generation 2", genB, err)
	}
	e.Seq = 4
	if err := s.AppendEvents(ctx, []conversation.Event{e}, store.Fence{SessionID: "old", Generation: 1}); !errors.Is(err, store.ErrFenced) {
		t.Fatalf("the former holder's append = %v, want ErrFenced", err)
	}
	if n, err := s.LastSeq(ctx, "old"); err != nil || n != 3 {
		t.Fatalf("LastSeq = %d, %v; want 3", n, err)
	}
}
