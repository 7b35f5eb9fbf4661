package claudeconv

import (
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/agentd/agentd/agent/agenttest"
	"github.com/agentd/agentd/conversation"
)

// convertLines runs lines through one StreamConverter; any skipped line
// fails the test.
func convertLines(t *testing.T, lines ...string) []conversation.Event {
	t.Helper()
	return agenttest.ConvertLines(t, NewStreamConverter(), lines...)
}

func mustReduce(t *testing.T, events []conversation.Event) conversation.State {
	t.Helper()
	st, err := conversation.Reduce(events)
	if err != nil {
		t.Fatalf("reduce: %v", err)
	}
	return st
}

func payload[T any](t *testing.T, e conversation.Event) T {
	t.Helper()
	var v T
	if err := json.Unmarshal(e.Payload, &v); err != nil {
		t.Fatalf("decode %s payload %s: %v", e.Type, e.Payload, err)
	}
	return v
}

func blockByID(t *testing.T, blocks []conversation.Block, id string) conversation.Block {
	t.Helper()
	for _, b := range blocks {
		if b.ID == id {
			return b
		}
	}
	t.Fatalf("no block %q among %d blocks", id, len(blocks))
	return conversation.Block{}
}

func subagentByID(t *testing.T, st conversation.State, id string) conversation.Subagent {
	t.Helper()
	for _, s := range st.Subagents {
		if s.ID == id {
			return s
		}
	}
	t.Fatalf("no subagent %q", id)
	return conversation.Subagent{}
}

func ids(blocks []conversation.Block) []string {
	var out []string
	for _, b := range blocks {
		out = append(out, b.ID)
	}
	return out
}

const (
	lineMsgStart  = `{"type":"stream_event","event":{"type":"message_start","message":{"model":"claude-x","id":"msg_1","type":"message","role":"assistant","content":[]}},"parent_tool_use_id":null,"uuid":"s1"}`
	lineTextStart = `{"type":"stream_event","event":{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}},"parent_tool_use_id":null,"uuid":"s2"}`
	lineDelta1    = `{"type":"stream_event","event":{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Hel"}},"parent_tool_use_id":null,"uuid":"s3"}`
	lineDelta2    = `{"type":"stream_event","event":{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"lo <b>"}},"parent_tool_use_id":null,"uuid":"s4"}`
	lineText      = `{"type":"assistant","message":{"model":"claude-x","id":"msg_1","type":"message","role":"assistant","content":[{"type":"text","text":"Hello <b>"}]},"parent_tool_use_id":null,"uuid":"a1"}`
	lineTextStop  = `{"type":"stream_event","event":{"type":"content_block_stop","index":0},"parent_tool_use_id":null,"uuid":"s5"}`
)

func TestStreamTextDeltasThenCompleteBlock(t *testing.T) {
	events := convertLines(t, lineMsgStart, lineTextStart, lineDelta1, lineDelta2, lineText, lineTextStop)
	ups := agenttest.OfType(events, conversation.TypeBlockUpsert)
	if len(ups) != 2 {
		t.Fatalf("want a pending and a complete upsert, got %d", len(ups))
	}
	first := payload[conversation.BlockUpsert](t, ups[0]).Block
	if first.ID != "msg_1-0" || first.Status != conversation.StatusPending || first.Type != conversation.BlockAssistantText {
		t.Fatalf("opening upsert = %+v", first)
	}
	deltas := agenttest.OfType(events, conversation.TypeBlockDelta)
	if len(deltas) != 2 || payload[conversation.BlockDelta](t, deltas[1]).Delta != "lo <b>" {
		t.Fatalf("deltas = %v", deltas)
	}
	st := mustReduce(t, events)
	b := blockByID(t, st.Blocks, "msg_1-0")
	if b.Content != "Hello <b>" || b.Status != conversation.StatusComplete || b.Model != "claude-x" {
		t.Fatalf("final block = %+v", b)
	}
	for _, e := range events {
		if e.Context.ConversationID != conversation.MainConversation || e.Context.Source != conversation.SourceRunner {
			t.Fatalf("event context = %+v", e.Context)
		}
	}
	// Without partial messages the same block results.
	plain := mustReduce(t, convertLines(t, lineText))
	if !reflect.DeepEqual(plain.Blocks, st.Blocks) {
		t.Fatalf("without partials %+v\nwith partials %+v", plain.Blocks, st.Blocks)
	}
}

