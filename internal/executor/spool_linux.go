package executor

import (
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// openTmpfile makes a nameless file in dir with O_TMPFILE.
func openTmpfile(dir string) (*os.File, error) {
	fd, err := unix.Open(dir, unix.O_TMPFILE|unix.O_RDWR|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return nil, err
	}
	return os.NewFile(uintptr(fd), filepath.Join(dir, "spool")), nil
}
