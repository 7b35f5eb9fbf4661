package conversation_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/agentd/agentd/conversation"
)

// A reduced block carries every field its type requires, empty values
// included (a tool_result upserted before its output has output "" and
// isError false), while the upsert events themselves carry only what they
// set, so a shallow merge of a later upsert changes only those fields.
func TestReducedBlocksCarryRequiredFields(t *testing.T) {
	ts := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	evs := []conversation.Event{
		conversation.Upsert(conversation.Block{ID: "u", Type: conversation.BlockUserMessage}),
		conversation.Upsert(conversation.Block{ID: "a", Type: conversation.BlockAssistantText}),
		conversation.Upsert(conversation.Block{ID: "th", Type: conversation.BlockThinking}),
		conversation.Upsert(conversation.Block{ID: "t", Type: conversation.BlockToolUse}),
		conversation.Upsert(conversation.Block{ID: "t-result", Type: conversation.BlockToolResult}),
		conversation.Upsert(conversation.Block{ID: "s", Type: conversation.BlockSystem}),
		conversation.Upsert(conversation.Block{ID: "sa", Type: conversation.BlockSubagent}),
		conversation.Upsert(conversation.Block{ID: "e", Type: conversation.BlockError}),
		conversation.Upsert(conversation.Block{ID: "k", Type: conversation.BlockSkillLoad}),
	}
	for i := range evs {
		evs[i].Seq = int64(i + 1)
		evs[i].Context.Timestamp = ts
		var p map[string]map[string]any
		if err := json.Unmarshal(evs[i].Payload, &p); err != nil {
			t.Fatal(err)
		}
		if len(p["block"]) != 2 {
			t.Fatalf("upsert %d carries more than it sets: %s", i, evs[i].Payload)
		}
	}
	st, err := conversation.Reduce(evs)
	if err != nil {
		t.Fatal(err)
	}
	raw, err := json.Marshal(st.Blocks)
	if err != nil {
		t.Fatal(err)
	}
	var blocks []map[string]any
	if err := json.Unmarshal(raw, &blocks); err != nil {
		t.Fatal(err)
	}
	want := map[string]map[string]any{
		"u":        {"content": ""},
		"a":        {"content": ""},
		"th":       {"content": ""},
		"t":        {"toolName": "", "toolUseId": "", "input": map[string]any{}, "status": "pending"},
		"t-result": {"toolUseId": "", "output": "", "isError": false},
		"s":        {"subtype": "", "message": ""},
		"sa":       {"subagentId": "", "input": "", "status": "pending"},
		"e":        {"message": ""},
		"k":        {"skillName": "", "content": ""},
	}
	for _, b := range blocks {
		id := b["id"].(string)
		if b["timestamp"] != "2026-01-02T03:04:05Z" {
			t.Errorf("%s: timestamp %v, want the event's", id, b["timestamp"])
		}
		for k, v := range want[id] {
			got, ok := b[k]
			if !ok {
				t.Errorf("%s: no %s in %v", id, k, b)
				continue
			}
			if g, _ := json.Marshal(got); string(g) != mustJSON(v) {
				t.Errorf("%s.%s = %s, want %s", id, k, g, mustJSON(v))
			}
		}
		if len(b) != 3+len(want[id]) {
			t.Errorf("%s: unexpected fields in %v", id, b)
		}
	}

	// A later partial upsert changes only what it sets; the filled fields stay.
	r := conversation.NewReducer()
	for _, e := range evs {
		_ = r.Apply(e)
	}
	later := conversation.Upsert(conversation.Block{ID: "t-result", Type: conversation.BlockToolResult, IsError: true})
	later.Seq = 100
	later.Context.Timestamp = ts.Add(time.Hour)
	if err := r.Apply(later); err != nil {
		t.Fatal(err)
	}
	b := r.State().Blocks[4]
	if !b.IsError || !b.Timestamp.Equal(ts) || b.Output != "" {
		t.Fatalf("merged: %+v", b)
	}
}

func mustJSON(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

// options:update sets the state's sessionOptions; the last one wins.
func TestOptionsUpdate(t *testing.T) {
	a := conversation.NewEvent(conversation.OptionsUpdate{SessionOptions: json.RawMessage(`{"model":"a"}`), Changed: []string{"model"}})
	b := conversation.NewEvent(conversation.OptionsUpdate{SessionOptions: json.RawMessage(`{"model":"b","permissionMode":"plan"}`)})
	a.Seq, b.Seq = 1, 2
	st, err := conversation.Reduce([]conversation.Event{a, b})
	if err != nil {
		t.Fatal(err)
	}
	if string(st.SessionOptions) != `{"model":"b","permissionMode":"plan"}` {
		t.Fatalf("sessionOptions %s", st.SessionOptions)
	}
	if st, _ := conversation.Reduce(nil); st.SessionOptions != nil {
		t.Fatalf("empty log: %s", st.SessionOptions)
	}
}
