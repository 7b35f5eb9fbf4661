package sqlite

import (
	"database/sql"
	"log/slog"
	"path/filepath"
	"testing"
	"time"

	"github.com/agentd/agentd/store"
)

// TestAuditMigrationKeepsData: a database made by a binary that knew only
// 0001 gains the audit tables on Open, keeps its sessions, and the new
// tables work for them.
func TestAuditMigrationKeepsData(t *testing.T) {
	ms, err := loadMigrations(embeddedMigrations, "migrations")
	if err != nil {
		t.Fatal(err)
	}
	if len(ms) < 2 || ms[1].Name != "0002_audit.sql" {
		t.Fatalf("migrations %v: want 0002_audit.sql second", ms)
	}
	path := filepath.Join(t.TempDir(), "old.db")
	db := rawDBAt(t, path)
	if _, err := migrate(t.Context(), db, ms[:1]); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(`INSERT INTO sessions (id, architecture, agent_profile_ref, name, status, runtime, turns)
		VALUES ('old', 'shell', 'default', '', 'idle', X'7B7D', 0)`); err != nil {
		t.Fatal(err)
	}
	db.Close()

	s, err := Open(t.Context(), path, WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		t.Fatalf("Open of a version-1 database: %v", err)
	}
	defer s.Close()
	if _, err := s.LoadSession(t.Context(), "old"); err != nil {
		t.Fatalf("the old session after the migration: %v", err)
	}
	rec := store.AuditRecord{SessionID: "old", Time: time.Now(), Kind: store.AuditExecutor, Method: "ping", Outcome: store.AuditOK}
	if err := s.AppendAudit(t.Context(), []store.AuditRecord{rec}); err != nil {
		t.Fatal(err)
	}
	if got, err := s.ReadAudit(t.Context(), "old", 0, 0); err != nil || len(got) != 1 || got[0].Method != "ping" {
		t.Fatalf("ReadAudit = %+v, %v", got, err)
	}
	if err := s.SaveModelToken(t.Context(), store.ModelToken{Hash: "h", SessionID: "old"}); err != nil {
		t.Fatal(err)
	}
}

// rawDBAt opens a plain connection to the database file at path.
func rawDBAt(t *testing.T, path string) *sql.DB {
	t.Helper()
	db, err := sql.Open("sqlite", path+"?_txlock=immediate&_pragma=foreign_keys(1)")
	if err != nil {
		t.Fatal(err)
	}
	db.SetMaxOpenConns(1)
	t.Cleanup(func() { db.Close() })
	return db
}

// BenchmarkAppendAudit: one batch of 256 records, as the audit recorder
// writes them.
func BenchmarkAppendAudit(b *testing.B) {
	s, err := Open(b.Context(), filepath.Join(b.TempDir(), "a.db"), WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	if err := s.CreateSession(b.Context(), store.Session{ID: "s", Architecture: "shell", Status: "idle"}); err != nil {
		b.Fatal(err)
	}
	batch := make([]store.AuditRecord, 256)
	for i := range batch {
		batch[i] = store.AuditRecord{SessionID: "s", Time: time.Now(), Kind: store.AuditExecutor, Method: "exec.start", Outcome: store.AuditOK, BytesIn: 200}
	}
	b.ReportAllocs()
	for b.Loop() {
		if err := s.AppendAudit(b.Context(), batch); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(batch)), "ns/record")
}
