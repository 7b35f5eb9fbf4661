package rpc

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"sync"
	"syscall"
	"testing"
	"testing/iotest"
	"time"

	"golang.org/x/sys/unix"

	"github.com/agentd/agentd/sandbox"
)

// testHandler serves a few methods for codec tests.
type testHandler struct {
	mu      sync.Mutex
	notes   []string
	outputs []ExecOutputParams
}

func (h *testHandler) HandleCall(ctx context.Context, c *Conn, req *Request) (any, error) {
	switch req.Method {
	case "echo":
		var v map[string]any
		if err := req.Decode(&v); err != nil {
			return nil, err
		}
		return v, nil
	case "need":
		var p struct {
			N *int `json:"n"`
		}
		if err := req.Decode(&p); err != nil {
			return nil, err
		}
		if p.N == nil {
			return nil, Errorf(CodeInvalidParams, "need: n is required")
		}
		return *p.N * 2, nil
	case "fail":
		return nil, Errorf(CodeNotFound, "nothing here")
	case "plain-error":
		return nil, errors.New("boom")
	case "panic":
		panic("handler bug")
	case "sleep":
		<-ctx.Done()
		return nil, ctx.Err()
	case "big":
		return strings.Repeat("x", 2<<20), nil
	case "callback":
		var r map[string]any
		if err := c.Call(ctx, "echo", map[string]any{"back": true}, &r); err != nil {
			return nil, err
		}
		return r, nil
	}
	return nil, Errorf(CodeMethodNotFound, "method not found: %q", req.Method)
}

func (h *testHandler) HandleNotify(c *Conn, method string, params json.RawMessage) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if method == MethodExecOutput {
		var p ExecOutputParams
		if json.Unmarshal(params, &p) == nil {
			h.outputs = append(h.outputs, p)
		}
		return
	}
	h.notes = append(h.notes, method+" "+string(params))
}

func (h *testHandler) HandleOutput(c *Conn, p ExecOutputParams) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.outputs = append(h.outputs, p)
}

// rawPeer is a test client speaking raw lines to a Conn.
type rawPeer struct {
	t  *testing.T
	nc net.Conn
	r  *bufio.Reader
}

func newRawPair(t *testing.T, opts ConnOptions) (*Conn, *rawPeer, *testHandler) {
	t.Helper()
	a, b := socketPair(t)
	h := &testHandler{}
	c := NewConn(a, h, opts)
	t.Cleanup(func() { c.Close(); c.Wait() })
	return c, &rawPeer{t: t, nc: b, r: bufio.NewReaderSize(b, 1<<20)}, h
}

// socketPair returns two connected Unix stream sockets. Close-on-exec is
// set under syscall.ForkLock, as the net package does, because macOS has
// no SOCK_CLOEXEC.
func socketPair(t testing.TB) (*net.UnixConn, *net.UnixConn) {
	t.Helper()
	syscall.ForkLock.RLock()
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM, 0)
	if err == nil {
		unix.CloseOnExec(fds[0])
		unix.CloseOnExec(fds[1])
	}
	syscall.ForkLock.RUnlock()
	if err != nil {
		t.Fatal(err)
	}
	conn := func(fd int) *net.UnixConn {
		f := os.NewFile(uintptr(fd), "socketpair")
		defer f.Close()
		c, err := net.FileConn(f)
		if err != nil {
			t.Fatal(err)
		}
		return c.(*net.UnixConn)
	}
	a, b := conn(fds[0]), conn(fds[1])
	t.Cleanup(func() { a.Close(); b.Close() })
	return a, b
}

func (p *rawPeer) send(line string) {
	p.t.Helper()
	if _, err := io.WriteString(p.nc, line); err != nil {
		p.t.Fatal(err)
	}
}

type rawResponse struct {
	JSONRPC string          `json:"jsonrpc"`
	ID      json.RawMessage `json:"id"`
	Result  json.RawMessage `json:"result"`
	Error   *Error          `json:"error"`
}