func TestStreamThinkingDeltas(t *testing.T) {
	events := convertLines(t,
		lineMsgStart,
		`{"type":"stream_event","event":{"type":"content_block_start","index":0,"content_block":{"type":"thinking","thinking":""}}}`,
		`{"type":"stream_event","event":{"type":"content_block_delta","index":0,"delta":{"type":"thinking_delta","thinking":"Let me "}}}`,
		`{"type":"stream_event","event":{"type":"content_block_delta","index":0,"delta":{"type":"signature_delta","signature":"abc"}}}`,
		`{"type":"stream_event","event":{"type":"content_block_delta","index":0,"delta":{"type":"thinking_delta","thinking":"think."}}}`,
	)
	st := mustReduce(t, events)
	b := blockByID(t, st.Blocks, "msg_1-0")
	if b.Type != conversation.BlockThinking || b.Content != "Let me think." || b.Status != conversation.StatusPending {
		t.Fatalf("streamed thinking = %+v", b)
	}
	// The complete line closes the block; a delta arriving after it is
	// dropped rather than appended twice.
	c := NewStreamConverter()
	var all []conversation.Event
	for _, l := range []string{lineMsgStart,
		`{"type":"stream_event","event":{"type":"content_block_start","index":0,"content_block":{"type":"thinking","thinking":""}}}`,
		`{"type":"stream_event","event":{"type":"content_block_delta","index":0,"delta":{"type":"thinking_delta","thinking":"Let me think."}}}`,
		`{"type":"assistant","message":{"id":"msg_1","content":[{"type":"thinking","thinking":"Let me think.","signature":"abc"}]}}`,
		`{"type":"stream_event","event":{"type":"content_block_delta","index":0,"delta":{"type":"thinking_delta","thinking":"late"}}}`,
	} {
		ev, err := c.Convert([]byte(l))
		if err != nil {
			t.Fatal(err)
		}
		all = append(all, ev...)
	}
	b = blockByID(t, mustReduce(t, all).Blocks, "msg_1-0")
	if b.Content != "Let me think." || b.Status != conversation.StatusComplete {
		t.Fatalf("completed thinking = %+v (a delta after the complete line must be dropped)", b)
	}
}

func TestStreamBlockIDsCountAcrossLines(t *testing.T) {
	events := convertLines(t,
		`{"type":"assistant","message":{"id":"msg_A","content":[{"type":"text","text":"one"}]},"uuid":"u1"}`,
		`{"type":"assistant","message":{"id":"msg_A","content":[{"type":"tool_use","id":"toolu_1","name":"Bash","input":{"command":"ls","description":"List"}}]},"uuid":"u2"}`,
		`{"type":"assistant","message":{"id":"msg_A","content":[{"type":"text","text":"two"}]},"uuid":"u3"}`,
		`{"type":"assistant","message":{"id":"msg_B","content":[{"type":"text","text":"three"},{"type":"text","text":"four"}]},"uuid":"u4"}`,
	)
	st := mustReduce(t, events)
	if got, want := ids(st.Blocks), []string{"msg_A-0", "toolu_1", "msg_A-2", "msg_B-0", "msg_B-1"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("ids = %v, want %v", got, want)
	}
	tool := blockByID(t, st.Blocks, "toolu_1")
	if tool.Type != conversation.BlockToolUse || tool.ToolName != "Bash" || tool.Description != "List" ||
		string(tool.Input) != `{"command":"ls","description":"List"}` || tool.Status != conversation.StatusComplete {
		t.Fatalf("tool block = %+v", tool)
	}
}

func TestStreamStreamedIndexMatchesCompleteLine(t *testing.T) {
	// The text block streamed at index 1 after a tool call at index 0: the
	// complete line must address msg_1-1, not renumber it.
	events := convertLines(t,
		lineMsgStart,
		`{"type":"stream_event","event":{"type":"content_block_start","index":0,"content_block":{"type":"tool_use","id":"toolu_9","name":"Read","input":{}}}}`,
		`{"type":"stream_event","event":{"type":"content_block_delta","index":0,"delta":{"type":"input_json_delta","partial_json":"{\"file_path\":"}}}`,
		`{"type":"stream_event","event":{"type":"content_block_delta","index":0,"delta":{"type":"input_json_delta","partial_json":"\"a.go\"}"}}}`,
		`{"type":"assistant","message":{"id":"msg_1","content":[{"type":"tool_use","id":"toolu_9","name":"Read","input":{"file_path":"a.go"}}]}}`,
		`{"type":"stream_event","event":{"type":"content_block_stop","index":0}}`,
		`{"type":"stream_event","event":{"type":"content_block_start","index":1,"content_block":{"type":"text","text":""}}}`,
		`{"type":"stream_event","event":{"type":"content_block_delta","index":1,"delta":{"type":"text_delta","text":"Done"}}}`,
		`{"type":"assistant","message":{"id":"msg_1","content":[{"type":"text","text":"Done"}]}}`,
	)
	st := mustReduce(t, events)
	if got, want := ids(st.Blocks), []string{"toolu_9", "msg_1-1"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("ids = %v, want %v", got, want)
	}
	if b := blockByID(t, st.Blocks, "toolu_9"); string(b.Input) != `{"file_path":"a.go"}` || b.Status != conversation.StatusComplete {
		t.Fatalf("tool = %+v", b)
	}
}

