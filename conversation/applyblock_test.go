package conversation_test

import (
	"encoding/json"
	"reflect"
	"testing"
	"time"

	"github.com/agentd/agentd/conversation"
)

// applyBoth applies each step to one reducer as events (Apply) and to
// another as typed values (ApplyBlock, ApplyDelta) and requires the same
// errors and the same state after every step.
type step struct {
	conv  string
	block *conversation.Block
	id    string // delta
	text  string
}

func applyBoth(t *testing.T, steps []step) {
	t.Helper()
	viaJSON, typed := conversation.NewReducer(), conversation.NewReducer()
	for i, s := range steps {
		var errJSON, errTyped error
		if s.block != nil {
			errJSON = viaJSON.Apply(conversation.Upsert(*s.block).In(s.conv))
			errTyped = typed.ApplyBlock(s.conv, *s.block)
		} else {
			errJSON = viaJSON.Apply(conversation.Delta(s.id, s.text).In(s.conv))
			errTyped = typed.ApplyDelta(s.conv, s.id, s.text)
		}
		if (errJSON == nil) != (errTyped == nil) || (errJSON != nil && errJSON.Error() != errTyped.Error()) {
			t.Fatalf("step %d: Apply: %v; typed: %v", i, errJSON, errTyped)
		}
		if a, b := viaJSON.State(), typed.State(); !reflect.DeepEqual(a, b) {
			t.Fatalf("step %d: states differ:\nApply: %+v\ntyped: %+v", i, a, b)
		}
	}
}

func TestApplyBlockMatchesApply(t *testing.T) {
	ts := time.Date(2025, 9, 3, 0, 52, 31, 217000000, time.UTC)
	tokyo := time.FixedZone("JST", 9*3600)
	applyBoth(t, []step{
		{block: &conversation.Block{ID: "m-0", Type: conversation.BlockAssistantText, Status: conversation.StatusPending, Timestamp: ts}},
		{id: "m-0", text: "Hel"},
		{id: "m-0", text: "lo \xff\xfe bad bytes"},
		{block: &conversation.Block{ID: "m-0", Type: conversation.BlockAssistantText, Status: conversation.StatusComplete, Model: "m"}},
		{block: &conversation.Block{ID: "t1", Type: conversation.BlockToolUse, ToolName: "Bash", ToolUseID: "t1",
			Input: json.RawMessage(`{"command":"ls \u003c x"}`), Timestamp: time.Now()}},
		{block: &conversation.Block{ID: "t1-result", Type: conversation.BlockToolResult, ToolUseID: "t1",
			Status: conversation.StatusPending, Metadata: map[string]any{"a": 1, "keep": "x"}, Timestamp: ts.In(tokyo)}},
		{id: "t1-result", text: "a\n"},
		{block: &conversation.Block{ID: "t1-result", Type: conversation.BlockToolResult, Status: conversation.StatusError,
			IsError: true, DurationMs: 5, Metadata: map[string]any{"a": 2, "b": []int{1}}, Timestamp: time.Now().In(tokyo)}},
		{block: &conversation.Block{ID: "t1-result", Type: "", Metadata: map[string]any{}}},
		{conv: "toolu_1", block: &conversation.Block{ID: "s-0", Type: conversation.BlockUserMessage, Content: "\xe2\x82 cut",
			Metadata: map[string]any{"synthetic": true}}},
		{conv: "toolu_1", id: "s-0", text: "+"},
		{conv: "toolu_2", id: "nope", text: "x\xff"},
		{conv: "toolu_3", block: &conversation.Block{Type: conversation.BlockAssistantText}},
		{block: &conversation.Block{ID: "z", Type: conversation.BlockSystem, Timestamp: time.Time{}.In(tokyo)}},
		{block: &conversation.Block{ID: "z\xff", Type: conversation.BlockSystem, Subtype: "s", Message: "m", Code: "c",
			SubagentID: "a", Name: "n", SkillName: "k", Summary: "s", DisplayName: "d", Description: "e", Output: "o"}},
		{block: &conversation.Block{ID: "z\xff", Type: conversation.BlockSystem, Input: json.RawMessage(`null`)}},
	})
}

