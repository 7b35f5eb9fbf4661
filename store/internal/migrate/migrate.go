// Package migrate applies a store's numbered schema migrations: SQL files
// named NNNN_description.sql (versions 1, 2, 3, … without gaps), embedded
// in the binary, applied in order in one transaction and recorded in a
// schema_migrations table (version, name, applied_at in Unix nanoseconds).
// The SQLite and PostgreSQL stores share it; each supplies a Dialect.
package migrate

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"slices"
	"strconv"
	"strings"
	"time"
)

// ErrSchemaTooNew: the database was migrated by a newer agentd than this
// binary; opening it could corrupt data the newer schema relies on.
var ErrSchemaTooNew = errors.New("store: database schema is newer than this binary")

// Migration is one numbered schema change.
type Migration struct {
	Version int
	Name    string // file name, e.g. 0001_init.sql
	SQL     string
}

// Dialect is what differs between databases.
type Dialect struct {
	// Lock, when set, is run first in the migration transaction so that
	// concurrent runners (servers starting together on one database)
	// serialise: e.g. PostgreSQL's pg_advisory_xact_lock. SQLite needs none
	// (its migration transaction is IMMEDIATE).
	Lock string
	// CreateTable creates schema_migrations when it does not exist.
	CreateTable string
	// Insert records one migration; its three parameters are the version,
	// the name and the time applied (Unix nanoseconds).
	Insert string
}

// ParseName returns the version of a migration file called
// NNNN_description.sql (at least one digit, version > 0).
func ParseName(name string) (int, error) {
	base, ok := strings.CutSuffix(name, ".sql")
	if !ok {
		return 0, fmt.Errorf("migration %q: name must end in .sql", name)
	}
	num, desc, ok := strings.Cut(base, "_")
	if !ok || num == "" || desc == "" {
		return 0, fmt.Errorf("migration %q: name must be NNNN_description.sql", name)
	}
	for _, r := range num {
		if r < '0' || r > '9' {
			return 0, fmt.Errorf("migration %q: version %q is not a number", name, num)
		}
	}
	v, err := strconv.Atoi(num)
	if err != nil || v <= 0 {
		return 0, fmt.Errorf("migration %q: version %q must be a positive number", name, num)
	}
	return v, nil
}

// Load reads dir of fsys. Versions must run 1, 2, 3, … without gaps or
// repeats, so the order is never ambiguous.
func Load(fsys fs.FS, dir string) ([]Migration, error) {
	entries, err := fs.ReadDir(fsys, dir)
	if err != nil {
		return nil, fmt.Errorf("read migrations: %w", err)
	}
	var ms []Migration
	for _, e := range entries {
		if e.IsDir() {
			continue
		}
		v, err := ParseName(e.Name())
		if err != nil {
			return nil, err
		}
		body, err := fs.ReadFile(fsys, path.Join(dir, e.Name()))
		if err != nil {
			return nil, fmt.Errorf("read migration %s: %w", e.Name(), err)
		}
		ms = append(ms, Migration{Version: v, Name: e.Name(), SQL: string(body)})
	}
	slices.SortFunc(ms, func(a, b Migration) int { return a.Version - b.Version })
	for i, m := range ms {
		if m.Version != i+1 {
			return nil, fmt.Errorf("migration %s: expected version %d (versions must run 1, 2, 3, … without gaps or repeats)", m.Name, i+1)
		}
	}
	if len(ms) == 0 {
		return nil, errors.New("no migrations found")
	}
	return ms, nil
}

// Apply applies the migrations db has not seen, in order, in one
// transaction (begun by db's default, after d.Lock), so a failed migration
// leaves the schema as it was. It returns the versions it applied, and
// fails with ErrSchemaTooNew when db records a version newer than the
// last of ms.
func Apply(ctx context.Context, db *sql.DB, d Dialect, ms []Migration) (applied []int, err error) {
	if len(ms) == 0 {
		return nil, errors.New("no migrations")
	}
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return nil, fmt.Errorf("begin migration: %w", err)
	}
	defer func() {
		if err != nil {
			_ = tx.Rollback()
		}
	}()
	if d.Lock != "" {
		if _, err := tx.ExecContext(ctx, d.Lock); err != nil {
			return nil, fmt.Errorf("lock for migration: %w", err)
		}
	}
	if _, err := tx.ExecContext(ctx, d.CreateTable); err != nil {
		return nil, fmt.Errorf("create schema_migrations: %w", err)
	}
	var current int
	if err := tx.QueryRowContext(ctx, `SELECT coalesce(max(version), 0) FROM schema_migrations`).Scan(&current); err != nil {
		return nil, fmt.Errorf("read schema version: %w", err)
	}
	latest := ms[len(ms)-1].Version
	if current > latest {
		return nil, fmt.Errorf("%w: the database is at version %d, this binary knows versions up to %d; run a newer agentd", ErrSchemaTooNew, current, latest)
	}
	for _, m := range ms[current:] {
		if _, err := tx.ExecContext(ctx, m.SQL); err != nil {
			return nil, fmt.Errorf("apply migration %s: %w", m.Name, err)
		}
		if _, err := tx.ExecContext(ctx, d.Insert, m.Version, m.Name, time.Now().UnixNano()); err != nil {
			return nil, fmt.Errorf("record migration %s: %w", m.Name, err)
		}
		applied = append(applied, m.Version)
	}
	if err := tx.Commit(); err != nil {
		return nil, fmt.Errorf("commit migrations: %w", err)
	}
	return applied, nil
}
