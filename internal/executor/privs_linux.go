package executor

import (
	"errors"
	"fmt"
	"syscall"

	"golang.org/x/sys/unix"
)

// switchUser makes every thread of this process run as uid/gid with the
// supplementary groups given, for good: the executor starts as root only
// where its sandbox needs root to be set up (bubblewrap without a user
// namespace) and drops to the session's user before it serves anything.
// It fails unless the switch is complete and irreversible.
func switchUser(uid, gid int, groups []int) error {
	if uid <= 0 || gid < 0 {
		return fmt.Errorf("switch user: refusing uid %d gid %d", uid, gid)
	}
	if groups == nil {
		groups = []int{}
	}
	// Go applies these to all threads (through the C library with cgo, or
	// AllThreadsSyscall without).
	if err := syscall.Setgroups(groups); err != nil {
		return fmt.Errorf("switch user: setgroups: %w", err)
	}
	if err := syscall.Setresgid(gid, gid, gid); err != nil {
		return fmt.Errorf("switch user: setresgid %d: %w", gid, err)
	}
	if err := syscall.Setresuid(uid, uid, uid); err != nil {
		return fmt.Errorf("switch user: setresuid %d: %w", uid, err)
	}
	r, e, s := unix.Getresuid()
	if r != uid || e != uid || s != uid {
		return fmt.Errorf("switch user: uids are %d/%d/%d, want %d", r, e, s, uid)
	}
	r, e, s = unix.Getresgid()
	if r != gid || e != gid || s != gid {
		return fmt.Errorf("switch user: gids are %d/%d/%d, want %d", r, e, s, gid)
	}
	// No way back.
	if err := syscall.Setresuid(0, 0, 0); err == nil {
		return errors.New("switch user: could switch back to root")
	}
	return nil
}