func (p *rawPeer) recv() rawResponse {
	p.t.Helper()
	_ = p.nc.SetReadDeadline(time.Now().Add(5 * time.Second))
	line, err := p.r.ReadBytes('\n')
	if err != nil {
		p.t.Fatalf("read: %v", err)
	}
	var r rawResponse
	if err := json.Unmarshal(line, &r); err != nil {
		p.t.Fatalf("response %q: %v", line, err)
	}
	if r.JSONRPC != "2.0" {
		p.t.Fatalf("response without jsonrpc 2.0: %s", line)
	}
	return r
}

func TestConnErrorCodes(t *testing.T) {
	_, p, _ := newRawPair(t, ConnOptions{MaxLine: 1 << 20})
	cases := []struct {
		name, line string
		code       int
		id         string
	}{
		{"not json", "{oops\n", CodeParseError, "null"},
		{"truncated json", `{"jsonrpc":"2.0","id":1,"method":"echo"` + "\n", CodeParseError, "null"},
		{"whitespace only", "   \n", CodeParseError, "null"},
		{"json array", "[1,2]\n", CodeInvalidRequest, "null"},
		{"json string", `"hello"` + "\n", CodeInvalidRequest, "null"},
		{"json null", "null\n", CodeInvalidRequest, "null"},
		{"missing jsonrpc", `{"id":7,"method":"echo"}` + "\n", CodeInvalidRequest, "7"},
		{"wrong version", `{"jsonrpc":"1.0","id":7,"method":"echo"}` + "\n", CodeInvalidRequest, "7"},
		{"method not string", `{"jsonrpc":"2.0","id":8,"method":5}` + "\n", CodeInvalidRequest, "8"},
		{"empty method", `{"jsonrpc":"2.0","id":8,"method":""}` + "\n", CodeInvalidRequest, "8"},
		{"params scalar", `{"jsonrpc":"2.0","id":9,"method":"echo","params":3}` + "\n", CodeInvalidRequest, "9"},
		{"id object", `{"jsonrpc":"2.0","id":{},"method":"echo"}` + "\n", CodeInvalidRequest, "null"},
		{"id null", `{"jsonrpc":"2.0","id":null,"method":"echo"}` + "\n", CodeInvalidRequest, "null"},
		{"id bool", `{"jsonrpc":"2.0","id":true,"method":"echo"}` + "\n", CodeInvalidRequest, "null"},
		{"nothing", `{"jsonrpc":"2.0","id":3}` + "\n", CodeInvalidRequest, "3"},
		{"unknown method", `{"jsonrpc":"2.0","id":10,"method":"nope"}` + "\n", CodeMethodNotFound, "10"},
		{"string id", `{"jsonrpc":"2.0","id":"a\"b","method":"nope"}` + "\n", CodeMethodNotFound, `"a\"b"`},
		{"params not object", `{"jsonrpc":"2.0","id":11,"method":"echo","params":[1]}` + "\n", CodeInvalidParams, "11"},
		{"params wrong type", `{"jsonrpc":"2.0","id":12,"method":"need","params":{"n":"x"}}` + "\n", CodeInvalidParams, "12"},
		{"params missing field", `{"jsonrpc":"2.0","id":13,"method":"need","params":{}}` + "\n", CodeInvalidParams, "13"},
		{"params missing", `{"jsonrpc":"2.0","id":14,"method":"need"}` + "\n", CodeInvalidParams, "14"},
		{"handler panic", `{"jsonrpc":"2.0","id":15,"method":"panic"}` + "\n", CodeInternal, "15"},
		{"plain error", `{"jsonrpc":"2.0","id":16,"method":"plain-error"}` + "\n", CodeInternal, "16"},
		{"domain error", `{"jsonrpc":"2.0","id":17,"method":"fail"}` + "\n", CodeNotFound, "17"},
		{"result too large", `{"jsonrpc":"2.0","id":18,"method":"big"}` + "\n", CodeTooLarge, "18"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p.t = t
			p.send(tc.line)
			r := p.recv()
			if r.Error == nil {
				t.Fatalf("no error: result %s", r.Result)
			}
			if r.Error.Code != tc.code {
				t.Errorf("code %d (%s), want %d", r.Error.Code, r.Error.Message, tc.code)
			}
			if string(r.ID) != tc.id {
				t.Errorf("id %s, want %s", r.ID, tc.id)
			}
		})
	}
	// None of that closed the connection.
	p.t = t
	p.send(`{"jsonrpc":"2.0","id":"ok","method":"echo","params":{"a":1}}` + "\n")
	if r := p.recv(); r.Error != nil || string(r.Result) != `{"a":1}` {
		t.Fatalf("after errors: %+v %s", r.Error, r.Result)
	}
}

