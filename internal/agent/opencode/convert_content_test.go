package opencode_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/agentd/agentd/agent/agenttest"
	"github.com/agentd/agentd/conversation"
	"github.com/agentd/agentd/internal/agent/agenttest/formattest"
	"github.com/agentd/agentd/internal/agent/opencode"
)

const (
	sseEvents  = "testdata/agent-output/ai-systems__raw-opencode-sse-events.jsonl"
	exportFile = "testdata/agent-output/ai-systems__main-opencode-transcript.json"

	task1 = "call_499d379c3296400fbf595aaa"
	task2 = "call_89ae295e49a949b8b67a3637"
)

func TestEventsSubagentsAndTools(t *testing.T) {
	st, events := formattest.Reduce(t, "opencode-events", sseEvents)
	s1 := agenttest.FindBlock(t, st.Blocks, task1)
	if s1.Type != conversation.BlockSubagent || s1.Status != conversation.StatusComplete || s1.Name != "general" ||
		s1.Description != "Load Test Skill" || string(s1.Input) != `"skills_test"` ||
		s1.Output != "Pickles from /Users/hunterhopkins/dev/projects/ai-systems/.opencode/plugin" || s1.DurationMs != 820239-813726 {
		t.Fatalf("first subagent %+v", s1)
	}
	if len(st.Subagents) != 2 {
		t.Fatalf("%d subagents, want 2", len(st.Subagents))
	}
	sub := st.Subagents[1]
	if sub.ID != task2 || sub.AgentID != "ses_4c72e3604ffefkLKmFGZXMq2KD" || sub.Status != conversation.StatusComplete ||
		sub.Output != `File created with content "Hello world from the subagent!"` {
		t.Fatalf("second subagent %+v", sub)
	}
	// The child session's own blocks: its prompt, a failed write, a read,
	// a write that worked.
	if u := agenttest.BlocksOf(sub.Blocks, conversation.BlockUserMessage); len(u) != 1 || !strings.HasPrefix(u[0].Content, "Write a file to the workspace") {
		t.Fatalf("subagent prompt %+v", u)
	}
	var calls []string
	for _, b := range agenttest.BlocksOf(sub.Blocks, conversation.BlockToolResult) {
		use := agenttest.FindBlock(t, sub.Blocks, b.ToolUseID)
		calls = append(calls, use.ToolName+map[bool]string{true: "!", false: ""}[b.IsError])
	}
	if strings.Join(calls, " ") != "write! read write" {
		t.Fatalf("subagent tool calls %v", calls)
	}
	if r := agenttest.FindBlock(t, st.Blocks, "call_2263fee915bc4f119851436f-result"); !r.IsError || !strings.HasPrefix(r.Output, "Error: You must read the file") {
		t.Fatalf("main failed write %+v", r)
	}
	texts := agenttest.BlocksOf(st.Blocks, conversation.BlockAssistantText)
	last := texts[len(texts)-1]
	if !strings.Contains(last.Content, "Done! I've completed all three steps") || last.Status != conversation.StatusComplete || last.Model != "big-pickle" {
		t.Fatalf("last text %+v", last)
	}
	// Usage: every step-finish once, in whichever session.
	var want conversation.Usage
	seen := map[string]bool{}
	for _, line := range strings.Split(agenttest.ReadFile(t, sseEvents), "\n") {
		var ev struct {
			Properties struct {
				Part struct {
					ID     string
					Type   string
					Tokens struct {
						Input, Output, Reasoning int64
						Cache                    struct{ Read, Write int64 }
					}
				}
			}
		}
		if json.Unmarshal([]byte(line), &ev) == nil && ev.Properties.Part.Type == "step-finish" && !seen[ev.Properties.Part.ID] {
			seen[ev.Properties.Part.ID] = true
			tk := ev.Properties.Part.Tokens
			want = want.Add(conversation.Usage{InputTokens: tk.Input, OutputTokens: tk.Output + tk.Reasoning, CacheReadInputTokens: tk.Cache.Read, CacheCreationInputTokens: tk.Cache.Write})
		}
	}
	if st.Usage != want || want.InputTokens == 0 {
		t.Fatalf("usage %+v, want %+v", st.Usage, want)
	}
	if n := agenttest.CountType(events, conversation.TypeQueryCompleted); n != 1 {
		t.Fatalf("%d query:completed, want 1 (the children's idles are not turn ends)", n)
	}
	if n := agenttest.CountType(events, conversation.TypeSubagentSpawned); n != 2 {
		t.Fatalf("%d subagent:spawned", n)
	}
	if n := agenttest.CountType(events, conversation.TypeBlockDelta); n < 200 {
		t.Fatalf("only %d deltas: part deltas should stream", n)
	}
}