// FuzzApplyBlock: ApplyBlock and ApplyDelta leave the state Apply leaves
// for the same blocks and deltas as events.
func FuzzApplyBlock(f *testing.F) {
	f.Add(uint8(0), "assistant_text", "hello", "x", int64(1756860751217000000), int16(0), "k", 1.5, false, int64(0), uint8(1))
	f.Add(uint8(1), "tool_result", "a\xffb", "\xe2\x82", int64(-62135596800000000000/1000), int16(540), "", 0.0, true, int64(7), uint8(2))
	f.Fuzz(func(t *testing.T, id uint8, typ, content, delta string, unixNano int64, offsetMin int16, key string,
		val float64, isError bool, dur int64, input uint8) {
		inputs := []json.RawMessage{nil, json.RawMessage(`{"a":1}`), json.RawMessage(`"x\u003c"`), json.RawMessage(`null`)}
		ids := []string{"a", "b", "", "a\xff"}
		b := conversation.Block{ID: ids[int(id)%len(ids)], Type: conversation.BlockType(typ), Content: content,
			IsError: isError, DurationMs: dur, Input: inputs[int(input)%len(inputs)]}
		if unixNano != 0 {
			b.Timestamp = time.Unix(0, unixNano).In(time.FixedZone("", int(offsetMin)*60))
		}
		if key != "" {
			b.Metadata = map[string]any{key: val}
		}
		if _, err := json.Marshal(b); err != nil {
			// Upsert would panic; ApplyBlock refuses it.
			if err := conversation.NewReducer().ApplyBlock("", b); err == nil {
				t.Fatal("ApplyBlock took a block json.Marshal refuses")
			}
			return
		}
		var steps []step
		for _, conv := range []string{"", "sub"} {
			steps = append(steps, step{conv: conv, block: &b}, step{conv: conv, id: b.ID, text: delta},
				step{conv: conv, block: &conversation.Block{ID: b.ID, Type: "x", Output: delta}})
		}
		applyBoth(t, steps)
	})
}

// TestTruncationMerge: truncated (and attachments) are values an upsert
// replaces whole, never merged into, and states read before keep theirs;
// ApplyBlock agrees with Apply.
func TestTruncationMerge(t *testing.T) {
	ref := &conversation.ArtifactRef{SHA256: "ab", Size: 9, ContentType: "text/plain; charset=utf-8"}
	first := &conversation.Truncation{Field: "output", TotalBytes: 5, Tail: "de", ArtifactError: "failed"}
	last := &conversation.Truncation{Field: "output", TotalBytes: 9, Tail: "hi\xff", Artifact: ref}
	applyBoth(t, []step{
		{block: &conversation.Block{ID: "r", Type: conversation.BlockToolResult, Status: conversation.StatusPending}},
		{id: "r", text: "abcdef"},
		{block: &conversation.Block{ID: "r", Type: conversation.BlockToolResult, Output: "ab", Truncated: first}},
		{block: &conversation.Block{ID: "r", Type: conversation.BlockToolResult, Status: conversation.StatusComplete}},
		{block: &conversation.Block{ID: "r", Type: conversation.BlockToolResult, Truncated: last,
			Attachments: []conversation.ArtifactRef{*ref}}},
		{block: &conversation.Block{ID: "r", Type: conversation.BlockToolResult, Attachments: []conversation.ArtifactRef{}}},
	})

	r := conversation.NewReducer()
	apply := func(b conversation.Block) {
		t.Helper()
		if err := r.Apply(conversation.Upsert(b)); err != nil {
			t.Fatal(err)
		}
	}
	apply(conversation.Block{ID: "r", Type: conversation.BlockToolResult, Output: "ab", Truncated: first})
	before := r.State()
	apply(conversation.Block{ID: "r", Type: conversation.BlockToolResult, Truncated: &conversation.Truncation{Field: "output", TotalBytes: 7, Tail: "fg"}})
	got := r.State().Blocks[0]
	if tr := got.Truncated; tr.TotalBytes != 7 || tr.Tail != "fg" || tr.ArtifactError != "" || got.Output != "ab" {
		t.Fatalf("after the second truncation: %+v %+v", got, tr)
	}
	if tr := before.Blocks[0].Truncated; tr.TotalBytes != 5 || tr.ArtifactError != "failed" {
		t.Fatalf("an earlier state changed: %+v", tr)
	}
	apply(conversation.Block{ID: "r", Type: conversation.BlockToolResult, Status: conversation.StatusComplete})
	if tr := r.State().Blocks[0].Truncated; tr == nil || tr.TotalBytes != 7 {
		t.Fatalf("an upsert without truncated dropped it: %+v", tr)
	}
}