func TestStreamToolInputFromDeltasWhenLineMissing(t *testing.T) {
	events := convertLines(t,
		lineMsgStart,
		`{"type":"stream_event","event":{"type":"content_block_start","index":0,"content_block":{"type":"tool_use","id":"toolu_9","name":"Read","input":{}}}}`,
		`{"type":"stream_event","event":{"type":"content_block_delta","index":0,"delta":{"type":"input_json_delta","partial_json":"{\"file_path\": "}}}`,
		`{"type":"stream_event","event":{"type":"content_block_delta","index":0,"delta":{"type":"input_json_delta","partial_json":"\"a.go\"}"}}}`,
		`{"type":"stream_event","event":{"type":"content_block_stop","index":0}}`,
	)
	b := blockByID(t, mustReduce(t, events).Blocks, "toolu_9")
	if string(b.Input) != `{"file_path":"a.go"}` || b.Status != conversation.StatusPending || b.ToolName != "Read" {
		t.Fatalf("interrupted tool = %+v", b)
	}
	// Broken partial JSON is not emitted.
	events = convertLines(t,
		lineMsgStart,
		`{"type":"stream_event","event":{"type":"content_block_start","index":0,"content_block":{"type":"tool_use","id":"toolu_9","name":"Read","input":{}}}}`,
		`{"type":"stream_event","event":{"type":"content_block_delta","index":0,"delta":{"type":"input_json_delta","partial_json":"{\"file_pa"}}}`,
		`{"type":"stream_event","event":{"type":"content_block_stop","index":0}}`,
	)
	// (The reduced block has the {} the reducer gives a tool_use without input.)
	if b := blockByID(t, mustReduce(t, events).Blocks, "toolu_9"); string(b.Input) != "{}" {
		t.Fatalf("truncated input emitted: %s", b.Input)
	}
}

const (
	lineTask      = `{"type":"assistant","message":{"id":"msg_T","content":[{"type":"tool_use","id":"toolu_task","name":"Task","input":{"subagent_type":"general-purpose","description":"Write file","prompt":"Write hello.txt"}}]},"parent_tool_use_id":null,"uuid":"t1"}`
	lineSubPrompt = `{"type":"user","message":{"role":"user","content":[{"type":"text","text":"Write hello.txt"}]},"parent_tool_use_id":"toolu_task","uuid":"t2"}`
	lineSubTool   = `{"type":"assistant","message":{"id":"msg_S","content":[{"type":"tool_use","id":"toolu_w","name":"Write","input":{"file_path":"hello.txt","content":"hi"}}]},"parent_tool_use_id":"toolu_task","uuid":"t3"}`
	lineSubResult = `{"type":"user","message":{"role":"user","content":[{"tool_use_id":"toolu_w","type":"tool_result","content":"File created"}]},"parent_tool_use_id":"toolu_task","uuid":"t4","tool_use_result":{"type":"create","durationMs":7}}`
	lineTaskDone  = `{"type":"user","message":{"role":"user","content":[{"tool_use_id":"toolu_task","type":"tool_result","content":[{"type":"text","text":"Wrote it."},{"type":"text","text":"agentId: abc123 (for resuming to continue this agent's work if needed)"}]}]},"parent_tool_use_id":null,"uuid":"t5","tool_use_result":{"status":"completed","agentId":"abc123","content":[{"type":"text","text":"Wrote it."}],"totalDurationMs":2330}}`
)

