package session

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"sync"
	"time"

	"github.com/agentd/agentd/restapi"
	"github.com/agentd/agentd/sandbox"
)

// What the agent changed: before each turn starts, the session's workspace
// is snapshotted (a manifest of path → content hash, the contents kept by
// hash), so the changes of a turn are the difference between its snapshot
// and the next one (or the workspace now, for the last turn), and the
// changes of the whole session the difference between the first snapshot
// and now. Snapshots live in the data folder (DataDir/changes/<session>/):
// turns/<query>.json and blobs/<sha256>. A file is read again only when its
// size or modification time changed since the last snapshot, so a snapshot
// costs a listing plus what the agent changed.

// Bounds of one snapshot: files larger than maxSnapshotFile, or beyond the
// byte and file budgets, are listed without their contents.
const (
	maxSnapshotFile  = 1 << 20
	maxSnapshotBytes = 64 << 20
	maxSnapshotFiles = 20000
)

// The changes types are the API's (restapi), field for field: the
// session layer fills them and the transport sends them as they are.
type (
	// FileVersion is a file's content in a workspace snapshot.
	FileVersion = restapi.FileVersion
	// FileDiff is one changed file.
	FileDiff = restapi.ChangedFile
	// TurnChanges are the changes made while one turn (and any turns
	// after it that have no snapshot) ran.
	TurnChanges = restapi.TurnChanges
	// Changes are a session's changes, per turn and overall.
	Changes = restapi.SessionChanges
)

type manifest struct {
	QueryID string                 `json:"queryId"`
	Taken   time.Time              `json:"taken"`
	Files   map[string]FileVersion `json:"files"`
}

// snapshots caches, per session, the hash of each file as last read.
type snapshots struct {
	mu    sync.Mutex // guards known
	known map[string]map[string]knownFile
}

type knownFile struct {
	size    int64
	modTime time.Time
	sha     string
}

func (m *Manager) changesDir(id string) string { return filepath.Join(m.cfg.DataDir, "changes", id) }

func (m *Manager) blobPath(id, sha string) string {
	return filepath.Join(m.changesDir(id), "blobs", sha)
}

// snapshotTurn records the workspace before turn queryID runs. A failure
// is logged: it costs the turn its diff, never the turn.
func (m *Manager) snapshotTurn(ctx context.Context, e sandbox.Environment, id, queryID string) {
	if e == nil {
		return
	}
	start := time.Now()
	files, err := m.snapshot(ctx, e, id)
	if err != nil {
		m.log.Warn("snapshot workspace", "session", id, "query", queryID, "err", err)
		return
	}
	b, err := json.Marshal(manifest{QueryID: queryID, Taken: time.Now().UTC(), Files: files})
	if err == nil {
		err = writeFileAtomic(filepath.Join(m.changesDir(id), "turns", queryID+".json"), b)
	}
	if err != nil {
		m.log.Warn("save workspace snapshot", "session", id, "query", queryID, "err", err)
		return
	}
	m.log.Debug("workspace snapshot", "session", id, "query", queryID, "files", len(files), "ms", time.Since(start).Milliseconds())
}

// snapshot hashes the workspace's files, keeping each content by hash.
func (m *Manager) snapshot(ctx context.Context, e sandbox.Environment, id string) (map[string]FileVersion, error) {
	list, err := e.List(ctx, "", true)
	if err != nil {
		return nil, fmt.Errorf("list workspace: %w", err)
	}
	m.snaps.mu.Lock()
	if m.snaps.known == nil {
		m.snaps.known = make(map[string]map[string]knownFile)
	}
	prev := m.snaps.known[id]
	m.snaps.mu.Unlock()
	next := make(map[string]knownFile, len(list))
	out := make(map[string]FileVersion, len(list))
	var read int64
	n := 0
	for _, f := range list {
		if f.IsDir || f.Mode&fs.ModeSymlink != 0 {
			continue
		}
		n++
		v := FileVersion{Size: f.Size}
		if k, ok := prev[f.Path]; ok && k.size == f.Size && k.modTime.Equal(f.ModTime) && k.sha != "" {
			v.SHA256 = k.sha
		} else if f.Size <= maxSnapshotFile && read+f.Size <= maxSnapshotBytes && n <= maxSnapshotFiles {
			data, err := e.ReadFile(ctx, f.Path)
			if err != nil {
				if ctx.Err() != nil {
					return nil, ctx.Err()
				}
				continue // gone meanwhile
			}
			read += int64(len(data))
			sum := sha256.Sum256(data)
			v.SHA256, v.Size = hex.EncodeToString(sum[:]), int64(len(data))
			if err := m.saveBlob(id, v.SHA256, data); err != nil {
				return nil, err
			}
		}
		if v.SHA256 != "" {
			next[f.Path] = knownFile{size: f.Size, modTime: f.ModTime, sha: v.SHA256}
		}
		out[f.Path] = v
	}
	m.snaps.mu.Lock()
	m.snaps.known[id] = next
	m.snaps.mu.Unlock()
	return out, nil
}

