package local

import (
	"fmt"

	"golang.org/x/sys/unix"
)

// MaxNice is the highest niceness Linux gives a process (the lowest CPU
// priority).
const MaxNice = 19

// ownNice returns this process's niceness (-20…19). The raw getpriority
// system call answers 20 - nice, so that it never looks like an error.
func ownNice() (int, error) {
	v, err := unix.Getpriority(unix.PRIO_PROCESS, 0)
	if err != nil {
		return 0, fmt.Errorf("getpriority: %w", err)
	}
	return 20 - v, nil
}

// renice lowers the CPU priority of every process of group pgid to this
// process's niceness plus add (at most MaxNice). Raising a niceness needs
// no privilege.
func renice(pgid, add int) error {
	own, err := ownNice()
	if err != nil {
		return err
	}
	nice := min(own+add, MaxNice)
	if nice <= own {
		return nil
	}
	if err := unix.Setpriority(unix.PRIO_PGRP, pgid, nice); err != nil && err != unix.ESRCH {
		// ESRCH: the group is gone already (a command that ended at once).
		return fmt.Errorf("setpriority of group %d to %d: %w", pgid, nice, err)
	}
	return nil
}
