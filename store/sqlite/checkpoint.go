package sqlite

import (
	"context"
	"database/sql"
	"log/slog"
	"time"
)

// checkpointInterval is how often the checkpointer copies the WAL into the
// database file.
const checkpointInterval = 500 * time.Millisecond

// checkpointer runs SQLite's WAL checkpoints on a connection of its own,
// in the background: the writer's commits never pay for a checkpoint's
// copying and fsyncs (wal_autocheckpoint is 0 on the writer). PASSIVE
// checkpoints wait for no reader or writer.
type checkpointer struct {
	db     *sql.DB
	log    *slog.Logger
	cancel context.CancelFunc
	done   chan struct{}
}

func (s *Store) startCheckpointer(ctx context.Context, path string, cfg config) error {
	db, err := sql.Open("sqlite", checkpointDSN(path, cfg))
	if err != nil {
		return err
	}
	db.SetMaxOpenConns(1)
	db.SetMaxIdleConns(1)
	db.SetConnMaxLifetime(0)
	if err := db.PingContext(ctx); err != nil {
		db.Close()
		return err
	}
	cctx, cancel := context.WithCancel(context.Background())
	c := &checkpointer{db: db, log: cfg.logger, cancel: cancel, done: make(chan struct{})}
	s.ckpt = c
	go c.run(cctx)
	return nil
}

func checkpointDSN(path string, cfg config) string {
	// The writer's settings minus its transaction mode: a checkpoint is not
	// a transaction.
	return driverDSN(path, cfg, true)
}

func (c *checkpointer) run(ctx context.Context) {
	defer close(c.done)
	t := time.NewTicker(checkpointInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			c.checkpoint(ctx)
		}
	}
}

func (c *checkpointer) checkpoint(ctx context.Context) {
	var busy, logFrames, done int
	err := c.db.QueryRowContext(ctx, "PRAGMA wal_checkpoint(PASSIVE)").Scan(&busy, &logFrames, &done)
	if err != nil && ctx.Err() == nil {
		c.log.Warn("sqlite checkpoint failed", "err", err)
	}
}

// stop ends the background loop, runs a last checkpoint and closes the
// connection.
func (c *checkpointer) stop() error {
	c.cancel()
	<-c.done
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c.checkpoint(ctx)
	return c.db.Close()
}
