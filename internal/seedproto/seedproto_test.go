package seedproto_test

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"reflect"
	"sort"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/agentd/agentd/conversation"
	"github.com/agentd/agentd/internal/seedproto"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// seedClient holds a conversation by the seed client's reducer rules
// (client/src/context/reducer.ts of agent-runtime, re-stated here): a
// started block is appended (to a subagent only if it was discovered), a
// delta is appended to the content of assistant_text and thinking blocks
// only (to "undefined" when the block has none, as JavaScript would), an
// update is a shallow merge, a completed block replaces the block, a
// discovered subagent replaces its thread, files are kept by path.
type seedClient struct {
	main      []map[string]any
	subOrder  []string
	subs      map[string][]map[string]any
	files     map[string]map[string]any
	envelopes int
}

func newSeedClient() *seedClient {
	return &seedClient{subs: map[string][]map[string]any{}, files: map[string]map[string]any{}}
}

// load is SESSION_LOADED: the client's state is agentd's (GET).
func (c *seedClient) load(st conversation.State) {
	c.main = jsonBlocks(st.Blocks)
	for _, s := range st.Subagents {
		c.subOrder = append(c.subOrder, s.ID)
		c.subs[s.ID] = jsonBlocks(s.Blocks)
	}
	for _, f := range st.WorkspaceFiles {
		c.files[f.Path] = map[string]any{"path": f.Path}
	}
}

func jsonBlocks(bs []conversation.Block) []map[string]any {
	var out []map[string]any
	raw, _ := json.Marshal(bs)
	_ = json.Unmarshal(raw, &out)
	return out
}

func (c *seedClient) thread(conv string) ([]map[string]any, bool) {
	if conv == "main" {
		return c.main, true
	}
	bs, ok := c.subs[conv]
	return bs, ok
}

func (c *seedClient) setThread(conv string, bs []map[string]any) {
	if conv == "main" {
		c.main = bs
	} else {
		c.subs[conv] = bs
	}
}

// apply receives one Socket.IO event as the client would: its JSON.
func (c *seedClient) apply(t testing.TB, msg seedproto.Message) {
	t.Helper()
	if msg.Event == seedproto.EventEnvelope {
		c.envelopes++
		return
	}
	raw, err := json.Marshal(msg.Data)
	if err != nil {
		t.Fatalf("%s: %v", msg.Event, err)
	}
	var d map[string]any
	if err := json.Unmarshal(raw, &d); err != nil {
		t.Fatal(err)
	}
	conv, _ := d["conversationId"].(string)
	switch msg.Event {
	case seedproto.EventBlockStart:
		bs, ok := c.thread(conv)
		if ok {
			c.setThread(conv, append(bs, d["block"].(map[string]any)))
		}
	case seedproto.EventBlockDelta:
		bs, _ := c.thread(conv)
		for _, b := range bs {
			if b["id"] == d["blockId"] && (b["type"] == "assistant_text" || b["type"] == "thinking") {
				b["content"] = jsString(b["content"]) + d["delta"].(string)
			}
		}
	case seedproto.EventBlockUpdate:
		bs, _ := c.thread(conv)
		for i, b := range bs {
			if b["id"] == d["blockId"] {
				m := map[string]any{}
				for k, v := range b {
					m[k] = v
				}
				for k, v := range d["updates"].(map[string]any) {
					m[k] = v
				}
				bs[i] = m
			}
		}
	case seedproto.EventBlockComplete:
		bs, _ := c.thread(conv)
		for i, b := range bs {
			if b["id"] == d["blockId"] {
				bs[i] = d["block"].(map[string]any)
			}
		}
	case seedproto.EventSubagentDiscovered:
		sub := d["subagent"].(map[string]any)
		id := sub["id"].(string)
		if _, ok := c.subs[id]; !ok {
			c.subOrder = append(c.subOrder, id)
		}
		var bs []map[string]any
		for _, b := range sub["blocks"].([]any) {
			bs = append(bs, b.(map[string]any))
		}
		c.subs[id] = bs
	case seedproto.EventFileCreated, seedproto.EventFileModified:
		f := d["file"].(map[string]any)
		c.files[f["path"].(string)] = f
	case seedproto.EventFileDeleted:
		delete(c.files, d["path"].(string))
	case seedproto.EventSubagentCompleted, seedproto.EventMetadataUpdate, seedproto.EventStatus, seedproto.EventError:
	default:
		t.Fatalf("unexpected event %s", msg.Event)
	}
}