// TestExportMatchesEvents: the export of the session and its live event
// stream give the same main-conversation tool calls and answers.
func TestExportMatchesEvents(t *testing.T) {
	live, _ := formattest.Reduce(t, "opencode-events", sseEvents)
	exp, events := formattest.Reduce(t, "opencode-export", exportFile)
	for _, typ := range []conversation.BlockType{conversation.BlockToolUse, conversation.BlockToolResult, conversation.BlockSubagent, conversation.BlockUserMessage} {
		a, b := agenttest.BlocksOf(live.Blocks, typ), agenttest.BlocksOf(exp.Blocks, typ)
		if len(a) != len(b) {
			t.Fatalf("%s: %d live, %d exported", typ, len(a), len(b))
		}
		for i := range a {
			if a[i].ID != b[i].ID || a[i].Status != b[i].Status || a[i].Output != b[i].Output || a[i].IsError != b[i].IsError ||
				string(a[i].Input) != string(b[i].Input) || a[i].Content != b[i].Content {
				t.Fatalf("%s %d:\n live %+v\n export %+v", typ, i, a[i], b[i])
			}
		}
	}
	lt, et := agenttest.BlocksOf(live.Blocks, conversation.BlockAssistantText), agenttest.BlocksOf(exp.Blocks, conversation.BlockAssistantText)
	if len(lt) != len(et) || lt[len(lt)-1].Content != et[len(et)-1].Content {
		t.Fatalf("assistant texts differ: %d live, %d exported", len(lt), len(et))
	}
	var qc conversation.QueryCompleted
	last := events[len(events)-1]
	if last.Type != conversation.TypeQueryCompleted || json.Unmarshal(last.Payload, &qc) != nil || !strings.HasPrefix(qc.Result, "Done!") {
		t.Fatalf("last event %s %s", last.Type, last.Payload)
	}
	// An export has no child sessions: the subagents are known by their
	// calls only.
	if len(exp.Subagents) != 2 || len(exp.Subagents[0].Blocks) != 0 || exp.Subagents[1].AgentID != "ses_4c72e3604ffefkLKmFGZXMq2KD" ||
		exp.Subagents[1].Status != conversation.StatusComplete {
		t.Fatalf("exported subagents %+v", exp.Subagents)
	}
}

