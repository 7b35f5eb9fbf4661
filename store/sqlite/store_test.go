package sqlite_test

import (
	"bufio"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/agentd/agentd/conversation"
	"github.com/agentd/agentd/profile"
	"github.com/agentd/agentd/store"
	"github.com/agentd/agentd/store/sqlite"
)

// raw opens a separate plain connection to the store's file, as another
// process would.
func raw(t *testing.T, path string) *sql.DB {
	t.Helper()
	db, err := sql.Open("sqlite", path+"?_pragma=busy_timeout(5000)")
	if err != nil {
		t.Fatal(err)
	}
	db.SetMaxOpenConns(1)
	t.Cleanup(func() { db.Close() })
	return db
}

func session(id string) store.Session {
	return store.Session{
		ID: id, Architecture: "shell", Status: conversation.SessionCreated,
		Runtime:   conversation.Runtime{Status: conversation.SessionCreated, Architecture: "shell"},
		CreatedAt: time.Now(),
	}
}

func ev(sessionID string, seq int64) conversation.Event {
	return conversation.Event{
		Seq: seq, Type: conversation.TypeLog, Payload: json.RawMessage(`{"level":"info","message":"m"}`),
		Context: conversation.Context{SessionID: sessionID, ConversationID: "main", Source: conversation.SourceServer, Timestamp: time.Now()},
	}
}

func mustCreate(t testing.TB, s store.Store, id string) {
	t.Helper()
	if err := s.CreateSession(t.Context(), session(id)); err != nil {
		t.Fatal(err)
	}
}

func TestOpenDSNForms(t *testing.T) {
	dir := t.TempDir()
	t.Chdir(dir)
	cases := map[string]string{
		"sqlite://" + filepath.Join(dir, "abs.db"): filepath.Join(dir, "abs.db"),
		"sqlite://rel.db":                          filepath.Join(dir, "rel.db"),
		"sqlite://nested/deeper/rel.db":            filepath.Join(dir, "nested/deeper/rel.db"),
		"sqlite:short.db":                          filepath.Join(dir, "short.db"),
		"plain.db?synchronous=full":                filepath.Join(dir, "plain.db"),
		filepath.Join(dir, "abs-plain.db"):         filepath.Join(dir, "abs-plain.db"),
	}
	for dsn, want := range cases {
		s, err := sqlite.Open(t.Context(), dsn)
		if err != nil {
			t.Errorf("Open(%q): %v", dsn, err)
			continue
		}
		if s.Path() != want {
			t.Errorf("Open(%q).Path() = %q, want %q", dsn, s.Path(), want)
		}
		mustCreate(t, s, "x")
		if err := s.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
		fi, err := os.Stat(want)
		if err != nil {
			t.Errorf("database file of %q: %v", dsn, err)
			continue
		}
		if fi.Mode().Perm() != 0o600 {
			t.Errorf("database file of %q has mode %v, want 0600", dsn, fi.Mode().Perm())
		}
	}
}

func TestOpenMemoryIsTemporary(t *testing.T) {
	a, err := sqlite.Open(t.Context(), ":memory:")
	if err != nil {
		t.Fatal(err)
	}
	b, err := sqlite.Open(t.Context(), "sqlite://:memory:")
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	mustCreate(t, a, "only-in-a")
	if _, err := b.LoadSession(t.Context(), "only-in-a"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("two :memory: stores share data: %v", err)
	}
	path := a.Path()
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Dir(path)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the :memory: store's directory survives Close: %v", err)
	}
}