func jsString(v any) string {
	if s, ok := v.(string); ok {
		return s
	}
	return fmt.Sprint(v) // undefined + "x" in JavaScript
}

// normalize drops what is null: the seed client keeps a null an update
// sent for a field agentd omits now.
func normalize(bs []map[string]any) []map[string]any {
	out := []map[string]any{}
	for _, b := range bs {
		m := map[string]any{}
		for k, v := range b {
			if v != nil {
				m[k] = v
			}
		}
		out = append(out, m)
	}
	return out
}

// sameConversation fails t unless the client holds agentd's conversation:
// the same blocks (as GET /api/sessions/{id} shows them), subagent threads
// and file paths.
func sameConversation(t testing.TB, what string, c *seedClient, st conversation.State) {
	t.Helper()
	if got, want := normalize(c.main), normalize(jsonBlocks(st.Blocks)); !reflect.DeepEqual(got, want) {
		t.Fatalf("%s: main blocks differ\nseed:   %s\nagentd: %s", what, js(got), js(want))
	}
	var ids []string
	for _, s := range st.Subagents {
		ids = append(ids, s.ID)
		if got, want := normalize(c.subs[s.ID]), normalize(jsonBlocks(s.Blocks)); !reflect.DeepEqual(got, want) {
			t.Fatalf("%s: subagent %s blocks differ\nseed:   %s\nagentd: %s", what, s.ID, js(got), js(want))
		}
	}
	if !reflect.DeepEqual(c.subOrder, ids) {
		t.Fatalf("%s: subagents %v, agentd %v", what, c.subOrder, ids)
	}
	var paths, want []string
	for p := range c.files {
		paths = append(paths, p)
	}
	for _, f := range st.WorkspaceFiles {
		want = append(want, f.Path)
	}
	sort.Strings(paths)
	if !reflect.DeepEqual(paths, want) {
		t.Fatalf("%s: files %v, agentd %v", what, paths, want)
	}
}

