//go:build unix

package sqlite_test

import (
	"syscall"
	"time"
)

// processCPU returns the CPU time (user + system) this process has used, so
// benchmarks can report CPU per event, which load from other processes on
// the machine does not distort the way it distorts wall-clock rates.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
