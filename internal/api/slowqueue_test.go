package api_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/agentd/agentd/conversation"
	"github.com/agentd/agentd/internal/eventlog"
)

// queueSize is the subscription queue of the small-queue tests: a burst of
// burst events, appended in one call, is offered to a live subscriber in
// one go, more than its queue holds, so the log cuts it off whatever the
// transport does meanwhile (no socket needs to fill up).
const (
	queueSize = 4
	burst     = 3 * queueSize
)

func smallQueueEnv(t *testing.T) (*env, *prometheus.Registry) {
	t.Helper()
	return slowEnvWith(t, eventlog.Options{QueueSize: queueSize}, time.Hour)
}

// appendBurst appends burst small events in one Append, returning the seq
// of the first.
func appendBurst(t *testing.T, e *env, id string) int64 {
	t.Helper()
	evs := make([]conversation.Event, burst)
	for i := range evs {
		evs[i] = conversation.NewEvent(conversation.LogEvent{Level: conversation.LevelInfo, Message: fmt.Sprint("burst ", i)})
	}
	got, err := e.log.Append(context.Background(), id, evs...)
	if err != nil {
		t.Fatal(err)
	}
	return got[0].Seq
}

func appendLive(t *testing.T, e *env, id string) int64 {
	t.Helper()
	got, err := e.log.Append(context.Background(), id, conversation.NewEvent(conversation.LogEvent{Level: conversation.LevelInfo, Message: "live"}))
	if err != nil {
		t.Fatal(err)
	}
	return got[0].Seq
}

// checkCutOffEvents: what a cut-off client got before the signal is a
// run of the burst from its start, at most a queue of it.
func checkCutOffEvents(t *testing.T, got []int64, first int64) {
	t.Helper()
	if len(got) > queueSize {
		t.Fatalf("got %d events of the burst before the cut-off, more than the queue (%d)", len(got), queueSize)
	}
	for i, seq := range got {
		if seq != first+int64(i) {
			t.Fatalf("event %d of the burst has seq %d, want %d", i, seq, first+int64(i))
		}
	}
}

// A WebSocket client whose subscription overflows its queue (a small
// queue, more than a queue of events at once) gets the queued events and
// close code 4008; the join does not just go quiet.
func TestWebSocketSmallQueueCutOff(t *testing.T) {
	e, reg := smallQueueEnv(t)
	id := e.create()
	first := len(e.events(id, 0))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	c := dialWS(t, ctx, e, "")
	defer c.CloseNow()
	joinWS(t, ctx, c, id, int64(first))
	// Live once it read an event appended after the join.
	readWS(t, ctx, c, appendLive(t, e, id))
	start := appendBurst(t, e, id)
	waitSlowConsumers(t, reg, 1)
	got := readUntilCutOff(t, ctx, c)
	checkCutOffEvents(t, got, start)
}

// The same over SSE: the queued events, then the error event
// SLOW_CONSUMER, then the end of the stream.
func TestSSESmallQueueCutOff(t *testing.T) {
	e, reg := smallQueueEnv(t)
	id := e.create()
	first := len(e.events(id, 0))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	s := openSSE(t, ctx, e, id, int64(first), "")
	readSSE(t, s, appendLive(t, e, id))
	start := appendBurst(t, e, id)
	waitSlowConsumers(t, reg, 1)
	var got []int64
	var typ string
	sawError := false
	for s.sc.Scan() {
		line := s.sc.Text()
		switch {
		case strings.HasPrefix(line, "event: "):
			typ = strings.TrimPrefix(line, "event: ")
		case strings.HasPrefix(line, "data: ") && typ == "error":
			var body struct{ Code string }
			if err := json.Unmarshal([]byte(strings.TrimPrefix(line, "data: ")), &body); err != nil || body.Code != "SLOW_CONSUMER" {
				t.Fatalf("error event %s", line)
			}
			sawError = true
		case strings.HasPrefix(line, "data: "):
			if sawError {
				t.Fatal("an event after the error event")
			}
			var ev conversation.Event
			if err := json.Unmarshal([]byte(strings.TrimPrefix(line, "data: ")), &ev); err != nil {
				t.Fatal(err)
			}
			got = append(got, ev.Seq)
		}
	}
	if !sawError {
		t.Fatalf("the stream ended after %d events without the SLOW_CONSUMER error event: %v", len(got), s.sc.Err())
	}
	checkCutOffEvents(t, got, start)
}

// The same over Socket.IO: the queued events, then session:error
// SLOW_CONSUMER for the session, then a disconnect.
func TestSocketIOSmallQueueCutOff(t *testing.T) {
	e, reg := smallQueueEnv(t)
	id := e.create()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var c *websocket.Conn
	for attempt := 1; c == nil; attempt++ {
		var err error
		if c, err = sioJoin(ctx, e.srv.URL, id); err != nil {
			if attempt == 10 {
				t.Fatal(err)
			}
			t.Logf("attempt %d: %v", attempt, err)
		}
	}
	defer c.CloseNow()
	seqOf := func(msg string) int64 {
		var p []json.RawMessage
		var ev conversation.Event
		if err := json.Unmarshal([]byte(strings.TrimPrefix(msg, "42")), &p); err != nil || len(p) < 2 || json.Unmarshal(p[1], &ev) != nil {
			t.Fatalf("session:event %.120q", msg)
		}
		return ev.Seq
	}
	// Live once it read an event appended after the join (the join
	// replays what the session has first).
	live := appendLive(t, e, id)
	for {
		_, data, err := c.Read(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if msg := string(data); strings.HasPrefix(msg, `42["session:event",`) && seqOf(msg) == live {
			break
		}
	}
	start := appendBurst(t, e, id)
	waitSlowConsumers(t, reg, 1)
	var got []int64
	sawError := false
	for {
		_, data, err := c.Read(ctx)
		if err != nil {
			if ctx.Err() != nil {
				t.Fatalf("no disconnect after %d events (session:error %v)", len(got), sawError)
			}
			break // the server disconnected
		}
		msg := string(data)
		switch {
		case strings.HasPrefix(msg, `42["session:event",`):
			if sawError {
				t.Fatal("an event after session:error")
			}
			got = append(got, seqOf(msg))
		case strings.HasPrefix(msg, `42["session:error",`):
			if !strings.Contains(msg, `"code":"SLOW_CONSUMER"`) || !strings.Contains(msg, id) {
				t.Fatalf("session:error %q", msg)
			}
			sawError = true
		case strings.HasPrefix(msg, `42["error",`), msg == "41", msg == "2":
		default:
			t.Fatalf("unexpected packet %.80q", msg)
		}
	}
	if !sawError {
		t.Fatalf("disconnected after %d events without session:error", len(got))
	}
	checkCutOffEvents(t, got, start)
}
