package local

import "syscall"

// killSession sends sig to every process of session sid.
func killSession(sid int, sig syscall.Signal) {
	for _, st := range processes(func(st procStat) bool { return st.SID == sid }) {
		_ = syscall.Kill(st.PID, sig)
	}
}
