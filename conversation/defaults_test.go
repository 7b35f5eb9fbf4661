package conversation_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/agentd/agentd/conversation"
)

// tool_use and subagent blocks get a status ("pending") and an input ({}
// and "") only when they have none: given ones are kept.
func TestBlockDefaultsOnlyWhenMissing(t *testing.T) {
	cases := []struct {
		in         conversation.Block
		wantInput  string
		wantStatus conversation.BlockStatus
	}{
		{conversation.Block{ID: "t", Type: conversation.BlockToolUse}, `{}`, conversation.StatusPending},
		{conversation.Block{ID: "t", Type: conversation.BlockToolUse, Input: json.RawMessage(`{"a":1}`), Status: conversation.StatusComplete}, `{"a":1}`, conversation.StatusComplete},
		{conversation.Block{ID: "s", Type: conversation.BlockSubagent}, `""`, conversation.StatusPending},
		{conversation.Block{ID: "s", Type: conversation.BlockSubagent, Input: json.RawMessage(`"do it"`), Status: conversation.StatusError}, `"do it"`, conversation.StatusError},
	}
	for _, c := range cases {
		for _, via := range []string{"Apply", "ApplyBlock"} {
			r := conversation.NewReducer()
			var err error
			if via == "Apply" {
				err = r.Apply(seq(1, conversation.Upsert(c.in)))
			} else {
				err = r.ApplyBlock("", c.in)
			}
			if err != nil {
				t.Fatal(err)
			}
			b := r.State().Blocks[0]
			if string(b.Input) != c.wantInput || b.Status != c.wantStatus {
				t.Errorf("%s %s (input %s, status %q): got input %s, status %q; want %s, %q", via, c.in.Type, c.in.Input, c.in.Status, b.Input, b.Status, c.wantInput, c.wantStatus)
			}
			// Block's own JSON carries the same.
			data, _ := json.Marshal(b)
			var m map[string]json.RawMessage
			json.Unmarshal(data, &m)
			if string(m["input"]) != c.wantInput || string(m["status"]) != `"`+string(c.wantStatus)+`"` {
				t.Errorf("%s %s: JSON %s", via, c.in.Type, data)
			}
		}
	}
	// Block's JSON also fills in what a block never reduced lacks.
	for typ, want := range map[conversation.BlockType]string{conversation.BlockToolUse: `{}`, conversation.BlockSubagent: `""`} {
		data, _ := json.Marshal(conversation.Block{ID: "x", Type: typ})
		var m map[string]json.RawMessage
		json.Unmarshal(data, &m)
		if string(m["input"]) != want || string(m["status"]) != `"pending"` {
			t.Errorf("%s JSON %s, want input %s and status pending", typ, data, want)
		}
		data, _ = json.Marshal(conversation.Block{ID: "x", Type: typ, Status: conversation.StatusComplete, Input: json.RawMessage(`{"k":2}`)})
		json.Unmarshal(data, &m)
		if string(m["input"]) != `{"k":2}` || string(m["status"]) != `"complete"` {
			t.Errorf("%s JSON %s: given input and status not kept", typ, data)
		}
	}
}

// Reduce reports the first error that is not a duplicate, and goes on.
func TestReduceReportsTheFirstRealError(t *testing.T) {
	up := seq(1, conversation.Upsert(conversation.Block{ID: "a", Type: conversation.BlockAssistantText}))
	st, err := conversation.Reduce([]conversation.Event{
		up, up, // a duplicate: not an error of the log
		seq(2, conversation.Delta("missing", "x")),
		seq(3, conversation.Delta("gone", "y")),
		seq(4, conversation.Delta("a", "ok")),
	})
	if err == nil || !strings.Contains(err.Error(), `"missing"`) || strings.Contains(err.Error(), `"gone"`) {
		t.Fatalf("Reduce error %v, want the one of seq 2", err)
	}
	if len(st.Blocks) != 1 || st.Blocks[0].Content != "ok" || st.LastSeq != 4 {
		t.Fatalf("state %+v", st)
	}
	if _, err := conversation.Reduce([]conversation.Event{up, up}); err != nil {
		t.Fatalf("duplicates only: %v", err)
	}
}

