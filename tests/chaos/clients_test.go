//go:build linux

package chaos

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/coder/websocket"

	"github.com/agentd/agentd/conversation"
	"github.com/agentd/agentd/restapi"
)

// conn is what one client connection received: the events in arrival
// order after the cursor it joined with. Every conn is checked against the
// store: seqs after+1, after+2, … with no gap or repeat, each event equal
// to the stored one.
type conn struct {
	kind    string // "ws" or "sse"
	role    string // "follower", "slow", "storm"
	session string
	after   int64
	events  []conversation.Event
	end     string // why it ended
}

// clients are the round's readers. The followers keep one stream per
// session open (reconnecting from the last seq they received whenever the
// server goes away or cuts them off) until stop.
type clients struct {
	h      *harness
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu    sync.Mutex // guards conns
	conns []*conn    // every finished connection, for the checks

	// The test goroutine's only.
	followers []*follower
	rng       *rand.Rand // for storms, seeded from the round's generator
}

// follower is a reconnecting reader of one session.
type follower struct {
	session string
	kind    string
	role    string
	mu      sync.Mutex
	last    int64 // the seq it has received up to
}

func (f *follower) seen() int64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.last
}

func newClients(h *harness, active []*session) *clients {
	ctx, cancel := context.WithCancel(context.Background())
	cl := &clients{h: h, ctx: ctx, cancel: cancel, rng: rand.New(rand.NewPCG(h.rng.Uint64(), h.rng.Uint64()))}
	for _, s := range active {
		last := int64(len(s.mirror))
		// Followers start at the store's end or, sometimes, earlier (a
		// replay that meets the live tail while the turn streams).
		from := func() int64 {
			if last > 0 && h.rng.IntN(2) == 0 {
				return h.rng.Int64N(last + 1)
			}
			return last
		}
		cl.follow(s.id, "ws", "follower", from(), 0)
		cl.follow(s.id, "sse", "follower", from(), 0)
		// A slow consumer now and then: it reads a frame every few ms.
		if h.rng.IntN(2) == 0 {
			kind := []string{"ws", "sse"}[h.rng.IntN(2)]
			cl.follow(s.id, kind, "slow", from(), time.Duration(2+h.rng.IntN(20))*time.Millisecond)
		}
	}
	return cl
}

// follow starts a reconnecting reader of session id from after; pause is
// how long it waits between two events (0: none).
func (cl *clients) follow(id, kind, role string, after int64, pause time.Duration) {
	f := &follower{session: id, kind: kind, role: role, last: after}
	cl.followers = append(cl.followers, f)
	cl.wg.Add(1)
	go func() {
		defer cl.wg.Done()
		backoff := 50 * time.Millisecond
		for cl.ctx.Err() == nil {
			c := &conn{kind: kind, role: role, session: id, after: f.seen()}
			got := func(ev conversation.Event) {
				f.mu.Lock()
				f.last = ev.Seq
				f.mu.Unlock()
				if pause > 0 {
					time.Sleep(pause) // the consumer's own slowness
				}
			}
			err := cl.read(cl.ctx, c, got)
			cl.record(c, err)
			if errors.Is(err, errGone) {
				return
			}
			if len(c.events) > 0 {
				backoff = 50 * time.Millisecond
			}
			select {
			case <-time.After(backoff):
			case <-cl.ctx.Done():
			}
			backoff = min(backoff*2, time.Second)
		}
	}()
}

// storm opens n short connections to random sessions from random cursors,
// each read for a random while and dropped. It is called by the test
// goroutine.
func (cl *clients) storm(n int) {
	type plan struct {
		s     *session
		kind  string
		after int64
		read  time.Duration
		delay time.Duration
	}
	var plans []plan
	ss := cl.h.sessions
	for range n {
		s := ss[cl.rng.IntN(len(ss))]
		last := int64(len(s.mirror))
		plans = append(plans, plan{
			s: s, kind: []string{"ws", "sse"}[cl.rng.IntN(2)], after: cl.rng.Int64N(last + 1),
			read:  time.Duration(10+cl.rng.IntN(500)) * time.Millisecond,
			delay: time.Duration(cl.rng.IntN(300)) * time.Millisecond,
		})
	}
	for _, p := range plans {
		cl.wg.Add(1)
		go func() {
			defer cl.wg.Done()
			select {
			case <-time.After(p.delay):
			case <-cl.ctx.Done():
				return
			}
			c := &conn{kind: p.kind, role: "storm", session: p.s.id, after: p.after}
			ctx, cancel := context.WithTimeout(cl.ctx, p.read)
			defer cancel()
			cl.record(c, cl.read(ctx, c, nil))
		}()
	}
}

func (cl *clients) record(c *conn, err error) {
	if err != nil {
		c.end = err.Error()
	}
	cl.mu.Lock()
	cl.conns = append(cl.conns, c)
	cl.mu.Unlock()
}

// errGone: the session does not exist (deleted); the reader stops.
var errGone = errors.New("session not found")

// errSlow: the server cut the reader off as a slow consumer.
var errSlow = errors.New("cut off as a slow consumer")

// read runs one connection of kind c.kind until ctx ends or the server
// ends it, appending what it receives to c.events and calling got (if
// set) after each.
func (cl *clients) read(ctx context.Context, c *conn, got func(conversation.Event)) error {
	if c.kind == "ws" {
		return cl.readWS(ctx, c, got)
	}
	return cl.readSSE(ctx, c, got)
}

