package executor

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"strconv"
	"strings"
)

// errNotLoopback: a TCP peer that is not on this network namespace's
// loopback, whose owner cannot be known.
var errNotLoopback = errors.New("peer not on loopback")

// loopbackPeerUID returns the uid owning the other end of a TCP connection
// made over loopback, as this network namespace's /proc/net/tcp (or tcp6)
// records it: the effective uid that created the peer's socket. Inside a
// Kubernetes pod, the port-forward stream of the API server is dialed by
// the node's container runtime (root); the pod's agents run as another
// uid and cannot make a socket of root's.
func loopbackPeerUID(c *net.TCPConn) (int, error) {
	local, ok1 := c.LocalAddr().(*net.TCPAddr)
	remote, ok2 := c.RemoteAddr().(*net.TCPAddr)
	if !ok1 || !ok2 {
		return -1, fmt.Errorf("peer credentials: %w", errNotLoopback)
	}
	lip, _ := netip.AddrFromSlice(local.IP)
	rip, _ := netip.AddrFromSlice(remote.IP)
	if !rip.Unmap().IsLoopback() || !lip.Unmap().IsLoopback() {
		return -1, fmt.Errorf("peer credentials: %w: %s", errNotLoopback, remote)
	}
	// The peer's socket: its local address is our remote one and the
	// other way round.
	for _, f := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		uid, err := socketUID(f, remote.AddrPort(), local.AddrPort())
		if err == nil {
			return uid, nil
		}
		if !errors.Is(err, errNoSocket) {
			return -1, fmt.Errorf("peer credentials: %w", err)
		}
	}
	return -1, fmt.Errorf("peer credentials: %w: %s → %s", errNoSocket, remote, local)
}

// errNoSocket: no socket with those addresses in the table.
var errNoSocket = errors.New("no such socket")

// socketUID finds the socket bound to local and connected to remote in a
// /proc/net/tcp{,6} table and returns its uid column.
func socketUID(table string, local, remote netip.AddrPort) (int, error) {
	f, err := os.Open(table)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return -1, errNoSocket
		}
		return -1, err
	}
	defer f.Close()
	return findSocketUID(f, strings.HasSuffix(table, "6"), local, remote)
}

// findSocketUID reads a /proc/net/tcp{,6} table (v6: addresses are 16
// bytes, IPv4 peers appear mapped) and returns the uid of the socket with
// those addresses.
func findSocketUID(r io.Reader, v6 bool, local, remote netip.AddrPort) (int, error) {
	wantL, wantR := procAddr(local, v6), procAddr(remote, v6)
	if wantL == "" || wantR == "" {
		return -1, errNoSocket
	}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 4096), 1<<20)
	first := true
	for sc.Scan() {
		if first { // the header
			first = false
			continue
		}
		// sl local rem st queues timer retrnsmt uid timeout inode …
		fs := strings.Fields(sc.Text())
		if len(fs) < 8 {
			continue
		}
		if !strings.EqualFold(fs[1], wantL) || !strings.EqualFold(fs[2], wantR) {
			continue
		}
		uid, err := strconv.Atoi(fs[7])
		if err != nil {
			return -1, fmt.Errorf("bad uid %q in the socket table", fs[7])
		}
		return uid, nil
	}
	if err := sc.Err(); err != nil {
		return -1, err
	}
	return -1, errNoSocket
}

// procAddr spells an address as the kernel's socket tables do: the
// address as 32-bit words in host (little-endian) order, in hex, then the
// port in hex. "" when the address does not fit the table.
func procAddr(ap netip.AddrPort, v6 bool) string {
	a := ap.Addr()
	var b []byte
	switch {
	case v6:
		a16 := a.As16() // an IPv4 address appears v4-mapped
		b = a16[:]
	case a.Unmap().Is4():
		a4 := a.Unmap().As4()
		b = a4[:]
	default:
		return ""
	}
	var sb strings.Builder
	for i := 0; i < len(b); i += 4 {
		fmt.Fprintf(&sb, "%08X", binary.LittleEndian.Uint32(b[i:i+4]))
	}
	fmt.Fprintf(&sb, ":%04X", ap.Port())
	return sb.String()
}
