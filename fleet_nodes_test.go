package agentd_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/agentd/agentd/conversation"
	"github.com/agentd/agentd/internal/agentdtest"
	"github.com/agentd/agentd/internal/bus/natstest"
	"github.com/agentd/agentd/restapi"
)

// The fleet tests (issue 12) run real `agentd serve` processes sharing
// one PostgreSQL database (scripts/pg.sh) and one NATS server
// (scripts/nats.sh, or a private nats-server), on loopback. Clients are
// real WebSocket and SSE connections that check every event's seq as it
// arrives: a gap or a repeat fails the test.

// fleet is a set of agentd serve processes of one fleet.
type fleet struct {
	t     *testing.T
	nodes []*agentdtest.Process
}

// startFleet starts n nodes sharing a new PostgreSQL schema and a NATS
// server (a subject prefix of their own), each with its own data folder,
// a lease ttl of ttl, and args.
func startFleet(t *testing.T, n int, ttl time.Duration, env []string, args ...string) *fleet {
	t.Helper()
	if testing.Short() {
		t.Skip("starts real servers")
	}
	storeURL := postgresStore(t)
	natsURL := natstest.URL(t)
	prefix := natstest.Prefix(t)
	f := &fleet{t: t}
	for range n {
		a := append([]string{"--data-dir", t.TempDir(), "--store", storeURL, "--nats", natsURL, "--nats-prefix", prefix,
			"--lease-ttl", ttl.String(), "--no-ui"}, args...)
		f.nodes = append(f.nodes, agentdtest.StartProcess(t, env, a...))
	}
	return f
}

// follower is a client of a session's events over WebSocket or SSE. It
// connects to the first of its URLs and, whenever the connection ends,
// to the next (round robin: a dead node is passed over), resuming after
// its last seq. Every event must follow the one before (seq + 1).
type follower struct {
	kind string // "ws" or "sse"
	urls []string
	id   string

	mu         sync.Mutex
	events     []received
	errs       []string
	reconnects int
	connected  int // connections made
	more       chan struct{}

	cancel context.CancelFunc
	done   chan struct{}
}

type received struct {
	seq  int64
	typ  conversation.EventType
	json []byte
}

func follow(t *testing.T, kind, id string, urls ...string) *follower {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	f := &follower{kind: kind, urls: urls, id: id, cancel: cancel, done: make(chan struct{}), more: make(chan struct{}, 1)}
	go f.run(ctx)
	t.Cleanup(f.stop)
	return f
}

func (f *follower) stop() {
	f.cancel()
	<-f.done
}

func (f *follower) String() string {
	return fmt.Sprintf("%s client on %s", f.kind, strings.Join(f.urls, " → "))
}

func (f *follower) run(ctx context.Context) {
	defer close(f.done)
	hc := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	for i := 0; ctx.Err() == nil; i++ {
		url := f.urls[i%len(f.urls)]
		var err error
		if f.kind == "ws" {
			err = f.ws(ctx, hc, url)
		} else {
			err = f.sse(ctx, hc, url)
		}
		if ctx.Err() != nil {
			return
		}
		f.mu.Lock()
		f.reconnects++
		f.mu.Unlock()
		_ = err
		select {
		case <-ctx.Done():
			return
		case <-time.After(50 * time.Millisecond):
		}
	}
}

func (f *follower) last() int64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.events) == 0 {
		return 0
	}
	return f.events[len(f.events)-1].seq
}

// got records an event; false once it was out of sequence.
func (f *follower) got(seq int64, typ conversation.EventType, data []byte) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	want := int64(1)
	if n := len(f.events); n > 0 {
		want = f.events[n-1].seq + 1
	}
	if seq != want {
		f.errs = append(f.errs, fmt.Sprintf("got seq %d, want %d (connection %d)", seq, want, f.connected))
		return false
	}
	f.events = append(f.events, received{seq, typ, bytes.Clone(data)})
	select {
	case f.more <- struct{}{}:
	default:
	}
	return true
}