func (cl *clients) readWS(ctx context.Context, c *conn, got func(conversation.Event)) error {
	u := strings.Replace(cl.h.url, "http", "ws", 1) + "/api/ws"
	dctx, dcancel := context.WithTimeout(ctx, 5*time.Second)
	ws, _, err := websocket.Dial(dctx, u, &websocket.DialOptions{HTTPClient: cl.h.hc})
	dcancel()
	if err != nil {
		return fmt.Errorf("dial: %w", err)
	}
	defer ws.CloseNow()
	ws.SetReadLimit(64 << 20)
	after := c.after
	join, _ := json.Marshal(restapi.ClientFrame{Op: "join", SessionID: c.session, After: &after, ID: json.RawMessage(`"j"`)})
	if err := ws.Write(ctx, websocket.MessageText, join); err != nil {
		return fmt.Errorf("join: %w", err)
	}
	acked := false
	for {
		_, data, err := ws.Read(ctx)
		if err != nil {
			if websocket.CloseStatus(err) == 4008 {
				cl.h.stats.mu.Lock()
				cl.h.stats.slowCuts++
				cl.h.stats.mu.Unlock()
				return errSlow
			}
			return err
		}
		var f restapi.ServerFrame
		if err := json.Unmarshal(data, &f); err != nil {
			return fmt.Errorf("bad frame %q: %w", data, err)
		}
		switch {
		case f.Op == "ack" && string(f.ID) == `"j"`:
			if !f.OK {
				if f.Error != nil && f.Error.Code == "SESSION_NOT_FOUND" {
					return errGone
				}
				return fmt.Errorf("join refused: %s", data)
			}
			acked = true
		case f.Op == "event" && f.Event != nil:
			if !acked {
				return fmt.Errorf("event before the join's ack: %s", data)
			}
			c.events = append(c.events, *f.Event)
			if got != nil {
				got(*f.Event)
			}
		}
	}
}

func (cl *clients) readSSE(ctx context.Context, c *conn, got func(conversation.Event)) error {
	u := cl.h.url + "/api/sessions/" + url.PathEscape(c.session) + "/events?after=" + strconv.FormatInt(c.after, 10)
	req, err := http.NewRequestWithContext(ctx, "GET", u, nil)
	if err != nil {
		return err
	}
	req.Header.Set("Accept", "text/event-stream")
	// The SSE stream has no client timeout (h.hc has one): it ends with ctx.
	resp, err := (&http.Client{Transport: cl.h.tr}).Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode == http.StatusNotFound {
		return errGone
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("status %s", resp.Status)
	}
	br := bufio.NewReaderSize(resp.Body, 64<<10)
	var id, typ, data string
	for {
		line, err := br.ReadString('\n')
		if err != nil {
			return err
		}
		line = strings.TrimSuffix(line, "\n")
		switch {
		case line == "":
			// A stream error is an `error` event without an id; the
			// session's own `error` events (an environment gone, …) have
			// their seq as id like every other event.
			if typ == "error" && id == "" {
				if strings.Contains(data, "SLOW_CONSUMER") {
					cl.h.stats.mu.Lock()
					cl.h.stats.slowCuts++
					cl.h.stats.mu.Unlock()
					return errSlow
				}
				return fmt.Errorf("error event: %s", data)
			}
			if data != "" {
				var ev conversation.Event
				if err := json.Unmarshal([]byte(data), &ev); err != nil {
					return fmt.Errorf("bad event %q: %w", data, err)
				}
				if id != strconv.FormatInt(ev.Seq, 10) || typ != string(ev.Type) {
					return fmt.Errorf("SSE id %q / event %q disagree with the data %q", id, typ, data)
				}
				c.events = append(c.events, ev)
				if got != nil {
					got(ev)
				}
			}
			id, typ, data = "", "", ""
		case strings.HasPrefix(line, ":"), strings.HasPrefix(line, "retry:"):
		case strings.HasPrefix(line, "id: "):
			id = line[4:]
		case strings.HasPrefix(line, "event: "):
			typ = line[7:]
		case strings.HasPrefix(line, "data: "):
			data = line[6:]
		default:
			return fmt.Errorf("unexpected SSE line %q", line)
		}
	}
}

// catchUp waits until every follower has received its session's last
// stored event: delivery must resume after every fault.
func (cl *clients) catchUp(ctx context.Context) bool {
	h := cl.h
	want := map[string]int64{}
	for _, s := range h.sessions {
		if !h.refresh(ctx, s) {
			return false
		}
		want[s.id] = int64(len(s.mirror))
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		var behind []string
		for _, f := range cl.followers {
			if got := f.seen(); got < want[f.session] {
				behind = append(behind, fmt.Sprintf("%s %s of %s at %d of %d", f.role, f.kind, f.session, got, want[f.session]))
			}
		}
		if len(behind) == 0 {
			return true
		}
		if time.Now().After(deadline) {
			h.failf("clients did not catch up with the store within 30s: %s", strings.Join(behind, "; "))
			return false
		}
		select {
		case <-time.After(50 * time.Millisecond):
		case <-ctx.Done():
			h.failf("clients catching up: %v", ctx.Err())
			return false
		}
	}
}

// stop ends every reader and waits for them (idempotent).
func (cl *clients) stop() {
	cl.cancel()
	cl.wg.Wait()
}