func js(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

// genLog builds a random log from next (a source of small numbers): every
// kind of event, with duplicates, unsequenced events, type changes,
// deltas to every type, bad events and subagent threads.
func genLog(next func(n int) int) []conversation.Event {
	pick := func(xs ...string) string { return xs[next(len(xs))] }
	ids := []string{"m1-0", "m1-1", "toolu_A", "toolu_A-result", "m2-0", "x"}
	types := []string{"assistant_text", "thinking", "tool_use", "tool_result", "subagent", "user_message", "error", "system", "skill_load"}
	var evs []conversation.Event
	var seq int64
	n := 5 + next(60)
	base := time.Date(2026, 11, 21, 23, 47, 49, 0, time.UTC)
	for i := range n {
		var e conversation.Event
		switch k := next(100); {
		case k < 35:
			b := map[string]any{"id": pick(ids...), "type": pick(types...)}
			if next(2) == 0 {
				b["content"] = pick("", "hello ", "wörld", "a\nb")
			}
			if next(3) == 0 {
				b["output"] = pick("out", "")
			}
			if next(3) == 0 {
				b["status"] = pick("pending", "complete", "error", "")
			}
			if next(5) == 0 {
				b["toolName"] = pick("Bash", "Edit")
			}
			if next(5) == 0 {
				b["input"] = []any{map[string]any{"command": "ls"}, "p", nil}[next(3)]
			}
			if next(5) == 0 {
				b["isError"] = next(2) == 0
			}
			if next(5) == 0 {
				b["metadata"] = []any{map[string]any{"a": 1}, map[string]any{"b": "x"}, nil, map[string]any{}}[next(4)]
			}
			if next(5) == 0 {
				b["timestamp"] = "2026-11-21T23:40:00.5Z"
			}
			if next(8) == 0 {
				b["model"] = pick("m", "")
			}
			raw, _ := json.Marshal(map[string]any{"block": b})
			e = conversation.Event{Type: conversation.TypeBlockUpsert, Payload: raw}
		case k < 62:
			e = conversation.Delta(pick(ids...), pick("x", "yz", "\n", "é"))
		case k < 67:
			e = conversation.NewEvent(conversation.MetadataUpdate{Usage: &conversation.Usage{InputTokens: int64(next(9)), OutputTokens: 2}})
		case k < 77:
			kinds := []conversation.EventType{conversation.TypeFileCreated, conversation.TypeFileModified, conversation.TypeFileDeleted}
			size := int64(next(4))
			e = conversation.NewEvent(conversation.FileChange{Kind: kinds[next(3)], Path: pick("a.txt", "dir/b.go", "c"), Size: &size})
		case k < 84:
			if next(2) == 0 {
				e = conversation.NewEvent(conversation.SubagentSpawned{ToolUseID: pick("toolu_A", "toolu_B"), Prompt: "p"})
			} else {
				e = conversation.NewEvent(conversation.SubagentCompleted{ToolUseID: pick("toolu_A", "toolu_B"), Status: conversation.BlockStatus(pick("complete", "error"))})
			}
		case k < 90:
			q := pick("q1", "q2")
			switch next(3) {
			case 0:
				e = conversation.NewEvent(conversation.QueryStarted{QueryID: q})
			case 1:
				e = conversation.NewEvent(conversation.QueryCompleted{QueryID: q})
			default:
				e = conversation.NewEvent(conversation.QueryFailed{QueryID: q, Error: "x"})
			}
		case k < 93:
			e = conversation.NewEvent(conversation.ErrorEvent{Message: "boom", Code: "C"})
		case k < 96:
			e = conversation.NewEvent(conversation.StatusChange{Status: conversation.SessionRunning, Runtime: conversation.Runtime{Status: conversation.SessionRunning, Architecture: "shell"}})
		case k < 98:
			e = conversation.NewEvent(conversation.OptionsUpdate{SessionOptions: json.RawMessage(`{"model":"m"}`)})
		default:
			e = conversation.Event{Type: conversation.TypeBlockUpsert, Payload: json.RawMessage(pick(`{"block":{"type":"x"}}`, `{"block":5}`, `[]`))}
		}
		e.Context.SessionID = "s"
		e.Context.ConversationID = pick("main", "main", "main", "toolu_A", "toolu_B", "")
		e.Context.Timestamp = base.Add(time.Duration(i) * time.Second)
		switch s := next(100); {
		case s < 8:
			e.Seq = max(1, seq-int64(next(3)))
		case s < 12:
			e.Seq = 0
		default:
			seq++
			e.Seq = seq
		}
		evs = append(evs, e)
	}
	return evs
}

// check maps evs after priming the first `primed` of them into a client
// that loaded agentd's state at that point, and requires the client's
// conversation to equal agentd's after every event (with a Flush) and at
// the end. It returns the messages' event names.
func check(t testing.TB, evs []conversation.Event, primed int) map[string]int {
	t.Helper()
	m := seedproto.New("s")
	client := newSeedClient()
	r := conversation.NewReducer()
	for _, e := range evs[:primed] {
		_ = r.Apply(e)
	}
	m.Prime(evs[:primed]...)
	client.load(r.State())
	names := map[string]int{}
	for i, e := range evs[primed:] {
		_ = r.Apply(e)
		for _, msg := range m.Map(e) {
			names[msg.Event]++
			client.apply(t, msg)
		}
		for _, msg := range m.Flush(false) {
			names[msg.Event]++
			client.apply(t, msg)
		}
		sameConversation(t, fmt.Sprintf("after event %d (%s seq %d)", primed+i, e.Type, e.Seq), client, r.State())
	}
	for _, msg := range m.Flush(true) {
		client.apply(t, msg)
	}
	sameConversation(t, "at the end", client, r.State())
	return names
}

func TestSeedClientHoldsAgentdsConversation(t *testing.T) {
	names := map[string]int{}
	for i := range 800 {
		rng := rand.New(rand.NewPCG(uint64(i), 7))
		evs := genLog(func(n int) int { return rng.IntN(n) })
		primed := 0
		if i%3 == 0 {
			primed = rng.IntN(len(evs) + 1)
		}
		for k, v := range check(t, evs, primed) {
			names[k] += v
		}
	}
	// The logs reach every kind of message.
	for _, n := range []string{seedproto.EventBlockStart, seedproto.EventBlockDelta, seedproto.EventBlockUpdate, seedproto.EventBlockComplete,
		seedproto.EventSubagentDiscovered, seedproto.EventSubagentCompleted, seedproto.EventFileCreated, seedproto.EventFileModified,
		seedproto.EventFileDeleted, seedproto.EventStatus, seedproto.EventError, seedproto.EventMetadataUpdate, seedproto.EventEnvelope} {
		if names[n] == 0 {
			t.Errorf("no %s in the generated logs", n)
		}
	}
}

// A shell-like turn: a tool_result's output streamed as deltas reaches the
// seed client as updates with the whole output (the seed appended deltas
// to assistant_text and thinking only); past LiveTextLimit only at the
// turn's end, so the bytes sent stay linear in the output.
func TestStreamedOutputAsUpdates(t *testing.T) {
	seq := int64(0)
	at := func(e conversation.Event) conversation.Event {
		seq++
		e.Seq = seq
		e.Context.SessionID = "s"
		e.Context.ConversationID = "main"
		e.Context.Timestamp = time.Date(2026, 1, 1, 0, 0, int(seq), 0, time.UTC)
		return e
	}
	m := seedproto.New("s")
	client := newSeedClient()
	r := conversation.NewReducer()
	var sent int
	feed := func(e conversation.Event, flush bool) []seedproto.Message {
		_ = r.Apply(e)
		msgs := m.Map(e)
		if flush {
			msgs = append(msgs, m.Flush(false)...)
		}
		for _, msg := range msgs {
			raw, _ := json.Marshal(msg.Data)
			sent += len(raw)
			client.apply(t, msg)
		}
		return msgs
	}
	feed(at(conversation.NewEvent(conversation.QueryStarted{QueryID: "q1"})), true)
	feed(at(conversation.Upsert(conversation.Block{ID: "q1-tool", Type: conversation.BlockToolUse, ToolName: "Bash", ToolUseID: "q1-tool"})), true)
	msgs := feed(at(conversation.Upsert(conversation.Block{ID: "q1-tool-result", Type: conversation.BlockToolResult, ToolUseID: "q1-tool"})), true)
	if len(msgs) != 1 || msgs[0].Event != seedproto.EventBlockStart {
		t.Fatalf("tool_result upsert: %+v", msgs)
	}
	start, _ := json.Marshal(msgs[0].Data)
	if !strings.Contains(string(start), `"output":""`) || !strings.Contains(string(start), `"isError":false`) {
		t.Fatalf("the started tool_result lacks required fields: %s", start)
	}
	// Three deltas in one batch: one update.
	var batch []seedproto.Message
	for _, d := range []string{"a\n", "b\n", "c\n"} {
		batch = append(batch, feed(at(conversation.Delta("q1-tool-result", d)), false)...)
	}
	flushed := m.Flush(false)
	if len(batch) != 0 || len(flushed) != 1 || flushed[0].Event != seedproto.EventBlockUpdate {
		t.Fatalf("deltas: %+v then %+v", batch, flushed)
	}
	client.apply(t, flushed[0])
	sameConversation(t, "after the batch", client, r.State())
	// A long output: beyond the limit, nothing until the turn ends.
	line := strings.Repeat("x", 1023) + "\n"
	for range 2 * seedproto.LiveTextLimit / len(line) {
		feed(at(conversation.Delta("q1-tool-result", line)), true)
	}
	if sent > 40*seedproto.LiveTextLimit {
		t.Fatalf("sent %d bytes for %d bytes of output", sent, 2*seedproto.LiveTextLimit)
	}
	msgs = feed(at(conversation.NewEvent(conversation.QueryCompleted{QueryID: "q1"})), true)
	if len(msgs) != 2 || msgs[0].Event != seedproto.EventBlockUpdate || msgs[1].Event != seedproto.EventEnvelope {
		t.Fatalf("turn end: %+v", msgs)
	}
	sameConversation(t, "after the turn", client, r.State())
}

func FuzzMapper(f *testing.F) {
	f.Add([]byte("seed-proto"), uint8(0))
	f.Add([]byte{1, 2, 3, 250, 0, 17, 99, 42, 7, 7, 7, 200, 13}, uint8(3))
	f.Add([]byte(strings.Repeat("\x00\x21\x3f\x5e\x7d\x9c\xbb\xda", 20)), uint8(40))
	f.Fuzz(func(t *testing.T, data []byte, primedAt uint8) {
		i := 0
		next := func(n int) int {
			if i >= len(data) {
				return 0
			}
			v := int(data[i]) % n
			i++
			return v
		}
		evs := genLog(next)
		check(t, evs, int(primedAt)%(len(evs)+1))
	})
}
