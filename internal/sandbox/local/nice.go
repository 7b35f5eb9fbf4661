package local

import (
	"fmt"
	"log/slog"

	"golang.org/x/sys/unix"
)

// MaxNice is the highest niceness Linux gives a process (the lowest CPU
// priority); macOS takes it too.
const MaxNice = 19

// niceness is what the processes of an environment are reniced to.
type niceness struct {
	to  int  // the niceness to set
	set bool // false: they keep this process's priority
}

// niceFor resolves Options.Nice once, at New: this process's niceness plus
// add, at most MaxNice. Raising a niceness needs no privilege; lowering
// one is never asked for.
func niceFor(add int, log *slog.Logger) niceness {
	if add <= 0 {
		return niceness{}
	}
	own, err := ownNice()
	if err != nil {
		log.Warn("agent processes keep the server's CPU priority", "err", err)
		return niceness{}
	}
	to := min(own+add, MaxNice)
	return niceness{to: to, set: to > own}
}

// apply sets the niceness of every process of group pgid.
func (n niceness) apply(pgid int) error {
	if !n.set {
		return nil
	}
	if err := unix.Setpriority(unix.PRIO_PGRP, pgid, n.to); err != nil && err != unix.ESRCH {
		// ESRCH: the group is gone already (a command that ended at once).
		return fmt.Errorf("setpriority of group %d to %d: %w", pgid, n.to, err)
	}
	return nil
}
