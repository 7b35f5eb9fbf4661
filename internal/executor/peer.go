package executor

import (
	"errors"
	"fmt"
	"net"
	"time"

	"golang.org/x/sys/unix"

	"github.com/agentd/agentd/internal/executor/rpc"
)

// ErrPeerRefused: the connecting process runs as a uid other than the
// allowed one.
var ErrPeerRefused = errors.New("executor: peer uid not allowed")

// peerCred returns the pid and uid of the process at the other end of a
// connection: for a Unix socket, what rpc.PeerCred reports. For a TCP
// connection over loopback (an executor listening on a port inside a pod,
// --listen-tcp) there is no SO_PEERCRED: the uid is that of the peer's
// socket in this network namespace's socket table, and the pid is -1.
func peerCred(nc net.Conn) (pid, uid int, err error) {
	if tc, ok := nc.(*net.TCPConn); ok {
		uid, err := loopbackPeerUID(tc)
		return -1, uid, err
	}
	return rpc.PeerCred(nc)
}

// peerUID returns the uid of the process at the other end of a Unix
// socket or of a loopback TCP connection (see peerCred).
func peerUID(nc net.Conn) (int, error) {
	_, uid, err := peerCred(nc)
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
	_, _ = nc.Write(rpc.EncodeError(&rpc.Error{Code: rpc.CodeDenied, Message: why.Error()}))
	nc.Close()
}
