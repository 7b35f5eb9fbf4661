//go:build linux

package chaos

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
	_ "modernc.org/sqlite" // the lock holder's driver
)

// fault is one injected failure, at a point of the round.
type fault struct {
	at   time.Duration // after the turns were sent
	kind faultKind
	hold time.Duration // locks and disk-full: how long
}

type faultKind int

const (
	killServer faultKind = iota
	killExecutor
	sqliteBusy
	diskFull
	storm
)

func (k faultKind) String() string {
	return [...]string{"kill -9 server", "kill -9 executor", "SQLite write lock", "disk full", "reconnect storm"}[k]
}

// busyTimeout is the server's SQLite busy_timeout (store/sqlite's
// default): a lock held longer makes its writes fail.
const busyTimeout = 5 * time.Second

// planFaults draws the round's faults, at random points within the turns'
// length d.
func (h *harness) planFaults(d time.Duration) []fault {
	at := func() time.Duration { return d/10 + time.Duration(h.rng.Int64N(int64(d*8/10))) }
	var fs []fault
	kills := 0
	for h.rng.IntN(2) == 0 && kills < 2 {
		fs = append(fs, fault{at: at(), kind: killServer})
		kills++
	}
	for h.rng.IntN(5) < 2 {
		fs = append(fs, fault{at: at(), kind: killExecutor})
		if len(fs) > 4 {
			break
		}
	}
	if h.rng.IntN(3) == 0 {
		hold := time.Duration(200+h.rng.IntN(3500)) * time.Millisecond
		// Beyond busy_timeout the server's writes fail: only in rounds
		// without a server kill, since a server starting (migrations)
		// under such a lock exits, as it should.
		if kills == 0 && h.rng.IntN(2) == 0 {
			hold = busyTimeout + time.Duration(500+h.rng.IntN(2500))*time.Millisecond
		}
		fs = append(fs, fault{at: at(), kind: sqliteBusy, hold: hold})
	}
	if h.tmpfs && h.rng.IntN(3) == 0 {
		fs = append(fs, fault{at: at(), kind: diskFull, hold: time.Duration(300+h.rng.IntN(2500)) * time.Millisecond})
	}
	if h.rng.IntN(2) == 0 {
		fs = append(fs, fault{at: at(), kind: storm})
	}
	slices.SortFunc(fs, func(a, b fault) int { return int(a.at - b.at) })
	return fs
}

// inject runs the faults at their times. Locks and disk-full are held in
// the background while later faults go on, except that a server kill
// waits for a full disk to be freed first (a server cannot start on a full
// disk) and for a lock beyond busy_timeout (planFaults avoids that).
func (h *harness) inject(ctx context.Context, fs []fault, cl *clients) {
	start := time.Now()
	var held sync.WaitGroup
	var diskFreed chan struct{}
	defer held.Wait()
	var names []string
	for _, f := range fs {
		names = append(names, fmt.Sprintf("%s@%v", f.kind, f.at.Round(10*time.Millisecond)))
	}
	h.t.Logf("round %d: faults %v", h.roundNo, names)
	for _, f := range fs {
		if d := f.at - time.Since(start); d > 0 {
			select {
			case <-time.After(d):
			case <-ctx.Done():
				return
			}
		}
		switch f.kind {
		case killServer:
			if diskFreed != nil {
				<-diskFreed
			}
			h.checkServerAlive()
			h.p.Restart() // SIGKILL, then a new server on the same data and port
			h.stats.serverKills++
		case killExecutor:
			h.killAnExecutor()
		case sqliteBusy:
			release, err := h.holdWriteLock(ctx)
			if err != nil {
				h.failf("hold SQLite write lock: %v", err)
				continue
			}
			h.stats.busy++
			if f.hold > busyTimeout {
				h.stats.busyOverTimeout++
			}
			held.Add(1)
			time.AfterFunc(f.hold, func() { defer held.Done(); release() })
		case diskFull:
			free, err := fillDisk(h.data)
			if err != nil {
				h.failf("fill the data folder: %v", err)
				continue
			}
			h.stats.diskFull++
			done := make(chan struct{})
			diskFreed = done
			held.Add(1)
			time.AfterFunc(f.hold, func() { defer held.Done(); free(); close(done) })
		case storm:
			h.stats.storms++
			cl.storm(20 + h.rng.IntN(40))
		}
	}
}

