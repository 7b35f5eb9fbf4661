package api

import (
	"bytes"
	"net"
	"testing"
	"time"
)

// recConn records each Write call (one per would-be syscall).
type recConn struct {
	net.Conn
	writes [][]byte
}

func (r *recConn) Write(p []byte) (int, error) {
	r.writes = append(r.writes, append([]byte(nil), p...))
	return len(p), nil
}
func (r *recConn) SetWriteDeadline(time.Time) error { return nil }

func TestBatchConnHoldsABurst(t *testing.T) {
	rc := &recConn{}
	b := newBatchConn(rc, time.Minute, time.Second)
	b.Write([]byte("solo"))
	if len(rc.writes) != 1 {
		t.Fatalf("outside a burst a write goes straight out: %d writes", len(rc.writes))
	}
	b.begin()
	b.begin() // a second pump of the same connection
	for _, s := range []string{"a", "b", "c"} {
		b.Write([]byte(s))
	}
	if len(rc.writes) != 1 {
		t.Fatalf("a burst was written before it ended: %q", rc.writes)
	}
	b.end()
	if len(rc.writes) != 1 {
		t.Fatal("flushed while another burst was still open")
	}
	b.end()
	if len(rc.writes) != 2 || !bytes.Equal(rc.writes[1], []byte("abc")) {
		t.Fatalf("burst not written as one: %q", rc.writes)
	}
}
