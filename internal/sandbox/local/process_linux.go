package local

import (
	"os"
	"syscall"

	"golang.org/x/sys/unix"
)

// newSysProcAttr: a command is killed if the server dies (Pdeathsig).
func newSysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}

// pipeSize is what output pipes are grown to (the default is 64 KiB); an
// unprivileged process may be capped by /proc/sys/fs/pipe-max-size, and a
// failure only costs throughput.
const pipeSize = 1 << 20

func growPipe(f *os.File) {
	if rc, err := f.SyscallConn(); err == nil {
		_ = rc.Control(func(fd uintptr) {
			_, _ = unix.FcntlInt(fd, unix.F_SETPIPE_SZ, pipeSize)
		})
	}
}

// waitExited returns once child pid has exited, leaving it unreaped
// (waitid with WNOWAIT).
func waitExited(pid int) {
	var info unix.Siginfo
	for {
		err := unix.Waitid(unix.P_PID, pid, &info, unix.WEXITED|unix.WNOWAIT, nil)
		if err != unix.EINTR {
			return
		}
	}
}