func TestStreamSubagent(t *testing.T) {
	events := convertLines(t, lineTask, lineSubPrompt, lineSubTool, lineSubResult, lineTaskDone)
	spawned := agenttest.OfType(events, conversation.TypeSubagentSpawned)
	if len(spawned) != 1 {
		t.Fatalf("spawned events: %d", len(spawned))
	}
	sp := payload[conversation.SubagentSpawned](t, spawned[0])
	if sp != (conversation.SubagentSpawned{ToolUseID: "toolu_task", Prompt: "Write hello.txt", SubagentType: "general-purpose", Description: "Write file"}) {
		t.Fatalf("spawned = %+v", sp)
	}
	done := agenttest.OfType(events, conversation.TypeSubagentCompleted)
	if len(done) != 1 {
		t.Fatalf("completed events: %d", len(done))
	}
	if c := payload[conversation.SubagentCompleted](t, done[0]); c.AgentID != "abc123" || c.Output != "Wrote it." ||
		c.Status != conversation.StatusComplete || c.DurationMs != 2330 {
		t.Fatalf("completed = %+v", c)
	}
	st := mustReduce(t, events)
	if len(st.Blocks) != 1 {
		t.Fatalf("main blocks = %v (the Task call must be a subagent block, not tool_use + tool_result)", ids(st.Blocks))
	}
	b := st.Blocks[0]
	if b.Type != conversation.BlockSubagent || b.SubagentID != "toolu_task" || b.Name != "general-purpose" ||
		string(b.Input) != `"Write hello.txt"` || b.Output != "Wrote it." || b.DurationMs != 2330 || b.Status != conversation.StatusComplete {
		t.Fatalf("subagent block = %+v", b)
	}
	sa := subagentByID(t, st, "toolu_task")
	if sa.AgentID != "abc123" || sa.Status != conversation.StatusComplete {
		t.Fatalf("subagent = %+v", sa)
	}
	if got, want := ids(sa.Blocks), []string{"t2-0", "toolu_w", "toolu_w-result"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("subagent blocks = %v, want %v", got, want)
	}
	if r := blockByID(t, sa.Blocks, "toolu_w-result"); r.DurationMs != 7 || r.Output != "File created" {
		t.Fatalf("subagent tool result = %+v", r)
	}
}

func TestStreamAgentToolAndFailedSubagent(t *testing.T) {
	events := convertLines(t,
		`{"type":"assistant","message":{"id":"m","content":[{"type":"tool_use","id":"toolu_a","name":"Agent","input":{"description":"d"}}]}}`,
		`{"type":"user","message":{"content":[{"type":"tool_result","tool_use_id":"toolu_a","is_error":true,"content":"<tool_use_error>prompt missing</tool_use_error>"}]},"tool_use_result":"InputValidationError"}`,
	)
	st := mustReduce(t, events)
	b := blockByID(t, st.Blocks, "toolu_a")
	if b.Type != conversation.BlockSubagent || b.Status != conversation.StatusError || b.Output != "prompt missing" {
		t.Fatalf("failed subagent block = %+v", b)
	}
	if c := payload[conversation.SubagentCompleted](t, agenttest.OfType(events, conversation.TypeSubagentCompleted)[0]); c.Status != conversation.StatusError {
		t.Fatalf("completed = %+v", c)
	}
}

func TestStreamBackgroundSubagent(t *testing.T) {
	events := convertLines(t,
		lineTask,
		`{"type":"system","subtype":"task_started","task_id":"bg1","tool_use_id":"toolu_task","description":"Write file","task_type":"local_agent"}`,
		`{"type":"user","message":{"content":[{"type":"tool_result","tool_use_id":"toolu_task","content":"Async agent launched successfully."}]},"tool_use_result":{"isAsync":true,"status":"async_launched","agentId":"bg1"}}`,
		`{"type":"system","subtype":"task_progress","task_id":"bg1","description":"working"}`,
	)
	if n := len(agenttest.OfType(events, conversation.TypeSubagentCompleted)); n != 0 {
		t.Fatalf("a background launch completed the subagent (%d events)", n)
	}
	st := mustReduce(t, events)
	if b := st.Blocks[0]; b.Status != conversation.StatusPending || b.Metadata["background"] != true {
		t.Fatalf("launched block = %+v", b)
	}
	c := NewStreamConverter()
	for _, l := range []string{lineTask,
		`{"type":"user","message":{"content":[{"type":"tool_result","tool_use_id":"toolu_task","content":"Async agent launched successfully."}]},"tool_use_result":{"isAsync":true,"status":"async_launched","agentId":"bg1"}}`,
	} {
		if _, err := c.Convert([]byte(l)); err != nil {
			t.Fatal(err)
		}
	}
	ev, err := c.Convert([]byte(`{"type":"system","subtype":"task_notification","task_id":"bg1","status":"failed","summary":"it broke","usage":{"duration_ms":900}}`))
	if err != nil {
		t.Fatal(err)
	}
	done := agenttest.OfType(ev, conversation.TypeSubagentCompleted)
	if len(done) != 1 {
		t.Fatalf("notification did not complete the subagent: %v", ev)
	}
	if p := payload[conversation.SubagentCompleted](t, done[0]); p.Status != conversation.StatusError || p.Output != "it broke" || p.DurationMs != 900 || p.AgentID != "bg1" {
		t.Fatalf("completed = %+v", p)
	}
}

