//go:build linux

package chaos

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/agentd/agentd/conversation"
	"github.com/agentd/agentd/internal/agent/shell"
	"github.com/agentd/agentd/restapi"
)

// storedEvent is an event as the store returned it.
type storedEvent = conversation.Event

// refresh appends to s.mirror what the store holds beyond it, retrying
// while the server restarts.
func (h *harness) refresh(ctx context.Context, s *session) bool {
	for {
		page, err := h.c.Events(ctx, s.id, int64(len(s.mirror)), 10000)
		if err != nil {
			if ctx.Err() != nil {
				h.failf("read events of %s: %v", s.id, err)
				return false
			}
			time.Sleep(100 * time.Millisecond) // the server is restarting
			continue
		}
		for _, ev := range page.Events {
			if want := int64(len(s.mirror)) + 1; ev.Seq != want {
				h.failf("session %s: the store returned seq %d after %d: a gap or a repeat", s.id, ev.Seq, want-1)
				return false
			}
			s.mirror = append(s.mirror, ev)
		}
		// lastSeq is read after the page: events appended in between make
		// it larger, never smaller.
		if page.LastSeq < int64(len(s.mirror)) {
			h.failf("session %s: lastSeq %d but events up to %d", s.id, page.LastSeq, len(s.mirror))
			return false
		}
		if len(page.Events) == 0 || int64(len(s.mirror)) == page.LastSeq {
			return true
		}
	}
}

// awaitTurns waits until every turn of the round has ended in the store
// (query:completed or query:failed).
func (h *harness) awaitTurns(ctx context.Context, active []*session) bool {
	deadline := time.Now().Add(90 * time.Second)
	for {
		h.checkServerAlive()
		running := 0
		for _, s := range active {
			if !h.refresh(ctx, s) {
				return false
			}
			for _, tn := range s.turns {
				if tn.end == "" {
					tn.end, tn.code = turnEnd(s.mirror, tn.queryID)
					if tn.end == "" {
						running++
					}
				}
			}
		}
		if running == 0 {
			break
		}
		if time.Now().After(deadline) {
			var st []string
			for _, s := range active {
				ss, err := h.c.Session(ctx, s.id)
				st = append(st, fmt.Sprintf("%s: %s active %q (%v)", s.id, ss.Status, ss.ActiveQueryID, err))
			}
			h.failf("turns still running after 90s: %s (data folder: %s)\n%s", strings.Join(st, "; "), diskUsage(h.data), tail(h.p.Logs(), 6000))
			return false
		}
		time.Sleep(100 * time.Millisecond)
	}
	for _, s := range active {
		for _, tn := range s.turns {
			if tn.round != h.roundNo {
				continue
			}
			if tn.end == string(conversation.TypeQueryCompleted) {
				h.stats.completed++
			} else {
				h.stats.failed++
				if h.stats.failedBy == nil {
					h.stats.failedBy = map[string]int{}
				}
				h.stats.failedBy[tn.code]++
			}
		}
	}
	return true
}

// turnEnd finds the query's terminal event in events.
func turnEnd(events []storedEvent, queryID string) (typ, code string) {
	for _, ev := range events {
		if ev.Type != conversation.TypeQueryCompleted && ev.Type != conversation.TypeQueryFailed {
			continue
		}
		var q conversation.QueryFailed
		if json.Unmarshal(ev.Payload, &q) == nil && q.QueryID == queryID {
			return string(ev.Type), q.Code
		}
	}
	return "", ""
}

// check verifies the round's invariants: the log of every session, what
// every client received, leaks, and that the server serves.
func (h *harness) check(ctx context.Context, cl *clients) bool {
	for _, s := range h.sessions {
		// The whole log again, from the start: it must equal the mirror
		// read piecewise while the faults went on.
		fresh := &session{id: s.id}
		if !h.refresh(ctx, fresh) {
			return false
		}
		if len(fresh.mirror) < len(s.mirror) {
			h.failf("session %s: the store lost events: %d, had %d", s.id, len(fresh.mirror), len(s.mirror))
			return false
		}
		for i := range s.mirror {
			if d := diffEvent(s.mirror[i], fresh.mirror[i]); d != "" {
				h.failf("session %s seq %d changed in the store: %s", s.id, i+1, d)
			}
		}
		s.mirror = fresh.mirror
		h.checkLog(s)
	}
	h.checkClients(cl)
	if races := h.p.Races(); races != "" {
		h.failf("the server reported data races:\n%s", races)
	}
	if h.t.Failed() {
		return false
	}
	return h.quiet(ctx) && h.probe(ctx)
}

