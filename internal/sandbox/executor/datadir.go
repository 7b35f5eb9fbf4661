package executor

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
)

// ProtectDataDir prepares the server's data folder for sandboxes that run
// as other users: they must reach their workspace
// (<dataDir>/workspaces/<id>) and nothing else. The folder and workspaces/
// become 0711 (passable, not listable) and every other entry of the folder
// (the database and its WAL and shared-memory files, node-id, …) loses
// all group and other permissions. SQLite creates its -wal and -shm files
// with the database's mode, so they stay closed too.
//
// What another component creates later directly in the data folder with a
// world-readable mode is not covered: its name is guessable.
//
// It fails when a parent of the folder cannot be passed by other users:
// sessions running as them could not reach their workspace.
func ProtectDataDir(dataDir string) error {
	abs, err := filepath.Abs(dataDir)
	if err != nil {
		return fmt.Errorf("protect data dir: %w", err)
	}
	for d := filepath.Dir(abs); ; d = filepath.Dir(d) {
		fi, err := os.Stat(d)
		if err != nil {
			return fmt.Errorf("protect data dir: %w", err)
		}
		if fi.Mode().Perm()&0o001 == 0 {
			return fmt.Errorf("protect data dir: %s (mode %v) cannot be passed by other users, so sessions running as them could not reach their workspaces under %s: put the data folder where every parent is at least 0711", d, fi.Mode().Perm(), abs)
		}
		if d == "/" {
			break
		}
	}
	if err := os.MkdirAll(filepath.Join(dataDir, "workspaces"), 0o711); err != nil {
		return fmt.Errorf("protect data dir: %w", err)
	}
	for _, d := range []string{dataDir, filepath.Join(dataDir, "workspaces")} {
		if err := os.Chmod(d, 0o711); err != nil {
			return fmt.Errorf("protect data dir: %w", err)
		}
	}
	ents, err := os.ReadDir(dataDir)
	if err != nil {
		return fmt.Errorf("protect data dir: %w", err)
	}
	for _, e := range ents {
		if e.Name() == "workspaces" || e.Type()&fs.ModeSymlink != 0 {
			continue
		}
		info, err := e.Info()
		if err != nil {
			continue // gone meanwhile
		}
		if m := info.Mode().Perm(); m&0o077 != 0 {
			if err := os.Chmod(filepath.Join(dataDir, e.Name()), m&^0o077); err != nil {
				return fmt.Errorf("protect data dir: %w", err)
			}
		}
	}
	return nil
}

// chownTree gives the workspace at root to uid/gid, safely although its
// previous owner may still be changing it: every path is resolved inside
// root (os.Root: a symlink or a swapped folder cannot lead out), symlinks
// themselves are changed, not their targets, and a hard-linked file owned
// by the server (which the server never makes: it would be a link to one
// of its files, e.g. planted where hard links are not protected) is left
// alone. The root folder itself is closed (0700, the server's) during the
// walk and given last, so the new owner cannot enter half-way.
func chownTree(root string, uid, gid int) error {
	if err := os.Lchown(root, os.Getuid(), os.Getgid()); err != nil {
		return err
	}
	if err := os.Chmod(root, 0o700); err != nil {
		return err
	}
	r, err := os.OpenRoot(root)
	if err != nil {
		return err
	}
	defer r.Close()
	server := uint32(os.Getuid())
	err = fs.WalkDir(r.FS(), ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil // removed meanwhile
			}
			return err
		}
		if p == "." {
			return nil
		}
		if d.Type().IsRegular() {
			if info, err := d.Info(); err == nil {
				if st, ok := info.Sys().(*syscall.Stat_t); ok && st.Nlink > 1 && st.Uid == server {
					return nil
				}
			}
		}
		if err := r.Lchown(p, uid, gid); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
		return nil
	})
	if err != nil {
		return err
	}
	return os.Lchown(root, uid, gid)
}

// revokeWorkspace takes a workspace back from its user when its
// environment ends (0700, the server's): the next environment may run as
// another session's user, and the files stay on disk.
func revokeWorkspace(ws string) error {
	if err := os.Lchown(ws, os.Getuid(), os.Getgid()); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		return err
	}
	return os.Chmod(ws, 0o700)
}