func TestConnNotificationsGetNoAnswer(t *testing.T) {
	_, p, h := newRawPair(t, ConnOptions{})
	p.send(`{"jsonrpc":"2.0","method":"hello","params":{"x":1}}` + "\n")
	p.send(`{"jsonrpc":"2.0","method":"panic-free"}` + "\n")
	// A response nobody asked for, and an invalid response: dropped, not
	// answered (answering could make two peers bounce errors forever).
	p.send(`{"jsonrpc":"2.0","id":999,"result":1}` + "\n")
	p.send(`{"jsonrpc":"2.0","id":998,"result":1,"error":{"code":1,"message":"x"}}` + "\n")
	p.send(`{"jsonrpc":"2.0","id":null,"error":{"code":-32700,"message":"parse error"}}` + "\n")
	p.send(`{"jsonrpc":"2.0","id":1,"method":"echo","params":{}}` + "\n")
	r := p.recv()
	if string(r.ID) != "1" || r.Error != nil {
		t.Fatalf("first answer should be to id 1, got %+v", r)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.notes) != 2 || h.notes[0] != `hello {"x":1}` || h.notes[1] != "panic-free " {
		t.Fatalf("notifications %q", h.notes)
	}
}

func TestConnOversizedLineDiscarded(t *testing.T) {
	const limit = 64 << 10
	_, p, _ := newRawPair(t, ConnOptions{MaxLine: limit})
	// 4 MiB in one line, written concurrently since the reader discards as
	// it reads.
	huge := `{"jsonrpc":"2.0","id":1,"method":"echo","params":{"x":"` + strings.Repeat("a", 4<<20) + `"}}` + "\n"
	go func() {
		_, _ = io.WriteString(p.nc, huge+`{"jsonrpc":"2.0","id":2,"method":"echo","params":{"y":2}}`+"\n")
	}()
	r := p.recv()
	if r.Error == nil || r.Error.Code != CodeTooLarge || string(r.ID) != "null" {
		t.Fatalf("oversized: %+v id %s", r.Error, r.ID)
	}
	r = p.recv()
	if string(r.ID) != "2" || string(r.Result) != `{"y":2}` {
		t.Fatalf("next line after the oversized one: %+v %s", r.Error, r.Result)
	}
	// A line of exactly the limit is fine.
	pad := limit - len(`{"jsonrpc":"2.0","id":3,"method":"echo","params":{"z":""}}`)
	p.send(`{"jsonrpc":"2.0","id":3,"method":"echo","params":{"z":"` + strings.Repeat("b", pad) + `"}}` + "\n")
	if r := p.recv(); r.Error != nil {
		t.Fatalf("line at the limit: %+v", r.Error)
	}
}

