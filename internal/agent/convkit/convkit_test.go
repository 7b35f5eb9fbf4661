package convkit_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/agentd/agentd/conversation"
	"github.com/agentd/agentd/internal/agent/convkit"
)

var t0 = time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)

// decode returns the payloads of events, checking each names conv.
func decode(t *testing.T, evs []conversation.Event, conv string) []conversation.Payload {
	t.Helper()
	var out []conversation.Payload
	for _, e := range evs {
		if e.Context.ConversationID != conv {
			t.Fatalf("event %s in conversation %q, want %q", e.Type, e.Context.ConversationID, conv)
		}
		p, err := e.Decode()
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, p)
	}
	return out
}

func TestClaim(t *testing.T) {
	bs := convkit.NewBlocks()
	if id := bs.Claim("a", "call_1"); id != "call_1" {
		t.Fatalf("first claim %q", id)
	}
	if id := bs.Claim("a", "other"); id != "call_1" {
		t.Fatalf("same key again %q", id)
	}
	if id := bs.Claim("b", "call_1"); id != "call_1~2" {
		t.Fatalf("reused want %q", id)
	}
	// The tool_result sibling of a claimed id is reserved with it.
	if id := bs.Claim("c", conversation.ToolResultID("call_1")); id == conversation.ToolResultID("call_1") {
		t.Fatalf("sibling handed out: %q", id)
	}
	if id := bs.Lookup("zz", "want"); id != "want" {
		t.Fatalf("lookup of an unclaimed key %q", id)
	}
	bs.Bind("alias", "call_1~2")
	if id, ok := bs.Claimed("alias"); !ok || id != "call_1~2" || bs.Lookup("alias", "x") != "call_1~2" {
		t.Fatalf("bound key: %q %v", id, ok)
	}
	if _, ok := bs.Claimed("nope"); ok {
		t.Fatal("unclaimed key reported claimed")
	}
}

func TestPut(t *testing.T) {
	bs := convkit.NewBlocks()
	o := &convkit.Out{TS: t0}
	bs.Put(o, "sub", conversation.Block{ID: "m", Type: conversation.BlockAssistantText, Status: conversation.StatusPending, Content: "Hel"})
	bs.Put(o, "other", conversation.Block{ID: "m", Content: "Hello"})                                                              // delta only; stays in "sub"
	bs.Put(o, "sub", conversation.Block{ID: "m", Content: "Hello"})                                                                // nothing
	bs.Put(o, "sub", conversation.Block{ID: "m", Status: conversation.StatusComplete, Content: "Hello!"})                          // delta and upsert
	bs.Put(o, "sub", conversation.Block{ID: "m", Content: "Bye"})                                                                  // rewrite: upsert with text
	bs.Put(o, "sub", conversation.Block{ID: "m", Type: conversation.BlockThinking, Content: "hmm"})                                // another type: a block of its own
	bs.Put(o, "sub", conversation.Block{ID: "r", Type: conversation.BlockToolResult, Output: "out", Timestamp: t0.Add(time.Hour)}) // text in Output
	ps := decode(t, o.Events, "sub")
	want := []string{
		`{"block":{"id":"m","type":"assistant_text","timestamp":"2025-01-02T03:04:05Z","status":"pending","content":"Hel"}}`,
		`{"blockId":"m","delta":"lo"}`,
		`{"blockId":"m","delta":"!"}`,
		`{"block":{"id":"m","type":"assistant_text","status":"complete"}}`,
		`{"block":{"id":"m","type":"assistant_text","content":"Bye"}}`,
		`{"block":{"id":"m~thinking","type":"thinking","timestamp":"2025-01-02T03:04:05Z","content":"hmm"}}`,
		`{"block":{"id":"r","type":"tool_result","timestamp":"2025-01-02T04:04:05Z","output":"out"}}`,
	}
	if len(ps) != len(want) {
		t.Fatalf("%d events, want %d: %+v", len(ps), len(want), ps)
	}
	for i, p := range ps {
		got, _ := json.Marshal(p)
		if string(got) != want[i] {
			t.Errorf("event %d: %s\nwant %s", i, got, want[i])
		}
	}
	if bs.Text("m") != "Bye" || bs.Text("r") != "out" || bs.Text("none") != "" || !bs.Has("m~thinking") || bs.Has("none") {
		t.Fatalf("texts %q %q", bs.Text("m"), bs.Text("r"))
	}
}