// An options:update without options (or with a non-object) leaves the
// options as they were; an event with no payload decodes to its zero value.
func TestOptionsUpdateWithoutOptionsAndEmptyPayloads(t *testing.T) {
	r := conversation.NewReducer()
	apply := func(n int64, payload string) {
		t.Helper()
		if err := r.Apply(conversation.Event{Seq: n, Type: conversation.TypeOptionsUpdate, Payload: json.RawMessage(payload)}); err != nil {
			t.Fatal(err)
		}
	}
	apply(1, `{"sessionOptions":{"model":"m"}}`)
	apply(2, `{}`)
	apply(3, `{"sessionOptions":[1]}`)
	apply(4, `{"sessionOptions":"  "}`)
	if got := string(r.State().SessionOptions); got != `{"model":"m"}` {
		t.Fatalf("options %s", got)
	}
	for _, payload := range []string{"", "null"} {
		p, err := conversation.Event{Type: conversation.TypeQueryCompleted, Payload: json.RawMessage(payload)}.Decode()
		if err != nil {
			t.Fatalf("payload %q: %v", payload, err)
		}
		if q, ok := p.(*conversation.QueryCompleted); !ok || *q != (conversation.QueryCompleted{}) {
			t.Fatalf("payload %q decoded to %#v", payload, p)
		}
	}
}

func TestUsageAddEveryField(t *testing.T) {
	a := conversation.Usage{InputTokens: 1, OutputTokens: 20, CacheReadInputTokens: 300, CacheCreationInputTokens: 4000}
	b := conversation.Usage{InputTokens: 50000, OutputTokens: 600000, CacheReadInputTokens: 7000000, CacheCreationInputTokens: 80000000}
	want := conversation.Usage{InputTokens: 50001, OutputTokens: 600020, CacheReadInputTokens: 7000300, CacheCreationInputTokens: 80004000}
	if got := a.Add(b); got != want {
		t.Fatalf("%+v + %+v = %+v, want %+v", a, b, got, want)
	}
}

// A query's end clears the active query only if it is that query's (an
// end without an id clears any).
func TestQueryEndClearsOnlyItsOwnActiveQuery(t *testing.T) {
	r := conversation.NewReducer()
	steps := []conversation.Event{
		seq(1, conversation.NewEvent(conversation.QueryStarted{QueryID: "q1"})),
		seq(2, conversation.NewEvent(conversation.QueryStarted{QueryID: "q2"})),
		seq(3, conversation.NewEvent(conversation.QueryCompleted{QueryID: "q1"})),
	}
	for _, e := range steps {
		if err := r.Apply(e); err != nil {
			t.Fatal(err)
		}
	}
	if got := r.State().ActiveQueryID; got != "q2" {
		t.Fatalf("active query %q after q1 ended, want q2", got)
	}
	if err := r.Apply(seq(4, conversation.NewEvent(conversation.QueryCompleted{}))); err != nil {
		t.Fatal(err)
	}
	if got := r.State().ActiveQueryID; got != "" {
		t.Fatalf("active query %q after an end without id, want none", got)
	}
}

// A subagent's agent id, once known, stays when a later event has none.
func TestSubagentAgentIDKept(t *testing.T) {
	st, err := conversation.Reduce([]conversation.Event{
		seq(1, conversation.NewEvent(conversation.SubagentSpawned{ToolUseID: "t", AgentID: "ag1", Prompt: "p"})),
		seq(2, conversation.NewEvent(conversation.SubagentCompleted{ToolUseID: "t", Status: conversation.StatusComplete})),
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(st.Subagents) != 1 || st.Subagents[0].AgentID != "ag1" {
		t.Fatalf("subagents %+v", st.Subagents)
	}
	st, _ = conversation.Reduce([]conversation.Event{
		seq(1, conversation.NewEvent(conversation.SubagentSpawned{ToolUseID: "t", Prompt: "p"})),
		seq(2, conversation.NewEvent(conversation.SubagentCompleted{ToolUseID: "t", AgentID: "ag2", Status: conversation.StatusComplete})),
	})
	if st.Subagents[0].AgentID != "ag2" {
		t.Fatalf("subagents %+v", st.Subagents)
	}
}

// ApplyBlock keeps a block's metadata (as JSON values), and drops an
// empty map.
func TestApplyBlockMetadata(t *testing.T) {
	r := conversation.NewReducer()
	if err := r.ApplyBlock("", conversation.Block{ID: "a", Type: conversation.BlockAssistantText, Metadata: map[string]any{"n": 1}}); err != nil {
		t.Fatal(err)
	}
	if err := r.ApplyBlock("", conversation.Block{ID: "b", Type: conversation.BlockAssistantText, Metadata: map[string]any{}}); err != nil {
		t.Fatal(err)
	}
	st := r.State()
	if st.Blocks[0].Metadata["n"] != float64(1) {
		t.Fatalf("metadata %#v", st.Blocks[0].Metadata)
	}
	if st.Blocks[1].Metadata != nil {
		t.Fatalf("empty metadata kept as %#v", st.Blocks[1].Metadata)
	}
}
