package rpc

import "golang.org/x/sys/unix"

// peerCred reads SO_PEERCRED of the Unix socket fd.
func peerCred(fd int) (pid, uid int, err error) {
	cred, err := unix.GetsockoptUcred(fd, unix.SOL_SOCKET, unix.SO_PEERCRED)
	if err != nil {
		return -1, -1, err
	}
	return int(cred.Pid), int(cred.Uid), nil
}
