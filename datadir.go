package agentd

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
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

// ErrDataDirInUse: another agentd serves from the same data folder. Two
// servers on one folder would share its node id, so neither the session
// leases nor their fencing could tell them apart, and their workspaces
// would collide.
var ErrDataDirInUse = errors.New("data folder in use by another agentd")

// lockDataDir takes an exclusive lock on dataDir/agentd.lock (flock: the
// kernel drops it when the process dies, however it dies) and writes this
// process's pid into the file for the error message of the next one. The
// returned file holds the lock until closed.
func lockDataDir(dataDir string) (*os.File, error) {
	p := filepath.Join(dataDir, "agentd.lock")
	f, err := os.OpenFile(p, os.O_RDWR|os.O_CREATE|unix.O_NOFOLLOW, 0o600)
	if err != nil {
		return nil, fmt.Errorf("lock data folder: %w", err)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		pid, _ := os.ReadFile(p)
		f.Close()
		if errors.Is(err, unix.EWOULDBLOCK) {
			holder := strings.TrimSpace(string(pid))
			if _, perr := strconv.Atoi(holder); perr != nil {
				holder = "unknown"
			}
			return nil, fmt.Errorf("%w: %s (pid %s); stop it, or give this server its own --data-dir", ErrDataDirInUse, dataDir, holder)
		}
		return nil, fmt.Errorf("lock data folder: %w", err)
	}
	if err := f.Truncate(0); err == nil {
		_, _ = f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	}
	return f, nil
}

// DataDir returns the data folder the server uses (absolute).
func (s *Server) DataDir() string { return s.cfg.DataDir }