func TestOpenRejects(t *testing.T) {
	dir := t.TempDir()
	notDB := filepath.Join(dir, "garbage.db")
	if err := os.WriteFile(notDB, []byte(strings.Repeat("not a database ", 100)), 0o600); err != nil {
		t.Fatal(err)
	}
	cases := map[string]string{
		"postgres://localhost/agentd":         "not sqlite",
		"":                                    "no database path",
		filepath.Join(dir, "x.db?sync=full"):  "unknown parameter",
		dir:                                   "", // a directory
		notDB:                                 "",
		filepath.Join(notDB, "under-file.db"): "", // parent is a file
	}
	for dsn, want := range cases {
		s, err := sqlite.Open(t.Context(), dsn)
		if err == nil {
			s.Close()
			t.Errorf("Open(%q) succeeded", dsn)
			continue
		}
		if !strings.Contains(err.Error(), want) {
			t.Errorf("Open(%q) = %v, want an error containing %q", dsn, err, want)
		}
	}
	for name, opt := range map[string]sqlite.Option{
		"read connections": sqlite.WithReadConnections(0),
		"busy timeout":     sqlite.WithBusyTimeout(-time.Second),
		"synchronous":      sqlite.WithSynchronous(sqlite.Synchronous(9)),
		"logger":           sqlite.WithLogger(nil),
	} {
		if s, err := sqlite.Open(t.Context(), filepath.Join(dir, "opt.db"), opt); err == nil {
			s.Close()
			t.Errorf("Open with a bad %s option succeeded", name)
		}
	}
}

func TestOpenCancelled(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if s, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "x.db")); err == nil {
		s.Close()
		t.Fatal("Open with a cancelled context succeeded")
	} else if !errors.Is(err, context.Canceled) {
		t.Fatalf("Open with a cancelled context = %v, want context.Canceled", err)
	}
}

func TestSchemaOnDisk(t *testing.T) {
	s := openTemp(t)
	path := s.Path()
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	db := raw(t, path)
	var mode string
	if err := db.QueryRow("PRAGMA journal_mode").Scan(&mode); err != nil || mode != "wal" {
		t.Errorf("journal_mode = %q, %v; want wal", mode, err)
	}
	var version int
	var name string
	if err := db.QueryRow("SELECT version, name FROM schema_migrations ORDER BY version DESC LIMIT 1").Scan(&version, &name); err != nil {
		t.Fatal(err)
	}
	if version != 6 || name != "0006_artifacts.sql" {
		t.Errorf("schema_migrations latest = %d %q", version, name)
	}
	// Reopening applies nothing twice.
	s2 := openTemp2(t, path)
	defer s2.Close()
	var n int
	if err := db.QueryRow("SELECT count(*) FROM schema_migrations").Scan(&n); err != nil || n != 6 {
		t.Errorf("schema_migrations has %d rows after a reopen, %v; want 6", n, err)
	}
}

func openTemp2(t *testing.T, path string, opts ...sqlite.Option) *sqlite.Store {
	t.Helper()
	s, err := sqlite.Open(t.Context(), path, append([]sqlite.Option{sqlite.WithLogger(quiet)}, opts...)...)
	if err != nil {
		t.Fatalf("Open(%q): %v", path, err)
	}
	return s
}

func TestOpenRefusesNewerSchema(t *testing.T) {
	s := openTemp(t)
	path := s.Path()
	s.Close()
	if _, err := raw(t, path).Exec("INSERT INTO schema_migrations VALUES (999, '0999_future.sql', 0)"); err != nil {
		t.Fatal(err)
	}
	_, err := sqlite.Open(t.Context(), path)
	if !errors.Is(err, sqlite.ErrSchemaTooNew) {
		t.Fatalf("Open of a newer database = %v, want ErrSchemaTooNew", err)
	}
	if !strings.Contains(err.Error(), "999") {
		t.Errorf("error does not name the database's version: %v", err)
	}
}

func TestDataSurvivesReopen(t *testing.T) {
	path := filepath.Join(t.TempDir(), "agentd.db")
	s := openTemp2(t, path)
	mustCreate(t, s, "s1")
	if err := s.AppendEvents(t.Context(), []conversation.Event{ev("s1", 1), ev("s1", 2)}); err != nil {
		t.Fatal(err)
	}
	if err := s.SaveAgentProfile(t.Context(), profile.Profile{ID: "p", Name: "P"}); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = openTemp2(t, path, sqlite.WithSynchronous(sqlite.SyncFull))
	defer s.Close()
	if n, err := s.LastSeq(t.Context(), "s1"); err != nil || n != 2 {
		t.Fatalf("LastSeq after reopen = %d, %v", n, err)
	}
	if _, err := s.LoadAgentProfile(t.Context(), "p"); err != nil {
		t.Fatalf("profile after reopen: %v", err)
	}
}

