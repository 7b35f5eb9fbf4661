//go:build !linux

package natstest

import "syscall"

// setDeathSignal does nothing: only Linux has a parent-death signal, so
// elsewhere a test process killed without cleanup leaves the child.
func setDeathSignal(*syscall.SysProcAttr, syscall.Signal) {}
