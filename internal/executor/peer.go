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

// peerUID returns the uid of the process at the other end of a Unix
// socket, as the kernel recorded it at connect time (SO_PEERCRED).
func peerUID(nc net.Conn) (int, error) {
	uc, ok := nc.(*net.UnixConn)
	if !ok {
		return -1, fmt.Errorf("peer credentials: %T is not a Unix socket", nc)
	}
	raw, err := uc.SyscallConn()
	if err != nil {
		return -1, fmt.Errorf("peer credentials: %w", err)
	}
	var cred *unix.Ucred
	var credErr error
	if err := raw.Control(func(fd uintptr) {
		cred, credErr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
	}); err != nil {
		return -1, fmt.Errorf("peer credentials: %w", err)
	}
	if credErr != nil {
		return -1, fmt.Errorf("peer credentials: %w", credErr)
	}
	return int(cred.Uid), nil
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
