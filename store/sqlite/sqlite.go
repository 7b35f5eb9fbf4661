package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	_ "modernc.org/sqlite" // registers the "sqlite" database/sql driver

	"github.com/agentd/agentd/store"
)

var _ store.Store = (*Store)(nil)

// Synchronous is SQLite's synchronous setting for the writer connection; see
// the package doc for the trade-off.
type Synchronous int

const (
	// SyncNormal (the default) syncs the WAL only at checkpoints: commits
	// survive a process crash, and an OS crash or power loss may lose the
	// last ones (never corrupt the database).
	SyncNormal Synchronous = iota
	// SyncFull syncs the WAL on every commit: commits survive an OS crash
	// too, at the price of one fsync per transaction.
	SyncFull
)

// String returns the pragma value, NORMAL or FULL.
func (s Synchronous) String() string {
	if s == SyncFull {
		return "FULL"
	}
	return "NORMAL"
}

const (
	defaultBusyTimeout = 5 * time.Second
	maxBusyTimeout     = time.Hour
)

// config is what Options and the DSN's parameters set.
type config struct {
	synchronous Synchronous
	busyTimeout time.Duration
	readConns   int
	compactAt   int
	logger      *slog.Logger

	artifactQuota store.ArtifactQuota
	artifactBlobs store.ArtifactBlobs
}

// Option configures Open. Options override the DSN's query parameters.
type Option func(*config)

// WithSynchronous sets the writer's durability level (default SyncNormal).
func WithSynchronous(s Synchronous) Option { return func(c *config) { c.synchronous = s } }

// WithBusyTimeout sets how long a statement waits for a lock held by another
// process sharing the file before failing (default 5s, at most an hour).
func WithBusyTimeout(d time.Duration) Option { return func(c *config) { c.busyTimeout = d } }

// WithReadConnections sets the size of the read pool (default: GOMAXPROCS,
// at least 4).
func WithReadConnections(n int) Option { return func(c *config) { c.readConns = n } }

// WithCompactAt sets how many rows the event tail (where appends go, in
// arrival order) holds before they are moved into the per-session table
// (default 1024; 1 moves them after every append). See compact.go.
func WithCompactAt(n int) Option { return func(c *config) { c.compactAt = n } }

// WithLogger sets the logger for schema migrations (default slog.Default()).
func WithLogger(l *slog.Logger) Option { return func(c *config) { c.logger = l } }

// Store is a store.Store in one SQLite database file. Its methods are safe
// for concurrent use: writes are serialised through one connection, reads
// run on a pool of read-only connections and never wait for the writer.
type Store struct {
	path   string
	tmpDir string  // a :memory: store's directory, removed by Close
	w      *sql.DB // the writer: one connection, IMMEDIATE transactions
	r      *sql.DB // the read pool, query_only connections

	insertTail   inserts   // into events_tail, prepared on w
	insertDirect inserts   // into events, prepared on w
	dataVersion  *sql.Stmt // PRAGMA data_version, prepared on w
	leaseGen     *sql.Stmt // a lease's generation (fences), prepared on w

	seqs      *storedSeqs   // the highest stored seq per session, for conflicts
	ckpt      *checkpointer // nil until started
	compactor *compactor    // nil until started

	artifactQuota atomic.Pointer[store.ArtifactQuota] // see WithArtifactQuota
	blobs         store.ArtifactBlobs                 // nil: artifact content in chunks; see WithArtifactBlobs
	stopSweep     func()                              // ends the background sweep of blobs (nil: none)
	log           *slog.Logger

	closeOnce sync.Once
	closeErr  error
}

// Open opens (creating if needed) the database named by dsn and migrates its
// schema to this binary's version. dsn is sqlite:///abs/path.db,
// sqlite://relative.db, a plain path, or :memory: for a throwaway database
// (a temporary file deleted by Close), optionally followed by
// ?synchronous=normal|full and busy_timeout=<ms or Go duration>. The parent
// directory is created if missing, and a new database file is made readable
// by its owner only (it holds profiles' environment variables).
//
// Open fails with ErrSchemaTooNew when a newer agentd has migrated the file.
func Open(ctx context.Context, dataSource string, opts ...Option) (*Store, error) {
	d, err := parseDSN(dataSource)
	if err != nil {
		return nil, fmt.Errorf("open sqlite store: %w", err)
	}
	cfg := config{
		synchronous: SyncNormal,
		busyTimeout: defaultBusyTimeout,
		readConns:   max(4, runtime.GOMAXPROCS(0)),
		compactAt:   defaultCompactAt,
		logger:      slog.Default(),
	}
	if d.set.synchronous {
		cfg.synchronous = d.params.synchronous
	}
	if d.set.busyTimeout {
		cfg.busyTimeout = d.params.busyTimeout
	}
	for _, o := range opts {
		o(&cfg)
	}
	if err := cfg.validate(); err != nil {
		return nil, fmt.Errorf("open sqlite store: %w", err)
	}

	s := &Store{seqs: newStoredSeqs(), blobs: cfg.artifactBlobs, log: cfg.logger}
	s.SetArtifactQuota(cfg.artifactQuota)
	if err := s.open(ctx, d.path, cfg); err != nil {
		s.closeAll()
		return nil, fmt.Errorf("open sqlite store %s: %w", dataSource, err)
	}
	s.sweepBlobsAtOpen()
	return s, nil
}