func TestStreamSkillLoad(t *testing.T) {
	events := convertLines(t,
		`{"type":"assistant","message":{"id":"m","content":[{"type":"tool_use","id":"toolu_s","name":"Skill","input":{"skill":"test-skill"}}]}}`,
		`{"type":"user","message":{"content":[{"type":"tool_result","tool_use_id":"toolu_s","content":"Launching skill: test-skill"}]},"uuid":"r1","tool_use_result":{"success":true,"commandName":"test-skill"}}`,
		`{"type":"user","message":{"content":[{"type":"text","text":"Base directory for this skill: /x\n\necho hi"}]},"uuid":"r2","isSynthetic":true}`,
		`{"type":"user","message":{"content":[{"type":"text","text":"later synthetic"}]},"uuid":"r3","isSynthetic":true}`,
	)
	st := mustReduce(t, events)
	if got, want := ids(st.Blocks), []string{"toolu_s", "toolu_s-result", "r2-0", "r3-0"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("ids = %v, want %v", got, want)
	}
	sk := blockByID(t, st.Blocks, "r2-0")
	if sk.Type != conversation.BlockSkillLoad || sk.SkillName != "test-skill" || !strings.HasPrefix(sk.Content, "Base directory") {
		t.Fatalf("skill block = %+v", sk)
	}
	if b := blockByID(t, st.Blocks, "r3-0"); b.Type != conversation.BlockUserMessage || b.Metadata["synthetic"] != true {
		t.Fatalf("second synthetic message = %+v", b)
	}
}

func TestStreamUserLines(t *testing.T) {
	events := convertLines(t,
		`{"type":"user","message":{"role":"user","content":"plain prompt"},"uuid":"u1","timestamp":"2025-01-02T03:04:05.678Z"}`,
		`{"type":"user","message":{"content":[{"type":"text","text":"look"},{"type":"image","source":{"type":"base64","media_type":"image/png","data":"AAAA"}}]},"uuid":"u2"}`,
		`{"type":"user","message":{"content":[{"type":"text","text":"[Request interrupted by user]"}]},"uuid":"u3"}`,
		`{"type":"user","message":{"content":[{"type":"text","text":"summary of before"}]},"uuid":"u4","isCompactSummary":true}`,
		`{"type":"user","message":{"content":[{"type":"tool_result","tool_use_id":"toolu_x","content":[{"type":"text","text":"a"},{"type":"image","source":{"media_type":"image/jpeg"}},{"type":"text","text":"b"}]},{"type":"text","text":"next prompt"}]},"uuid":"u5"}`,
	)
	st := mustReduce(t, events)
	want := []struct {
		id, typ, text string
	}{
		{"u1-0", "user_message", "plain prompt"},
		{"u2-0", "user_message", "look\n[image: image/png]"},
		{"u3-0", "system", "[Request interrupted by user]"},
		{"u4-0", "system", "summary of before"},
		{"toolu_x-result", "tool_result", "a\n[image: image/jpeg]\nb"},
		{"u5-1", "user_message", "next prompt"},
	}
	if len(st.Blocks) != len(want) {
		t.Fatalf("blocks = %v", ids(st.Blocks))
	}
	for i, w := range want {
		b := st.Blocks[i]
		text := b.Content + b.Message + b.Output
		if b.ID != w.id || string(b.Type) != w.typ || text != w.text {
			t.Errorf("block %d = %s %s %q, want %s %s %q", i, b.ID, b.Type, text, w.id, w.typ, w.text)
		}
	}
	ts := time.Date(2025, 1, 2, 3, 4, 5, 678e6, time.UTC)
	if !st.Blocks[0].Timestamp.Equal(ts) || !events[0].Context.Timestamp.Equal(ts) {
		t.Fatalf("timestamps: block %v, event %v", st.Blocks[0].Timestamp, events[0].Context.Timestamp)
	}
}

