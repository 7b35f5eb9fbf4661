package executor

import (
	"errors"
	"fmt"
	"net"
	"time"

	"golang.org/x/sys/unix"
)

// ErrPeerRefused: the connecting process runs as a uid other than the
// allowed one.
var ErrPeerRefused = errors.New("executor: peer uid not allowed")

// PeerCred returns the pid and uid of the process at the other end of a
// Unix socket connection, as the kernel recorded them (SO_PEERCRED),
// translated into this process's namespaces. For the connecting side of a
// connection to a listening socket, that is the process that last called
// listen() on it: the executor does so itself (relisten), so a server
// dialing its socket sees the executor, not whoever created the socket.
//
// For a TCP connection over loopback (an executor listening on a port
// inside a pod, --listen-tcp) there is no SO_PEERCRED: the uid is that of
// the peer's socket in this network namespace's socket table, and the pid
// is -1.
func PeerCred(nc net.Conn) (pid, uid int, err error) {
	if tc, ok := nc.(*net.TCPConn); ok {
		uid, err := loopbackPeerUID(tc)
		return -1, uid, err
	}
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

// peerUID returns the uid of the process at the other end of a Unix
// socket (see PeerCred).
func peerUID(nc net.Conn) (int, error) {
	_, uid, err := PeerCred(nc)
	return uid, err
}

// relisten calls listen() again on an inherited listening socket: Linux
// then records this process (and its current uid) as the one clients see
// with SO_PEERCRED, instead of the server that created the socket and
// handed it over. The backlog is capped by net.core.somaxconn.
func relisten(ln net.Listener) error {
	ul, ok := ln.(*net.UnixListener)
	if !ok {
		return fmt.Errorf("relisten: %T is not a Unix socket listener", ln)
	}
	raw, err := ul.SyscallConn()
	if err != nil {
		return fmt.Errorf("relisten: %w", err)
	}
	var lerr error
	if err := raw.Control(func(fd uintptr) { lerr = unix.Listen(int(fd), 4096) }); err != nil {
		return fmt.Errorf("relisten: %w", err)
	}
	if lerr != nil {
		return fmt.Errorf("relisten: %w", lerr)
	}
	return nil
}

// checkPeer refuses a connection whose peer uid is not allowed.
func checkPeer(nc net.Conn, allowed int) error {
	uid, err := peerUID(nc)
	if err != nil {
		return err
	}
	return checkUID(uid, allowed)
}

func checkUID(uid, allowed int) error {
	if uid != allowed {
		return fmt.Errorf("%w: uid %d (allowed: %d)", ErrPeerRefused, uid, allowed)
	}
	return nil
}

// refuse tells a refused peer why, as a JSON-RPC error with id null, and
// closes the connection.
func refuse(nc net.Conn, why error) {
	_ = nc.SetWriteDeadline(time.Now().Add(time.Second))
	_, _ = nc.Write(appendError(nil, nullID, &Error{Code: CodeDenied, Message: why.Error()}))
	nc.Close()
}