// checkServerAlive fails the round if the server exited by itself.
func (h *harness) checkServerAlive() {
	h.t.Helper()
	if h.p.Exited() {
		h.failf("the server exited by itself:\n%s", tail(h.p.Logs(), 4000))
	}
}

// killAnExecutor sends SIGKILL to the executor of a random session that
// has one.
func (h *harness) killAnExecutor() {
	ex := executors(h.run)
	if len(ex) == 0 {
		return
	}
	p := ex[h.rng.IntN(len(ex))]
	h.noteCgroups(p.pid)
	if err := syscall.Kill(p.pid, syscall.SIGKILL); err == nil {
		h.stats.executorKills++
	}
}

// holdWriteLock takes SQLite's write lock on the server's database from a
// connection of our own (BEGIN IMMEDIATE) until release is called.
func (h *harness) holdWriteLock(ctx context.Context) (release func(), err error) {
	db, err := sql.Open("sqlite", "file:"+h.db+"?_pragma=busy_timeout(10000)")
	if err != nil {
		return nil, err
	}
	conn, err := db.Conn(ctx)
	if err != nil {
		db.Close()
		return nil, err
	}
	if _, err := conn.ExecContext(ctx, "BEGIN IMMEDIATE"); err != nil {
		conn.Close()
		db.Close()
		return nil, err
	}
	return func() {
		_, _ = conn.ExecContext(context.Background(), "ROLLBACK")
		conn.Close()
		db.Close()
	}, nil
}

// fillDisk fills the file system of dir (a tmpfs of ours) and returns what
// frees it again.
func fillDisk(dir string) (free func(), err error) {
	path := filepath.Join(dir, "chaos-filler")
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o600)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	free = func() { os.Remove(path) }
	var st unix.Statfs_t
	if err := unix.Fstatfs(int(f.Fd()), &st); err != nil {
		free()
		return nil, err
	}
	if n := int64(st.Bavail) * st.Bsize; n > 0 {
		if err := unix.Fallocate(int(f.Fd()), 0, 0, n); err != nil && !errors.Is(err, unix.ENOSPC) {
			free()
			return nil, fmt.Errorf("fallocate %d bytes: %w", n, err)
		}
	}
	// Whatever fallocate left (it rounds), written until ENOSPC.
	buf := make([]byte, 64<<10)
	for {
		if _, err := f.Write(buf); err != nil {
			if errors.Is(err, unix.ENOSPC) {
				return free, nil
			}
			free()
			return nil, err
		}
	}
}

// mountTmpfs mounts a tmpfs of size bytes on dir for the test's length;
// false when it cannot (not root, no mount permission).
func mountTmpfs(t interface {
	Logf(string, ...any)
	Cleanup(func())
}, dir string, size int64) bool {
	if err := unix.Mount("chaos", dir, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, fmt.Sprintf("size=%d,mode=0755", size)); err != nil {
		t.Logf("chaos: mount tmpfs on %s: %v", dir, err)
		return false
	}
	t.Cleanup(func() {
		if err := unix.Unmount(dir, 0); err != nil {
			t.Logf("chaos: unmount %s: %v (detaching it)", dir, err)
			_ = unix.Unmount(dir, unix.MNT_DETACH)
		}
	})
	return true
}

// diskUsage says how full dir's file system is.
func diskUsage(dir string) string {
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return err.Error()
	}
	return fmt.Sprintf("%d of %d KiB free", int64(st.Bavail)*st.Bsize>>10, int64(st.Blocks)*st.Bsize>>10)
}

func tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return "…" + s[len(s)-n:]
}
