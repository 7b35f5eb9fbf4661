package pgtest

import "syscall"

// setDeathSignal has the kernel send sig to the child when this process
// dies.
func setDeathSignal(attr *syscall.SysProcAttr, sig syscall.Signal) { attr.Pdeathsig = sig }