func TestCloseTwiceAndUseAfterClose(t *testing.T) {
	s := openTemp(t)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if _, err := s.ListSessions(t.Context()); err == nil {
		t.Error("ListSessions after Close succeeded")
	}
	if err := s.AppendEvents(t.Context(), []conversation.Event{ev("s1", 1)}); err == nil {
		t.Error("AppendEvents after Close succeeded")
	}
}

// The store refuses data for sessions that do not exist, so a late write
// cannot resurrect a deleted session's data.
func TestUnknownSessionWritesAreNotFound(t *testing.T) {
	s := openTemp(t)
	defer s.Close()
	ctx := t.Context()
	mustCreate(t, s, "real")
	_, leaseErr := s.AcquireLease(ctx, "ghost", "h", time.Minute)
	checks := map[string]error{
		"AppendEvents":      s.AppendEvents(ctx, []conversation.Event{ev("real", 1), ev("ghost", 1)}),
		"SaveTranscript":    s.SaveTranscript(ctx, "ghost", "t", []byte("x")),
		"SaveWorkspaceFile": s.SaveWorkspaceFile(ctx, "ghost", store.WorkspaceFile{Path: "f"}),
		"AcquireLease":      leaseErr,
	}
	for name, err := range checks {
		if !errors.Is(err, store.ErrNotFound) {
			t.Errorf("%s for an unknown session = %v, want ErrNotFound", name, err)
		}
	}
	if n, _ := s.LastSeq(ctx, "real"); n != 0 {
		t.Errorf("the batch with an unknown session stored %d events of the real one", n)
	}
	// Eight or more events of a session go straight to events, fewer to the
	// tail: an unknown session on either path fails the whole batch.
	var direct, mixed []conversation.Event
	for seq := int64(1); seq <= 8; seq++ {
		direct = append(direct, ev("ghost", seq))
		mixed = append(mixed, ev("real", seq))
	}
	mixed = append(mixed, ev("ghost", 1))
	for name, batch := range map[string][]conversation.Event{"direct": direct, "direct and tail": mixed} {
		if err := s.AppendEvents(ctx, batch); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("AppendEvents, %s, for an unknown session = %v, want ErrNotFound", name, err)
		}
	}
	if n, _ := s.LastSeq(ctx, "real"); n != 0 {
		t.Errorf("a rejected batch stored %d events of the real session", n)
	}
	// The rejected batches' seqs are free: nothing of them was stored.
	if err := s.AppendEvents(ctx, []conversation.Event{ev("real", 1), ev("real", 2), ev("real", 8)}); err != nil {
		t.Fatalf("appending seqs of a rejected batch: %v", err)
	}
	if n, _ := s.LastSeq(ctx, "real"); n != 8 {
		t.Errorf("LastSeq(real) = %d, want 8", n)
	}
}

func TestRejectsUnstorableValues(t *testing.T) {
	s := openTemp(t)
	defer s.Close()
	ctx := t.Context()
	mustCreate(t, s, "s1")
	far := time.Date(2300, 1, 1, 0, 0, 0, 0, time.UTC)
	e := ev("s1", 1)
	e.Context.Timestamp = far
	if err := s.AppendEvents(ctx, []conversation.Event{e}); err == nil || !strings.Contains(err.Error(), "range") {
		t.Errorf("AppendEvents with a year-2300 timestamp = %v, want a range error", err)
	}
	sess := session("s2")
	sess.CreatedAt = time.Date(1600, 1, 1, 0, 0, 0, 0, time.UTC)
	if err := s.CreateSession(ctx, sess); err == nil {
		t.Error("CreateSession with a year-1600 time succeeded")
	}
	if err := s.CreateSession(ctx, store.Session{}); err == nil {
		t.Error("CreateSession without an id succeeded")
	}
	if err := s.SaveAgentProfile(ctx, profile.Profile{Name: "no id"}); err == nil {
		t.Error("SaveAgentProfile without an id succeeded")
	}
	if err := s.SaveWorkspaceFile(ctx, "s1", store.WorkspaceFile{}); err == nil {
		t.Error("SaveWorkspaceFile without a path succeeded")
	}
	if _, err := s.AcquireLease(ctx, "s1", "h", 0); err == nil {
		t.Error("AcquireLease with ttl 0 succeeded")
	}
	if _, err := s.AcquireLease(ctx, "s1", "", time.Minute); err == nil {
		t.Error("AcquireLease without a holder succeeded")
	}
	// Zero times round-trip as zero.
	e = ev("s1", 1)
	e.Context.Timestamp = time.Time{}
	if err := s.AppendEvents(ctx, []conversation.Event{e}); err != nil {
		t.Fatal(err)
	}
	got, err := s.ReadEvents(ctx, "s1", 0, 0)
	if err != nil || len(got) != 1 || !got[0].Context.Timestamp.IsZero() {
		t.Errorf("zero timestamp after round trip: %v, %v", got, err)
	}
}