// TestEventsNewerProtocol covers what opencode 1.1x+ sends and the shared
// capture lacks: message.part.delta, permission.asked/replied, the global
// event wrapper, SSE framing, session.error before idle, an unrelated
// session, and bash output streaming in metadata.
func TestEventsNewerProtocol(t *testing.T) {
	lines := []string{
		`: connected`,
		`event: message`,
		`data: {"type":"server.connected","properties":{}}`,
		`{"type":"session.created","properties":{"info":{"id":"ses_main","title":"t","time":{"created":1}}}}`,
		`{"type":"session.created","properties":{"info":{"id":"ses_other","title":"other","time":{"created":1}}}}`,
		`{"type":"session.status","properties":{"sessionID":"ses_main","status":{"type":"busy"}}}`,
		`{"type":"message.updated","properties":{"sessionID":"ses_main","info":{"id":"msg_u","sessionID":"ses_main","role":"user","time":{"created":1767000000000}}}}`,
		`{"type":"message.part.updated","properties":{"sessionID":"ses_main","part":{"id":"prt_u","sessionID":"ses_main","messageID":"msg_u","type":"text","text":"run ls"},"time":1767000000001}}`,
		`{"type":"message.updated","properties":{"sessionID":"ses_main","info":{"id":"msg_a","sessionID":"ses_main","role":"assistant","time":{"created":1767000000002},"modelID":"mock-1","providerID":"mock"}}}`,
		`{"type":"message.part.updated","properties":{"sessionID":"ses_main","part":{"id":"prt_r","sessionID":"ses_main","messageID":"msg_a","type":"reasoning","text":"","time":{"start":1767000000003}},"time":1767000000003}}`,
		`{"type":"message.part.delta","properties":{"sessionID":"ses_main","messageID":"msg_a","partID":"prt_r","field":"text","delta":"thinking"}}`,
		`{"directory":"/w","payload":{"type":"message.part.delta","properties":{"sessionID":"ses_main","messageID":"msg_a","partID":"prt_t","field":"text","delta":"I'll "}}}`,
		`{"type":"message.part.delta","properties":{"sessionID":"ses_main","messageID":"msg_a","partID":"prt_t","field":"text","delta":"list."}}`,
		`{"type":"message.part.updated","properties":{"sessionID":"ses_main","part":{"id":"prt_bash","sessionID":"ses_main","messageID":"msg_a","type":"tool","callID":"toolu_1","tool":"bash","state":{"status":"pending","input":{},"raw":""}},"time":1767000000010}}`,
		`{"type":"permission.asked","properties":{"id":"per_1","sessionID":"ses_main","permission":"bash","patterns":["ls"],"metadata":{},"always":["ls *"],"tool":{"messageID":"msg_a","callID":"toolu_1"}}}`,
		`{"type":"permission.replied","properties":{"sessionID":"ses_main","requestID":"per_1","reply":"once"}}`,
		`{"type":"message.part.updated","properties":{"sessionID":"ses_main","part":{"id":"prt_bash","sessionID":"ses_main","messageID":"msg_a","type":"tool","callID":"toolu_1","tool":"bash","state":{"status":"running","input":{"command":"ls"},"metadata":{"output":"a.txt\n"},"time":{"start":1767000000011}}},"time":1767000000012}}`,
		`{"type":"message.part.updated","properties":{"sessionID":"ses_other","part":{"id":"prt_x","sessionID":"ses_other","messageID":"msg_x","type":"text","text":"elsewhere"},"time":1767000000013}}`,
		`{"type":"message.part.updated","properties":{"sessionID":"ses_main","part":{"id":"prt_bash","sessionID":"ses_main","messageID":"msg_a","type":"tool","callID":"toolu_1","tool":"bash","state":{"status":"completed","input":{"command":"ls"},"output":"a.txt\nb.txt\n","title":"ls","metadata":{"exit":0,"output":"a.txt\nb.txt\n"},"time":{"start":1767000000011,"end":1767000000020}}},"time":1767000000020}}`,
		`{"type":"message.part.updated","properties":{"sessionID":"ses_main","part":{"id":"prt_sf","sessionID":"ses_main","messageID":"msg_a","type":"step-finish","reason":"tool-calls","cost":0.0125,"tokens":{"input":100,"output":20,"reasoning":5,"cache":{"read":50,"write":10}}},"time":1767000000021}}`,
		`{"type":"session.error","properties":{"sessionID":"ses_main","error":{"name":"MessageAbortedError","data":{"message":"Aborted"}}}}`,
		`{"type":"session.status","properties":{"sessionID":"ses_main","status":{"type":"idle"}}}`,
		`{"type":"session.idle","properties":{"sessionID":"ses_main"}}`,
		`{"type":"lsp.updated","properties":{}}`,
	}
	c := opencode.NewEventsConverter(opencode.WithSessionID("ses_main"))
	events := agenttest.ConvertLines(t, c, lines...)
	st := agenttest.CheckEvents(t, events)
	if th := agenttest.FindBlock(t, st.Blocks, "prt_r"); th.Type != conversation.BlockThinking || th.Content != "thinking" {
		t.Fatalf("reasoning %+v", th)
	}
	if tx := agenttest.FindBlock(t, st.Blocks, "prt_t"); tx.Type != conversation.BlockAssistantText || tx.Content != "I'll list." {
		t.Fatalf("text %+v", tx)
	}
	if r := agenttest.FindBlock(t, st.Blocks, "toolu_1-result"); r.Output != "a.txt\nb.txt\n" || r.IsError || r.DurationMs != 9 || r.Metadata["exitCode"] != float64(0) {
		t.Fatalf("bash result %+v", r)
	}
	for _, b := range st.Blocks {
		if b.Content == "elsewhere" {
			t.Fatal("a part of an unrelated session was converted")
		}
	}
	if st.Usage != (conversation.Usage{InputTokens: 100, OutputTokens: 25, CacheReadInputTokens: 50, CacheCreationInputTokens: 10}) || st.CostUSD != 0.0125 {
		t.Fatalf("usage %+v cost %v", st.Usage, st.CostUSD)
	}
	if st.Model != "mock-1" {
		t.Fatalf("model %q", st.Model)
	}
	var perm conversation.PermissionRequested
	var res conversation.PermissionResolved
	var failed []conversation.QueryFailed
	for _, e := range events {
		switch e.Type {
		case conversation.TypePermissionRequest:
			_ = json.Unmarshal(e.Payload, &perm)
		case conversation.TypePermissionResolved:
			_ = json.Unmarshal(e.Payload, &res)
		case conversation.TypeQueryFailed:
			var f conversation.QueryFailed
			_ = json.Unmarshal(e.Payload, &f)
			failed = append(failed, f)
		case conversation.TypeQueryCompleted:
			t.Fatal("an aborted turn must not complete")
		}
	}
	if perm.RequestID != "per_1" || perm.ToolName != "bash" || perm.ToolUseID != "toolu_1" || res.RequestID != "per_1" || res.Behavior != conversation.Allow {
		t.Fatalf("permission %+v / %+v", perm, res)
	}
	if len(failed) != 1 || !failed[0].Interrupted || failed[0].Code != "MessageAbortedError" {
		t.Fatalf("turn ends %+v (idle twice must end the turn once)", failed)
	}
	if len(st.PendingPermissions) != 0 {
		t.Fatalf("pending permissions %+v", st.PendingPermissions)
	}
	if c.SessionID() != "ses_main" {
		t.Fatalf("session %q", c.SessionID())
	}

	quiet := opencode.NewEventsConverter(opencode.WithoutPermissionEvents(), opencode.WithoutUserMessages())
	events = nil
	for _, l := range lines {
		ev, _ := quiet.Convert([]byte(l))
		events = append(events, ev...)
	}
	st = agenttest.CheckEvents(t, events)
	if agenttest.CountType(events, conversation.TypePermissionRequest)+agenttest.CountType(events, conversation.TypePermissionResolved) != 0 {
		t.Fatal("permission events despite WithoutPermissionEvents")
	}
	if u := agenttest.BlocksOf(st.Blocks, conversation.BlockUserMessage); len(u) != 0 {
		t.Fatalf("user messages despite WithoutUserMessages: %+v", u)
	}
}