func (f *follower) ws(ctx context.Context, hc *http.Client, base string) error {
	c, _, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(base, "http")+"/api/ws", &websocket.DialOptions{HTTPClient: hc})
	if err != nil {
		return err
	}
	defer c.CloseNow()
	c.SetReadLimit(16 << 20)
	after := f.last()
	join, _ := json.Marshal(restapi.ClientFrame{Op: "join", SessionID: f.id, After: &after})
	if err := c.Write(ctx, websocket.MessageText, join); err != nil {
		return err
	}
	f.mu.Lock()
	f.connected++
	f.mu.Unlock()
	for {
		_, data, err := c.Read(ctx)
		if err != nil {
			return err
		}
		var fr struct {
			Op    string          `json:"op"`
			OK    bool            `json:"ok"`
			Event json.RawMessage `json:"event"`
		}
		if err := json.Unmarshal(data, &fr); err != nil {
			return err
		}
		switch fr.Op {
		case "ack":
			if !fr.OK {
				return fmt.Errorf("join refused: %s", data)
			}
		case "event":
			var e struct {
				Seq  int64                  `json:"seq"`
				Type conversation.EventType `json:"type"`
			}
			if err := json.Unmarshal(fr.Event, &e); err != nil {
				return err
			}
			if !f.got(e.Seq, e.Type, fr.Event) {
				return fmt.Errorf("out of sequence")
			}
		}
	}
}

func (f *follower) sse(ctx context.Context, hc *http.Client, base string) error {
	req, _ := http.NewRequestWithContext(ctx, "GET", base+"/api/sessions/"+f.id+"/events", nil)
	req.Header.Set("Accept", "text/event-stream")
	req.Header.Set("Last-Event-ID", strconv.FormatInt(f.last(), 10))
	resp, err := hc.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		return fmt.Errorf("status %d: %s", resp.StatusCode, b)
	}
	f.mu.Lock()
	f.connected++
	f.mu.Unlock()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	var id int64
	var typ string
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "id: "):
			id, _ = strconv.ParseInt(strings.TrimPrefix(line, "id: "), 10, 64)
		case strings.HasPrefix(line, "event: "):
			typ = strings.TrimPrefix(line, "event: ")
		case strings.HasPrefix(line, "data: "):
			if typ == "error" {
				return fmt.Errorf("error event: %s", line)
			}
			if !f.got(id, conversation.EventType(typ), []byte(strings.TrimPrefix(line, "data: "))) {
				return fmt.Errorf("out of sequence")
			}
		}
	}
	if err := sc.Err(); err != nil {
		return err
	}
	return io.EOF
}

// waitFor waits until cond holds on the follower's events (up to 60 s).
func (f *follower) waitFor(t *testing.T, what string, cond func([]received) bool) {
	t.Helper()
	deadline := time.After(60 * time.Second)
	for {
		f.mu.Lock()
		ok := cond(f.events)
		errs := append([]string(nil), f.errs...)
		f.mu.Unlock()
		if len(errs) > 0 {
			t.Fatalf("%s: %s", f, strings.Join(errs, "; "))
		}
		if ok {
			return
		}
		select {
		case <-f.more:
		case <-time.After(100 * time.Millisecond):
		case <-deadline:
			t.Fatalf("%s: timed out waiting until %s (it has %d events)", f, what, f.last())
		}
	}
}

// turnEnd returns the end event of query among evs, if there.
func turnEnd(evs []received, query string) (received, bool) {
	for _, e := range evs {
		if e.typ != conversation.TypeQueryCompleted && e.typ != conversation.TypeQueryFailed {
			continue
		}
		var p struct {
			Payload struct {
				QueryID string `json:"queryId"`
			} `json:"payload"`
		}
		_ = json.Unmarshal(e.json, &p)
		if p.Payload.QueryID == query {
			return e, true
		}
	}
	return received{}, false
}

// end returns the end event of query among the events f has received
// (the zero received if not there).
func (f *follower) end(query string) received {
	f.mu.Lock()
	defer f.mu.Unlock()
	e, _ := turnEnd(f.events, query)
	return e
}

func hasTurnEnd(query string) func([]received) bool {
	return func(evs []received) bool { _, ok := turnEnd(evs, query); return ok }
}

func upTo(seq int64) func([]received) bool {
	return func(evs []received) bool { return len(evs) > 0 && evs[len(evs)-1].seq >= seq }
}

// idleAfter waits for the session:idle event following query's end and
// returns its seq: the session's last event until the next turn.
func idleAfter(t *testing.T, f *follower, query string) int64 {
	t.Helper()
	var seq int64
	f.waitFor(t, "session:idle after "+query, func(evs []received) bool {
		end, ok := turnEnd(evs, query)
		if !ok {
			return false
		}
		for _, e := range evs[end.seq:] {
			if e.typ == conversation.TypeSessionIdle {
				seq = e.seq
				return true
			}
		}
		return false
	})
	return seq
}