func TestStreamToolErrorAndServerTools(t *testing.T) {
	events := convertLines(t,
		`{"type":"assistant","message":{"id":"m","content":[{"type":"tool_use","id":"toolu_e","name":"Edit","input":{}}]}}`,
		`{"type":"user","message":{"content":[{"type":"tool_result","tool_use_id":"toolu_e","is_error":true,"content":"<tool_use_error>File has not been read yet.</tool_use_error>"}]}}`,
		`{"type":"assistant","message":{"id":"m2","content":[{"type":"server_tool_use","id":"srvtoolu_1","name":"web_search","input":{"query":"go"}},{"type":"web_search_tool_result","tool_use_id":"srvtoolu_1","content":[{"type":"web_search_result","title":"Go","url":"https://go.dev"}]},{"type":"text","text":"Found it"}]}}`,
	)
	st := mustReduce(t, events)
	r := blockByID(t, st.Blocks, "toolu_e-result")
	if !r.IsError || r.Status != conversation.StatusError || r.Output != "File has not been read yet." {
		t.Fatalf("error result = %+v", r)
	}
	if got, want := ids(st.Blocks), []string{"toolu_e", "toolu_e-result", "srvtoolu_1", "srvtoolu_1-result", "m2-2"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("ids = %v, want %v", got, want)
	}
}

func TestStreamAPIErrorMessage(t *testing.T) {
	events := convertLines(t,
		`{"type":"assistant","message":{"id":"e1","model":"<synthetic>","content":[{"type":"text","text":"API Error: 529 overloaded"}]},"isApiErrorMessage":true,"error":"overloaded","uuid":"x"}`,
	)
	b := mustReduce(t, events).Blocks[0]
	if b.Type != conversation.BlockError || b.Message != "API Error: 529 overloaded" || b.Code != "overloaded" || b.Status != conversation.StatusError {
		t.Fatalf("api error block = %+v", b)
	}
	if n := len(agenttest.OfType(events, conversation.TypeMetadataUpdate)); n != 0 {
		t.Fatalf("the synthetic model was reported as the session's model")
	}
}

func TestStreamResult(t *testing.T) {
	c := NewStreamConverter()
	conv := func(l string) []conversation.Event {
		t.Helper()
		ev, err := c.Convert([]byte(l))
		if err != nil {
			t.Fatal(err)
		}
		return ev
	}
	conv(`{"type":"system","subtype":"init","session_id":"s","model":"claude-main","claude_code_version":"2.1.7","tools":["Bash"]}`)
	ev := conv(`{"type":"result","subtype":"success","is_error":false,"duration_ms":1500,"result":"4","total_cost_usd":0.1,"usage":{"input_tokens":10,"output_tokens":5,"cache_read_input_tokens":3,"cache_creation_input_tokens":2},"modelUsage":{"claude-haiku":{"costUSD":0.09},"claude-main":{"costUSD":0.01}}}`)
	if len(ev) != 2 || ev[0].Type != conversation.TypeMetadataUpdate || ev[1].Type != conversation.TypeQueryCompleted {
		t.Fatalf("result events = %v", ev)
	}
	md := payload[conversation.MetadataUpdate](t, ev[0])
	if *md.CostUSD != 0.1 || md.Model != "claude-main" || *md.Usage != (conversation.Usage{InputTokens: 10, OutputTokens: 5, CacheReadInputTokens: 3, CacheCreationInputTokens: 2}) {
		t.Fatalf("metadata = %+v usage %+v", md, md.Usage)
	}
	if q := payload[conversation.QueryCompleted](t, ev[1]); q.Result != "4" || q.DurationMs != 1500 || q.QueryID != "" {
		t.Fatalf("completed = %+v", q)
	}
	ev = conv(`{"type":"result","subtype":"error_max_turns","is_error":true,"duration_ms":10,"total_cost_usd":0.25}`)
	if md := payload[conversation.MetadataUpdate](t, ev[0]); *md.CostUSD < 0.1499999 || *md.CostUSD > 0.1500001 {
		t.Fatalf("cost increment = %v, want 0.15", *md.CostUSD)
	}
	if q := payload[conversation.QueryFailed](t, ev[1]); q.Code != "MAX_TURNS" || q.Error == "" {
		t.Fatalf("failed = %+v", q)
	}
	ev = conv(`{"type":"result","subtype":"success","is_error":true,"result":"API Error: 401 invalid key"}`)
	if q := payload[conversation.QueryFailed](t, ev[len(ev)-1]); q.Code != "API_ERROR" || q.Error != "API Error: 401 invalid key" {
		t.Fatalf("failed = %+v", q)
	}
	ev = conv(`{"type":"result","subtype":"error_during_execution","is_error":true,"errors":["tool crashed"]}`)
	if q := payload[conversation.QueryFailed](t, ev[len(ev)-1]); q.Code != "EXECUTION_ERROR" || q.Error != "tool crashed" {
		t.Fatalf("failed = %+v", q)
	}
	// Without init, the model comes from modelUsage (the most expensive).
	ev = convertLines(t, `{"type":"result","subtype":"success","modelUsage":{"b":{"costUSD":1},"a":{"costUSD":2}}}`)
	if md := payload[conversation.MetadataUpdate](t, ev[0]); md.Model != "a" {
		t.Fatalf("model = %q", md.Model)
	}
}

