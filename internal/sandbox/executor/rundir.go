package executor

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// ensureRunDir creates the run folder, or accepts the one that exists only
// if it is the server's: a folder (not a symlink) owned by the server's
// uid that no one else may write, under parents no one but root and the
// server may change (not writable by others, or sticky like /tmp). The
// default /tmp/agentd-<uid> is predictable: a local user who made it first
// would otherwise choose what the server's sockets, locks and logs open.
// A new folder is 0700, or 0711 when shared (executors run as other users
// and pass through it to their own folders); an existing one loses read and
// write for others and keeps its passability (another server sharing it
// may need it).
func ensureRunDir(dir string, shared bool) error {
	dir, err := filepath.Abs(dir)
	if err != nil {
		return fmt.Errorf("run folder: %w", err)
	}
	parent := filepath.Dir(dir)
	if err := os.MkdirAll(parent, 0o755); err != nil {
		return fmt.Errorf("run folder: %w", err)
	}
	real, err := filepath.EvalSymlinks(parent)
	if err != nil {
		return fmt.Errorf("run folder: %w", err)
	}
	if err := checkParents(real, shared); err != nil {
		return fmt.Errorf("run folder %s: %w", dir, err)
	}
	mode := fs.FileMode(0o700)
	if shared {
		mode = 0o711
	}
	if err := os.Mkdir(dir, mode); err != nil && !errors.Is(err, fs.ErrExist) {
		return fmt.Errorf("run folder: %w", err)
	}
	cur, err := checkOwnDir(dir)
	if err != nil {
		return fmt.Errorf("run folder %s: %w; remove it or use another run folder (XDG_RUNTIME_DIR)", dir, err)
	}
	// Never listable; passable when shared. A folder another server
	// sharing it made passable stays so (its users still need that).
	want := cur&0o700 | mode&0o011 | cur&0o011
	if cur != want {
		if err := os.Chmod(dir, want); err != nil {
			return fmt.Errorf("run folder: %w", err)
		}
	}
	return nil
}

// checkOwnDir checks that dir is a folder, not a symlink, owned by this
// process's uid and writable by nobody else, and returns its permission
// bits. The check is made on the opened folder (O_NOFOLLOW), not on a path
// that could change under it.
func checkOwnDir(dir string) (fs.FileMode, error) {
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		if errors.Is(err, unix.ELOOP) || errors.Is(err, unix.ENOTDIR) {
			return 0, errors.New("not a folder (a symlink?)")
		}
		return 0, err
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return 0, err
	}
	if int(st.Uid) != os.Getuid() {
		return 0, fmt.Errorf("belongs to uid %d, not to this server (uid %d)", st.Uid, os.Getuid())
	}
	if st.Mode&0o022 != 0 {
		return 0, fmt.Errorf("others may write it (mode %o)", st.Mode&0o7777)
	}
	return fs.FileMode(st.Mode & 0o777), nil
}

// checkParents checks every folder from / down to dir (symlinks already
// resolved): owned by root or this process's uid, and writable by nobody
// else unless sticky (where others cannot rename or remove what is ours).
// With shared, other users must be able to pass through each.
func checkParents(dir string, shared bool) error {
	cur := "/"
	parts := strings.Split(strings.Trim(dir, "/"), "/")
	for i := -1; i < len(parts); i++ {
		if i >= 0 {
			if parts[i] == "" {
				continue
			}
			cur = filepath.Join(cur, parts[i])
		}
		var st unix.Stat_t
		if err := unix.Lstat(cur, &st); err != nil {
			return fmt.Errorf("%s: %w", cur, err)
		}
		if st.Mode&unix.S_IFMT != unix.S_IFDIR {
			return fmt.Errorf("%s is not a folder", cur)
		}
		if st.Uid != 0 && int(st.Uid) != os.Getuid() {
			return fmt.Errorf("its parent %s belongs to uid %d, who could replace the run folder", cur, st.Uid)
		}
		if st.Mode&0o022 != 0 && st.Mode&unix.S_ISVTX == 0 {
			return fmt.Errorf("its parent %s may be written by others (mode %o) and is not sticky", cur, st.Mode&0o7777)
		}
		if shared && st.Mode&0o001 == 0 {
			return fmt.Errorf("its parent %s (mode %o) cannot be passed by other users, whom the executors run as", cur, st.Mode&0o7777)
		}
	}
	return nil
}

// openLockFile opens (creating it) the lock file name in the folder
// lockDir without following symlinks: the folder is opened first and
// checked (the server's, 0700), then the file is created in it with
// openat(O_NOFOLLOW) and checked on the open file (a regular file of the
// server's with one link). A lock file is handed to the executor: it must
// never be anything else.
func openLockFile(lockDir, name string) (*os.File, error) {
	dfd, err := unix.Open(lockDir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("lock folder %s: %w", lockDir, err)
	}
	defer unix.Close(dfd)
	var st unix.Stat_t
	if err := unix.Fstat(dfd, &st); err != nil {
		return nil, fmt.Errorf("lock folder %s: %w", lockDir, err)
	}
	if int(st.Uid) != os.Getuid() || st.Mode&0o077 != 0 {
		return nil, fmt.Errorf("lock folder %s: owned by uid %d, mode %o: want this server's, 0700", lockDir, st.Uid, st.Mode&0o7777)
	}
	fd, err := unix.Openat(dfd, name, unix.O_CREAT|unix.O_RDWR|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_NOCTTY|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return nil, fmt.Errorf("lock file %s/%s: %w", lockDir, name, err)
	}
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("lock file %s/%s: %w", lockDir, name, err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG || int(st.Uid) != os.Getuid() || st.Nlink != 1 {
		unix.Close(fd)
		return nil, fmt.Errorf("lock file %s/%s: not a regular file of this server's with one link (mode %o, uid %d, %d links)", lockDir, name, st.Mode, st.Uid, st.Nlink)
	}
	return os.NewFile(uintptr(fd), filepath.Join(lockDir, name)), nil
}

// readTail returns at most the last n bytes of the regular file at path,
// which its environment's user may have replaced: no symlink is followed,
// nothing but a regular file is read, and nothing blocks.
func readTail(path string, n int64) ([]byte, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_NOCTTY, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	info, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !info.Mode().IsRegular() {
		return nil, fmt.Errorf("%s is not a regular file", path)
	}
	if size := info.Size(); size > n {
		if _, err := f.Seek(size-n, io.SeekStart); err != nil {
			return nil, err
		}
	}
	return io.ReadAll(io.LimitReader(f, n))
}
