package rpc

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/agentd/agentd/sandbox"
)

var fuzzSeeds = []string{
	`{"jsonrpc":"2.0","id":1,"method":"echo","params":{"a":1}}`,
	`{"jsonrpc":"2.0","method":"exec.output","params":{"tag":"t","stream":"stdout","offset":0,"data":"aGk="}}`,
	`{"jsonrpc":"2.0","id":"x","result":{"ok":true}}`,
	`{"jsonrpc":"2.0","id":null,"error":{"code":-32700,"message":"parse error"}}`,
	`[{"jsonrpc":"2.0","id":1,"method":"echo"}]`,
	`{"jsonrpc":"2.0","id":1,"method":"sleep"}`,
	`{"jsonrpc":"2.0","id":1e400,"method":"echo"}`,
	`{"jsonrpc":"2.0","id":1,"method":"need","params":{"n":3}}`,
	"\x00\xff{",
	"",
}

// FuzzDecode: the strict decoder never panics, and whatever the
// exec.output fast path accepts, the generic decoder reads the same way.
func FuzzDecode(f *testing.F) {
	for _, s := range fuzzSeeds {
		f.Add([]byte(s))
	}
	f.Add(bytes.TrimSuffix(appendOutput(nil, "tag", sandbox.Stderr, 12345, []byte("data\n\x00")), []byte("\n")))
	f.Add([]byte(`{"jsonrpc":"2.0","method":"exec.output","params":{"tag":"t","stream":"stdout","offset":0,"size":3}}`))
	f.Fuzz(func(t *testing.T, line []byte) {
		if p, size, ok := parseOutputFrame(line); ok {
			// A frame header is also a valid notification.
			m, _, perr := decodeMessage(line)
			if perr != nil || m.kind != kindNotification || m.method != MethodExecOutput || size < 0 {
				t.Fatalf("frame header %+v not a valid exec.output: %v", p, perr)
			}
		}
		m, id, perr := decodeMessage(line)
		if perr != nil {
			if perr.Code > -32000 || perr.Code < -32700 {
				t.Fatalf("error code %d", perr.Code)
			}
			if id == nil || !json.Valid(id) {
				t.Fatalf("reply id %q", id)
			}
		} else if m.kind == 0 {
			t.Fatal("no kind and no error")
		}
		p, ok := parseOutput(line)
		if !ok {
			return
		}
		if perr != nil || m.kind != kindNotification || m.method != MethodExecOutput {
			t.Fatalf("fast path accepted what the decoder rejects: %v %+v", perr, m)
		}
		var g ExecOutputParams
		if err := json.Unmarshal(m.params, &g); err != nil {
			t.Fatalf("fast path accepted bad params: %v", err)
		}
		if len(g.Data) == 0 {
			g.Data = []byte{}
		}
		if len(p.Data) == 0 {
			p.Data = []byte{}
		}
		if !reflect.DeepEqual(p, g) {
			t.Fatalf("fast %+v, generic %+v", p, g)
		}
	})
}

// FuzzLineReader: lines within the limit come back exactly; longer ones
// are reported, never returned.
func FuzzLineReader(f *testing.F) {
	f.Add([]byte("a\nbb\n\nccc"), 2)
	f.Add([]byte(strings.Repeat("x", 300)+"\ny\n"), 100)
	f.Fuzz(func(t *testing.T, in []byte, max int) {
		if max <= 0 || max > 1<<20 {
			return
		}
		lr := newLineReader(bytes.NewReader(in), max)
		var want []string
		for i, l := range strings.Split(string(in), "\n") {
			if i == strings.Count(string(in), "\n") && l == "" {
				break
			}
			if len(l) > max {
				l = "<too long>"
			}
			want = append(want, l)
		}
		got, _ := readLines(t, lr)
		if !reflect.DeepEqual(got, want) && !(len(got) == 0 && len(want) == 0) {
			t.Fatalf("got %q want %q", got, want)
		}
	})
}

// FuzzServe feeds arbitrary bytes to a serving connection: it must answer
// only with well-formed JSON-RPC responses, never panic, and end once the
// input ends.
func FuzzServe(f *testing.F) {
	f.Add([]byte(strings.Join(fuzzSeeds, "\n")), false)
	f.Add([]byte("{\n}\n[\n]\n\"\n"), false)
	frame := appendOutputFrame(nil, "t", sandbox.Stdout, 0, []byte("raw\n{bytes}\n"))
	f.Add(append(frame, fuzzSeeds[0]+"\n"...), true)
	f.Add(frame[:len(frame)-3], true)
	f.Add([]byte(`{"jsonrpc":"2.0","method":"exec.output","params":{"tag":"t","stream":"stdout","offset":0,"size":999999999}}`+"\n"), true)
	f.Fuzz(func(t *testing.T, in []byte, binary bool) {
		a, b := socketPair(t)
		c := NewConn(a, &testHandler{}, ConnOptions{MaxLine: 4 << 10, AcceptBinary: binary})
		go func() {
			_, _ = b.Write(in)
			_ = b.CloseWrite()
		}()
		_ = b.SetReadDeadline(time.Now().Add(10 * time.Second))
		r := bufio.NewReader(b)
		for {
			line, err := r.ReadBytes('\n')
			if err != nil {
				if !errors.Is(err, io.EOF) {
					t.Fatalf("connection did not end: %v", err)
				}
				break
			}
			var resp rawResponse
			if err := json.Unmarshal(line, &resp); err != nil || resp.JSONRPC != "2.0" || resp.ID == nil ||
				(resp.Error == nil) == (resp.Result == nil) {
				t.Fatalf("bad reply %q", line)
			}
		}
		c.Close()
		c.Wait()
	})
}