func TestStreamSystemLines(t *testing.T) {
	init := `{"type":"system","subtype":"init","cwd":"/w","session_id":"sess-1","tools":["Task","Bash"],"model":"claude-opus","permissionMode":"default","claude_code_version":"2.1.3","uuid":"i"}`
	in, ok := ParseInit([]byte(init))
	if !ok || in.SessionID != "sess-1" || in.Model != "claude-opus" || in.Version != "2.1.3" || !reflect.DeepEqual(in.Tools, []string{"Task", "Bash"}) {
		t.Fatalf("ParseInit = %+v, %v", in, ok)
	}
	if _, ok := ParseInit([]byte(`{"type":"system","subtype":"status"}`)); ok {
		t.Fatal("ParseInit accepted a status line")
	}
	if _, ok := ParseInit([]byte(`{"type":`)); ok {
		t.Fatal("ParseInit accepted bad JSON")
	}
	events := convertLines(t, init,
		`{"type":"system","subtype":"status","status":"compacting"}`,
		`{"type":"system","subtype":"status","status":null}`,
		`{"type":"system","subtype":"status","status":"requesting"}`,
		`{"type":"system","subtype":"hook_response","hook_name":"SessionStart:Callback","hook_event":"SessionStart","stdout":"","stderr":""}`,
		`{"type":"system","subtype":"hook_response","hook_name":"Stop","exit_code":2,"stderr":"denied"}`,
		`{"type":"system","subtype":"api_retry","attempt":1,"max_retries":10,"retry_delay_ms":600,"error_status":529,"error":"overloaded"}`,
		`{"type":"system","subtype":"compact_boundary","compact_metadata":{"trigger":"auto","pre_tokens":1234},"uuid":"cb"}`,
		`{"type":"system","subtype":"brand_new","detail":1}`,
	)
	logs := agenttest.OfType(events, conversation.TypeLog)
	want := []struct {
		level conversation.LogLevel
		msg   string
	}{
		{conversation.LevelInfo, "Claude Code 2.1.3 started with model claude-opus"},
		{conversation.LevelInfo, "status: compacting"},
		{conversation.LevelInfo, "status cleared"},
		{conversation.LevelDebug, "status: requesting"},
		{conversation.LevelDebug, "hook SessionStart:Callback response"},
		{conversation.LevelWarn, "hook Stop response failed: denied"},
		{conversation.LevelWarn, "API request failed: overloaded (HTTP 529); retry 1/10 in 600 ms"},
		{conversation.LevelInfo, `system message "brand_new"`},
	}
	if len(logs) != len(want) {
		t.Fatalf("logs = %d, want %d", len(logs), len(want))
	}
	for i, w := range want {
		p := payload[conversation.LogEvent](t, logs[i])
		if p.Level != w.level || p.Message != w.msg {
			t.Errorf("log %d = %s %q, want %s %q", i, p.Level, p.Message, w.level, w.msg)
		}
	}
	var data initData
	if err := json.Unmarshal(payload[conversation.LogEvent](t, logs[0]).Data, &data); err != nil || data.Version != "2.1.3" || data.SessionID != "sess-1" {
		t.Fatalf("init data = %+v, %v", data, err)
	}
	if d := payload[conversation.LogEvent](t, logs[7]).Data; !strings.Contains(string(d), `"brand_new"`) {
		t.Fatalf("unknown subtype log lacks the raw line: %s", d)
	}
	st := mustReduce(t, events)
	if b := blockByID(t, st.Blocks, "cb-0"); b.Type != conversation.BlockSystem || b.Subtype != "compact_boundary" || !strings.Contains(b.Message, "1234 tokens") {
		t.Fatalf("compact block = %+v", b)
	}
}

