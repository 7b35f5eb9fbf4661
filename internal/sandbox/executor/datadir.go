package executor

import (
	"errors"
	"io/fs"
	"os"
	"syscall"
)

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
		if info, err := d.Info(); err == nil {
			if st, ok := info.Sys().(*syscall.Stat_t); ok {
				if d.Type().IsRegular() && st.Nlink > 1 && st.Uid == server {
					return nil
				}
				if int(st.Uid) == uid && int(st.Gid) == gid {
					return nil // already the user's (most of a workspace given again)
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
