// Package postgres is agentd's store for a fleet: a store.Store in a
// PostgreSQL database (pgx v5, a pgxpool connection pool), which several
// servers may share. It passes the same conformance suite (store/storetest)
// as the embedded SQLite store.
//
// # URLs
//
// Open takes a postgres:// or postgresql:// URL as pgx parses it, e.g.
// postgres://agentd:secret@db.internal:5432/agentd?sslmode=verify-full.
// Useful parameters: search_path (a schema of its own per agentd
// installation, or per test), pool_max_conns, sslmode, and any server
// setting (e.g. synchronous_commit=off trades the last commits on a
// server crash for append latency).
//
// # Writes
//
// The event log's group commit is one round trip: agentd_check_append
// (the schema's one function: fences, then the batch's sessions, their rows
// locked) and an INSERT … SELECT FROM unnest of one array per column are
// pipelined into one implicit transaction. (session_id, seq) is the primary
// key, so two servers can never store the same seq of a session; fencing
// (store.Fence) keeps a server that lost a session's lease from appending
// at all. Lease expiry is by the database server's clock.
//
// # Schema and migrations
//
// migrations/NNNN_description.sql, embedded, applied at Open by the same
// runner as SQLite's (store/internal/migrate), in one transaction under an
// advisory lock per schema, so servers starting together migrate once.
// A database migrated by a newer agentd fails Open with ErrSchemaTooNew.
// Names, paths and ids sort by bytes (COLLATE "C") whatever the database's
// locale; times are timestamptz (microseconds; the zero time is NULL).
package postgres
