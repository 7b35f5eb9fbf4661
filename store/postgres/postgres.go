package postgres

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/agentd/agentd/store"
	"github.com/agentd/agentd/store/internal/migrate"
)

var _ store.Store = (*Store)(nil)

//go:embed migrations/*.sql
var embeddedMigrations embed.FS

// ErrSchemaTooNew: the database was migrated by a newer agentd than this
// binary.
var ErrSchemaTooNew = migrate.ErrSchemaTooNew

// dialect runs the migrations under a transaction-scoped advisory lock,
// per schema, so servers starting together migrate one after the other.
var dialect = migrate.Dialect{
	Lock: `SELECT pg_advisory_xact_lock(hashtext('agentd schema_migrations ' || current_schema()))`,
	CreateTable: `CREATE TABLE IF NOT EXISTS schema_migrations (
		version    bigint PRIMARY KEY,
		name       text   NOT NULL,
		applied_at bigint NOT NULL
	)`,
	Insert: `INSERT INTO schema_migrations (version, name, applied_at) VALUES ($1, $2, $3)`,
}

type config struct {
	logger   *slog.Logger
	maxConns int32

	artifactQuota store.ArtifactQuota
	artifactBlobs store.ArtifactBlobs
}

// Option configures Open.
type Option func(*config)

// WithLogger sets the logger for schema migrations (default slog.Default()).
func WithLogger(l *slog.Logger) Option { return func(c *config) { c.logger = l } }

// WithMaxConns sets the connection pool's size (default: pgxpool's,
// max(4, GOMAXPROCS), unless the URL sets pool_max_conns).
func WithMaxConns(n int32) Option { return func(c *config) { c.maxConns = n } }

// Store is a store.Store in a PostgreSQL database. Its methods are safe for
// concurrent use, also by several processes (servers of a fleet) sharing
// the database.
type Store struct {
	pool      *pgxpool.Pool
	closeOnce sync.Once

	artifactQuota atomic.Pointer[store.ArtifactQuota] // see WithArtifactQuota
	blobs         store.ArtifactBlobs                 // nil: artifact content in chunks; see WithArtifactBlobs
	stopSweep     func()                              // ends the background sweep of blobs (nil: none)
	log           *slog.Logger
}

// Open connects to the database named by url (postgres://… or
// postgresql://…, anything pgx accepts, e.g. ?sslmode=, ?search_path=, or
// ?pool_max_conns=) and migrates its schema to this binary's version. It
// fails with ErrSchemaTooNew when a newer agentd has migrated it.
func Open(ctx context.Context, url string, opts ...Option) (*Store, error) {
	cfg := config{logger: slog.Default()}
	for _, o := range opts {
		o(&cfg)
	}
	if cfg.logger == nil {
		return nil, errors.New("open postgres store: nil logger")
	}
	pc, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, fmt.Errorf("open postgres store: %w", redact(err))
	}
	if cfg.maxConns > 0 {
		pc.MaxConns = cfg.maxConns
	}
	pool, err := pgxpool.NewWithConfig(ctx, pc)
	if err != nil {
		return nil, fmt.Errorf("open postgres store: %w", redact(err))
	}
	s := &Store{pool: pool, blobs: cfg.artifactBlobs, log: cfg.logger}
	s.SetArtifactQuota(cfg.artifactQuota)
	if err := s.migrate(ctx, cfg.logger); err != nil {
		pool.Close()
		return nil, fmt.Errorf("open postgres store: %w", err)
	}
	s.sweepBlobsAtOpen()
	return s, nil
}

func (s *Store) migrate(ctx context.Context, log *slog.Logger) error {
	ms, err := migrate.Load(embeddedMigrations, "migrations")
	if err != nil {
		return err
	}
	db := stdlib.OpenDBFromPool(s.pool)
	defer db.Close()
	applied, err := migrate.Apply(ctx, db, dialect, ms)
	if err != nil {
		return withCtxErr(ctx, err)
	}
	if len(applied) > 0 {
		var schema string
		_ = s.pool.QueryRow(ctx, `SELECT current_schema()`).Scan(&schema)
		log.Info("postgres store migrated", "schema", schema, "applied", applied, "version", ms[len(ms)-1].Version)
	}
	return nil
}

