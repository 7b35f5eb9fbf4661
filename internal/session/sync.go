package session

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/agentd/agentd/agent"
	"github.com/agentd/agentd/sandbox"
	"github.com/agentd/agentd/store"
)

// SyncResult says what Sync did.
type SyncResult struct {
	// Saved, Deleted and Unchanged count the workspace files whose copy in
	// the store was written, removed (no longer in the workspace, or now
	// larger than the bound) or already right; Skipped those larger than
	// the bound (not copied).
	Saved, Deleted, Unchanged, Skipped int
	// Transcripts names the agent transcripts the store holds for the
	// session afterwards.
	Transcripts []string
}

// Sync persists a session's workspace and its agent's transcript to the
// store now, instead of as they change: with the environment up, the
// workspace watcher's pending changes are recorded first (events and
// copies) and the runner saves its transcript (agent.Syncer); then every
// workspace file up to the copy bound (Config.PersistFilesMax) whose copy
// differs is saved, and copies of files no longer there are removed, so
// the store can restore the workspace as it is. It is idempotent: a second
// call writes nothing. Workspace copying off (PersistFilesMax 0) leaves
// the files alone.
func (m *Manager) Sync(ctx context.Context, id string) (SyncResult, error) {
	s, err := m.Get(id)
	if err != nil {
		return SyncResult{}, err
	}
	type live struct {
		h      *host
		runner agent.Runner
	}
	cur, err := doSync(ctx, s, func(o *owner, done func(live, error)) {
		if o.env == nil || o.starting || o.envLost {
			done(live{}, nil)
			return
		}
		done(live{o.host, o.runner}, nil)
	})
	if err != nil {
		return SyncResult{}, err
	}
	var res SyncResult
	if cur.h != nil {
		// The watcher's held-back changes first, so the copies below and
		// the file events agree.
		if err := syncWorkspace(ctx, cur.h); err != nil && !errors.Is(err, errors.ErrUnsupported) {
			m.log.Warn("sync: flush the workspace watch", "session", id, "err", err)
		}
		if sy, ok := cur.runner.(agent.Syncer); ok {
			if err := sy.Sync(ctx); err != nil {
				return SyncResult{}, fmt.Errorf("save the agent's transcript: %w", err)
			}
		}
	}
	if m.cfg.PersistFilesMax > 0 {
		if err := m.syncFiles(ctx, id, &res); err != nil {
			return SyncResult{}, err
		}
	}
	names, err := m.cfg.Store.ListTranscripts(ctx, id)
	if err != nil {
		return SyncResult{}, fmt.Errorf("list transcripts: %w", err)
	}
	res.Transcripts = names
	if res.Transcripts == nil {
		res.Transcripts = []string{}
	}
	m.log.Info("session synced", "session", id, "saved", res.Saved, "deleted", res.Deleted, "unchanged", res.Unchanged, "skipped", res.Skipped)
	return res, nil
}

// syncFiles makes the store's copies of the workspace the workspace's
// files up to the bound.
func (m *Manager) syncFiles(ctx context.Context, id string, res *SyncResult) error {
	stored, err := m.cfg.Store.ListWorkspaceFiles(ctx, id)
	if err != nil {
		return fmt.Errorf("list saved files: %w", err)
	}
	old := make(map[string]store.WorkspaceFile, len(stored))
	for _, f := range stored {
		old[f.Path] = f
	}
	seen := make(map[string]bool, len(stored))
	err = m.WalkFiles(ctx, id, m.cfg.PersistFilesMax, func(fi sandbox.FileInfo, data []byte) error {
		if data == nil && fi.Size > 0 {
			res.Skipped++
			return nil // larger than the bound: its stale copy, if any, goes below
		}
		seen[fi.Path] = true
		mode := uint32(fi.Mode.Perm())
		if f, ok := old[fi.Path]; ok && bytes.Equal(f.Content, data) && (f.Mode == mode || f.Mode == 0) {
			res.Unchanged++
			return nil
		}
		if err := m.cfg.Store.SaveWorkspaceFile(ctx, id, store.WorkspaceFile{Path: fi.Path, Content: data, Mode: mode, UpdatedAt: time.Now().UTC()}); err != nil {
			return fmt.Errorf("save %s: %w", fi.Path, err)
		}
		res.Saved++
		return nil
	})
	if err != nil {
		return fmt.Errorf("read the workspace: %w", err)
	}
	for _, f := range stored {
		if seen[f.Path] {
			continue
		}
		if err := m.cfg.Store.DeleteSessionFile(ctx, id, f.Path); err != nil {
			return fmt.Errorf("forget %s: %w", f.Path, err)
		}
		res.Deleted++
	}
	return nil
}