// checkLog checks one session's stored events: each turn exactly once,
// its output lines in order with none repeated (a prefix when the turn
// failed, all of them when it completed), nothing of a turn after its end.
func (h *harness) checkLog(s *session) {
	type q struct {
		users, started, ends int
		startSeq, endSeq     int64
		output               strings.Builder
		lateDelta            int64
	}
	queries := map[string]*q{}
	get := func(id string) *q {
		if queries[id] == nil {
			queries[id] = &q{}
		}
		return queries[id]
	}
	resultOf := map[string]string{} // result block id → query id
	for _, tn := range s.turns {
		resultOf[conversation.ToolResultID(shell.ToolUseID(tn.queryID))] = tn.queryID
	}
	for _, ev := range s.mirror {
		var p struct {
			QueryID string `json:"queryId"`
			BlockID string `json:"blockId"`
			Delta   string `json:"delta"`
			Block   struct {
				ID      string `json:"id"`
				Content string `json:"content"`
			} `json:"block"`
		}
		_ = json.Unmarshal(ev.Payload, &p)
		switch ev.Type {
		case conversation.TypeQueryStarted:
			x := get(p.QueryID)
			x.started++
			x.startSeq = ev.Seq
		case conversation.TypeQueryCompleted, conversation.TypeQueryFailed:
			x := get(p.QueryID)
			x.ends++
			x.endSeq = ev.Seq
		case conversation.TypeBlockDelta:
			if id, ok := resultOf[p.BlockID]; ok {
				x := get(id)
				x.output.WriteString(p.Delta)
				if x.ends > 0 && x.lateDelta == 0 {
					x.lateDelta = ev.Seq
				}
			}
		case conversation.TypeBlockUpsert:
			// The message itself (Claude Code's runner upserts the block
			// again with its resume checkpoint, without content).
			if strings.HasSuffix(p.Block.ID, "-user") && p.Block.Content != "" {
				get(strings.TrimSuffix(p.Block.ID, "-user")).users++
			}
		}
	}
	for _, tn := range s.turns {
		x := get(tn.queryID)
		where := fmt.Sprintf("session %s turn %s (%s, round %d)", s.id, tn.queryID, tn.mark, tn.round)
		once := x.started == 1 && x.ends == 1 && x.users == 1
		if !once {
			h.failf("%s: %d user messages, %d query:started and %d terminal events, want 1 each", where, x.users, x.started, x.ends)
		}
		if s.claude {
			if once && x.startSeq < x.endSeq {
				h.checkClaudeTurn(where, s.mirror[x.startSeq-1:x.endSeq], tn.end == string(conversation.TypeQueryCompleted))
			}
			continue
		}
		if x.lateDelta != 0 {
			h.failf("%s: output at seq %d after the turn ended at seq %d", where, x.lateDelta, x.endSeq)
		}
		out := x.output.String()
		n := 0 // lines as printed, in order
		for {
			want := fmt.Sprintf("%s l%d\n", tn.mark, n+1)
			if !strings.HasPrefix(out, want) {
				break
			}
			out = out[len(want):]
			n++
		}
		// A failed turn's output may end with the runner's note of why (no
		// line of the command's own).
		if out != "" && (tn.end == string(conversation.TypeQueryCompleted) || strings.Contains(out, tn.mark+" l")) {
			h.failf("%s: after %d good lines the output goes on with %q (a line lost, repeated or reordered)\nwhole output:\n%s",
				where, n, tail(out, 200), x.output.String())
		}
		if tn.end == string(conversation.TypeQueryCompleted) && n != tn.lines {
			h.failf("%s completed with %d of its %d lines", where, n, tn.lines)
		}
	}
}

// checkClients compares every connection's events with the store.
func (h *harness) checkClients(cl *clients) {
	byID := map[string]*session{}
	for _, s := range h.sessions {
		byID[s.id] = s
	}
	for _, c := range cl.conns {
		h.stats.connections++
		s := byID[c.session]
		if s == nil {
			continue
		}
		for i, ev := range c.events {
			want := c.after + int64(i) + 1
			if ev.Seq != want {
				h.failf("%s %s of %s (joined after %d, ended %q): event %d has seq %d, want %d (a gap or a repeat)",
					c.role, c.kind, c.session, c.after, c.end, i, ev.Seq, want)
				break
			}
			if ev.Seq > int64(len(s.mirror)) {
				h.failf("%s %s of %s: received seq %d, which the store does not hold (it has %d)", c.role, c.kind, c.session, ev.Seq, len(s.mirror))
				break
			}
			if d := diffEvent(s.mirror[ev.Seq-1], ev); d != "" {
				h.failf("%s %s of %s: seq %d differs from the store: %s", c.role, c.kind, c.session, ev.Seq, d)
				break
			}
			h.stats.eventsCompared++
		}
	}
}

// diffEvent describes how b differs from a ("" if equal).
func diffEvent(a, b storedEvent) string {
	ja, _ := json.Marshal(a)
	jb, _ := json.Marshal(b)
	var ca, cb bytes.Buffer
	_ = json.Compact(&ca, ja)
	_ = json.Compact(&cb, jb)
	if bytes.Equal(ca.Bytes(), cb.Bytes()) {
		return ""
	}
	return fmt.Sprintf("%s vs %s", ca.Bytes(), cb.Bytes())
}

