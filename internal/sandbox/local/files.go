package local

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"syscall"

	"github.com/agentd/agentd/sandbox"
)

// tmpPrefix starts the names of atomic writes' temporary files; tmpPattern
// is in every environment's ignore list.
const (
	tmpPrefix  = ".agentd-tmp-"
	tmpPattern = tmpPrefix + "*"
)

// maxSymlinks bounds symlink resolution, like the kernel's ELOOP limit.
const maxSymlinks = 40

// resolve maps a cleaned workspace path (from sandbox.CleanPath) to the
// real relative path it names, following symlinks that stay inside the
// workspace (the last component only when followLast). A symlink leading
// outside the workspace, absolute or by "..", is ErrInvalidPath. Components
// that do not exist are kept as they are (a path about to be created).
//
// The operations then act through e.root (an os.Root), which refuses
// escapes on its own: the check here gives the clear error and accepts the
// absolute in-workspace links os.Root rejects; os.Root closes the race of
// a folder swapped for a symlink in between.
func (e *Environment) resolve(clean string, followLast bool) (string, error) {
	todo := splitPath(clean)
	var done []string
	links := 0
	for len(todo) > 0 {
		c := todo[0]
		todo = todo[1:]
		switch c {
		case "", ".":
			continue
		case "..":
			if len(done) == 0 {
				return "", fmt.Errorf("%w: %q: a symlink leads outside the workspace", sandbox.ErrInvalidPath, clean)
			}
			done = done[:len(done)-1]
			continue
		}
		cur := append(done[:len(done):len(done)], c)
		if len(todo) == 0 && !followLast {
			done = cur
			break
		}
		info, err := e.root.Lstat(strings.Join(cur, "/"))
		switch {
		case errors.Is(err, fs.ErrNotExist):
			done = cur
			continue
		case err != nil:
			return "", fsError("resolve", clean, err)
		case info.Mode()&fs.ModeSymlink == 0:
			done = cur
			continue
		}
		if links++; links > maxSymlinks {
			return "", fmt.Errorf("%w: %q: too many levels of symlinks", sandbox.ErrInvalidPath, clean)
		}
		target, err := e.root.Readlink(strings.Join(cur, "/"))
		if err != nil {
			return "", fsError("resolve", clean, err)
		}
		if filepath.IsAbs(target) {
			rel, err := filepath.Rel(e.dir, filepath.Clean(target))
			if err != nil || rel == ".." || strings.HasPrefix(rel, "../") {
				return "", fmt.Errorf("%w: %q: symlink to %s is outside the workspace", sandbox.ErrInvalidPath, clean, target)
			}
			done = nil
			target = rel
		}
		todo = append(splitPath(target), todo...)
	}
	if len(done) == 0 {
		return ".", nil
	}
	return strings.Join(done, "/"), nil
}

func splitPath(p string) []string {
	if p == "" || p == "." {
		return nil
	}
	return strings.Split(filepath.ToSlash(p), "/")
}

// fsError wraps an error from a file operation with op and path, adding
// the sandbox sentinel callers map: missing → ErrNotFound; escape refused by
// os.Root, a path through a file, a folder where a file was expected →
// ErrInvalidPath.
func fsError(op, p string, err error) error {
	var pe *fs.PathError
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return fmt.Errorf("%s %s: %w: %w", op, p, sandbox.ErrNotFound, err)
	case errors.Is(err, syscall.ENOTDIR), errors.Is(err, syscall.EISDIR), errors.Is(err, syscall.ELOOP):
		return fmt.Errorf("%s %s: %w: %w", op, p, sandbox.ErrInvalidPath, err)
	case errors.As(err, &pe) && strings.Contains(pe.Err.Error(), "escapes"):
		// os.Root's "path escapes from parent" has no exported sentinel.
		return fmt.Errorf("%s %s: %w: %w", op, p, sandbox.ErrInvalidPath, err)
	}
	return fmt.Errorf("%s %s: %w", op, p, err)
}

