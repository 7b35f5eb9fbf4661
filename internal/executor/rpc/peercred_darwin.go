package rpc

import (
	"fmt"

	"golang.org/x/sys/unix"
)

// peerCred reads LOCAL_PEERCRED (the uid, as getpeereid(3) does) and
// LOCAL_PEERPID of the Unix socket fd. macOS has no pid namespaces to
// translate across.
func peerCred(fd int) (pid, uid int, err error) {
	cred, err := unix.GetsockoptXucred(fd, unix.SOL_LOCAL, unix.LOCAL_PEERCRED)
	if err != nil {
		return -1, -1, fmt.Errorf("LOCAL_PEERCRED: %w", err)
	}
	pid, err = unix.GetsockoptInt(fd, unix.SOL_LOCAL, unix.LOCAL_PEERPID)
	if err != nil {
		return -1, -1, fmt.Errorf("LOCAL_PEERPID: %w", err)
	}
	return pid, int(cred.Uid), nil
}
