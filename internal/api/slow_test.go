package api_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/agentd/agentd/conversation"
	"github.com/agentd/agentd/internal/api"
	"github.com/agentd/agentd/internal/eventlog"
)

// slowEnv is an env whose clients count as stuck after a short write
// timeout, with a generous grace for the close frame (the test must start
// reading again within it), and whose metrics can be read.
func slowEnv(t *testing.T) (*env, *prometheus.Registry) {
	return slowEnvWith(t, eventlog.Options{}, 300*time.Millisecond)
}

func slowEnvWith(t *testing.T, opts eventlog.Options, writeTimeout time.Duration) (*env, *prometheus.Registry) {
	reg := prometheus.NewRegistry()
	opts.Registerer = reg
	e := newEnvWith(t, opts, func(c *api.Config) {
		c.WriteTimeout = writeTimeout
		c.CloseTimeout = 20 * time.Second
	})
	return e, reg
}

func counterValue(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name {
			return mf.GetMetric()[0].GetCounter().GetValue()
		}
	}
	t.Fatalf("no metric %s", name)
	return 0
}

// waitSlowConsumers waits until the metric counts want slow consumers.
func waitSlowConsumers(t *testing.T, reg *prometheus.Registry, want float64) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		got := counterValue(t, reg, "agentd_event_slow_consumers_total")
		if got == want {
			return
		}
		if got > want || time.Now().After(deadline) {
			t.Fatalf("agentd_event_slow_consumers_total = %v, want %v", got, want)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// smallBufferClient dials with a 4 KiB receive buffer, so that a client
// that stops reading fills the socket after a few MiB.
func smallBufferClient() *http.Client {
	d := &net.Dialer{Control: func(_, _ string, c syscall.RawConn) error {
		var serr error
		err := c.Control(func(fd uintptr) {
			serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 4096)
		})
		if err != nil {
			return err
		}
		return serr
	}}
	return &http.Client{Transport: &http.Transport{DialContext: d.DialContext, DisableKeepAlives: true}}
}

// appendBig appends n events of about 256 KiB each (n*256 KiB is well
// above what the server's send and the client's receive buffer hold).
func appendBig(t *testing.T, e *env, id string, n int) {
	t.Helper()
	big := strings.Repeat("x", 256<<10)
	for i := 0; i < n; i++ {
		if _, err := e.log.Append(context.Background(), id, conversation.NewEvent(conversation.LogEvent{Level: conversation.LevelInfo, Message: big})); err != nil {
			t.Fatal(err)
		}
	}
}

const bigEvents = 48 // 12 MiB

// A WebSocket client that stops reading is a slow consumer once a socket
// write has been blocked for the write timeout, or once its subscription's
// queue holds more than QueueBytes: it is counted once, and when it reads
// again it gets the events written so far, then close code 4008.
func TestWebSocketClientThatStopsReading(t *testing.T) {
	t.Run("write blocked", func(t *testing.T) {
		e, reg := slowEnv(t)
		testWebSocketStopsReading(t, e, reg)
	})
	// The write timeout is out of reach here: the byte bound cuts it off
	// (the record bound, 4096, is far).
	t.Run("queue bytes", func(t *testing.T) {
		e, reg := slowEnvWith(t, eventlog.Options{QueueBytes: 1 << 20}, time.Hour)
		testWebSocketStopsReading(t, e, reg)
	})
}

func testWebSocketStopsReading(t *testing.T, e *env, reg *prometheus.Registry) {
	id := e.create()
	first := len(e.events(id, 0))
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c, _, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(e.srv.URL, "http")+"/api/ws", &websocket.DialOptions{HTTPClient: smallBufferClient()})
	if err != nil {
		t.Fatal(err)
	}
	defer c.CloseNow()
	c.SetReadLimit(1 << 20)
	joinWS(t, ctx, c, id, int64(first))
	// One event read makes sure the subscription is live (events stored
	// before are replayed from the store, page by page, never queued).
	if _, err := e.log.Append(ctx, id, conversation.NewEvent(conversation.LogEvent{Level: conversation.LevelInfo, Message: "live"})); err != nil {
		t.Fatal(err)
	}
	readWS(t, ctx, c, int64(first+1))
	first++
	// The client reads nothing from here on.
	appendBig(t, e, id, bigEvents)
	waitSlowConsumers(t, reg, 1)

	got := readUntilCutOff(t, ctx, c)
	if len(got) == 0 || len(got) >= bigEvents {
		t.Fatalf("got %d of %d events before 4008, want some but not all", len(got), bigEvents)
	}
	for i, seq := range got {
		if seq != int64(first+i+1) {
			t.Fatalf("event %d has seq %d, want %d", i, seq, first+i+1)
		}
	}
	if v := counterValue(t, reg, "agentd_event_slow_consumers_total"); v != 1 {
		t.Fatalf("agentd_event_slow_consumers_total = %v after the close, want 1", v)
	}
}