// target cleans and resolves p for an operation, refusing the workspace
// root itself unless allowRoot.
func (e *Environment) target(p string, followLast, allowRoot bool) (string, error) {
	clean, err := sandbox.CleanPath(p)
	if err != nil {
		return "", err
	}
	if clean == "." && !allowRoot {
		return "", fmt.Errorf("%w: %q is the workspace root", sandbox.ErrInvalidPath, p)
	}
	real, err := e.resolve(clean, followLast)
	if err != nil {
		return "", err
	}
	if real == "." && !allowRoot {
		return "", fmt.Errorf("%w: %q is the workspace root", sandbox.ErrInvalidPath, p)
	}
	return real, nil
}

// ReadFile returns the contents of the regular file at p: at most
// Options.MaxReadBytes (ErrTooLarge beyond, checked before reading), never
// a FIFO, socket, device or folder (ErrNotRegular), opened as OpenFile
// does.
func (e *Environment) ReadFile(ctx context.Context, p string) ([]byte, error) {
	return sandbox.ReadFileLimit(ctx, e, p, e.opts.MaxReadBytes)
}

// OpenFile opens the regular file at p for reading (sandbox.FileOpener).
// Symlinks are followed only inside the workspace. What is not a regular
// file is refused before it is opened (ErrNotRegular), and the open itself
// is non-blocking and checked again on the open file (fstat), so a FIFO or
// device swapped in meanwhile is refused without waiting on it or reading
// it.
func (e *Environment) OpenFile(ctx context.Context, p string) (sandbox.FileReader, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	leave, err := e.enter()
	if err != nil {
		return nil, err
	}
	defer leave()
	real, err := e.target(p, true, true)
	if err != nil {
		return nil, err
	}
	info, err := e.root.Lstat(real)
	if err != nil {
		return nil, fsError("open", p, err)
	}
	if !info.Mode().IsRegular() {
		return nil, fmt.Errorf("open %s: %w (%s)", p, sandbox.ErrNotRegular, fileKind(info.Mode()))
	}
	// os.Root opens every component with O_NOFOLLOW and resolves links
	// inside the root itself.
	f, err := e.root.OpenFile(real, os.O_RDONLY|syscall.O_NONBLOCK|syscall.O_NOCTTY, 0)
	if err != nil {
		return nil, fsError("open", p, err)
	}
	info, err = f.Stat()
	if err != nil {
		f.Close()
		return nil, fsError("open", p, err)
	}
	if !info.Mode().IsRegular() {
		f.Close()
		return nil, fmt.Errorf("open %s: %w (%s)", p, sandbox.ErrNotRegular, fileKind(info.Mode()))
	}
	return &openFile{File: f, info: sandbox.FileInfo{
		Path: p, Size: info.Size(), Mode: info.Mode(), ModTime: info.ModTime(),
	}}, nil
}

// openFile is a FileReader over an *os.File.
type openFile struct {
	*os.File
	info sandbox.FileInfo
}

func (f *openFile) Info() sandbox.FileInfo { return f.info }

// fileKind names what a non-regular file is, for error messages.
func fileKind(m fs.FileMode) string {
	switch {
	case m.IsDir():
		return "a folder"
	case m&fs.ModeNamedPipe != 0:
		return "a FIFO"
	case m&fs.ModeSocket != 0:
		return "a socket"
	case m&fs.ModeCharDevice != 0:
		return "a character device"
	case m&fs.ModeDevice != 0:
		return "a block device"
	case m&fs.ModeSymlink != 0:
		return "a symlink"
	}
	return "not a regular file"
}

// WriteFile writes data to p atomically (a temporary file in the same
// folder, renamed over p), creating parent folders. mode 0 means 0644; the
// mode is applied exactly, not filtered by the umask. A symlink at p that
// stays inside the workspace is written through.
func (e *Environment) WriteFile(ctx context.Context, p string, data []byte, mode fs.FileMode) error {
	return e.WriteFiles(ctx, []sandbox.File{{Path: p, Content: data, Mode: mode}})
}

// WriteFiles writes each file as WriteFile does. Every path is checked
// before anything is written; the batch as a whole is not atomic.
func (e *Environment) WriteFiles(ctx context.Context, files []sandbox.File) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	leave, err := e.enter()
	if err != nil {
		return err
	}
	defer leave()
	reals := make([]string, len(files))
	for i, f := range files {
		if reals[i], err = e.target(f.Path, true, false); err != nil {
			return err
		}
	}
	for i, f := range files {
		if err := ctx.Err(); err != nil {
			return err
		}
		if err := e.writeAtomic(reals[i], f.Content, f.Mode); err != nil {
			return fsError("write", f.Path, err)
		}
	}
	return nil
}