// TestCapturedServeMatchesExport: a real opencode 1.18.33 `serve` run (two
// turns against the mock model, a bash call behind a permission prompt)
// converted from its raw SSE stream gives the same blocks as `opencode
// export` of the same session afterwards.
func TestCapturedServeMatchesExport(t *testing.T) {
	live, events := formattest.Reduce(t, "opencode-events", "testdata/captured/opencode-events.sse.txt")
	saved, exported := formattest.Reduce(t, "opencode-export", "testdata/captured/opencode-export.json")
	if len(live.Blocks) != 8 || len(saved.Blocks) != len(live.Blocks) {
		t.Fatalf("%d live blocks, %d exported", len(live.Blocks), len(saved.Blocks))
	}
	for i, a := range live.Blocks {
		// A live tool block is created at its pending state, which has no
		// time of its own; the export knows when it ran.
		b := saved.Blocks[i]
		a.Timestamp = b.Timestamp
		aj, _ := json.Marshal(a)
		bj, _ := json.Marshal(b)
		if string(aj) != string(bj) {
			t.Fatalf("block %d:\n live  %s\n saved %s", i, aj, bj)
		}
	}
	if r := agenttest.FindBlock(t, live.Blocks, "toolu_01qM9DxlfHhWPVrF2GY8OWvb-result"); r.Output != "a.txt\nb.txt\nopencode.json\n" || r.Metadata["exitCode"] != float64(0) {
		t.Fatalf("bash result %+v", r)
	}
	if live.Usage != saved.Usage || live.CostUSD != saved.CostUSD || live.CostUSD == 0 {
		t.Fatalf("usage live %+v $%v, exported %+v $%v", live.Usage, live.CostUSD, saved.Usage, saved.CostUSD)
	}
	if agenttest.CountType(events, conversation.TypeQueryCompleted) != 2 || agenttest.CountType(exported, conversation.TypeQueryCompleted) != 2 {
		t.Fatal("want two turn ends from each")
	}
	if agenttest.CountType(events, conversation.TypePermissionRequest) != 1 || agenttest.CountType(events, conversation.TypePermissionResolved) != 1 || len(live.PendingPermissions) != 0 {
		t.Fatal("want the bash permission asked and answered")
	}
}
