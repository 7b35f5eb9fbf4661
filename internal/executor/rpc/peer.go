package rpc

import (
	"fmt"
	"net"
)

// PeerCred returns the pid and uid of the process at the other end of a
// Unix socket connection, as the kernel recorded them (peercred_linux.go,
// peercred_darwin.go). On Linux they are translated into this process's
// namespaces. For the connecting side of a connection to a listening
// socket, that is the process that last called listen() on it: the
// executor does so itself, so a server dialing its socket sees the
// executor, not whoever created the socket.
func PeerCred(nc net.Conn) (pid, uid int, err error) {
	uc, ok := nc.(*net.UnixConn)
	if !ok {
		return -1, -1, fmt.Errorf("peer credentials: %T is not a Unix socket", nc)
	}
	raw, err := uc.SyscallConn()
	if err != nil {
		return -1, -1, fmt.Errorf("peer credentials: %w", err)
	}
	var credErr error
	if err := raw.Control(func(fd uintptr) {
		pid, uid, credErr = peerCred(int(fd))
	}); err != nil {
		return -1, -1, fmt.Errorf("peer credentials: %w", err)
	}
	if credErr != nil {
		return -1, -1, fmt.Errorf("peer credentials: %w", credErr)
	}
	return pid, uid, nil
}
