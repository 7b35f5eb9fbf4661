package session

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/agentd/agentd/sandbox"
	"github.com/agentd/agentd/store"
)

// withFiles runs f on the session's workspace: through its environment
// when it is up, otherwise through a process-less view of the folder.
func (m *Manager) withFiles(ctx context.Context, id string, f func(sandbox.Environment) error) error {
	s, err := m.Get(id)
	if err != nil {
		return err
	}
	if env := s.liveEnv(); env != nil {
		err := f(env)
		if !errors.Is(err, sandbox.ErrGone) {
			return err
		}
		// The environment died under the session: have it dropped, and
		// read the workspace folder, which outlives it.
		_ = s.do(func(o *owner) { o.loseEnv(env, err) })
	}
	env, err := m.cfg.Files.Create(ctx, sandbox.Spec{SessionID: id, Workspace: m.workspace(id), Ignore: m.cfg.WatchIgnore})
	if err != nil {
		return err
	}
	defer env.Terminate(context.Background())
	return f(env)
}

// ListFiles lists the session's workspace recursively.
func (m *Manager) ListFiles(ctx context.Context, id string) ([]sandbox.FileInfo, error) {
	var out []sandbox.FileInfo
	err := m.withFiles(ctx, id, func(e sandbox.Environment) error {
		var err error
		out, err = e.List(ctx, "", true)
		return err
	})
	return out, err
}

// WriteFile writes one workspace file (PUT …/files/{path}): through the
// live environment when it is up (its watcher reports the change as
// file:* events), otherwise into the workspace folder, whose copy in the
// store (Config.PersistFilesMax) is then updated here.
func (m *Manager) WriteFile(ctx context.Context, id, path string, data []byte) (sandbox.FileInfo, error) {
	p, err := sandbox.CleanPath(path)
	if err != nil {
		return sandbox.FileInfo{}, err
	}
	if p == "." {
		return sandbox.FileInfo{}, fmt.Errorf("%w: the workspace root is not a file", sandbox.ErrInvalidPath)
	}
	s, err := m.Get(id)
	if err != nil {
		return sandbox.FileInfo{}, err
	}
	live := s.liveEnv() != nil
	err = m.withFiles(ctx, id, func(e sandbox.Environment) error {
		return e.WriteFile(ctx, p, data, 0o644)
	})
	if err != nil {
		return sandbox.FileInfo{}, err
	}
	if !live && m.cfg.PersistFilesMax > 0 && int64(len(data)) <= m.cfg.PersistFilesMax {
		f := store.WorkspaceFile{Path: p, Content: data, Mode: 0o644, UpdatedAt: time.Now().UTC()}
		if err := m.cfg.Store.SaveWorkspaceFile(ctx, id, f); err != nil {
			m.log.Warn("save file", "session", id, "path", p, "err", err)
		}
	}
	return sandbox.FileInfo{Path: p, Size: int64(len(data)), Mode: 0o644, ModTime: time.Now().UTC()}, nil
}

// ReadFile returns one workspace file.
func (m *Manager) ReadFile(ctx context.Context, id, path string) ([]byte, error) {
	if _, err := sandbox.CleanPath(path); err != nil {
		return nil, err
	}
	var out []byte
	err := m.withFiles(ctx, id, func(e sandbox.Environment) error {
		var err error
		out, err = e.ReadFile(ctx, path)
		return err
	})
	return out, err
}

// OpenFile opens one regular workspace file to stream: through the live
// environment when it is up, otherwise through a process-less view of the
// folder. Environments that cannot hand out a file (no sandbox.FileOpener)
// read it whole instead, up to maxRead bytes (sandbox.ErrTooLarge beyond).
// The caller closes the file.
func (m *Manager) OpenFile(ctx context.Context, id, path string, maxRead int64) (sandbox.FileReader, error) {
	if _, err := sandbox.CleanPath(path); err != nil {
		return nil, err
	}
	var out sandbox.FileReader
	err := m.withFiles(ctx, id, func(e sandbox.Environment) error {
		if o, ok := e.(sandbox.FileOpener); ok {
			f, err := o.OpenFile(ctx, path)
			out = f
			return err
		}
		data, err := sandbox.ReadFileLimit(ctx, e, path, maxRead)
		if err != nil {
			return err
		}
		out = &memFile{Reader: bytes.NewReader(data), info: sandbox.FileInfo{Path: path, Size: int64(len(data)), Mode: 0o644}}
		return nil
	})
	return out, err
}

// memFile is a FileReader over bytes read whole.
type memFile struct {
	*bytes.Reader
	info sandbox.FileInfo
}

func (f *memFile) Info() sandbox.FileInfo { return f.info }
func (f *memFile) Close() error           { return nil }

// liveEnv returns the environment if it is up. It asks the owner only when
// one runs; a nil answer means "use the folder".
func (s *Session) liveEnv() sandbox.Environment {
	s.mu.Lock()
	running := s.own != nil
	s.mu.Unlock()
	if !running {
		return nil
	}
	ch := make(chan sandbox.Environment, 1)
	if err := s.do(func(o *owner) {
		if o.starting {
			ch <- nil
			return
		}
		ch <- o.env
	}); err != nil {
		return nil
	}
	return <-ch
}
