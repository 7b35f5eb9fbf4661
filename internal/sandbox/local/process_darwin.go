package local

import (
	"errors"
	"os"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// newSysProcAttr: macOS has no parent-death signal, so a server that dies
// without shutting down (SIGKILL, a crash) leaves its commands running.
func newSysProcAttr() *syscall.SysProcAttr { return &syscall.SysProcAttr{} }

// growPipe does nothing: macOS has no F_SETPIPE_SZ (its pipes grow by
// themselves up to 64 KiB).
func growPipe(*os.File) {}

// szomb is p_stat of a zombie (SZOMB in <sys/proc.h>).
const szomb = 5

// waitExited returns once child pid has exited, leaving it unreaped. macOS
// has no usable waitid(WNOWAIT) (Go's os package avoids it too: golang/go
// issue 19314), so a kqueue EVFILT_PROC NOTE_EXIT says when; ESRCH on
// registering means the child is a zombie already. Every second, or every
// 10 ms if no kqueue can be had, the process table is asked too, so an
// exit the kqueue missed cannot hold the command up forever.
func waitExited(pid int) {
	kq, err := unix.Kqueue()
	if err == nil {
		defer unix.Close(kq)
		var ev unix.Kevent_t
		unix.SetKevent(&ev, pid, unix.EVFILT_PROC, unix.EV_ADD|unix.EV_ONESHOT)
		ev.Fflags = unix.NOTE_EXIT
		for {
			_, err = unix.Kevent(kq, []unix.Kevent_t{ev}, nil, nil)
			if err != unix.EINTR {
				break
			}
		}
		if errors.Is(err, unix.ESRCH) {
			return
		}
	}
	if err != nil {
		kq = -1
	}
	out := make([]unix.Kevent_t, 1)
	second := unix.NsecToTimespec(int64(time.Second))
	for !zombie(pid) {
		if kq < 0 {
			time.Sleep(10 * time.Millisecond)
			continue
		}
		if n, _ := unix.Kevent(kq, nil, out, &second); n > 0 {
			return
		}
	}
}

// zombie reports whether pid has exited: a zombie, or no process at all.
func zombie(pid int) bool {
	kp, err := unix.SysctlKinfoProc("kern.proc.pid", pid)
	return err != nil || kp.Proc.P_stat == szomb
}
