package local

import (
	"fmt"

	"golang.org/x/sys/unix"
)

// ownNice returns this process's niceness (-20…20). On macOS getpriority
// is libc's, which answers the niceness itself (not 20 - nice, as Linux's
// system call does), as a C int: a negative one may come back with its
// upper 32 bits clear, hence the int32.
func ownNice() (int, error) {
	v, err := unix.Getpriority(unix.PRIO_PROCESS, 0)
	if err != nil {
		return 0, fmt.Errorf("getpriority: %w", err)
	}
	return int(int32(v)), nil
}