func (e *Environment) writeAtomic(real string, data []byte, mode fs.FileMode) error {
	if mode == 0 {
		mode = 0o644
	}
	dir := path.Dir(real)
	if err := e.root.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	var rnd [6]byte
	_, _ = rand.Read(rnd[:])
	tmp := path.Join(dir, tmpPrefix+hex.EncodeToString(rnd[:])+"-"+path.Base(real))
	f, err := e.root.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	_, err = f.Write(data)
	if err == nil {
		err = f.Chmod(mode.Perm())
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = e.root.Rename(tmp, real)
	}
	if err != nil {
		_ = e.root.Remove(tmp)
	}
	return err
}

// List returns the entries under dir ("" or "." for the root), sorted by
// path, with workspace-relative paths as the caller named them (a listed
// symlinked folder keeps its name). Non-recursive lists the folder's own
// entries. Recursive descends into sub-folders but not into symlinks, and
// leaves out ignored paths entirely (entry and contents) unless dir itself
// is ignored, since then the caller asked for it explicitly.
func (e *Environment) List(ctx context.Context, dir string, recursive bool) ([]sandbox.FileInfo, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	leave, err := e.enter()
	if err != nil {
		return nil, err
	}
	defer leave()
	clean, err := sandbox.CleanPath(dir)
	if err != nil {
		return nil, err
	}
	real, err := e.resolve(clean, true)
	if err != nil {
		return nil, err
	}
	info, err := e.root.Stat(real)
	if err != nil {
		return nil, fsError("list", dir, err)
	}
	if !info.IsDir() {
		return nil, fmt.Errorf("list %s: %w: not a folder", dir, sandbox.ErrInvalidPath)
	}
	named := func(p string) string {
		rest := p
		if real != "." {
			rest = strings.TrimPrefix(p, real+"/")
		}
		if clean == "." {
			return rest
		}
		return clean + "/" + rest
	}
	entry := func(p string, d fs.DirEntry) (sandbox.FileInfo, bool) {
		fi, err := d.Info()
		if err != nil {
			return sandbox.FileInfo{}, false // vanished meanwhile
		}
		return sandbox.FileInfo{
			Path:    named(p),
			Size:    fi.Size(),
			Mode:    fi.Mode(),
			IsDir:   fi.IsDir(),
			ModTime: fi.ModTime(),
		}, true
	}
	fsys := e.root.FS()
	var out []sandbox.FileInfo
	if !recursive {
		ents, err := fs.ReadDir(fsys, real)
		if err != nil {
			return nil, fsError("list", dir, err)
		}
		for _, d := range ents {
			if fi, ok := entry(path.Join(real, d.Name()), d); ok {
				out = append(out, fi)
			}
		}
	} else {
		filter := !e.ignore.Match(clean)
		err = fs.WalkDir(fsys, real, func(p string, d fs.DirEntry, err error) error {
			if p == real {
				return err
			}
			if err != nil {
				return nil // vanished or unreadable: skip it
			}
			if err := ctx.Err(); err != nil {
				return err
			}
			fi, ok := entry(p, d)
			if filter && e.ignore.Match(fi.Path) {
				if d.IsDir() {
					return fs.SkipDir
				}
				return nil
			}
			if ok {
				out = append(out, fi)
			}
			return nil
		})
		if err != nil {
			return nil, fsError("list", dir, err)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Path < out[j].Path })
	return out, nil
}

// Remove removes the file or folder (with its contents) at p. A symlink is
// removed itself, not its target. Removing the workspace root is refused.
func (e *Environment) Remove(ctx context.Context, p string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	leave, err := e.enter()
	if err != nil {
		return err
	}
	defer leave()
	real, err := e.target(p, false, false)
	if err != nil {
		return err
	}
	if _, err := e.root.Lstat(real); err != nil {
		return fsError("remove", p, err)
	}
	if err := e.root.RemoveAll(real); err != nil {
		return fsError("remove", p, err)
	}
	return nil
}