// sameEvents checks that every follower has exactly the events 1…last,
// byte for byte the same envelope whichever node and transport carried it.
func sameEvents(t *testing.T, last int64, fs ...*follower) {
	t.Helper()
	for _, f := range fs {
		f.waitFor(t, fmt.Sprintf("seq %d", last), upTo(last))
	}
	ref := fs[0]
	ref.mu.Lock()
	defer ref.mu.Unlock()
	for _, f := range fs[1:] {
		f.mu.Lock()
		for i := range last {
			a, b := ref.events[i], f.events[i]
			if a.seq != i+1 || b.seq != i+1 || !bytes.Equal(compact(a.json), compact(b.json)) {
				f.mu.Unlock()
				t.Fatalf("seq %d differs: %s has %s, %s has %s", i+1, ref, a.json, f, b.json)
			}
		}
		if int64(len(f.events)) != last {
			f.mu.Unlock()
			t.Fatalf("%s has %d events, want %d", f, len(f.events), last)
		}
		f.mu.Unlock()
	}
}

func compact(b []byte) []byte {
	var out bytes.Buffer
	if json.Compact(&out, b) != nil {
		return b
	}
	return out.Bytes()
}

// endOf decodes a turn end event's payload.
func endOf(t *testing.T, e received) (interrupted bool, code string) {
	t.Helper()
	var p struct {
		Payload struct {
			Interrupted bool   `json:"interrupted"`
			Code        string `json:"code"`
		} `json:"payload"`
	}
	if err := json.Unmarshal(e.json, &p); err != nil {
		t.Fatal(err)
	}
	return p.Payload.Interrupted, p.Payload.Code
}