// The same for SSE: the client that reads again gets the events written
// so far, then the error event, then the end of the stream.
func TestSSEClientThatStopsReading(t *testing.T) {
	e, reg := slowEnv(t)
	id := e.create()
	first := len(e.events(id, 0))
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", fmt.Sprintf("%s/api/sessions/%s/events?after=%d", e.srv.URL, id, first), nil)
	req.Header.Set("Accept", "text/event-stream")
	resp, err := smallBufferClient().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("sse: %d", resp.StatusCode)
	}
	appendBig(t, e, id, bigEvents)
	waitSlowConsumers(t, reg, 1)

	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	events, sawError := 0, false
	var typ string
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "event: "):
			typ = strings.TrimPrefix(line, "event: ")
		case strings.HasPrefix(line, "data: ") && typ == "error":
			var body struct{ Code string }
			json.Unmarshal([]byte(strings.TrimPrefix(line, "data: ")), &body)
			if body.Code != "SLOW_CONSUMER" {
				t.Fatalf("error event %s", line)
			}
			sawError = true
		case strings.HasPrefix(line, "data: "):
			if sawError {
				t.Fatal("an event after the error event")
			}
			events++
		}
	}
	if !sawError {
		t.Fatalf("stream ended after %d events without the error event: %v", events, sc.Err())
	}
	if events == 0 || events >= bigEvents {
		t.Fatalf("got %d of %d events before the error, want some but not all", events, bigEvents)
	}
}

// Socket.IO buffers what is emitted without bound; the server keeps at
// most a little in flight, so a client that stops reading is found out the
// same way: counted, then session:error and a disconnect.
func TestSocketIOClientThatStopsReading(t *testing.T) {
	e, reg := slowEnv(t)
	id := e.create()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	// A raw Engine.IO v4 client over WebSocket: open, connect to "/", join.
	var c *websocket.Conn
	for attempt := 1; c == nil; attempt++ {
		var err error
		c, err = sioJoin(ctx, e.srv.URL, id)
		if err != nil {
			if attempt == 10 {
				t.Fatal(err)
			}
			t.Logf("attempt %d: %v", attempt, err)
		}
	}
	defer c.CloseNow()
	appendBig(t, e, id, bigEvents)
	waitSlowConsumers(t, reg, 1)

	events, sawError := 0, false
	for {
		_, data, err := c.Read(ctx)
		if err != nil {
			break // the server disconnected
		}
		msg := string(data)
		switch {
		case strings.HasPrefix(msg, `42["session:event",`):
			if sawError {
				t.Fatal("an event after session:error")
			}
			events++
		case strings.HasPrefix(msg, `42["session:error",`):
			if !strings.Contains(msg, `"code":"SLOW_CONSUMER"`) || !strings.Contains(msg, id) {
				t.Fatalf("session:error %q", msg)
			}
			sawError = true
		case strings.HasPrefix(msg, `42["error",`):
			// The connection-level error the seed's clients listen to.
			if !sawError || !strings.Contains(msg, `"code":"SLOW_CONSUMER"`) || !strings.Contains(msg, `"message":`) || !strings.Contains(msg, id) {
				t.Fatalf("error %q", msg)
			}
		case msg == "41", msg == "2": // disconnect, ping
		default:
			t.Fatalf("unexpected packet %.80q", msg)
		}
	}
	if !sawError {
		t.Fatalf("disconnected after %d events without session:error", events)
	}
	if events >= bigEvents {
		t.Fatalf("got all %d events: the client was not cut off", events)
	}
	if err := ctx.Err(); errors.Is(err, context.DeadlineExceeded) {
		t.Fatal("timed out")
	}
}

