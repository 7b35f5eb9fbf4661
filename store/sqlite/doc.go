// Package sqlite is agentd's embedded store: a store.Store in one SQLite
// database file, through modernc.org/sqlite (pure Go, no cgo).
//
// # Data source names
//
// Open accepts sqlite:///abs/path.db, sqlite://relative/path.db,
// sqlite:relative.db, a plain path, and :memory: (a temporary file that Close
// deletes: a real in-memory database cannot be shared between the writer and
// the read pool, nor run in WAL mode). Query parameters:
// synchronous=normal|full and busy_timeout=<milliseconds or Go duration>.
// Options given to Open override them.
//
// # Connections and concurrency
//
// The database runs in WAL mode with foreign keys on. Writes go through a
// single connection whose transactions are BEGIN IMMEDIATE, so writers
// queue in Go (on database/sql's pool, honouring each call's context)
// instead of failing with SQLITE_BUSY, and a transaction never has to be
// retried halfway. Reads run on a separate pool of query_only connections:
// in WAL mode a reader sees the last committed state and never waits for the
// writer. busy_timeout only matters when another process opens the same
// file.
//
// AppendEvents of N events is one transaction through prepared inserts of
// 32 rows (then single rows for the rest), so the event log's group commit
// costs one commit (and, with synchronous=FULL, one fsync) per batch, not
// per event.
//
// # The event tail
//
// events is clustered by (session_id, seq), so a session's replay is one
// range scan, but a commit carrying one event of each of k sessions would
// dirty k leaf pages and write k WAL frames. A session's events therefore
// go to events_tail, an unindexed table in arrival order, unless the batch
// carries eight or more of them (they fill a page of events' own). A
// background compactor (compact.go) moves the tail into events, sorted by
// session, 1,024 of its oldest rows per transaction, once it holds
// WithCompactAt rows (default 1024) and appends have paused for 20 ms, or
// at once when it reaches 16 times that. Reads merge both tables; a
// reader's snapshot sees a compaction whole or not at all. (session_id,
// seq) stays unique across both tables through a cache of each session's
// highest stored seq (seqs.go), dropped whenever SQLite's data_version
// shows another connection has committed.
//
// # Durability: synchronous NORMAL (default) or FULL
//
// With NORMAL, a commit is written to the WAL but the WAL is fsynced only at
// checkpoints. A committed transaction survives a crash of the process
// (kill -9, panic, OOM kill): its pages are in the operating system's cache.
// An operating-system crash or power loss may lose the last transactions
// committed before it, never the database's consistency. With FULL
// (WithSynchronous(SyncFull) or ?synchronous=full), every commit fsyncs the
// WAL: nothing acknowledged is lost even then, at the cost of an fsync per
// transaction (see BenchmarkAppendEvents for what that costs per batch
// size). Choose FULL when the machine can lose power and an acknowledged
// event must never disappear; NORMAL when the process is what crashes.
//
// # Schema and migrations
//
// The schema is built by the SQL files in migrations/, embedded in the
// binary and named NNNN_description.sql with versions 1, 2, 3, … (no gaps).
// Open applies the ones the database lacks, in order, in one IMMEDIATE
// transaction (concurrent Opens of one file serialise; a failing migration
// leaves the schema untouched) and records each in schema_migrations
// (version, name, applied_at). A database whose recorded version is newer
// than the newest migration this binary knows fails Open with
// ErrSchemaTooNew. A schema change is a new file with the next number, e.g.
// migrations/0002_audit.sql for the executor's audit table; never edit an
// applied migration. A migration that must rebuild a table with foreign keys
// pointing at it needs foreign_keys off, which SQLite ignores inside a
// transaction; such a migration would need its own runner step.
//
// Times are stored as Unix nanoseconds (the zero time as NULL) and come back
// in UTC; times outside 1678–2262 are rejected. Events of a session that does
// not exist are refused with store.ErrNotFound (a foreign key), as are its
// transcripts, files and leases, so nothing outlives DeleteSession.
package sqlite