func TestCorruptRowsAreErrors(t *testing.T) {
	s := openTemp(t)
	defer s.Close()
	mustCreate(t, s, "s1")
	db := raw(t, s.Path())
	if _, err := db.Exec(`UPDATE sessions SET runtime = X'7B6E6F74' WHERE id = 's1'`); err != nil { // "{not"
		t.Fatal(err)
	}
	if _, err := db.Exec(`INSERT INTO agent_profiles VALUES ('bad', X'5B5B', 0)`); err != nil { // "[["
		t.Fatal(err)
	}
	if _, err := s.LoadSession(t.Context(), "s1"); err == nil {
		t.Error("LoadSession of a corrupt runtime succeeded")
	}
	if _, err := s.ListSessions(t.Context()); err == nil {
		t.Error("ListSessions with a corrupt runtime succeeded")
	}
	if _, err := s.LoadAgentProfile(t.Context(), "bad"); err == nil {
		t.Error("LoadAgentProfile of corrupt JSON succeeded")
	}
	if _, err := s.ListAgentProfiles(t.Context()); err == nil {
		t.Error("ListAgentProfiles with corrupt JSON succeeded")
	}
}

// While another process holds the write lock, reads go on (WAL), and this
// store's writes wait busy_timeout and then fail instead of hanging.
func TestReadersDoNotWaitForWriter(t *testing.T) {
	s := openTemp(t, sqlite.WithBusyTimeout(100*time.Millisecond))
	defer s.Close()
	ctx := t.Context()
	mustCreate(t, s, "s1")
	if err := s.AppendEvents(ctx, []conversation.Event{ev("s1", 1)}); err != nil {
		t.Fatal(err)
	}

	other := raw(t, s.Path())
	conn, err := other.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := conn.ExecContext(ctx, "BEGIN IMMEDIATE"); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.ExecContext(ctx, `INSERT INTO events (session_id, seq, type, payload, conversation_id, source, ts, actor)
		VALUES ('s1', 2, 'log', NULL, 'main', 'server', NULL, NULL)`); err != nil {
		t.Fatal(err)
	}

	evs, err := s.ReadEvents(ctx, "s1", 0, 0)
	if err != nil {
		t.Fatalf("ReadEvents while another connection writes: %v", err)
	}
	if len(evs) != 1 {
		t.Fatalf("ReadEvents saw %d events; the uncommitted one must not show", len(evs))
	}
	if _, err := s.LastSeq(ctx, "s1"); err != nil {
		t.Fatalf("LastSeq while another connection writes: %v", err)
	}
	if err := s.AppendEvents(ctx, []conversation.Event{ev("s1", 3)}); err == nil {
		t.Fatal("AppendEvents succeeded while another connection holds the write lock")
	}

	if _, err := conn.ExecContext(ctx, "COMMIT"); err != nil {
		t.Fatal(err)
	}
	if n, err := s.LastSeq(ctx, "s1"); err != nil || n != 2 {
		t.Fatalf("LastSeq after the other commit = %d, %v; want 2", n, err)
	}
	if err := s.AppendEvents(ctx, []conversation.Event{ev("s1", 3)}); err != nil {
		t.Fatalf("AppendEvents after the lock is gone: %v", err)
	}
}

func TestPragmasPerConnection(t *testing.T) {
	for _, c := range []struct {
		dsn  string
		opts []sqlite.Option
		want int // PRAGMA synchronous: 1 NORMAL, 2 FULL
	}{
		{dsn: "a.db", want: 1},
		{dsn: "b.db?synchronous=full", want: 2},
		{dsn: "c.db?synchronous=full", opts: []sqlite.Option{sqlite.WithSynchronous(sqlite.SyncNormal)}, want: 1},
		{dsn: "d.db", opts: []sqlite.Option{sqlite.WithSynchronous(sqlite.SyncFull)}, want: 2},
	} {
		s, err := sqlite.Open(t.Context(), filepath.Join(t.TempDir(), c.dsn), c.opts...)
		if err != nil {
			t.Fatal(err)
		}
		got, fk := sqlite.WriterPragmas(t, s)
		if got != c.want || fk != 1 {
			t.Errorf("%s: writer synchronous = %d, foreign_keys = %d; want %d and 1", c.dsn, got, fk, c.want)
		}
		s.Close()
	}
}

// TestSurvivesKill appends from a child process, kills it with SIGKILL
// mid-stream, and checks that every batch the child saw committed is there,
// and no partial batch is (synchronous=NORMAL's promise).
func TestSurvivesKill(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a child process")
	}
	path := filepath.Join(t.TempDir(), "crash.db")
	cmd := exec.CommandContext(t.Context(), os.Args[0], "-test.run=^TestCrashChild$", "-test.count=1")
	cmd.Env = append(os.Environ(), "AGENTD_SQLITE_CRASH_DB="+path)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var acked int64
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		if n, err := strconv.ParseInt(strings.TrimPrefix(sc.Text(), "acked "), 10, 64); err == nil {
			acked = n
		}
		if acked >= 3000 {
			break
		}
	}
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	if acked < 3000 {
		t.Fatalf("child stopped after %d events", acked)
	}
	s := openTemp2(t, path)
	defer s.Close()
	last, err := s.LastSeq(t.Context(), "crash")
	if err != nil {
		t.Fatal(err)
	}
	if last < acked {
		t.Fatalf("after SIGKILL: LastSeq %d < %d acknowledged", last, acked)
	}
	if last%crashBatch != 0 {
		t.Fatalf("after SIGKILL: LastSeq %d is not a whole number of %d-event batches", last, crashBatch)
	}
	evs, err := s.ReadEvents(t.Context(), "crash", 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	for i, e := range evs {
		if e.Seq != int64(i+1) {
			t.Fatalf("after SIGKILL: event %d has seq %d", i, e.Seq)
		}
	}
}

const crashBatch = 10

// TestCrashChild is TestSurvivesKill's child: it appends until killed.
func TestCrashChild(t *testing.T) {
	path := os.Getenv("AGENTD_SQLITE_CRASH_DB")
	if path == "" {
		t.Skip("run by TestSurvivesKill")
	}
	s, err := sqlite.Open(context.Background(), path)
	if err != nil {
		t.Fatal(err)
	}
	mustCreate(t, s, "crash")
	for seq := int64(1); ; seq += crashBatch {
		batch := make([]conversation.Event, crashBatch)
		for i := range batch {
			batch[i] = ev("crash", seq+int64(i))
		}
		if err := s.AppendEvents(context.Background(), batch); err != nil {
			t.Fatal(err)
		}
		fmt.Printf("acked %d\n", seq+crashBatch-1)
	}
}

// A write whose context ends before its commit stores nothing, and the
// driver starts no goroutine to watch the context: only database/sql's own
// (every sql.Tx has one) runs. The driver's was a cost every group commit
// of the event log paid.
func TestWriteCancelledBeforeCommit(t *testing.T) {
	s := openTemp(t)
	defer s.Close()
	// The fewest over a few tries: the store's background work (checkpoints)
	// may start a goroutine of its own during one.
	extra := 1 << 30
	for i := range 5 {
		id := fmt.Sprint("p", i)
		n, err := sqlite.WriteAndCancel(t, s, id)
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("write = %v, want context.Canceled", err)
		}
		if _, err := s.LoadAgentProfile(t.Context(), id); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("the cancelled write stored its row: LoadAgentProfile = %v", err)
		}
		extra = min(extra, n)
	}
	if extra > 1 {
		t.Fatalf("%d goroutines started for one transaction, want database/sql's one", extra)
	}
}