func TestConnSymmetricCalls(t *testing.T) {
	a, b := socketPair(t)
	ca := NewConn(a, &testHandler{}, ConnOptions{})
	cb := NewConn(b, &testHandler{}, ConnOptions{})
	defer func() { ca.Close(); cb.Close(); ca.Wait(); cb.Wait() }()
	ctx := context.Background()
	var wg sync.WaitGroup
	for i := range 50 {
		wg.Add(2)
		go func() {
			defer wg.Done()
			var r map[string]int
			if err := ca.Call(ctx, "echo", map[string]int{"i": i}, &r); err != nil || r["i"] != i {
				t.Errorf("a→b %d: %v %v", i, r, err)
			}
		}()
		go func() {
			defer wg.Done()
			var r int
			if err := cb.Call(ctx, "need", map[string]int{"n": i}, &r); err != nil || r != 2*i {
				t.Errorf("b→a %d: %v %v", i, r, err)
			}
		}()
	}
	wg.Wait()
	// A handler calling back into the caller on the same connection.
	var r map[string]bool
	if err := ca.Call(ctx, "callback", map[string]int{}, &r); err != nil || !r["back"] {
		t.Fatalf("callback: %v %v", r, err)
	}
	var pe *Error
	if err := ca.Call(ctx, "fail", nil, nil); !errors.As(err, &pe) || pe.Code != CodeNotFound || !errors.Is(err, sandbox.ErrNotFound) {
		t.Fatalf("fail: %v", err)
	}
}

func TestConnCallCancelAndClose(t *testing.T) {
	a, b := socketPair(t)
	var calls []string
	var mu sync.Mutex
	ca := NewConn(a, &testHandler{}, ConnOptions{OnCall: func(m string, n int, err error, d time.Duration) {
		mu.Lock()
		calls = append(calls, fmt.Sprintf("%s %v", m, err != nil))
		mu.Unlock()
	}})
	cb := NewConn(b, &testHandler{}, ConnOptions{})
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if err := ca.Call(ctx, "sleep", nil, nil); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("sleep: %v", err)
	}
	// The peer going away fails a pending call with ErrClosed.
	errc := make(chan error, 1)
	go func() { errc <- ca.Call(context.Background(), "sleep", nil, nil) }()
	time.Sleep(20 * time.Millisecond)
	cb.Close()
	if err := <-errc; !errors.Is(err, ErrClosed) {
		t.Fatalf("call across close: %v", err)
	}
	<-ca.Done()
	if err := ca.Call(context.Background(), "echo", nil, nil); !errors.Is(err, ErrClosed) {
		t.Fatalf("call after close: %v", err)
	}
	if err := ca.Notify("x", nil); !errors.Is(err, ErrClosed) {
		t.Fatalf("notify after close: %v", err)
	}
	ca.Close()
	ca.Wait()
	cb.Wait()
	mu.Lock()
	defer mu.Unlock()
	if len(calls) != 3 || calls[0] != "sleep true" {
		t.Fatalf("OnCall saw %q", calls)
	}
}

func TestConnCloseFlushesQueuedReply(t *testing.T) {
	// Close after a reply was queued still writes it (shutdown relies on it).
	a, b := socketPair(t)
	closed := make(chan struct{})
	h := handlerFunc(func(ctx context.Context, c *Conn, req *Request) (any, error) {
		req.AfterReply(func() { go func() { c.Close(); close(closed) }() })
		return "bye", nil
	})
	ca := NewConn(a, h, ConnOptions{})
	cb := NewConn(b, &testHandler{}, ConnOptions{})
	var s string
	if err := cb.Call(context.Background(), "shutdown", nil, &s); err != nil || s != "bye" {
		t.Fatalf("reply before close: %q %v", s, err)
	}
	<-closed
	<-cb.Done()
	ca.Wait()
	cb.Close()
	cb.Wait()
}

type handlerFunc func(ctx context.Context, c *Conn, req *Request) (any, error)

func (f handlerFunc) HandleCall(ctx context.Context, c *Conn, req *Request) (any, error) {
	return f(ctx, c, req)
}
func (f handlerFunc) HandleNotify(*Conn, string, json.RawMessage) {}

