package modelproxy

import (
	"errors"
	"io"
	"strings"
	"testing"
)

// closedAfter is a server request body that Go's server closed once its
// data was read: any later Read fails.
type closedAfter struct{ r io.Reader }

func (c *closedAfter) Read(b []byte) (int, error) {
	n, err := c.r.Read(b)
	if err == io.EOF {
		return n, errors.New("http: invalid Read on closed Body")
	}
	return n, err
}

func (c *closedAfter) Close() error { return nil }

// TestCountingReaderEndsAtContentLength: the transport's extra read after
// the last byte of a body of known length gets io.EOF, not the closed
// body's error; the bytes are counted. A body of unknown length is read
// through as it is.
func TestCountingReaderEndsAtContentLength(t *testing.T) {
	const body = "0123456789"
	cr := &countingReader{rc: &closedAfter{strings.NewReader(body)}, size: int64(len(body))}
	// What the transport does: exactly Content-Length bytes, then one more
	// read that must see EOF.
	if n, err := io.Copy(io.Discard, io.LimitReader(cr, int64(len(body)))); n != int64(len(body)) || err != nil {
		t.Fatalf("copy = %d, %v", n, err)
	}
	if n, err := cr.Read(make([]byte, 8)); n != 0 || err != io.EOF {
		t.Fatalf("read after the last byte = %d, %v; want 0, EOF", n, err)
	}
	if cr.n.Load() != int64(len(body)) {
		t.Fatalf("counted %d bytes, want %d", cr.n.Load(), len(body))
	}

	unknown := &countingReader{rc: &closedAfter{strings.NewReader(body)}, size: -1}
	if _, err := io.ReadAll(unknown); err == nil || err == io.EOF {
		t.Fatalf("unknown length: ReadAll error %v, want the body's own", err)
	}
}
