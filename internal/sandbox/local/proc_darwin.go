package local

import (
	"syscall"

	"golang.org/x/sys/unix"
)

// killSession sends sig to every process of session sid, found in the
// process table (macOS has no /proc).
func killSession(sid int, sig syscall.Signal) {
	all, err := unix.SysctlKinfoProcSlice("kern.proc.all")
	if err != nil {
		return
	}
	for i := range all {
		pid := int(all[i].Proc.P_pid)
		if pid <= 0 || all[i].Proc.P_stat == szomb {
			continue
		}
		if s, err := unix.Getsid(pid); err == nil && s == sid {
			_ = syscall.Kill(pid, sig)
		}
	}
}
