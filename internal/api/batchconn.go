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
// It is safe for concurrent use; mu guards buf, depth and the deadline.
//
// The write deadline is kept between a timeout and a second less ahead,
// refreshed when it gets older than that: setting it is not free (a
// runtime timer), and a stream writing a thousand times a second set it
// twice per write.
type batchConn struct {
	net.Conn
	mu       sync.Mutex
	buf      *bufio.Writer
	depth    int
	deadline time.Time // when the write deadline was last set
}

// deadlineSlack is how much of its timeout a write deadline may have
// used before it is set again.
const deadlineSlack = time.Second

// refreshDeadlineLocked sets the write deadline to timeout from now unless
// it was set less than deadlineSlack ago.
func (b *batchConn) refreshDeadlineLocked(timeout time.Duration) {
	now := time.Now()
	if now.Sub(b.deadline) < deadlineSlack {
		return
	}
	_ = b.Conn.SetWriteDeadline(now.Add(timeout))
	b.deadline = now
}

func newBatchConn(c net.Conn) *batchConn {
	b := &batchConn{Conn: c}
	b.buf = bufio.NewWriterSize(c, 64<<10)
	return b
}

func (b *batchConn) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.depth == 0 {
		// The library's own frames (pong, close): its context bounds
		// them too, this only keeps an old deadline from failing them.
		b.refreshDeadlineLocked(wsWriteTimeout)
	}
	n, err := b.buf.Write(p)
	if err == nil && b.depth == 0 {
		err = b.buf.Flush()
	}
	return n, err
}

// begin opens a burst; the write deadline bounds the whole burst (a
// client that stops reading is cut off instead of stalling its pumps).
func (b *batchConn) begin(timeout time.Duration) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.depth == 0 {
		b.refreshDeadlineLocked(timeout)
	}
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

// batchingWriter makes Hijack hand the websocket library a batchConn.
type batchingWriter struct {
	http.ResponseWriter
	conn *batchConn
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
	w.conn = newBatchConn(c)
	// The websocket library (server side) writes through the returned
	// bufio.Writer, so it must end in the batchConn too.
	return w.conn, bufio.NewReadWriter(brw.Reader, bufio.NewWriterSize(w.conn, 4096)), nil
}

func (w *batchingWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }
