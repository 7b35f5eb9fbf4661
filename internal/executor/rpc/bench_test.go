package rpc

import (
	"context"
	"encoding/json"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentd/agentd/sandbox"
)

// outputCounter is a receiving end that only counts output bytes.
type outputCounter struct{ n atomic.Int64 }

func (h *outputCounter) HandleCall(context.Context, *Conn, *Request) (any, error) {
	return nil, Errorf(CodeMethodNotFound, "no")
}

func (h *outputCounter) HandleNotify(*Conn, string, json.RawMessage) {}

func (h *outputCounter) HandleOutput(_ *Conn, p ExecOutputParams) { h.n.Add(int64(len(p.Data))) }

// BenchmarkCodecOutput: exec.output notifications of 256 KiB (the
// executor's largest chunk) through a socket pair, encoded and decoded by
// the codec (no process, no spool).
func BenchmarkCodecOutput(b *testing.B) {
	for _, binary := range []bool{false, true} {
		b.Run(map[bool]string{false: "json", true: "binary"}[binary], func(b *testing.B) {
			benchCodecOutput(b, binary)
		})
	}
}

func benchCodecOutput(b *testing.B, binary bool) {
	x, y := socketPair(b)
	h := &outputCounter{}
	cx := NewConn(x, &testHandler{}, ConnOptions{})
	cx.SetBinaryOutput(binary)
	cy := NewConn(y, h, ConnOptions{AcceptBinary: binary})
	defer func() { cx.Close(); cy.Close(); cx.Wait(); cy.Wait() }()
	data := make([]byte, 256<<10)
	b.SetBytes(int64(len(data)))
	var off int64
	for b.Loop() {
		if err := cx.NotifyOutput("t", sandbox.Stdout, off, data); err != nil {
			b.Fatal(err)
		}
		off += int64(len(data))
	}
	for h.n.Load() < off {
		time.Sleep(time.Millisecond)
	}
}