// sioJoin connects a raw Engine.IO v4 client over WebSocket with a small
// receive buffer, connects to "/" and joins the session, reading nothing
// after the join's ack. The library has two races at connect: it emits
// "connection" only after it sent the open packet, and answers CONNECT
// before it registers the socket, so a CONNECT or an event sent at once
// may be lost or make it close the connection; the caller retries.
func sioJoin(ctx context.Context, base, id string) (*websocket.Conn, error) {
	sc, err := sioConnect(ctx, base, &websocket.DialOptions{HTTPClient: smallBufferClient()})
	if err != nil {
		return nil, err
	}
	if err := sc.c.Write(ctx, websocket.MessageText, []byte(fmt.Sprintf(`421["session:join",%q]`, id))); err != nil {
		return sc.fail("send join: %v", err)
	}
	for {
		p, _, ended := sc.next(20 * time.Second)
		if ended {
			return sc.fail("connection ended at join: %v", sc.readErr)
		}
		if strings.HasPrefix(p, "40") {
			continue // a second connect was answered too
		}
		if !strings.HasPrefix(p, `431[{"ok":true`) {
			return sc.fail("join ack %q", p)
		}
		break
	}
	for range sc.packets { // the reader has stopped
	}
	return sc.c, nil
}

// sioConn is a raw Socket.IO client during its handshake: a goroutine
// reads packets until the first ack ("431…").
type sioConn struct {
	c       *websocket.Conn
	packets chan string
	readErr error // set before packets is closed
}

// sioConnect dials, reads the open packet and connects to "/" (sending
// CONNECT again until it is answered).
func sioConnect(ctx context.Context, base string, opts *websocket.DialOptions) (*sioConn, error) {
	c, _, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(base, "http")+"/socket.io/?EIO=4&transport=websocket", opts)
	if err != nil {
		return nil, err
	}
	c.SetReadLimit(1 << 20)
	sc := &sioConn{c: c, packets: make(chan string, 16)}
	go func() {
		defer close(sc.packets)
		for {
			_, data, err := c.Read(ctx)
			if err != nil {
				sc.readErr = err
				return
			}
			sc.packets <- string(data)
			if strings.HasPrefix(string(data), "431") {
				return
			}
		}
	}()
	if open, _, ended := sc.next(20 * time.Second); ended {
		_, err := sc.fail("connection ended before the open packet: %v", sc.readErr)
		return nil, err
	} else if !strings.HasPrefix(open, "0{") {
		_, err := sc.fail("open packet %q", open)
		return nil, err
	}
	for connected := false; !connected; {
		if err := c.Write(ctx, websocket.MessageText, []byte("40")); err != nil {
			_, err := sc.fail("send connect: %v", err)
			return nil, err
		}
		p, ok, ended := sc.next(time.Second)
		if ended {
			_, err := sc.fail("connection ended at connect: %v", sc.readErr)
			return nil, err
		}
		if ok && !strings.HasPrefix(p, "40") {
			_, err := sc.fail("connect packet %q", p)
			return nil, err
		}
		connected = ok
	}
	return sc, nil
}

func (sc *sioConn) next(timeout time.Duration) (p string, ok, ended bool) {
	select {
	case p, ok := <-sc.packets:
		return p, ok, !ok
	case <-time.After(timeout):
		return "", false, false
	}
}

// fail closes the connection and waits for the reader.
func (sc *sioConn) fail(format string, args ...any) (*websocket.Conn, error) {
	sc.c.CloseNow()
	for range sc.packets {
	}
	return nil, fmt.Errorf(format, args...)
}

// readUntilCutOff reads event frames until the server closes c, which
// must be with 4008 (slow consumer), and returns the seqs read.
func readUntilCutOff(t *testing.T, ctx context.Context, c *websocket.Conn) []int64 {
	t.Helper()
	var got []int64
	for {
		_, data, err := c.Read(ctx)
		if err != nil {
			if code := websocket.CloseStatus(err); code != api.CloseSlowConsumer {
				t.Fatalf("after %d events: %v (close code %d), want close code 4008", len(got), err, code)
			}
			return got
		}
		var f struct {
			Op    string
			Event conversation.Event
		}
		if err := json.Unmarshal(data, &f); err != nil || f.Op != "event" {
			t.Fatalf("frame %.120s: %v", data, err)
		}
		got = append(got, f.Event.Seq)
	}
}