// TestFleetThreeNodes: three nodes, one PostgreSQL, one NATS. A shell
// session started through node A streams a paced command; WebSocket and
// SSE clients on A, B and C all receive the exact same contiguous
// sequence. Messages and interrupts sent through B and C act on it (they
// are forwarded to A, which holds the lease) and are answered as A
// answers them.
func TestFleetThreeNodes(t *testing.T) {
	f := startFleet(t, 3, 5*time.Second, nil)
	a, b, c := f.nodes[0], f.nodes[1], f.nodes[2]
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	id := createShell(ctx, t, a)
	var fs []*follower
	for _, n := range f.nodes {
		fs = append(fs, follow(t, "ws", id, n.URL), follow(t, "sse", id, n.URL))
	}
	// Every client is live before the turn starts (status created is seq 1).
	for _, fl := range fs {
		fl.waitFor(t, "the first event", upTo(1))
	}

	q1, err := a.Client.Send(ctx, id, `for i in $(seq 1 40); do echo line $i; sleep 0.02; done`)
	if err != nil {
		t.Fatal(err)
	}
	fs[3].waitFor(t, "the first turn ends", hasTurnEnd(q1.QueryID))

	// Through B, forwarded to A, which runs the session.
	q2, err := b.Client.Send(ctx, id, `i=0; while true; do i=$((i+1)); echo tick $i; sleep 0.02; done`)
	if err != nil {
		t.Fatal(err)
	}
	fs[5].waitFor(t, "ticks", func(evs []received) bool {
		for _, e := range evs {
			if bytes.Contains(e.json, []byte("tick 5")) {
				return true
			}
		}
		return false
	})
	// Answered as A answers: busy while the turn runs, for a client that
	// asks not to queue.
	if _, err := c.Client.SendNow(ctx, id, "echo no"); err == nil || !strings.Contains(err.Error(), "SESSION_BUSY") {
		t.Fatalf("a second message through C while a turn runs: %v, want SESSION_BUSY", err)
	}
	// By default it waits in A's queue; B cancels it there.
	qm, err := c.Client.Send(ctx, id, "echo queued")
	if err != nil || !qm.Queued || qm.MessageID == "" {
		t.Fatalf("a message through C while a turn runs: %+v, %v; want it queued", qm, err)
	}
	if err := b.Client.CancelQueued(ctx, id, qm.MessageID); err != nil {
		t.Fatalf("cancel the queued message through B: %v", err)
	}
	if err := c.Client.CancelQueued(ctx, id, qm.MessageID); err == nil || !strings.Contains(err.Error(), "MESSAGE_NOT_FOUND") {
		t.Fatalf("cancel it again through C: %v, want MESSAGE_NOT_FOUND", err)
	}
	// A rename and an options change through other servers are made by A,
	// whose record is the current one (a stale copy would overwrite it).
	if sum, err := c.Client.Rename(ctx, id, "fleet session"); err != nil || sum.Name != "fleet session" {
		t.Fatalf("rename through C: %+v, %v", sum, err)
	}
	if opts, err := b.Client.UpdateOptions(ctx, id, json.RawMessage(`{"model":"m2"}`)); err != nil || !bytes.Contains(opts, []byte(`"m2"`)) {
		t.Fatalf("options through B: %s, %v", opts, err)
	}
	if st, err := a.Client.Session(ctx, id); err != nil || st.Name != "fleet session" || !bytes.Contains(st.SessionOptions, []byte(`"m2"`)) {
		t.Fatalf("A's record after the rename and the options change: name %q options %s, %v", st.Name, st.SessionOptions, err)
	}
	if err := c.Client.Interrupt(ctx, id); err != nil {
		t.Fatal(err)
	}
	fs[0].waitFor(t, "the interrupted turn ends", hasTurnEnd(q2.QueryID))
	if err := b.Client.Interrupt(ctx, id); err == nil || !strings.Contains(err.Error(), "NO_ACTIVE_TURN") {
		t.Fatalf("an interrupt through B with nothing running: %v, want NO_ACTIVE_TURN", err)
	}
	q3, err := c.Client.Send(ctx, id, "echo through C")
	if err != nil {
		t.Fatal(err)
	}
	fs[1].waitFor(t, "the third turn ends", hasTurnEnd(q3.QueryID))
	last := idleAfter(t, fs[1], q3.QueryID)
	sameEvents(t, last, fs...)

	fs[0].mu.Lock()
	e1, _ := turnEnd(fs[0].events, q1.QueryID)
	e2, _ := turnEnd(fs[0].events, q2.QueryID)
	e3, _ := turnEnd(fs[0].events, q3.QueryID)
	fs[0].mu.Unlock()
	if e1.typ != conversation.TypeQueryCompleted || e3.typ != conversation.TypeQueryCompleted {
		t.Fatalf("turns ended %s, %s", e1.json, e3.json)
	}
	if interrupted, _ := endOf(t, e2); e2.typ != conversation.TypeQueryCompleted || !interrupted {
		t.Fatalf("the interrupted turn ended %s", e2.json)
	}
	// Every turn ran on A (it held the lease): B and C started nothing.
	if !strings.Contains(a.Logs(), "environment up") || strings.Contains(b.Logs(), "environment up") || strings.Contains(c.Logs(), "environment up") {
		t.Fatalf("environments started: A %v, B %v, C %v", strings.Contains(a.Logs(), "environment up"),
			strings.Contains(b.Logs(), "environment up"), strings.Contains(c.Logs(), "environment up"))
	}
	// Reads work on every node.
	for _, n := range f.nodes {
		list, err := n.Client.Sessions(ctx)
		if err != nil || len(list) != 1 || list[0].SessionID != id || list[0].Status != conversation.SessionIdle || list[0].LastSeq != last {
			st, _ := n.Client.Session(ctx, id)
			t.Fatalf("%s (A %s) lists %+v, %v; want last seq %d; state %s %d", n.URL, a.URL, list, err, last, st.Status, st.LastSeq)
		}
		st, err := n.Client.Session(ctx, id)
		if err != nil || st.Status != conversation.SessionIdle || st.LastSeq != last || len(st.Turns) != 3 {
			t.Fatalf("%s: state %+v, %v", n.URL, st, err)
		}
		if out := st.Blocks[len(st.Blocks)-1].Output; out != "through C\n" {
			t.Fatalf("%s: last output %q", n.URL, out)
		}
		h := health(t, n.URL)
		if h.Status != "ok" || h.Node == "" || h.Store == nil || h.Store.Kind != "postgres" || h.Bus == nil || h.Bus.Status != "ok" {
			t.Fatalf("%s: health %+v", n.URL, h)
		}
	}
	// A session deleted through C is gone everywhere.
	if err := c.Client.DeleteSession(ctx, id, true); err != nil {
		t.Fatal(err)
	}
	for _, n := range f.nodes {
		waitFor(t, func() bool {
			_, err := n.Client.Session(ctx, id)
			return err != nil && strings.Contains(err.Error(), "SESSION_NOT_FOUND")
		})
	}
}

