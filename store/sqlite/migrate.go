package sqlite

import (
	"context"
	"database/sql"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"slices"
	"strconv"
	"strings"
	"time"
)

//go:embed migrations/*.sql
var embeddedMigrations embed.FS

// ErrSchemaTooNew: the database was migrated by a newer agentd than this
// binary; opening it could corrupt data the newer schema relies on.
var ErrSchemaTooNew = errors.New("sqlite store: database schema is newer than this binary")

// migration is one numbered schema change.
type migration struct {
	version int
	name    string // file name, e.g. 0001_init.sql
	sql     string
}

// parseMigrationName returns the version of a migration file called
// NNNN_description.sql (at least one digit, version > 0).
func parseMigrationName(name string) (int, error) {
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

// loadMigrations reads dir of fsys. Versions must run 1, 2, 3, … without
// gaps or repeats, so the order is never ambiguous.
func loadMigrations(fsys fs.FS, dir string) ([]migration, error) {
	entries, err := fs.ReadDir(fsys, dir)
	if err != nil {
		return nil, fmt.Errorf("read migrations: %w", err)
	}
	var ms []migration
	for _, e := range entries {
		if e.IsDir() {
			continue
		}
		v, err := parseMigrationName(e.Name())
		if err != nil {
			return nil, err
		}
		body, err := fs.ReadFile(fsys, path.Join(dir, e.Name()))
		if err != nil {
			return nil, fmt.Errorf("read migration %s: %w", e.Name(), err)
		}
		ms = append(ms, migration{version: v, name: e.Name(), sql: string(body)})
	}
	slices.SortFunc(ms, func(a, b migration) int { return a.version - b.version })
	for i, m := range ms {
		if m.version != i+1 {
			return nil, fmt.Errorf("migration %s: expected version %d (versions must run 1, 2, 3, … without gaps or repeats)", m.name, i+1)
		}
	}
	if len(ms) == 0 {
		return nil, errors.New("no migrations found")
	}
	return ms, nil
}

// migrate applies the migrations db has not seen, in order, in one
// IMMEDIATE transaction (db's transactions are, see Open), so concurrent
// Opens of one file serialise and a failed migration leaves the schema as it
// was. It returns the versions it applied.
func migrate(ctx context.Context, db *sql.DB, ms []migration) (applied []int, err error) {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return nil, fmt.Errorf("begin migration: %w", err)
	}
	defer func() {
		if err != nil {
			_ = tx.Rollback()
		}
	}()
	if _, err := tx.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS schema_migrations (
		version    INTEGER PRIMARY KEY,
		name       TEXT    NOT NULL,
		applied_at INTEGER NOT NULL
	) STRICT`); err != nil {
		return nil, fmt.Errorf("create schema_migrations: %w", err)
	}
	var current int
	if err := tx.QueryRowContext(ctx, `SELECT coalesce(max(version), 0) FROM schema_migrations`).Scan(&current); err != nil {
		return nil, fmt.Errorf("read schema version: %w", err)
	}
	latest := ms[len(ms)-1].version
	if current > latest {
		return nil, fmt.Errorf("%w: the database is at version %d, this binary knows versions up to %d; run a newer agentd", ErrSchemaTooNew, current, latest)
	}
	for _, m := range ms[current:] {
		if _, err := tx.ExecContext(ctx, m.sql); err != nil {
			return nil, fmt.Errorf("apply migration %s: %w", m.name, err)
		}
		if _, err := tx.ExecContext(ctx, `INSERT INTO schema_migrations (version, name, applied_at) VALUES (?, ?, ?)`,
			m.version, m.name, time.Now().UnixNano()); err != nil {
			return nil, fmt.Errorf("record migration %s: %w", m.name, err)
		}
		applied = append(applied, m.version)
	}
	if err := tx.Commit(); err != nil {
		return nil, fmt.Errorf("commit migrations: %w", err)
	}
	return applied, nil
}
