package api_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"
)

// sioClient is a minimal Socket.IO v4 client over Engine.IO long-polling,
// enough to connect with auth, emit with acks and read events.
type sioClient struct {
	t       *testing.T
	base    string
	sid     string
	pending []string // Socket.IO packets read but not consumed
	closed  bool
}

func (c *sioClient) url() string {
	return c.base + "/socket.io/?EIO=4&transport=polling&sid=" + c.sid + "&t=" + strconv.FormatInt(time.Now().UnixNano(), 36)
}

// dialSIO opens an Engine.IO session and connects to the main namespace
// with auth.token = token. It returns the CONNECT_ERROR packet's text when
// the server refuses.
func dialSIO(t *testing.T, base, token string) (*sioClient, string) {
	t.Helper()
	resp, err := http.Get(base + "/socket.io/?EIO=4&transport=polling")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if len(body) == 0 || body[0] != '0' {
		t.Fatalf("engine.io open: %d %q", resp.StatusCode, body)
	}
	var open struct{ Sid string }
	if err := json.Unmarshal(body[1:], &open); err != nil {
		t.Fatalf("engine.io open %q: %v", body, err)
	}
	c := &sioClient{t: t, base: base, sid: open.Sid}
	auth, _ := json.Marshal(map[string]string{"token": token})
	c.post("0" + string(auth))
	p := c.next(func(p string) bool { return strings.HasPrefix(p, "0") || strings.HasPrefix(p, "4") })
	if strings.HasPrefix(p, "4") {
		return c, p
	}
	return c, ""
}

func (c *sioClient) post(packet string) {
	c.t.Helper()
	resp, err := http.Post(c.url(), "text/plain;charset=UTF-8", strings.NewReader("4"+packet))
	if err != nil {
		c.t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
}

var sioHTTP = &http.Client{Timeout: 50 * time.Second}

// poll reads one polling payload; false once the session is gone.
func (c *sioClient) poll() bool {
	c.t.Helper()
	if c.closed {
		return false
	}
	// A poll the server holds longer than its ping interval (25 s) and
	// ping timeout (20 s) together is one it lost: fail, not hang.
	resp, err := sioHTTP.Get(c.url())
	if err != nil {
		c.t.Fatalf("socket.io poll: %v", err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 {
		c.closed = true
		return false
	}
	for _, pk := range strings.Split(string(body), "\x1e") {
		switch {
		case pk == "1": // engine close
			c.closed = true
		case pk == "2": // ping
			resp, err := http.Post(c.url(), "text/plain;charset=UTF-8", strings.NewReader("3"))
			if err == nil {
				resp.Body.Close()
			}
		case strings.HasPrefix(pk, "4"):
			c.pending = append(c.pending, pk[1:])
		}
	}
	return !c.closed
}

// next returns the first Socket.IO packet matching ok, polling for more
// (at most 10 s).
func (c *sioClient) next(ok func(string) bool) string {
	c.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		for i, p := range c.pending {
			if ok(p) {
				c.pending = append(c.pending[:i], c.pending[i+1:]...)
				return p
			}
		}
		if !c.poll() {
			for i, p := range c.pending {
				if ok(p) {
					c.pending = append(c.pending[:i], c.pending[i+1:]...)
					return p
				}
			}
			return ""
		}
	}
	c.t.Fatal("socket.io: no matching packet within 10s")
	return ""
}

// call emits event with args and an ack id, and returns the ack's first
// argument.
func (c *sioClient) call(id int, event string, args ...any) map[string]any {
	c.t.Helper()
	b, _ := json.Marshal(append([]any{event}, args...))
	c.post(fmt.Sprintf("2%d%s", id, b))
	prefix := fmt.Sprintf("3%d[", id)
	p := c.next(func(p string) bool { return strings.HasPrefix(p, prefix) })
	if p == "" {
		c.t.Fatalf("socket.io: no ack %d (closed)", id)
	}
	var out []map[string]any
	if err := json.Unmarshal([]byte(p[len(prefix)-1:]), &out); err != nil || len(out) == 0 {
		c.t.Fatalf("socket.io ack %q: %v", p, err)
	}
	return out[0]
}

// waitGone polls until the server ends the connection: a DISCONNECT
// packet, an engine close, or the session forgotten.
func (c *sioClient) waitGone() {
	c.t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for time.Now().Before(deadline) {
		for _, p := range c.pending {
			if p == "1" || strings.HasPrefix(p, "1") {
				return
			}
		}
		if !c.poll() {
			return
		}
	}
	c.t.Fatal("socket.io: the server did not close the connection")
}

func (c *sioClient) close() {
	if !c.closed {
		c.post("1")
		resp, err := http.Post(c.url(), "text/plain;charset=UTF-8", strings.NewReader("1"))
		if err == nil {
			resp.Body.Close()
		}
	}
}
