package agentd

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// DefaultDataDir is the data folder used when none is configured: the
// user's data folder, $XDG_DATA_HOME/agentd (~/.local/share/agentd). Not a
// folder under the working directory: workspaces there would sit inside
// whatever checkout agentd was started from, and git run by an agent in a
// workspace would find that repository.
func DefaultDataDir() string {
	if x := os.Getenv("XDG_DATA_HOME"); filepath.IsAbs(x) {
		return filepath.Join(x, "agentd")
	}
	if home, err := os.UserHomeDir(); err == nil && home != "" {
		return filepath.Join(home, ".local", "share", "agentd")
	}
	return filepath.Join(os.TempDir(), "agentd-"+strconv.Itoa(os.Getuid()))
}

// ErrDataDirInUse is returned by New when another agentd serves the data
// folder.
var ErrDataDirInUse = errors.New("data folder in use")

// lockDataDir takes the data folder's lock (an exclusive flock on
// agentd.lock, released when the file is closed or the process ends): two
// servers on one folder would both run its sessions.
func lockDataDir(dir string) (*os.File, error) {
	p := filepath.Join(dir, "agentd.lock")
	f, err := os.OpenFile(p, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", p, err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		holder := ""
		if b, rerr := os.ReadFile(p); rerr == nil {
			if pid := strings.TrimSpace(string(b)); pid != "" {
				holder = " (pid " + pid + ")"
			}
		}
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, fmt.Errorf("%w: %s is used by another agentd%s; stop it, or give this one its own --data-dir", ErrDataDirInUse, dir, holder)
		}
		return nil, fmt.Errorf("lock %s: %w", p, err)
	}
	if err := f.Truncate(0); err == nil {
		_, _ = f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	}
	return f, nil
}

// DataDir returns the data folder the server uses (absolute).
func (s *Server) DataDir() string { return s.cfg.DataDir }
