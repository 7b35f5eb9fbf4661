package local

import (
	"fmt"

	"golang.org/x/sys/unix"
)

// ownNice returns this process's niceness (-20…19). The raw getpriority
// system call answers 20 - nice, so that it never looks like an error.
func ownNice() (int, error) {
	v, err := unix.Getpriority(unix.PRIO_PROCESS, 0)
	if err != nil {
		return 0, fmt.Errorf("getpriority: %w", err)
	}
	return 20 - v, nil
}
