package rpc

import (
	"net"
	"os"
	"testing"
)

func TestPeerCred(t *testing.T) {
	a, b := socketPair(t)
	pid, uid, err := PeerCred(a)
	if err != nil || pid != os.Getpid() || uid != os.Getuid() {
		t.Fatalf("peer of a socket pair: pid %d uid %d %v, want %d %d", pid, uid, err, os.Getpid(), os.Getuid())
	}
	if _, _, err := PeerCred(b); err != nil {
		t.Fatal(err)
	}
	x, y := net.Pipe()
	defer x.Close()
	defer y.Close()
	if _, _, err := PeerCred(x); err == nil {
		t.Fatal("peer credentials of a pipe")
	}
}