func (m *Manager) saveBlob(id, sha string, data []byte) error {
	p := m.blobPath(id, sha)
	if _, err := os.Stat(p); err == nil {
		return nil
	}
	if err := writeFileAtomic(p, data); err != nil {
		return fmt.Errorf("keep file content: %w", err)
	}
	return nil
}

func writeFileAtomic(p string, data []byte) error {
	if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(p), ".tmp-*")
	if err != nil {
		return err
	}
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		os.Remove(tmp.Name())
		return err
	}
	if err := tmp.Close(); err != nil {
		os.Remove(tmp.Name())
		return err
	}
	return os.Rename(tmp.Name(), p)
}

// Changes returns what the session's turns changed in its workspace.
func (m *Manager) Changes(ctx context.Context, id string) (Changes, error) {
	if _, err := m.Get(id); err != nil {
		return Changes{}, err
	}
	st, err := m.states.get(ctx, id)
	if err != nil {
		return Changes{}, err
	}
	type snap struct {
		query string
		files map[string]FileVersion
	}
	var snaps []snap
	for _, t := range st.Turns {
		b, err := os.ReadFile(filepath.Join(m.changesDir(id), "turns", t.QueryID+".json"))
		if err != nil {
			continue // a turn from before snapshots, or one whose snapshot failed
		}
		var mf manifest
		if json.Unmarshal(b, &mf) == nil {
			snaps = append(snaps, snap{t.QueryID, mf.Files})
		}
	}
	var now map[string]FileVersion
	err = m.withFiles(ctx, id, func(e sandbox.Environment) error {
		var err error
		now, err = m.snapshot(ctx, e, id)
		return err
	})
	if err != nil {
		return Changes{}, err
	}
	out := Changes{Turns: []TurnChanges{}, Overall: []FileDiff{}}
	for i, s := range snaps {
		after := now
		if i+1 < len(snaps) {
			after = snaps[i+1].files
		}
		out.Turns = append(out.Turns, TurnChanges{QueryID: s.query, Files: diffManifests(s.files, after)})
	}
	if len(snaps) > 0 {
		out.Overall = diffManifests(snaps[0].files, now)
	}
	return out, nil
}

// diffManifests lists the files that differ between two snapshots, by path.
func diffManifests(before, after map[string]FileVersion) []FileDiff {
	out := []FileDiff{}
	for p, a := range after {
		b, ok := before[p]
		if !ok {
			out = append(out, FileDiff{Path: p, Change: "added", After: ptr(a)})
			continue
		}
		// Contents unknown both times (too large): only a size change shows.
		if b.SHA256 == a.SHA256 && (b.SHA256 != "" || b.Size == a.Size) {
			continue
		}
		out = append(out, FileDiff{Path: p, Change: "modified", Before: ptr(b), After: ptr(a)})
	}
	for p, b := range before {
		if _, ok := after[p]; !ok {
			out = append(out, FileDiff{Path: p, Change: "deleted", Before: ptr(b)})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Path < out[j].Path })
	return out
}

func ptr[T any](v T) *T { return &v }

var shaRE = regexp.MustCompile(`^[0-9a-f]{64}$`)

// ChangedContent returns a file content kept by a snapshot of the session.
func (m *Manager) ChangedContent(ctx context.Context, id, sha string) ([]byte, error) {
	if _, err := m.Get(id); err != nil {
		return nil, err
	}
	if !shaRE.MatchString(sha) {
		return nil, fmt.Errorf("%w: %q is not a sha256 in hex", ErrInvalidRequest, sha)
	}
	data, err := os.ReadFile(m.blobPath(id, sha))
	if errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("%w: no content %s in this session's snapshots", sandbox.ErrNotFound, sha)
	}
	return data, err
}

// WalkFiles calls f for each file of the session's workspace (recursively,
// ignored folders left out), with its content when it is at most maxSize
// bytes (nil otherwise), in path order.
func (m *Manager) WalkFiles(ctx context.Context, id string, maxSize int64, f func(info sandbox.FileInfo, data []byte) error) error {
	return m.withFiles(ctx, id, func(e sandbox.Environment) error {
		list, err := e.List(ctx, "", true)
		if err != nil {
			return err
		}
		for _, fi := range list {
			if fi.IsDir {
				continue
			}
			var data []byte
			if fi.Size <= maxSize {
				if data, err = e.ReadFile(ctx, fi.Path); err != nil {
					if ctx.Err() != nil {
						return ctx.Err()
					}
					continue // gone meanwhile
				}
			}
			if err := f(fi, data); err != nil {
				return err
			}
		}
		return nil
	})
}

// forgetChanges removes a purged session's snapshots.
func (m *Manager) forgetChanges(id string) {
	m.snaps.mu.Lock()
	delete(m.snaps.known, id)
	m.snaps.mu.Unlock()
	if err := os.RemoveAll(m.changesDir(id)); err != nil {
		m.log.Warn("remove snapshots", "session", id, "err", err)
	}
}