func health(t *testing.T, base string) restapi.Health {
	t.Helper()
	resp, err := http.Get(base + "/health")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var h restapi.Health
	if err := json.NewDecoder(resp.Body).Decode(&h); err != nil {
		t.Fatal(err)
	}
	return h
}

// TestFleetKillNode: kill -9 of node A mid-turn (local sandbox: the turn's
// process dies with A). Another node takes the session over once A's lease
// expires: the turn ends failed SERVER_LOST. Every client, those on A
// reconnecting to a live node with their last seq, ends with the same
// contiguous sequence and no duplicate; the next message works.
func TestFleetKillNode(t *testing.T) {
	const ttl = 2 * time.Second
	f := startFleet(t, 3, ttl, nil)
	a, b, c := f.nodes[0], f.nodes[1], f.nodes[2]
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	id := createShell(ctx, t, a)
	fs := []*follower{
		follow(t, "ws", id, a.URL, b.URL), follow(t, "sse", id, a.URL, c.URL),
		follow(t, "ws", id, b.URL), follow(t, "sse", id, c.URL),
	}
	sent, err := a.Client.Send(ctx, id, `for i in $(seq 1 400); do echo line $i; sleep 0.05; done`)
	if err != nil {
		t.Fatal(err)
	}
	fs[2].waitFor(t, "the turn streams", upTo(30))
	a.Kill()
	killed := time.Now()

	fs[3].waitFor(t, "another node takes the session over", hasTurnEnd(sent.QueryID))
	t.Logf("taken over %v after kill -9 (lease ttl %v)", time.Since(killed).Round(time.Millisecond), ttl)
	end := fs[3].end(sent.QueryID)
	if _, code := endOf(t, end); end.typ != conversation.TypeQueryFailed || code != "SERVER_LOST" {
		t.Fatalf("the turn ended %s", end.json)
	}

	// The next message works, through any live node.
	next, err := c.Client.Send(ctx, id, "echo after the take-over")
	if err != nil {
		t.Fatal(err)
	}
	fs[0].waitFor(t, "the next turn ends", hasTurnEnd(next.QueryID))
	sameEvents(t, idleAfter(t, fs[0], next.QueryID), fs...)
	e := fs[0].end(next.QueryID)
	if e.typ != conversation.TypeQueryCompleted {
		t.Fatalf("the next turn ended %s", e.json)
	}
	for _, fl := range fs[:2] {
		fl.mu.Lock()
		n := fl.reconnects
		fl.mu.Unlock()
		if n == 0 {
			t.Fatalf("%s never reconnected", fl)
		}
	}
	st, err := c.Client.Session(ctx, id)
	if err != nil || st.Blocks[len(st.Blocks)-1].Output != "after the take-over\n" {
		t.Fatalf("state after the take-over: %+v, %v", st, err)
	}
}