// quiet waits until the run is at rest (no session with its environment
// up: the idle timeout terminated them all; no process of ours left but
// the server) and checks that nothing leaked: processes, cgroups,
// mounts, and the server's descriptors and goroutines against its first
// quiet point.
func (h *harness) quiet(ctx context.Context) bool {
	deadline := time.Now().Add(60 * time.Second)
	h.tr.CloseIdleConnections()
	for {
		h.checkServerAlive()
		var busy []string
		list, err := h.c.Sessions(ctx)
		if err != nil {
			busy = append(busy, "list sessions: "+err.Error())
		}
		for _, s := range list {
			// Terminated, created or error: no environment up.
			if s.Status.Active() {
				busy = append(busy, fmt.Sprintf("session %s is %s", s.SessionID, s.Status))
			}
		}
		for _, p := range ours(h.data, h.run, h.p.PID()) {
			if p.executor {
				h.noteCgroups(p.pid)
			}
			busy = append(busy, fmt.Sprintf("process %d %q (state %s)", p.pid, strings.Join(p.argv, " "), p.state))
		}
		if len(busy) == 0 {
			break
		}
		if time.Now().After(deadline) {
			h.failf("not at rest 60s after the turns ended: %s", strings.Join(busy, "; "))
			return false
		}
		time.Sleep(100 * time.Millisecond)
	}
	for g := range h.cgroups {
		if exists(g) {
			h.failf("cgroup %s outlived its executor", g)
		}
		delete(h.cgroups, g)
	}
	if m := mountsUnder(h.data, h.run); len(m) > 0 {
		h.failf("mounts left under the run's folders: %v", m)
	}
	return h.checkServerResources(ctx)
}

// checkServerResources compares the server's open descriptors (other than
// its database files, and its model proxy's pooled connections to
// mock-llm) and goroutines with its first quiet point. Idle connections
// the server has not noticed closing yet may linger for a moment: it
// waits up to 10 s for them. The goroutines allow for 2 more: a pooled
// connection's two.
func (h *harness) checkServerResources(ctx context.Context) bool {
	pid := h.p.PID()
	deadline := time.Now().Add(10 * time.Second)
	for {
		fds := serverFDs(pid, h.modelPort)
		g, err := h.goroutines(ctx)
		if err != nil {
			h.failf("read the server's metrics: %v", err)
			return false
		}
		if h.base.pid != pid {
			h.base.pid, h.base.fds, h.base.goroutines = pid, fds, g
			return true
		}
		extra := len(fds) - len(h.base.fds)
		if extra <= 0 && g <= h.base.goroutines+2 {
			return true
		}
		if time.Now().After(deadline) {
			h.failf("server %d leaks: %d descriptors (first quiet point %d), %d goroutines (then %d)\nnow:  %v\nthen: %v",
				pid, len(fds), len(h.base.fds), g, h.base.goroutines, fds, h.base.fds)
			return false
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// goroutines reads go_goroutines from the server's /metrics.
func (h *harness) goroutines(ctx context.Context) (int, error) {
	req, _ := http.NewRequestWithContext(ctx, "GET", h.url+"/metrics", nil)
	resp, err := h.hc.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "go_goroutines "); ok {
			return strconv.Atoi(strings.TrimSpace(v))
		}
	}
	return 0, fmt.Errorf("no go_goroutines in /metrics")
}

// probe checks the server serves: health, and a new session runs a turn.
func (h *harness) probe(ctx context.Context) bool {
	h.stats.probes++
	if _, err := h.c.Health(ctx); err != nil {
		h.failf("health: %v", err)
		return false
	}
	created, err := h.c.CreateSession(ctx, restapi.CreateSessionRequest{Architecture: "shell"})
	if err != nil {
		h.failf("probe: create session: %v", err)
		return false
	}
	defer func() {
		if err := h.c.DeleteSession(ctx, created.SessionID, true); err != nil {
			h.failf("probe: delete session: %v", err)
		}
	}()
	sent, err := h.c.Send(ctx, created.SessionID, "echo probe")
	if err != nil {
		h.failf("probe: send: %v", err)
		return false
	}
	s := &session{id: created.SessionID}
	deadline := time.Now().Add(30 * time.Second)
	for {
		if !h.refresh(ctx, s) {
			return false
		}
		if end, code := turnEnd(s.mirror, sent.QueryID); end != "" {
			if end != string(conversation.TypeQueryCompleted) {
				h.failf("probe turn failed: %s", code)
				return false
			}
			break
		}
		if time.Now().After(deadline) {
			h.failf("probe turn did not end within 30s")
			return false
		}
		time.Sleep(50 * time.Millisecond)
	}
	st, err := h.c.Session(ctx, created.SessionID)
	if err != nil {
		h.failf("probe: state: %v", err)
		return false
	}
	if i := slices.IndexFunc(st.Blocks, func(b conversation.Block) bool { return b.Output == "probe\n" }); i < 0 {
		h.failf("probe: no block with the output %q: %+v", "probe\n", st.Blocks)
		return false
	}
	return true
}
