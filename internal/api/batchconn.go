package api

import (
	"bufio"
	"net"
	"net/http"
	"sync"
	"time"
)

// batchConn is the network connection under a WebSocket. The websocket
// library flushes after every frame, which costs one write(2) per event per
// subscriber; between begin and end, batchConn keeps those bytes in its
// buffer and writes the whole burst at once. Outside a burst every write
// goes straight through, so the library's control frames (pong, close) are
// never held back longer than a burst.
//
// Every write to the network is under a stallGuard (stall.go): a client
// that stops reading is found out, whichever goroutine writes.
//
// It is safe for concurrent use; mu guards buf and depth.
type batchConn struct {
	net.Conn
	guard *stallGuard
	mu    sync.Mutex
	buf   *bufio.Writer
	depth int
}

func newBatchConn(c net.Conn, writeTimeout, closeTimeout time.Duration) *batchConn {
	b := &batchConn{Conn: c, guard: newStallGuard(writeTimeout, closeTimeout, c.SetWriteDeadline)}
	b.buf = bufio.NewWriterSize(guardedWriter{w: c, g: b.guard}, 64<<10)
	return b
}

func (b *batchConn) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	n, err := b.buf.Write(p)
	if err == nil && b.depth == 0 {
		err = b.buf.Flush()
	}
	return n, err
}

// begin opens a burst.
func (b *batchConn) begin() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.depth++
}

// end closes a burst, writing it out when it was the last one open.
func (b *batchConn) end() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.depth--
	if b.depth > 0 {
		return nil
	}
	return b.buf.Flush()
}

// Close stops the guard with the connection.
func (b *batchConn) Close() error {
	b.guard.stop()
	return b.Conn.Close()
}

// goodbye bounds what is still written (the frame in flight, a close
// frame) by the close timeout: a client that was found stuck has had
// that deadline since; one cut off for its queue gets it now.
func (b *batchConn) goodbye() {
	if !b.guard.stalled() {
		_ = b.Conn.SetWriteDeadline(time.Now().Add(b.guard.grace))
	}
}

// batchingWriter makes Hijack hand the websocket library a batchConn.
type batchingWriter struct {
	http.ResponseWriter
	writeTimeout, closeTimeout time.Duration
	conn                       *batchConn
}

func (w *batchingWriter) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	c, brw, err := http.NewResponseController(w.ResponseWriter).Hijack()
	if err != nil {
		return nil, nil, err
	}
	if err := brw.Writer.Flush(); err != nil {
		c.Close()
		return nil, nil, err
	}
	w.conn = newBatchConn(c, w.writeTimeout, w.closeTimeout)
	// The websocket library (server side) writes through the returned
	// bufio.Writer, so it must end in the batchConn too.
	return w.conn, bufio.NewReadWriter(brw.Reader, bufio.NewWriterSize(w.conn, 4096)), nil
}

func (w *batchingWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }
