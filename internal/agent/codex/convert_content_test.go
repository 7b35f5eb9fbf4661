package codex_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/agentd/agentd/agent/agenttest"
	"github.com/agentd/agentd/conversation"
	"github.com/agentd/agentd/internal/agent/agenttest/e2etest"
	"github.com/agentd/agentd/internal/agent/agenttest/formattest"
	"github.com/agentd/agentd/internal/agent/codex"
)

const (
	execDir  = "testdata/agent-output/"
	rollout  = execDir + "agentcmd__rollout-2025-09-24T20-12-23-01997ea4.jsonl"
	appTurns = "testdata/app-server/three-turns.jsonl"
)

func TestExecCommandAndUsage(t *testing.T) {
	st, events := formattest.Reduce(t, "codex-exec-json", execDir+"agentcmd__codex-exec-json__stream-output-2.jsonl")
	id := "019a2d7a-6455-7170-a661-c6d8b94c630a-1-item_1"
	use := agenttest.FindBlock(t, st.Blocks, id)
	if use.Type != conversation.BlockToolUse || use.ToolName != "shell" || string(use.Input) != `{"command":"bash -lc ls"}` || use.Status != conversation.StatusComplete {
		t.Fatalf("tool_use %+v", use)
	}
	res := agenttest.FindBlock(t, st.Blocks, conversation.ToolResultID(id))
	if res.IsError || res.ToolUseID != id || !strings.Contains(res.Output, "test.js") || res.Metadata["exitCode"] != float64(0) {
		t.Fatalf("tool_result %+v", res)
	}
	want := conversation.Usage{InputTokens: 6040 - 4992, OutputTokens: 129, CacheReadInputTokens: 4992}
	if st.Usage != want {
		t.Fatalf("usage %+v, want %+v", st.Usage, want)
	}
	if n := agenttest.CountType(events, conversation.TypeQueryCompleted); n != 1 {
		t.Fatalf("%d query:completed, want 1", n)
	}
	texts := agenttest.BlocksOf(st.Blocks, conversation.BlockAssistantText)
	if len(texts) != 1 || !strings.HasPrefix(texts[0].Content, "Files here:") {
		t.Fatalf("assistant text %+v", texts)
	}
	if th := agenttest.BlocksOf(st.Blocks, conversation.BlockThinking); len(th) != 1 || th[0].Content != "**Preparing to list files with bash shell**" {
		t.Fatalf("thinking %+v", th)
	}
}

func TestExecFileChange(t *testing.T) {
	st, _ := formattest.Reduce(t, "codex-exec-json", execDir+"agentcmd__codex-exec-json__stream-output-3.jsonl")
	uses := agenttest.BlocksOf(st.Blocks, conversation.BlockToolUse)
	if len(uses) != 1 || uses[0].ToolName != "apply_patch" {
		t.Fatalf("tool uses %+v", uses)
	}
	var in struct {
		Changes []struct{ Path, Kind string }
	}
	if err := json.Unmarshal(uses[0].Input, &in); err != nil || len(in.Changes) != 1 ||
		in.Changes[0].Path != "/private/tmp/codex-research-test/hello.txt" || in.Changes[0].Kind != "add" {
		t.Fatalf("apply_patch input %s (%v)", uses[0].Input, err)
	}
	res := agenttest.FindBlock(t, st.Blocks, conversation.ToolResultID(uses[0].ID))
	if res.IsError || res.Output != "add /private/tmp/codex-research-test/hello.txt\n" {
		t.Fatalf("result %+v", res)
	}
}

func TestExecIDsScopedPerTurnAndPrefix(t *testing.T) {
	lines := []string{
		`{"type":"thread.started","thread_id":"th"}`,
		`{"type":"turn.started"}`,
		`{"type":"item.completed","item":{"id":"item_0","type":"agent_message","text":"one"}}`,
		`{"type":"turn.completed","usage":{"input_tokens":1,"cached_input_tokens":0,"output_tokens":1}}`,
		`{"type":"thread.started","thread_id":"th"}`,
		`{"type":"turn.started"}`,
		`{"type":"item.completed","item":{"id":"item_0","type":"agent_message","text":"two"}}`,
		`{"type":"error","message":"quota exceeded"}`,
		`{"type":"turn.failed","error":{"message":"quota exceeded"}}`,
	}
	c := codex.NewExecJSONConverter()
	events := agenttest.ConvertLines(t, c, lines...)
	st := agenttest.CheckEvents(t, events)
	texts := agenttest.BlocksOf(st.Blocks, conversation.BlockAssistantText)
	if len(texts) != 2 || texts[0].ID != "th-1-item_0" || texts[1].ID != "th-2-item_0" || texts[1].Content != "two" {
		t.Fatalf("texts %+v", texts)
	}
	if c.ThreadID() != "th" {
		t.Fatalf("thread id %q", c.ThreadID())
	}
	if n := agenttest.CountType(events, conversation.TypeQueryFailed); n != 1 {
		t.Fatalf("%d query:failed", n)
	}
	errs := agenttest.BlocksOf(st.Blocks, conversation.BlockError)
	if len(errs) != 1 || errs[0].Message != "quota exceeded" {
		t.Fatalf("errors %+v", errs)
	}

	p := codex.NewExecJSONConverter(codex.WithIDPrefix("q7"))
	ev, err := p.Convert([]byte(`{"type":"item.started","item":{"id":"item_3","type":"command_execution","command":"ls","aggregated_output":"","status":"in_progress"}}`))
	if err != nil || len(ev) != 1 {
		t.Fatalf("%v %v", ev, err)
	}
	var u conversation.BlockUpsert
	if err := json.Unmarshal(ev[0].Payload, &u); err != nil || u.Block.ID != "q7-0-item_3" {
		t.Fatalf("prefixed id: %+v %v", u.Block, err)
	}
}

func TestExecUnknownItemIsLogged(t *testing.T) {
	c := codex.NewExecJSONConverter()
	ev, err := c.Convert([]byte(`{"type":"item.completed","item":{"id":"item_9","type":"hologram","x":1}}`))
	if err != nil || len(ev) != 1 || ev[0].Type != conversation.TypeLog {
		t.Fatalf("%v %v", ev, err)
	}
	var l conversation.LogEvent
	_ = json.Unmarshal(ev[0].Payload, &l)
	if !strings.Contains(string(l.Data), "hologram") {
		t.Fatalf("log data %s should keep the raw line", l.Data)
	}
}

// TestRolloutFailedCommands checks the rollout's three failed shell
// commands are error results with their exit codes, and the rest of the
// conversation is there.
func TestRolloutFailedCommands(t *testing.T) {
	st, events := formattest.Reduce(t, "codex-rollout", rollout)
	uses := agenttest.BlocksOf(st.Blocks, conversation.BlockToolUse)
	results := agenttest.BlocksOf(st.Blocks, conversation.BlockToolResult)
	if len(uses) != 16 || len(results) != 16 {
		t.Fatalf("%d tool_use, %d tool_result; want 16 each", len(uses), len(results))
	}
	var failed []float64
	for _, r := range results {
		use := agenttest.FindBlock(t, st.Blocks, r.ToolUseID)
		if use.ToolName != "shell" {
			t.Fatalf("tool %q", use.ToolName)
		}
		code, _ := r.Metadata["exitCode"].(float64)
		if r.IsError != (code != 0) {
			t.Fatalf("result %s: isError %v with exit code %v", r.ID, r.IsError, code)
		}
		if r.IsError {
			failed = append(failed, code)
			if r.Status != conversation.StatusError || use.Status != conversation.StatusError {
				t.Fatalf("failed call %s: statuses %s/%s", r.ID, use.Status, r.Status)
			}
		}
	}
	if len(failed) != 3 || failed[0] != 2 || failed[1] != 1 || failed[2] != 1 {
		t.Fatalf("failed exit codes %v, want [2 1 1]", failed)
	}
	first := agenttest.FindBlock(t, st.Blocks, "call_WmlLLopV6YokTw8Y639cqY5h-result")
	if !strings.Contains(first.Output, "syntax error near unexpected token") {
		t.Fatalf("first failure output %q", first.Output)
	}
	users := agenttest.BlocksOf(st.Blocks, conversation.BlockUserMessage)
	if len(users) != 2 || !strings.Contains(users[1].Content, "so prefetching isn't slowing down data loading") {
		t.Fatalf("user messages %d", len(users))
	}
	texts := agenttest.BlocksOf(st.Blocks, conversation.BlockAssistantText)
	if len(texts) != 2 || !strings.HasPrefix(texts[1].Content, "**Impact On Initial Load**") || texts[1].Model != "gpt-5-codex" {
		t.Fatalf("assistant texts %d", len(texts))
	}
	if th := agenttest.BlocksOf(st.Blocks, conversation.BlockThinking); len(th) != 17 {
		t.Fatalf("%d thinking blocks, want 17", len(th))
	}
	// The last token_count's totals: every increment adds up to them.
	var lastTotal struct{ in, cached, out int64 }
	for _, line := range strings.Split(agenttest.ReadFile(t, rollout), "\n") {
		var l struct {
			Payload struct {
				Type string
				Info *struct {
					Total struct {
						Input  int64 `json:"input_tokens"`
						Cached int64 `json:"cached_input_tokens"`
						Output int64 `json:"output_tokens"`
					} `json:"total_token_usage"`
				}
			}
		}
		if json.Unmarshal([]byte(line), &l) == nil && l.Payload.Type == "token_count" && l.Payload.Info != nil {
			lastTotal.in, lastTotal.cached, lastTotal.out = l.Payload.Info.Total.Input, l.Payload.Info.Total.Cached, l.Payload.Info.Total.Output
		}
	}
	want := conversation.Usage{InputTokens: lastTotal.in - lastTotal.cached, OutputTokens: lastTotal.out, CacheReadInputTokens: lastTotal.cached}
	if st.Usage != want || want.OutputTokens == 0 {
		t.Fatalf("usage %+v, want %+v", st.Usage, want)
	}
	if st.Model != "gpt-5-codex" {
		t.Fatalf("model %q", st.Model)
	}
	if n := agenttest.CountType(events, conversation.TypeQueryCompleted); n != 0 {
		t.Fatalf("0.40 rollouts record no turn end; got %d query:completed", n)
	}
}

func TestRolloutNewerShapes(t *testing.T) {
	lines := []string{
		`{"timestamp":"2026-01-01T00:00:00Z","type":"session_meta","payload":{"id":"s2","cli_version":"0.169.0"}}`,
		`{"timestamp":"2026-01-01T00:00:01Z","type":"event_msg","payload":{"type":"item_completed","thread_id":"s2","turn_id":"t1","item":{"type":"UserMessage","id":"u1","content":[{"type":"text","text":"fix it","text_elements":[]}]}}}`,
		`{"timestamp":"2026-01-01T00:00:02Z","type":"response_item","payload":{"type":"reasoning","id":"rs_1","summary":[{"type":"summary_text","text":"plan"}],"content":[{"type":"reasoning_text","text":"raw thoughts"}],"encrypted_content":null}}`,
		`{"timestamp":"2026-01-01T00:00:03Z","type":"response_item","payload":{"type":"custom_tool_call","status":"completed","call_id":"call_p","name":"apply_patch","input":"*** Begin Patch\n*** End Patch"}}`,
		`{"timestamp":"2026-01-01T00:00:04Z","type":"response_item","payload":{"type":"custom_tool_call_output","call_id":"call_p","output":"{\"output\":\"Success.\",\"metadata\":{\"exit_code\":0,\"duration_seconds\":0.25}}"}}`,
		`{"timestamp":"2026-01-01T00:00:05Z","type":"response_item","payload":{"type":"function_call","name":"exec_command","arguments":"{\"cmd\":\"false\"}","call_id":"call_x"}}`,
		`{"timestamp":"2026-01-01T00:00:06Z","type":"response_item","payload":{"type":"function_call_output","call_id":"call_x","output":"Exit code: 1\nWall time: 0.5 seconds\nOutput:\n"}}`,
		`{"timestamp":"2026-01-01T00:00:07Z","type":"response_item","payload":{"type":"tool_search_call","call_id":null,"execution":"x","arguments":{"q":1}}}`,
		`{"timestamp":"2026-01-01T00:00:08Z","type":"event_msg","payload":{"type":"task_complete","last_agent_message":"done"}}`,
		`{"timestamp":"2026-01-01T00:00:09Z","type":"event_msg","payload":{"type":"turn_aborted","reason":"interrupted"}}`,
	}
	c := codex.NewRolloutConverter()
	events := agenttest.ConvertLines(t, c, lines...)
	st := agenttest.CheckEvents(t, events)
	if u := agenttest.FindBlock(t, st.Blocks, "u1"); u.Content != "fix it" || u.Type != conversation.BlockUserMessage {
		t.Fatalf("user %+v", u)
	}
	if th := agenttest.FindBlock(t, st.Blocks, "rs_1"); th.Content != "raw thoughts" || th.Summary != "plan" {
		t.Fatalf("thinking %+v", th)
	}
	if p := agenttest.FindBlock(t, st.Blocks, "call_p-result"); p.IsError || p.Output != "Success." || p.DurationMs != 250 {
		t.Fatalf("patch result %+v", p)
	}
	if x := agenttest.FindBlock(t, st.Blocks, "call_x-result"); !x.IsError || x.Metadata["exitCode"] != float64(1) || x.DurationMs != 500 {
		t.Fatalf("exec result %+v", x)
	}
	if n := agenttest.CountType(events, conversation.TypeQueryCompleted); n != 2 {
		t.Fatalf("%d query:completed, want 2", n)
	}
	if events[len(events)-1].Context.Timestamp.IsZero() {
		t.Fatal("events should carry the line's timestamp")
	}
}

func TestAppServerHandmadeTurns(t *testing.T) {
	st, events := formattest.Reduce(t, "codex-app-server", appTurns)
	if u := agenttest.FindBlock(t, st.Blocks, "user-1"); u.Content != "list the files" {
		t.Fatalf("user %+v", u)
	}
	if th := agenttest.FindBlock(t, st.Blocks, "rs_1"); th.Content != "**Listing files**\n\nI will run ls." || th.Status != conversation.StatusComplete {
		t.Fatalf("reasoning %+v", th)
	}
	if r := agenttest.FindBlock(t, st.Blocks, "call_1-result"); r.Output != "a.txt\nb.txt\n" || r.IsError || r.DurationMs != 12 || r.Metadata["exitCode"] != float64(0) {
		t.Fatalf("turn 1 result %+v", r)
	}
	// Turn 2 reuses call_1: a new block, not a merge into turn 1's.
	if u := agenttest.FindBlock(t, st.Blocks, "call_1~2"); string(u.Input) != `{"command":"false","cwd":"/work"}` || u.Status != conversation.StatusError {
		t.Fatalf("turn 2 call %+v", u)
	}
	if r := agenttest.FindBlock(t, st.Blocks, "call_1~2-result"); !r.IsError || r.Metadata["exitCode"] != float64(1) {
		t.Fatalf("turn 2 result %+v", r)
	}
	if r := agenttest.FindBlock(t, st.Blocks, "call_2-result"); r.Output != "add /work/c.txt\n" || r.IsError {
		t.Fatalf("patch result %+v", r)
	}
	if m := agenttest.FindBlock(t, st.Blocks, "msg_1"); m.Content != "Two files: a.txt and b.txt." || m.Status != conversation.StatusComplete {
		t.Fatalf("message %+v", m)
	}
	if m := agenttest.FindBlock(t, st.Blocks, "msg_3"); m.Content != "Let me" || m.Status != conversation.StatusPending {
		t.Fatalf("interrupted message %+v", m)
	}
	sub := agenttest.FindBlock(t, st.Blocks, "call_3")
	if sub.Type != conversation.BlockSubagent || sub.SubagentID != "call_3" || string(sub.Input) != `"count the lines of a.txt"` || sub.Output != "a.txt has 3 lines." || sub.Status != conversation.StatusComplete {
		t.Fatalf("subagent block %+v", sub)
	}
	if len(st.Subagents) != 1 || st.Subagents[0].ID != "call_3" || st.Subagents[0].Status != conversation.StatusComplete ||
		len(st.Subagents[0].Blocks) != 1 || st.Subagents[0].Blocks[0].Content != "a.txt has 3 lines." {
		t.Fatalf("subagents %+v", st.Subagents)
	}
	want := conversation.Usage{InputTokens: 1700 + 500, OutputTokens: 260 + 20, CacheReadInputTokens: 400}
	if st.Usage != want {
		t.Fatalf("usage %+v, want %+v (a repeated total must not count twice)", st.Usage, want)
	}
	if st.Model != "gpt-5.1-codex" {
		t.Fatalf("model %q", st.Model)
	}
	var perms []conversation.PermissionRequested
	var ends []conversation.EventType
	for _, e := range events {
		switch e.Type {
		case conversation.TypePermissionRequest:
			var p conversation.PermissionRequested
			_ = json.Unmarshal(e.Payload, &p)
			perms = append(perms, p)
		case conversation.TypeQueryCompleted, conversation.TypeQueryFailed:
			ends = append(ends, e.Type)
		}
	}
	if len(perms) != 2 || perms[0].RequestID != "0" || perms[0].ToolUseID != "call_1" || perms[0].ToolName != "shell" ||
		perms[1].RequestID != "req-7" || perms[1].ToolUseID != "call_2" || perms[1].ToolName != "apply_patch" {
		t.Fatalf("permission requests %+v", perms)
	}
	if len(ends) != 3 || ends[0] != conversation.TypeQueryCompleted || ends[1] != conversation.TypeQueryFailed || ends[2] != conversation.TypeQueryCompleted {
		t.Fatalf("turn ends %v", ends)
	}
	last := events[len(events)-1]
	var qc conversation.QueryCompleted
	if err := json.Unmarshal(last.Payload, &qc); err != nil || !qc.Interrupted {
		t.Fatalf("last event %s %s: want an interrupted query:completed", last.Type, last.Payload)
	}
	if errs := agenttest.BlocksOf(st.Blocks, conversation.BlockError); len(errs) != 1 || errs[0].Code != "responseStreamDisconnected" {
		t.Fatalf("error blocks %+v (a retried error is only a log)", errs)
	}
}

func TestAppServerOptions(t *testing.T) {
	c := codex.NewAppServerConverter(codex.WithoutPermissionEvents(), codex.WithoutUserMessages())
	var events []conversation.Event
	for _, l := range strings.Split(strings.TrimSpace(agenttest.ReadFile(t, appTurns)), "\n") {
		ev, err := c.Convert([]byte(l))
		if err != nil {
			t.Fatal(err)
		}
		events = append(events, ev...)
	}
	if n := agenttest.CountType(events, conversation.TypePermissionRequest); n != 0 {
		t.Fatalf("%d permission events with WithoutPermissionEvents", n)
	}
	st := agenttest.CheckEvents(t, events)
	if u := agenttest.BlocksOf(st.Blocks, conversation.BlockUserMessage); len(u) != 0 {
		t.Fatalf("user messages %+v with WithoutUserMessages", u)
	}
	if c.ThreadID() != "019b1f00-0000-7000-8000-0000000000a1" {
		t.Fatalf("thread id %q", c.ThreadID())
	}
}

func TestParseApprovalRequest(t *testing.T) {
	a, ok := codex.ParseApprovalRequest("execCommandApproval",
		json.RawMessage(`{"conversationId":"th","callId":"call_9","approvalId":null,"command":["rm","-rf","x"],"cwd":"/w","reason":"cleanup","parsedCmd":[]}`))
	if !ok || a.ToolName != "shell" || a.ItemID != "call_9" || a.ThreadID != "th" {
		t.Fatalf("%+v %v", a, ok)
	}
	var in map[string]any
	if err := json.Unmarshal(a.Input, &in); err != nil || in["reason"] != "cleanup" || in["cwd"] != "/w" {
		t.Fatalf("input %s", a.Input)
	}
	if _, ok := codex.ParseApprovalRequest("item/tool/requestUserInput", json.RawMessage(`{}`)); ok {
		t.Fatal("requestUserInput is not an approval")
	}
	if _, ok := codex.ParseApprovalRequest("item/fileChange/requestApproval", json.RawMessage(`[`)); ok {
		t.Fatal("malformed params must not parse")
	}
}

// TestCapturedAppServerMatchesRollout: a real codex 0.169 app-server run
// (two turns against the mock model, one failing command) and the rollout
// file codex wrote for the same thread give the same blocks: same ids,
// texts, outputs and error flags, so a thread replayed from its rollout
// looks as it did live.
func TestCapturedAppServerMatchesRollout(t *testing.T) {
	live, events := formattest.Reduce(t, "codex-app-server", "testdata/captured/codex-app-server-two-turns.jsonl")
	saved, _ := formattest.Reduce(t, "codex-rollout", "testdata/captured/rollout-2026-11-22T01-25-47-01a200db-fe7f-7601-afb2-2a944f609622.jsonl")
	if len(live.Blocks) != 11 || len(saved.Blocks) != len(live.Blocks) {
		t.Fatalf("%d live blocks, %d saved", len(live.Blocks), len(saved.Blocks))
	}
	for i, a := range live.Blocks {
		b := saved.Blocks[i]
		if a.ID != b.ID || a.Type != b.Type || a.Content != b.Content || a.Output != b.Output || a.IsError != b.IsError || a.Status != b.Status {
			t.Fatalf("block %d:\n live  %+v\n saved %+v", i, a, b)
		}
	}
	fail := agenttest.FindBlock(t, live.Blocks, "call_PGzHQaXsaQ4K4EapIT1ZI6zb-result")
	if !fail.IsError || fail.Metadata["exitCode"] != float64(1) {
		t.Fatalf("failed command %+v", fail)
	}
	if n := agenttest.CountType(events, conversation.TypeQueryCompleted); n != 2 {
		t.Fatalf("%d query:completed, want 2", n)
	}
	if n := agenttest.CountType(events, conversation.TypePermissionRequest); n != 2 {
		t.Fatalf("%d permission requests, want 2", n)
	}
	if live.Usage != saved.Usage || live.Usage.InputTokens == 0 {
		t.Fatalf("usage live %+v, saved %+v", live.Usage, saved.Usage)
	}
}

func TestCapturedExecFailure(t *testing.T) {
	st, _ := formattest.Reduce(t, "codex-exec-json", "testdata/captured/codex-exec-fail.jsonl")
	res := agenttest.BlocksOf(st.Blocks, conversation.BlockToolResult)
	if len(res) != 1 || !res[0].IsError || res[0].Metadata["exitCode"] != float64(1) || res[0].Status != conversation.StatusError {
		t.Fatalf("results %+v", res)
	}
	// codex reports a missing model catalogue entry as a (non-fatal)
	// error item, before the turn starts.
	if e := agenttest.BlocksOf(st.Blocks, conversation.BlockError); len(e) != 1 || !strings.Contains(e[0].Message, "Model metadata") {
		t.Fatalf("errors %+v", e)
	}
}

// Codex's multi-agent v2 (features.multi_agent_v2, which the runner turns
// on) reports a spawn as subAgentActivity items in the parent thread, and
// the child thread's items under its own thread id with no thread/started.
func TestCapturedAppServerSubagent(t *testing.T) {
	st, events := formattest.Reduce(t, "codex-app-server", "testdata/captured/codex-app-server-subagent.jsonl")
	const call = "call_hFiBInKDUpmcrAPg6dItJn0P"
	spawned := agenttest.OfType(events, conversation.TypeSubagentSpawned)
	if len(spawned) != 1 {
		t.Fatalf("%d subagent:spawned, want 1 (item/started and item/completed both report the spawn)", len(spawned))
	}
	if p := e2etest.Payload[conversation.SubagentSpawned](spawned[0]); p.ToolUseID != call || p.AgentID != "01a20231-bec6-79c0-a419-01dd0a997cd0" || p.Description != "/root/greeter" {
		t.Fatalf("spawned %+v", p)
	}
	sub := agenttest.FindBlock(t, st.Blocks, call)
	if sub.Type != conversation.BlockSubagent || sub.Status != conversation.StatusComplete || sub.Output != "Greetings from the subagent." || sub.Metadata["agentPath"] != "/root/greeter" {
		t.Fatalf("subagent block %+v", sub)
	}
	if len(st.Subagents) != 1 || len(st.Subagents[0].Blocks) != 1 || st.Subagents[0].Blocks[0].Content != "Greetings from the subagent." {
		t.Fatalf("subagents %+v", st.Subagents)
	}
	for _, b := range st.Blocks {
		if b.Content == "Greetings from the subagent." {
			t.Fatalf("the child's message is in the parent's conversation: %+v", b)
		}
	}
	if n := agenttest.CountType(events, conversation.TypeSubagentCompleted); n != 1 {
		t.Fatalf("%d subagent:completed, want 1", n)
	}
	if n := agenttest.CountType(events, conversation.TypeQueryCompleted); n != 1 {
		t.Fatalf("%d query:completed, want 1 (the child's turn/completed ends no query)", n)
	}
}

// A subAgentActivity without a thread id links nothing, and a "completed"
// one for an unknown thread completes nothing.
func TestAppServerSubagentActivityWithoutThread(t *testing.T) {
	c := codex.NewAppServerConverter()
	events := agenttest.ConvertLines(t, c,
		`{"method":"thread/started","params":{"thread":{"id":"main","parentThreadId":null}}}`,
		`{"method":"item/started","params":{"threadId":"main","turnId":"t1","item":{"type":"subAgentActivity","id":"call_1","kind":"started","agentThreadId":"","agentPath":"/root/x"}}}`,
		`{"method":"item/completed","params":{"threadId":"main","turnId":"t1","item":{"type":"subAgentActivity","id":"done-1","kind":"completed","agentThreadId":"other","agentPath":"/root/y"}}}`,
	)
	if n := agenttest.CountType(events, conversation.TypeSubagentSpawned) + agenttest.CountType(events, conversation.TypeSubagentCompleted); n != 0 {
		t.Fatalf("%d subagent events:%s", n, e2etest.Dump(events))
	}
}
