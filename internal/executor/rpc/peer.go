package rpc

import (
	"fmt"
	"net"

	"golang.org/x/sys/unix"
)

// PeerCred returns the pid and uid of the process at the other end of a
// Unix socket connection, as the kernel recorded them (SO_PEERCRED),
// translated into this process's namespaces. For the connecting side of a
// connection to a listening socket, that is the process that last called
// listen() on it: the executor does so itself, so a server dialing its
// socket sees the executor, not whoever created the socket.
func PeerCred(nc net.Conn) (pid, uid int, err error) {
	uc, ok := nc.(*net.UnixConn)
	if !ok {
		return -1, -1, fmt.Errorf("peer credentials: %T is not a Unix socket", nc)
	}
	raw, err := uc.SyscallConn()
	if err != nil {
		return -1, -1, fmt.Errorf("peer credentials: %w", err)
	}
	var cred *unix.Ucred
	var credErr error
	if err := raw.Control(func(fd uintptr) {
		cred, credErr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
	}); err != nil {
		return -1, -1, fmt.Errorf("peer credentials: %w", err)
	}
	if credErr != nil {
		return -1, -1, fmt.Errorf("peer credentials: %w", credErr)
	}
	return int(cred.Pid), int(cred.Uid), nil
}
