// Package storefiles serves a session's workspace files from the copies
// the store keeps (store.WorkspaceFile), read-only: what the files API
// shows of a session whose workspace lives in its environment (a
// Kubernetes pod's volume) while that environment is down. Files over
// the store's size bound are not there.
package storefiles

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"

	"sort"
	"strings"

	"github.com/agentd/agentd/sandbox"
	"github.com/agentd/agentd/store"
)

// ErrReadOnly: the view cannot run or change anything.
var ErrReadOnly = errors.New("storefiles: the environment is down: its saved files are read-only")

// Source lists a session's saved files.
type Source interface {
	ListWorkspaceFiles(ctx context.Context, sessionID string) ([]store.WorkspaceFile, error)
}

// Provider makes read-only views of sessions' saved files. Safe for
// concurrent use.
type Provider struct{ src Source }

var _ sandbox.Provider = (*Provider)(nil)

// New returns a Provider over src.
func New(src Source) *Provider { return &Provider{src: src} }

// Name returns "store".
func (p *Provider) Name() string { return "store" }

// Create reads spec.SessionID's saved files; nothing is created anywhere.
func (p *Provider) Create(ctx context.Context, spec sandbox.Spec) (sandbox.Environment, error) {
	files, err := p.src.ListWorkspaceFiles(ctx, spec.SessionID)
	if err != nil {
		return nil, fmt.Errorf("saved files: %w", err)
	}
	v := &view{files: map[string]store.WorkspaceFile{}}
	for _, f := range files {
		clean, err := sandbox.CleanPath(f.Path)
		if err != nil || clean == "." {
			continue
		}
		v.files[clean] = f
	}
	return v, nil
}

// view is one session's saved files. Immutable once made.
type view struct {
	files map[string]store.WorkspaceFile
}

var (
	_ sandbox.Environment = (*view)(nil)
	_ sandbox.FileOpener  = (*view)(nil)
)

func (v *view) Exec(context.Context, sandbox.Cmd) (sandbox.Process, error) { return nil, ErrReadOnly }

func (v *view) lookup(p string) (store.WorkspaceFile, error) {
	clean, err := sandbox.CleanPath(p)
	if err != nil {
		return store.WorkspaceFile{}, err
	}
	f, ok := v.files[clean]
	if !ok {
		if v.isDir(clean) {
			return store.WorkspaceFile{}, fmt.Errorf("read %s: %w", p, sandbox.ErrNotRegular)
		}
		return store.WorkspaceFile{}, fmt.Errorf("read %s: %w", p, sandbox.ErrNotFound)
	}
	return f, nil
}

func (v *view) isDir(clean string) bool {
	if clean == "." {
		return true
	}
	for p := range v.files {
		if strings.HasPrefix(p, clean+"/") {
			return true
		}
	}
	return false
}

func (v *view) ReadFile(_ context.Context, p string) ([]byte, error) {
	f, err := v.lookup(p)
	if err != nil {
		return nil, err
	}
	return bytes.Clone(f.Content), nil
}

func (v *view) OpenFile(_ context.Context, p string) (sandbox.FileReader, error) {
	f, err := v.lookup(p)
	if err != nil {
		return nil, err
	}
	return &reader{Reader: bytes.NewReader(f.Content), info: info(f)}, nil
}

func info(f store.WorkspaceFile) sandbox.FileInfo {
	mode := fs.FileMode(f.Mode).Perm()
	if mode == 0 {
		mode = 0o644
	}
	return sandbox.FileInfo{Path: f.Path, Size: int64(len(f.Content)), Mode: mode, ModTime: f.UpdatedAt}
}

func (v *view) WriteFile(context.Context, string, []byte, fs.FileMode) error { return ErrReadOnly }
func (v *view) WriteFiles(context.Context, []sandbox.File) error             { return ErrReadOnly }
func (v *view) Remove(context.Context, string) error                         { return ErrReadOnly }

// List lists the saved files under dir, with the folders their paths
// imply, sorted by path.
func (v *view) List(_ context.Context, dir string, recursive bool) ([]sandbox.FileInfo, error) {
	clean, err := sandbox.CleanPath(dir)
	if err != nil {
		return nil, err
	}
	if !v.isDir(clean) {
		if _, ok := v.files[clean]; ok {
			return nil, fmt.Errorf("list %s: %w: not a folder", dir, sandbox.ErrInvalidPath)
		}
		return nil, fmt.Errorf("list %s: %w", dir, sandbox.ErrNotFound)
	}
	prefix := ""
	if clean != "." {
		prefix = clean + "/"
	}
	seen := map[string]sandbox.FileInfo{}
	for p, f := range v.files {
		rest, ok := strings.CutPrefix(p, prefix)
		if !ok {
			continue
		}
		parts := strings.Split(rest, "/")
		if !recursive && len(parts) > 1 {
			d := prefix + parts[0]
			seen[d] = sandbox.FileInfo{Path: d, IsDir: true, Mode: fs.ModeDir | 0o755}
			continue
		}
		for i := 1; i < len(parts); i++ {
			d := prefix + strings.Join(parts[:i], "/")
			seen[d] = sandbox.FileInfo{Path: d, IsDir: true, Mode: fs.ModeDir | 0o755}
		}
		seen[p] = info(f)
	}
	out := make([]sandbox.FileInfo, 0, len(seen))
	for _, fi := range seen {
		out = append(out, fi)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Path < out[j].Path })
	return out, nil
}

// Watch reports nothing: the channel closes when ctx ends.
func (v *view) Watch(ctx context.Context) (<-chan sandbox.FileEvent, error) {
	ch := make(chan sandbox.FileEvent)
	go func() { <-ctx.Done(); close(ch) }()
	return ch, nil
}

func (v *view) Running() bool                   { return true }
func (v *view) Terminate(context.Context) error { return nil }
func (v *view) WorkDir() string                 { return "" }

// reader is an open saved file.
type reader struct {
	*bytes.Reader
	info sandbox.FileInfo
}

func (r *reader) Info() sandbox.FileInfo { return r.info }
func (r *reader) Close() error           { return nil }