func TestOutputFastPathAndFallback(t *testing.T) {
	c, p, h := newRawPair(t, ConnOptions{})
	_ = c
	data := []byte("hello\x00\xff world\n")
	line := appendOutput(nil, "t1", sandbox.Stderr, 42, data)
	// The same notification spelled differently goes the generic way.
	generic := `{"params":{"data":"` + "aGk=" + `","offset":7,"stream":"stdout","tag":"t<2>"},"method":"exec.output","jsonrpc":"2.0"}` + "\n"
	p.send(string(line) + generic)
	p.send(`{"jsonrpc":"2.0","id":1,"method":"echo","params":{}}` + "\n")
	p.recv()
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.outputs) != 2 {
		t.Fatalf("outputs %+v", h.outputs)
	}
	o := h.outputs[0]
	if o.Tag != "t1" || o.Stream != sandbox.Stderr || o.Offset != 42 || !bytes.Equal(o.Data, data) {
		t.Fatalf("fast path: %+v", o)
	}
	o = h.outputs[1]
	if o.Tag != "t<2>" || o.Stream != sandbox.Stdout || o.Offset != 7 || string(o.Data) != "hi" {
		t.Fatalf("generic path: %+v", o)
	}
}

func TestParseOutputRejectsVariants(t *testing.T) {
	good := string(appendOutput(nil, "tag", sandbox.Stdout, 5, []byte("abc")))
	good = strings.TrimSuffix(good, "\n")
	if _, ok := parseOutput([]byte(good)); !ok {
		t.Fatal("canonical line not parsed")
	}
	bad := []string{
		strings.Replace(good, `"offset":5`, `"offset":05`, 1),
		strings.Replace(good, `"offset":5`, `"offset":-5`, 1),
		strings.Replace(good, `"offset":5`, `"offset":99999999999999999999`, 1),
		strings.Replace(good, `"stream":"stdout"`, `"stream":"stdin"`, 1),
		strings.Replace(good, `YWJj`, `YW\nJj`, 1),
		strings.Replace(good, `YWJj`, "YW\rJj", 1),
		strings.Replace(good, `YWJj`, `YWJ`, 1),
		strings.Replace(good, `"tag":"tag"`, `"tag":"t\"g"`, 1),
		good + " ",
		good[:len(good)-1],
	}
	for _, b := range bad {
		if p, ok := parseOutput([]byte(b)); ok {
			t.Errorf("accepted %q as %+v", b, p)
		}
	}
}

// readLines reads lr to its end: its lines, "<too long>" for each line
// over its limit, and the error that ended it (nil for EOF). A line
// returned over the limit fails the test.
func readLines(t *testing.T, lr *lineReader) ([]string, error) {
	t.Helper()
	var got []string
	for {
		l, err := lr.next()
		if errors.Is(err, errLineTooLong) {
			got = append(got, "<too long>")
			continue
		}
		if errors.Is(err, io.EOF) {
			return got, nil
		}
		if err != nil {
			return got, err
		}
		if len(l) > lr.max {
			t.Fatalf("line of %d over max %d", len(l), lr.max)
		}
		got = append(got, string(l))
	}
}

func TestLineReader(t *testing.T) {
	input := "a\nbb\n\nccc\n" + strings.Repeat("x", 100) + "\nlast"
	lr := newLineReader(iotest.OneByteReader(strings.NewReader(input)), 10)
	got, err := readLines(t, lr)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"a", "bb", "", "ccc", "<too long>", "last"}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("got %q want %q", got, want)
	}
	// A read error other than EOF is reported after the data before it.
	lr = newLineReader(io.MultiReader(strings.NewReader("ok\n"), iotest.ErrReader(errors.New("broken"))), 10)
	if l, err := lr.next(); err != nil || string(l) != "ok" {
		t.Fatalf("%q %v", l, err)
	}
	if _, err := lr.next(); err == nil || err.Error() != "broken" {
		t.Fatalf("want the read error, got %v", err)
	}
}