// TestFleetKillNodeExecutor: the same with the executor sandbox, whose
// executors outlive their server. The nodes share a workspaces folder and
// the executors' run folder (one machine), so the node taking the session
// over re-attaches to the executor: the running command survives kill -9
// of its node and its output continues, every line exactly once.
func TestFleetKillNodeExecutor(t *testing.T) {
	const ttl = 2 * time.Second
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	f, id := executorFleet(ctx, t, 3, ttl, "afx")
	a, b, c := f.nodes[0], f.nodes[1], f.nodes[2]
	fs := []*follower{
		follow(t, "ws", id, a.URL, b.URL), follow(t, "sse", id, a.URL, c.URL),
		follow(t, "ws", id, c.URL), follow(t, "sse", id, b.URL),
	}
	const lines = 80
	sent := sendLines(ctx, t, a, id, lines)
	fs[2].waitFor(t, "the turn streams", streamed("line 15"))
	a.Kill()
	fs[2].waitFor(t, "the turn ends", hasTurnEnd(sent.QueryID))
	end := fs[2].end(sent.QueryID)
	if end.typ != conversation.TypeQueryCompleted {
		t.Fatalf("the turn ended %s", end.json)
	}
	want := linesOutput(lines)
	st, err := b.Client.Session(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	var out string
	for _, bl := range st.Blocks {
		if bl.Type == conversation.BlockToolResult {
			out = bl.Output
		}
	}
	if out != want {
		t.Fatalf("the command's output across the take-over:\n%s\nwant every line once:\n%s", out, want)
	}
	if !strings.Contains(b.Logs()+c.Logs(), "environment re-attached") {
		t.Fatalf("no node re-attached the executor:\nB:\n%s\nC:\n%s", b.Logs(), c.Logs())
	}
	next, err := b.Client.Send(ctx, id, "echo next")
	if err != nil {
		t.Fatal(err)
	}
	fs[3].waitFor(t, "the next turn ends", hasTurnEnd(next.QueryID))
	sameEvents(t, idleAfter(t, fs[3], next.QueryID), fs...)
}

// executorFleet starts n nodes running sessions in the executor sandbox
// and creates a shell session on the first. When the test ends the
// session is deleted (stopping its executor) through the last node, as the
// first may have been killed by then. runPrefix names the runtime folder,
// short as socket paths are limited.
func executorFleet(ctx context.Context, t *testing.T, n int, ttl time.Duration, runPrefix string) (*fleet, string) {
	t.Helper()
	run, err := os.MkdirTemp("", runPrefix)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(run) })
	ws := filepath.Join(t.TempDir(), "workspaces")
	f := startFleet(t, n, ttl, []string{"XDG_RUNTIME_DIR=" + run}, "--sandbox", "executor", "--workspaces", ws)
	id := createShell(ctx, t, f.nodes[0])
	last := f.nodes[n-1]
	t.Cleanup(func() {
		dctx, dcancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer dcancel()
		_ = last.Client.DeleteSession(dctx, id, true)
	})
	return f, id
}

// createShell creates a shell session through node and returns its id.
func createShell(ctx context.Context, t *testing.T, node *agentdtest.Process) string {
	t.Helper()
	created, err := node.Client.CreateSession(ctx, restapi.CreateSessionRequest{Architecture: "shell"})
	if err != nil {
		t.Fatal(err)
	}
	return created.SessionID
}

// sendLines sends, through node, a command printing "line 1" to "line n",
// one every 50ms.
func sendLines(ctx context.Context, t *testing.T, node *agentdtest.Process, id string, n int) restapi.MessageResponse {
	t.Helper()
	sent, err := node.Client.Send(ctx, id, fmt.Sprintf(`for i in $(seq 1 %d); do echo line $i; sleep 0.05; done`, n))
	if err != nil {
		t.Fatal(err)
	}
	return sent
}

// linesOutput is what sendLines' command prints.
func linesOutput(n int) string {
	var b strings.Builder
	for i := 1; i <= n; i++ {
		fmt.Fprintf(&b, "line %d\n", i)
	}
	return b.String()
}

// streamed holds once an event holding text has been received.
func streamed(text string) func([]received) bool {
	return func(evs []received) bool {
		for _, e := range evs {
			if bytes.Contains(e.json, []byte(text)) {
				return true
			}
		}
		return false
	}
}

// TestFleetDrainHandsOver: SIGTERM to the node running a session of the
// executor sandbox hands the session over instead of failing its turn: the
// node detaches from the executor, releases the lease and says so, and
// another node re-attaches at once (long before the lease would have
// expired); the command's output continues, every line once.
func TestFleetDrainHandsOver(t *testing.T) {
	const ttl = time.Minute // a take-over by expiry would be far too late
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	f, id := executorFleet(ctx, t, 2, ttl, "afd")
	a, b := f.nodes[0], f.nodes[1]
	fl := follow(t, "ws", id, b.URL)
	const lines = 60
	sent := sendLines(ctx, t, a, id, lines)
	fl.waitFor(t, "the turn streams", streamed("line 10"))
	stopped := time.Now()
	a.Terminate()
	fl.waitFor(t, "the turn ends", hasTurnEnd(sent.QueryID))
	if d := time.Since(stopped); d > ttl/2 {
		t.Fatalf("handed over after %v: the lease expired, it was not released", d)
	}
	end := fl.end(sent.QueryID)
	if end.typ != conversation.TypeQueryCompleted {
		t.Fatalf("the turn ended %s", end.json)
	}
	st, err := b.Client.Session(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	want := linesOutput(lines)
	if out := st.Blocks[len(st.Blocks)-1].Output; out != want {
		t.Fatalf("the command's output across the hand-over:\n%s", out)
	}
	if !strings.Contains(b.Logs(), "environment re-attached") {
		t.Fatalf("B did not re-attach:\n%s", b.Logs())
	}
}