func TestStreamBadLinesAreSkipped(t *testing.T) {
	c := NewStreamConverter()
	for _, l := range []string{`{"type":"assistant","message":{"id":"m","content":[{"type":"te`, `not json`, `[1,2]`, `{"type":"user"} trailing`, `{"type":"user","message":{"content":"\x"}}`} {
		ev, err := c.Convert([]byte(l))
		if !errors.Is(err, ErrMalformed) || ev != nil {
			t.Errorf("%q: err=%v events=%v, want ErrMalformed", l, err, ev)
		}
	}
	for _, l := range []string{`{"type":"summary","summary":"x","leafUuid":"y"}`, `{"type":"file-history-snapshot"}`, `{"type":"queue-operation"}`} {
		if _, err := c.Convert([]byte(l)); !errors.Is(err, ErrIgnored) {
			t.Errorf("%q: err=%v, want ErrIgnored", l, err)
		}
	}
	if ev, err := c.Convert([]byte("  \r\n")); ev != nil || err != nil {
		t.Errorf("blank line: %v %v", ev, err)
	}
	// Still usable, and odd-but-valid shapes never panic.
	for _, l := range []string{
		`{"type":"assistant","message":{"id":"m","content":[{"type":"text","text":"ok"}]}}`,
		`{"type":"assistant","message":{"content":5}}`,
		`{"type":"assistant","message":null}`,
		`{"type":"user","message":{"content":[1,"x",null]}}`,
		`{"type":"stream_event","event":{"type":"content_block_delta","index":99,"delta":{"type":"text_delta","text":"x"}}}`,
		`{"type":"stream_event","event":{"type":"content_block_start","index":-1}}`,
		`{"type":"stream_event","event":"nope"}`,
		`{"type":"result","usage":"nope","total_cost_usd":"x"}`,
		`{"type":"system","subtype":"init","tools":"x"}`,
		`{"type":"user","uuid":5,"message":{"content":[{"type":"tool_result","tool_use_id":"t","content":{"odd":true}}]},"tool_use_result":{"agentId":{"a":1},"totalDurationMs":"x"}}`,
		`{"type":"assistant","message":{"id":7,"content":[{"type":"tool_use","id":null,"name":"Task","input":"not an object"}]}}`,
	} {
		ev, err := c.Convert([]byte(l))
		if err != nil {
			t.Errorf("%q: %v", l, err)
		}
		if _, err := conversation.Reduce(ev); err != nil {
			t.Errorf("%q: events do not reduce: %v", l, err)
		}
	}
}

func TestStreamUnknownTypesAreLogged(t *testing.T) {
	events := convertLines(t,
		`{"type":"brand_new_kind","x":1}`,
		`{"type":"assistant","message":{"id":"m","content":[{"type":"hologram","beam":true},{"type":"text","text":"after"}]}}`,
		`{"type":"keep_alive"}`,
	)
	logs := agenttest.OfType(events, conversation.TypeLog)
	if len(logs) != 2 {
		t.Fatalf("logs = %d, want 2", len(logs))
	}
	if d := payload[conversation.LogEvent](t, logs[0]).Data; string(d) != `{"type":"brand_new_kind","x":1}` {
		t.Fatalf("unknown line data = %s", d)
	}
	if d := payload[conversation.LogEvent](t, logs[1]).Data; string(d) != `{"type":"hologram","beam":true}` {
		t.Fatalf("unknown block data = %s", d)
	}
	// The unknown block still takes its place in the numbering.
	if got := ids(mustReduce(t, events).Blocks); !reflect.DeepEqual(got, []string{"m-1"}) {
		t.Fatalf("ids = %v", got)
	}
}

func TestStreamErrorLines(t *testing.T) {
	events := convertLines(t,
		`{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}`,
		`{"type":"error","error":"boom"}`,
		`{"type":"error"}`,
		`{"type":"stream_event","event":{"type":"error","error":{"type":"api_error","message":"Internal"}}}`,
	)
	want := []conversation.ErrorEvent{
		{Message: "Overloaded", Code: "overloaded_error"}, {Message: "boom"},
		{Message: "Claude Code reported an error"}, {Message: "Internal", Code: "api_error"},
	}
	if len(events) != len(want) {
		t.Fatalf("events = %v", events)
	}
	for i, w := range want {
		if events[i].Type != conversation.TypeError || payload[conversation.ErrorEvent](t, events[i]) != w {
			t.Errorf("event %d = %s %s, want %+v", i, events[i].Type, events[i].Payload, w)
		}
	}
}

func TestStreamDuplicateLinesConvertOnce(t *testing.T) {
	events := convertLines(t, lineText, lineText)
	if n := len(agenttest.OfType(events, conversation.TypeBlockUpsert)); n != 1 {
		t.Fatalf("a repeated line (same uuid) was converted %d times", n)
	}
}