func TestDecodeMessageKinds(t *testing.T) {
	m, _, err := decodeMessage([]byte(`{"jsonrpc":"2.0","method":"n","params":{"a":1}}`))
	if err != nil || m.kind != kindNotification || m.method != "n" || string(m.params) != `{"a":1}` {
		t.Fatalf("notification: %+v %v", m, err)
	}
	m, _, err = decodeMessage([]byte(`{"jsonrpc":"2.0","id":"x","method":"r"}`))
	if err != nil || m.kind != kindRequest || string(m.id) != `"x"` {
		t.Fatalf("request: %+v %v", m, err)
	}
	m, _, err = decodeMessage([]byte(`{"jsonrpc":"2.0","id":4,"result":null}`))
	if err != nil || m.kind != kindResponse || string(m.result) != "null" {
		t.Fatalf("null result: %+v %v", m, err)
	}
	m, _, err = decodeMessage([]byte(`{"jsonrpc":"2.0","id":4,"error":{"code":-32000,"message":"x","data":{"k":1}}}`))
	if err != nil || m.err == nil || m.err.Code != CodeNotFound || string(m.err.Data) != `{"k":1}` {
		t.Fatalf("error: %+v %v", m, err)
	}
}

func TestBinaryOutputFrames(t *testing.T) {
	a, b := socketPair(t)
	h := &testHandler{}
	ca := NewConn(a, &testHandler{}, ConnOptions{})
	cb := NewConn(b, h, ConnOptions{AcceptBinary: true, MaxLine: 1 << 20})
	defer func() { ca.Close(); cb.Close(); ca.Wait(); cb.Wait() }()
	// Raw data with newlines and JSON-looking bytes, mixed with JSON
	// lines and requests.
	d1 := []byte("line\n{\"jsonrpc\":\"2.0\"}\n\x00")
	if err := ca.NotifyOutput("t", sandbox.Stdout, 0, d1); err != nil {
		t.Fatal(err)
	}
	ca.SetBinaryOutput(true)
	if err := ca.NotifyOutput("t", sandbox.Stdout, int64(len(d1)), d1); err != nil {
		t.Fatal(err)
	}
	if err := ca.NotifyOutput("t", sandbox.Stderr, 0, nil); err != nil {
		t.Fatal(err)
	}
	big := bytes.Repeat([]byte{0xff, '\n'}, 300<<10)
	if err := ca.NotifyOutput("t", sandbox.Stderr, 0, big); err != nil {
		t.Fatal(err)
	}
	var r map[string]int
	if err := ca.Call(context.Background(), "echo", map[string]int{"x": 1}, &r); err != nil || r["x"] != 1 {
		t.Fatalf("call after frames: %v %v", r, err)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.outputs) != 4 || !bytes.Equal(h.outputs[0].Data, d1) || !bytes.Equal(h.outputs[1].Data, d1) ||
		h.outputs[1].Offset != int64(len(d1)) || len(h.outputs[2].Data) != 0 || !bytes.Equal(h.outputs[3].Data, big) {
		t.Fatalf("outputs %d", len(h.outputs))
	}
}

func TestBinaryFrameOverLimitEndsConnection(t *testing.T) {
	_, p, _ := newRawPair(t, ConnOptions{AcceptBinary: true, MaxLine: 1024})
	p.send(`{"jsonrpc":"2.0","method":"exec.output","params":{"tag":"t","stream":"stdout","offset":0,"size":5000}}` + "\n")
	_ = p.nc.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := p.r.ReadBytes('\n'); !errors.Is(err, io.EOF) {
		t.Fatalf("connection not closed: %v", err)
	}
}

func TestBinaryFramesIgnoredWithoutOptIn(t *testing.T) {
	// A side that did not ask for frames reads a header as an ordinary
	// notification (and the raw bytes as lines): nothing is mistaken for
	// a frame.
	_, p, h := newRawPair(t, ConnOptions{})
	p.send(`{"jsonrpc":"2.0","method":"exec.output","params":{"tag":"t","stream":"stdout","offset":0,"size":2}}` + "\n")
	p.send(`{"jsonrpc":"2.0","id":1,"method":"echo","params":{}}` + "\n")
	if r := p.recv(); string(r.ID) != "1" {
		t.Fatalf("%+v", r)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.outputs) != 1 || len(h.outputs[0].Data) != 0 {
		t.Fatalf("outputs %+v", h.outputs)
	}
}
