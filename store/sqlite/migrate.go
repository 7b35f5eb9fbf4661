package sqlite

import (
	"context"
	"database/sql"
	"embed"

	migrations "github.com/agentd/agentd/store/internal/migrate"
)

//go:embed migrations/*.sql
var embeddedMigrations embed.FS

// ErrSchemaTooNew: the database was migrated by a newer agentd than this
// binary; opening it could corrupt data the newer schema relies on.
var ErrSchemaTooNew = migrations.ErrSchemaTooNew

// migration is one numbered schema change (store/internal/migrate, which
// the PostgreSQL store shares).
type migration = migrations.Migration

var (
	parseMigrationName = migrations.ParseName
	loadMigrations     = migrations.Load
)

// dialect is SQLite's: the writer's transactions are IMMEDIATE (see Open),
// so concurrent Opens of one file serialise without a lock statement.
var dialect = migrations.Dialect{
	CreateTable: `CREATE TABLE IF NOT EXISTS schema_migrations (
		version    INTEGER PRIMARY KEY,
		name       TEXT    NOT NULL,
		applied_at INTEGER NOT NULL
	) STRICT`,
	Insert: `INSERT INTO schema_migrations (version, name, applied_at) VALUES (?, ?, ?)`,
}

// migrate applies the migrations db has not seen, in order, in one
// IMMEDIATE transaction (db's transactions are, see Open), so concurrent
// Opens of one file serialise and a failed migration leaves the schema as it
// was. It returns the versions it applied.
func migrate(ctx context.Context, db *sql.DB, ms []migration) ([]int, error) {
	return migrations.Apply(ctx, db, dialect, ms)
}
