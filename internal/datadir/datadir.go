// Package datadir closes the server's data folder to other host users: the
// database, the secrets and the workspaces (whose files agents made, e.g.
// set-uid programs) are the server's and its sandboxes' only.
package datadir

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

// Secure prepares the data folder at every start, so that an install made
// by an older version (0755 folders) is fixed too.
//
// Without shared, the folder and workspaces/ become 0700: nobody but the
// server's uid (and root) reaches anything in it. With shared (sandboxes
// run as other users and open their workspace by its host path:
// <dataDir>/workspaces/<id>), both become 0711 (passable, not listable),
// every other entry of the folder (the database and its WAL and
// shared-memory files, node-id, …) loses all group and other permissions
// (SQLite creates its -wal and -shm files with the database's mode, so they
// stay closed too), and every parent of the folder must be passable by
// other users (else sessions running as them could not reach their
// workspace: an error says so).
//
// Either way every workspace folder becomes 0700, its owner unchanged (a
// live environment's user keeps its own; the others are the server's):
// no other user enters one.
//
// What another component later creates directly in a shared data folder
// with a world-readable mode is not covered: its name is guessable.
func Secure(dataDir string, shared bool) error {
	abs, err := filepath.Abs(dataDir)
	if err == nil {
		abs, err = filepath.EvalSymlinks(abs) // a data folder may be a link
	}
	if err != nil {
		return fmt.Errorf("secure data dir: %w", err)
	}
	mode := fs.FileMode(0o700)
	if shared {
		mode = 0o711
		for d := filepath.Dir(abs); ; d = filepath.Dir(d) {
			fi, err := os.Stat(d)
			if err != nil {
				return fmt.Errorf("secure data dir: %w", err)
			}
			if fi.Mode().Perm()&0o001 == 0 {
				return fmt.Errorf("secure data dir: %s (mode %v) cannot be passed by other users, so sessions running as them could not reach their workspaces under %s: put the data folder where every parent is at least 0711", d, fi.Mode().Perm(), abs)
			}
			if d == "/" {
				break
			}
		}
	}
	ws := filepath.Join(abs, "workspaces")
	if err := os.MkdirAll(ws, mode); err != nil {
		return fmt.Errorf("secure data dir: %w", err)
	}
	if err := chmodDir(abs, mode); err != nil {
		return fmt.Errorf("secure data dir: %w", err)
	}
	if shared {
		ents, err := os.ReadDir(abs)
		if err != nil {
			return fmt.Errorf("secure data dir: %w", err)
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
				if err := os.Chmod(filepath.Join(abs, e.Name()), m&^0o077); err != nil {
					return fmt.Errorf("secure data dir: %w", err)
				}
			}
		}
	}
	return SecureWorkspaces(ws, shared)
}

// SecureWorkspaces prepares a folder of workspaces as Secure does
// <dataDir>/workspaces: the folder 0700 (0711 when shared), every
// workspace in it 0700. Secure calls it; a server whose workspaces live
// elsewhere (a folder the servers of a fleet share) calls it for that
// folder.
func SecureWorkspaces(ws string, shared bool) error {
	mode := fs.FileMode(0o700)
	if shared {
		mode = 0o711
	}
	if err := os.MkdirAll(ws, mode); err != nil {
		return fmt.Errorf("secure workspaces: %w", err)
	}
	if err := chmodDir(ws, mode); err != nil {
		return fmt.Errorf("secure workspaces: %w", err)
	}
	ents, err := os.ReadDir(ws)
	if err != nil {
		return fmt.Errorf("secure workspaces: %w", err)
	}
	for _, e := range ents {
		if !e.IsDir() {
			continue // a symlink or a file: not a workspace, not followed
		}
		if err := chmodDir(filepath.Join(ws, e.Name()), 0o700); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("secure workspaces: %w", err)
		}
	}
	return nil
}

// chmodDir sets a folder's mode when it differs, without following a
// symlink put in its place.
func chmodDir(d string, mode fs.FileMode) error {
	fi, err := os.Lstat(d)
	if err != nil {
		return err
	}
	if !fi.IsDir() {
		return fmt.Errorf("%s is not a folder", d)
	}
	if fi.Mode().Perm() == mode {
		return nil
	}
	return os.Chmod(d, mode)
}