func (c config) validate() error {
	if c.synchronous != SyncNormal && c.synchronous != SyncFull {
		return fmt.Errorf("unknown synchronous setting %d", c.synchronous)
	}
	if c.busyTimeout < 0 || c.busyTimeout > maxBusyTimeout {
		return fmt.Errorf("busy timeout %v out of range [0, %v]", c.busyTimeout, maxBusyTimeout)
	}
	if c.readConns < 1 {
		return fmt.Errorf("read connections %d: need at least 1", c.readConns)
	}
	if c.compactAt < 1 {
		return fmt.Errorf("compact at %d rows: need at least 1", c.compactAt)
	}
	if c.logger == nil {
		return errors.New("nil logger")
	}
	return nil
}

func (s *Store) open(ctx context.Context, path string, cfg config) error {
	if path == memoryPath {
		dir, err := os.MkdirTemp("", "agentd-sqlite-")
		if err != nil {
			return fmt.Errorf("create temporary database: %w", err)
		}
		s.tmpDir = dir
		path = filepath.Join(dir, "agentd.db")
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return fmt.Errorf("resolve path: %w", err)
	}
	s.path = abs
	if err := os.MkdirAll(filepath.Dir(abs), 0o750); err != nil {
		return fmt.Errorf("create database directory: %w", err)
	}
	// SQLite creates files 0644; make a new one 0600 first (the WAL and
	// shared-memory files copy its mode).
	f, err := os.OpenFile(abs, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return fmt.Errorf("create database file: %w", err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("create database file: %w", err)
	}

	if s.w, err = sql.Open("sqlite", driverDSN(abs, cfg, true)); err != nil {
		return fmt.Errorf("open writer: %w", err)
	}
	s.w.SetMaxOpenConns(1)
	s.w.SetMaxIdleConns(1)
	s.w.SetConnMaxLifetime(0)
	s.w.SetConnMaxIdleTime(0)
	var mode string
	if err := s.w.QueryRowContext(ctx, "PRAGMA journal_mode").Scan(&mode); err != nil {
		return fmt.Errorf("open writer: %w", err)
	}
	if !strings.EqualFold(mode, "wal") {
		return fmt.Errorf("journal mode is %q, not WAL (does the file system support shared memory?)", mode)
	}

	ms, err := loadMigrations(embeddedMigrations, "migrations")
	if err != nil {
		return err
	}
	applied, err := migrate(ctx, s.w, ms)
	if err != nil {
		return err
	}
	if len(applied) > 0 {
		cfg.logger.Info("sqlite store migrated", "path", abs, "applied", applied, "version", ms[len(ms)-1].Version)
	}

	// Chunks a put wrote before failing in a way that skipped its cleanup
	// (a crash): no content row owns them (artifacts.go).
	if _, err := s.w.ExecContext(ctx, `DELETE FROM artifact_chunks
		WHERE sha256 NOT IN (SELECT sha256 FROM artifact_contents)`); err != nil {
		return fmt.Errorf("delete orphaned artifact chunks: %w", err)
	}

	if s.insertTail, err = s.prepareInserts(ctx, "events_tail"); err != nil {
		return err
	}
	if s.insertDirect, err = s.prepareInserts(ctx, "events"); err != nil {
		return err
	}
	if s.dataVersion, err = s.w.PrepareContext(ctx, `PRAGMA data_version`); err != nil {
		return fmt.Errorf("prepare data_version: %w", err)
	}
	// Every fenced write reads it: a statement prepared per read cost
	// more than the read.
	if s.leaseGen, err = s.w.PrepareContext(ctx, `SELECT generation FROM leases WHERE session_id = ?`); err != nil {
		return fmt.Errorf("prepare lease generation: %w", err)
	}

	if s.r, err = sql.Open("sqlite", driverDSN(abs, cfg, false)); err != nil {
		return fmt.Errorf("open readers: %w", err)
	}
	s.r.SetMaxOpenConns(cfg.readConns)
	s.r.SetMaxIdleConns(cfg.readConns)
	s.r.SetConnMaxLifetime(0)
	if err := s.r.PingContext(ctx); err != nil {
		return fmt.Errorf("open readers: %w", err)
	}
	if err := s.startCheckpointer(ctx, abs, cfg); err != nil {
		return fmt.Errorf("start checkpointer: %w", err)
	}
	if err := s.startCompactor(ctx, cfg.compactAt, cfg.logger); err != nil {
		return fmt.Errorf("start compactor: %w", err)
	}
	return nil
}

// driverDSN is the modernc.org/sqlite data source for the writer or a reader.
// Pragmas run on every new connection.
func driverDSN(path string, cfg config, writer bool) string {
	q := url.Values{}
	q.Add("_pragma", fmt.Sprintf("busy_timeout(%d)", cfg.busyTimeout.Milliseconds()))
	q.Add("_pragma", "foreign_keys(1)")
	if writer {
		q.Add("_pragma", "journal_mode(WAL)")
		q.Add("_pragma", "synchronous("+cfg.synchronous.String()+")")
		// Keep a checkpointed WAL from staying at its high-water mark.
		q.Add("_pragma", "journal_size_limit(67108864)")
		// Commits never run a checkpoint (which copies the WAL into the
		// database and fsyncs it, stalling every appender behind it); the
		// background checkpointer does (checkpoint.go).
		q.Add("_pragma", "wal_autocheckpoint(0)")
		// The 32-row inserts keep a statement journal; in memory it never
		// spills to a temporary file (5–15 % less CPU per event in
		// BenchmarkEventAppend's single-event cells).
		q.Add("_pragma", "temp_store(MEMORY)")
		// Take the write lock at BEGIN, so a transaction never fails halfway
		// on a lock another process took after it started reading.
		q.Set("_txlock", "immediate")
	} else {
		q.Add("_pragma", "query_only(1)")
	}
	return path + "?" + q.Encode()
}

// Path returns the database file's absolute path.
func (s *Store) Path() string { return s.path }

// Close closes the database. It is safe to call more than once; later calls
// return the first call's result. Calls made after Close fail.
func (s *Store) Close() error {
	s.closeOnce.Do(func() {
		if s.stopSweep != nil {
			s.stopSweep()
		}
		s.closeErr = s.closeAll()
	})
	return s.closeErr
}

// closeAll releases whatever open got to.
func (s *Store) closeAll() error {
	var errs []error
	if s.compactor != nil {
		s.compactor.stop()
	}
	if s.ckpt != nil {
		errs = append(errs, s.ckpt.stop())
	}
	for _, st := range []*sql.Stmt{s.insertTail.one, s.insertTail.many, s.insertDirect.one, s.insertDirect.many, s.dataVersion, s.leaseGen} {
		if st != nil {
			errs = append(errs, st.Close())
		}
	}
	if s.r != nil {
		errs = append(errs, s.r.Close())
	}
	if s.w != nil {
		errs = append(errs, s.w.Close())
	}
	if s.tmpDir != "" {
		errs = append(errs, os.RemoveAll(s.tmpDir))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("close sqlite store: %w", err)
	}
	return nil
}

// write runs f in an IMMEDIATE transaction on the writer connection and
// commits it; any error rolls it back. f must not keep tx.
//
// The transaction begins without ctx's cancellation: with it, the driver
// starts a goroutine per transaction to watch ctx (besides database/sql's
// own), a cost every group commit paid. ctx is checked before the
// commit instead (and by f between its statements), so a cancelled write
// stores nothing; a statement already running finishes first (SQLite's
// busy timeout bounds its wait for a lock).
func (s *Store) write(ctx context.Context, f func(tx *sql.Tx) error) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	tx, err := s.w.BeginTx(context.WithoutCancel(ctx), nil)
	if err != nil {
		return withCtxErr(ctx, err)
	}
	if err := f(tx); err != nil {
		_ = tx.Rollback()
		return withCtxErr(ctx, err)
	}
	if err := ctx.Err(); err != nil {
		_ = tx.Rollback()
		return err
	}
	if err := tx.Commit(); err != nil {
		return withCtxErr(ctx, fmt.Errorf("%w: %w", errCommit, err))
	}
	return nil
}

// errCommit marks write's errors from the commit itself, after which the
// transaction's outcome is not known.
var errCommit = errors.New("commit")

// withCtxErr adds ctx's error to err when ctx has ended: after a
// cancellation database/sql and the driver report it in several shapes
// (sql.ErrTxDone, an interrupt), and callers match context.Canceled.
func withCtxErr(ctx context.Context, err error) error {
	cerr := ctx.Err()
	if cerr == nil || errors.Is(err, cerr) {
		return err
	}
	return fmt.Errorf("%w: %w", cerr, err)
}