// Close closes the connection pool. It is safe to call more than once.
func (s *Store) Close() error {
	s.closeOnce.Do(func() {
		if s.stopSweep != nil {
			s.stopSweep()
		}
		s.pool.Close()
	})
	return nil
}

// Ping implements store.Pinger: one round trip to the database.
func (s *Store) Ping(ctx context.Context) error {
	if err := s.pool.Ping(ctx); err != nil {
		return fmt.Errorf("ping postgres store: %w", withCtxErr(ctx, err))
	}
	return nil
}

// AppendConcurrency tells the event log how many group commits to keep in
// flight: each waits about a WAL flush on the database server, during
// which others can be sent, on other connections of the pool (half of
// it: reads, leases and session updates need the rest).
func (s *Store) AppendConcurrency() int {
	return max(1, int(s.pool.Config().MaxConns)/2)
}

// Pool returns the store's connection pool (for tests and tools).
func (s *Store) Pool() *pgxpool.Pool { return s.pool }

// redact drops a connection string's password from a parse error.
func redact(err error) error {
	var pe *pgconn.ParseConfigError
	if errors.As(err, &pe) {
		return errors.New(pe.Error()) // pgconn already masks the password
	}
	return err
}

// pgCode returns err's SQLSTATE, "" if it is not a server error.
func pgCode(err error) string {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		return pe.Code
	}
	return ""
}

// pgDetailList splits a raised error's DETAIL (a list joined by \x1f).
func pgDetailList(err error) []string {
	var pe *pgconn.PgError
	if !errors.As(err, &pe) || pe.Detail == "" {
		return nil
	}
	return strings.Split(pe.Detail, "\x1f")
}

const (
	codeUniqueViolation     = "23505"
	codeForeignKeyViolation = "23503"
	codeFenced              = "AGF01" // agentd_check_append: stale fences
	codeUnknownSession      = "AGN01" // agentd_check_append: missing sessions
)

// withCtxErr adds ctx's error to err when ctx has ended, so callers can
// match context.Canceled whatever shape pgx gave the interruption.
func withCtxErr(ctx context.Context, err error) error {
	cerr := ctx.Err()
	if err == nil || cerr == nil || errors.Is(err, cerr) {
		return err
	}
	return fmt.Errorf("%w: %w", cerr, err)
}

// timeArg is t for a query argument: NULL for the zero time.
func timeArg(t time.Time) any {
	if t.IsZero() {
		return nil
	}
	return t
}

// scanTime is a scanned nullable timestamptz, in UTC.
func scanTime(t *time.Time) time.Time {
	if t == nil {
		return time.Time{}
	}
	return t.UTC()
}

// optBytes stores an empty slice as NULL (an empty JSON document is no
// document).
func optBytes(b []byte) any {
	if len(b) == 0 {
		return nil
	}
	return b
}

// reqBytes makes a stored empty value a non-nil empty slice.
func reqBytes(b []byte) []byte {
	if b == nil {
		return []byte{}
	}
	return b
}

// checkCtx fails fast on an ended context: a call with one has no effect.
func checkCtx(ctx context.Context) error { return ctx.Err() }

// writeGrace is how long a write already sent may still run after its
// caller's context ended before it is interrupted.
const writeGrace = 30 * time.Second

// writeCtx returns the context a write runs with once sent: ctx's values
// but not its end, so that a write the server committed is never reported
// failed because its caller gave up at the last moment (a group commit
// must learn the truth about its batch); it is interrupted only if it is
// still running writeGrace after ctx ended (a hung server), and then its
// outcome is unknown. Call the returned function when the write is done.
func writeCtx(ctx context.Context) (context.Context, func()) {
	wctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	var (
		mu    sync.Mutex
		timer *time.Timer
		done  bool
	)
	stop := context.AfterFunc(ctx, func() {
		mu.Lock()
		defer mu.Unlock()
		if !done {
			timer = time.AfterFunc(writeGrace, cancel)
		}
	})
	return wctx, func() {
		stop()
		mu.Lock()
		done = true
		if timer != nil {
			timer.Stop()
		}
		mu.Unlock()
		cancel()
	}
}