func TestAppendText(t *testing.T) {
	bs := convkit.NewBlocks()
	o := &convkit.Out{}
	if bs.AppendText(o, "x", "a") || len(o.Events) != 0 {
		t.Fatal("appended to an unknown block")
	}
	bs.Put(o, "", conversation.Block{ID: "x", Type: conversation.BlockAssistantText, Content: "a"})
	if !bs.AppendText(o, "x", "") || len(o.Events) != 1 {
		t.Fatal("an empty delta emitted an event")
	}
	if !bs.AppendText(o, "x", "b") || bs.Text("x") != "ab" || len(o.Events) != 2 || o.Events[1].Type != conversation.TypeBlockDelta {
		t.Fatalf("text %q events %d", bs.Text("x"), len(o.Events))
	}
}

func TestSettlePending(t *testing.T) {
	bs := convkit.NewBlocks()
	o := &convkit.Out{TS: t0}
	bs.Put(o, "", conversation.Block{ID: "t2", Type: conversation.BlockToolUse, Status: conversation.StatusPending, ToolName: "sh"})
	bs.Put(o, "c", conversation.Block{ID: "t1", Type: conversation.BlockAssistantText, Status: conversation.StatusPending})
	bs.Put(o, "", conversation.Block{ID: "t0", Type: conversation.BlockAssistantText, Status: conversation.StatusComplete})
	end := t0.Add(time.Minute)
	evs := bs.SettlePending(end)
	if len(evs) != 2 {
		t.Fatalf("%d events", len(evs))
	}
	for i, want := range []struct {
		id, conv string
		status   conversation.BlockStatus
	}{{"t1", "c", conversation.StatusComplete}, {"t2", conversation.MainConversation, conversation.StatusError}} {
		p, err := evs[i].Decode()
		if err != nil {
			t.Fatal(err)
		}
		b := p.(*conversation.BlockUpsert).Block
		if b.ID != want.id || b.Status != want.status || evs[i].Context.ConversationID != want.conv || !evs[i].Context.Timestamp.Equal(end) {
			t.Fatalf("event %d: %+v in %q at %v", i, b, evs[i].Context.ConversationID, evs[i].Context.Timestamp)
		}
	}
	if again := bs.SettlePending(end); len(again) != 0 {
		t.Fatalf("settled twice: %d events", len(again))
	}
}

func TestObjectInput(t *testing.T) {
	for in, want := range map[string]string{
		`{"a":1}`:   `{"a":1}`,
		` {"a":1} `: `{"a":1}`,
		``:          `{}`,
		`null`:      `{}`,
		`[1,2]`:     `{"input":[1,2]}`,
		`"s"`:       `{"input":"s"}`,
		`{broken`:   `{"input":"{broken"}`,
	} {
		if got := string(convkit.ObjectInput(json.RawMessage(in))); got != want {
			t.Errorf("%q: %s, want %s", in, got, want)
		}
	}
}

func FuzzObjectInput(f *testing.F) {
	for _, s := range []string{`{"a":1}`, ``, `null`, `[1]`, `"x"`, `{`, "\xff"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		var m map[string]json.RawMessage
		if out := convkit.ObjectInput(in); json.Unmarshal(out, &m) != nil || m == nil {
			t.Fatalf("%q gave %q, not an object", in, out)
		}
	})
}

func TestTimes(t *testing.T) {
	if !convkit.MsTime(0).IsZero() || !convkit.MsTime(-5).IsZero() || !convkit.MsTime(1735787045000).Equal(time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)) {
		t.Fatal("MsTime")
	}
	if got := convkit.ParseTime("2025-01-02T04:04:05.5+01:00"); got.Location() != time.UTC || !got.Equal(t0.Add(500*time.Millisecond)) {
		t.Fatalf("ParseTime %v", got)
	}
	if !convkit.ParseTime("yesterday").IsZero() {
		t.Fatal("a bad time parsed")
	}
	if convkit.StatusOf(true, true) != conversation.StatusError || convkit.StatusOf(true, false) != conversation.StatusComplete || convkit.StatusOf(false, false) != conversation.StatusPending {
		t.Fatal("StatusOf")
	}
	if string(convkit.MustJSON(func() {})) != "null" {
		t.Fatal("MustJSON of a func")
	}
}
