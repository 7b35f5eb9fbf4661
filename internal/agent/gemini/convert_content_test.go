package gemini_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentd/agentd/agent/agenttest"
	"github.com/agentd/agentd/conversation"
	"github.com/agentd/agentd/internal/agent/agenttest/formattest"
	"github.com/agentd/agentd/internal/agent/gemini"
	"github.com/agentd/agentd/internal/convert"
)

const (
	dir          = "testdata/agent-output/"
	streamRead   = dir + "agentcmd-doc__stream-json__read-file__9c9a14e1.jsonl"
	sessionEdit  = dir + "agentcmd__session-2025-10-29T10-36-453aa339.json"
	sessionLines = "testdata/session-jsonl/handmade-session-2025-10-29T10-37-453aa339.jsonl"
	jsonOut      = dir + "agentcmd-doc__output-format-json__capital-of-france.json"
)

func TestStreamJSONReadFile(t *testing.T) {
	st, events := formattest.Reduce(t, "gemini-stream-json", streamRead)
	id := "read_file-1761734190726-4dfc76eb0c846"
	use := agenttest.FindBlock(t, st.Blocks, id)
	if use.ToolName != "read_file" || string(use.Input) != `{"absolute_path":"/private/tmp/gemini-test/sample.txt"}` || use.Status != conversation.StatusComplete {
		t.Fatalf("tool_use %+v", use)
	}
	res := agenttest.FindBlock(t, st.Blocks, conversation.ToolResultID(id))
	if res.IsError || res.DurationMs != 21 {
		t.Fatalf("tool_result %+v (duration from the two timestamps: 21ms)", res)
	}
	texts := agenttest.BlocksOf(st.Blocks, conversation.BlockAssistantText)
	if len(texts) != 1 || !strings.Contains(texts[0].Content, "test content from gemini research") || texts[0].Status != conversation.StatusComplete {
		t.Fatalf("texts %+v", texts)
	}
	if u := agenttest.BlocksOf(st.Blocks, conversation.BlockUserMessage); len(u) != 1 || u[0].Content != "Read the file..." {
		t.Fatalf("user %+v", u)
	}
	if st.Usage != (conversation.Usage{InputTokens: 11068, OutputTokens: 44}) || st.Model != "gemini-2.5-pro" {
		t.Fatalf("usage %+v model %q", st.Usage, st.Model)
	}
	var qc conversation.QueryCompleted
	last := events[len(events)-1]
	if last.Type != conversation.TypeQueryCompleted || json.Unmarshal(last.Payload, &qc) != nil || qc.DurationMs != 7654 {
		t.Fatalf("last event %s %s", last.Type, last.Payload)
	}
}

// TestStreamJSONDeltas streams an answer in chunks around a tool call: the
// chunks before the call are one block, those after it another, each
// growing by block:delta.
func TestStreamJSONDeltas(t *testing.T) {
	lines := []string{
		`{"type":"init","timestamp":"2026-01-01T00:00:00.000Z","session_id":"s1","model":"gemini-3-pro"}`,
		`{"type":"message","timestamp":"2026-01-01T00:00:00.001Z","role":"user","content":"hi"}`,
		`{"type":"message","timestamp":"2026-01-01T00:00:01.000Z","role":"assistant","content":"Let me ","delta":true}`,
		`{"type":"message","timestamp":"2026-01-01T00:00:01.100Z","role":"assistant","content":"look.","delta":true}`,
		`{"type":"tool_use","timestamp":"2026-01-01T00:00:02.000Z","tool_name":"run_shell_command","tool_id":"t1","parameters":{"command":"false"}}`,
		`{"type":"tool_result","timestamp":"2026-01-01T00:00:02.500Z","tool_id":"t1","status":"error","output":"","error":{"type":"execution_failed","message":"exit 1"}}`,
		`{"type":"error","timestamp":"2026-01-01T00:00:02.600Z","severity":"warning","message":"loop detected"}`,
		`{"type":"message","timestamp":"2026-01-01T00:00:03.000Z","role":"assistant","content":"It ","delta":true}`,
		`{"type":"message","timestamp":"2026-01-01T00:00:03.100Z","role":"assistant","content":"failed.","delta":true}`,
		`{"type":"result","timestamp":"2026-01-01T00:00:04.000Z","status":"error","error":{"type":"FatalCancellationError","message":"Operation cancelled."},"stats":{"total_tokens":30,"input_tokens":20,"output_tokens":10,"cached":5,"input":15,"duration_ms":0,"tool_calls":1}}`,
	}
	c := gemini.NewStreamJSONConverter(gemini.WithIDPrefix("q2"), gemini.WithoutUserMessages())
	events := agenttest.ConvertLines(t, c, lines...)
	st := agenttest.CheckEvents(t, events)
	texts := agenttest.BlocksOf(st.Blocks, conversation.BlockAssistantText)
	if len(texts) != 2 || texts[0].Content != "Let me look." || texts[1].Content != "It failed." || texts[0].ID != "q2-1" || texts[1].ID != "q2-2" {
		t.Fatalf("texts %+v", texts)
	}
	if n := agenttest.CountType(events, conversation.TypeBlockDelta); n != 2 {
		t.Fatalf("%d deltas, want 2", n)
	}
	if u := agenttest.BlocksOf(st.Blocks, conversation.BlockUserMessage); len(u) != 0 {
		t.Fatalf("user messages with WithoutUserMessages: %+v", u)
	}
	if r := agenttest.FindBlock(t, st.Blocks, "t1-result"); !r.IsError || r.Output != "exit 1" || r.DurationMs != 500 || r.Metadata["errorType"] != "execution_failed" {
		t.Fatalf("result %+v", r)
	}
	if st.Usage != (conversation.Usage{InputTokens: 15, OutputTokens: 10, CacheReadInputTokens: 5}) {
		t.Fatalf("usage %+v", st.Usage)
	}
	var qf conversation.QueryFailed
	last := events[len(events)-1]
	if last.Type != conversation.TypeQueryFailed || json.Unmarshal(last.Payload, &qf) != nil || !qf.Interrupted || qf.Code != "FatalCancellationError" {
		t.Fatalf("last event %s %s", last.Type, last.Payload)
	}
	if c.SessionID() != "s1" {
		t.Fatalf("session id %q", c.SessionID())
	}
}

func TestSessionDocument(t *testing.T) {
	st, events := formattest.Reduce(t, "gemini-session", sessionEdit)
	uses := agenttest.BlocksOf(st.Blocks, conversation.BlockToolUse)
	if len(uses) != 3 || uses[1].ToolName != "replace" || uses[1].DisplayName != "Edit" {
		t.Fatalf("tool uses %+v", uses)
	}
	if r := agenttest.FindBlock(t, st.Blocks, "replace-1761734228885-7a63ed9561c45-result"); r.IsError ||
		r.Output != "Successfully modified file: /private/tmp/gemini-test/created.txt (1 replacements)." {
		t.Fatalf("replace result %+v", r)
	}
	if r := agenttest.FindBlock(t, st.Blocks, "read_file-1761734231198-1c505312bf0b-result"); r.Output != "Goodbye from Gemini CLI" {
		t.Fatalf("second read %+v", r)
	}
	th := agenttest.FindBlock(t, st.Blocks, "80aec7c7-87cd-4812-ae58-bf135c0422b5-1")
	if th.Type != conversation.BlockThinking || th.Summary != "Pinpointing the Absolute Path" {
		t.Fatalf("thought %+v", th)
	}
	if len(agenttest.BlocksOf(st.Blocks, conversation.BlockThinking)) != 6 {
		t.Fatal("want 6 thoughts")
	}
	done := agenttest.FindBlock(t, st.Blocks, "3227021e-79b9-4bc0-8cb5-904c0a840e6c-1")
	if done.Content != "Done." || done.Type != conversation.BlockAssistantText {
		t.Fatalf("answer %+v", done)
	}
	// input counts the prompt minus its cached part; thoughts are output.
	want := conversation.Usage{
		InputTokens:          5367 + (5393 - 4029) + 5454 + 5480,
		OutputTokens:         18 + 244 + 39 + 151 + 18 + 43 + 2 + 48,
		CacheReadInputTokens: 4029,
	}
	if st.Usage != want {
		t.Fatalf("usage %+v, want %+v", st.Usage, want)
	}
	var qc conversation.QueryCompleted
	last := events[len(events)-1]
	if last.Type != conversation.TypeQueryCompleted || json.Unmarshal(last.Payload, &qc) != nil || qc.Result != "Done." {
		t.Fatalf("last event %s %s", last.Type, last.Payload)
	}
}

// TestSessionLinesMatchDocument: the JSON-lines layout of the same chat
// (messages appended again as they change) reduces to the same blocks as
// the single document, before the hand-written extra turn.
func TestSessionLinesMatchDocument(t *testing.T) {
	doc, _ := formattest.Reduce(t, "gemini-session", sessionEdit)
	lines, events := formattest.Reduce(t, "gemini-session", sessionLines)
	if len(lines.Blocks) < len(doc.Blocks) {
		t.Fatalf("%d blocks from lines, %d from the document", len(lines.Blocks), len(doc.Blocks))
	}
	for i, want := range doc.Blocks {
		got := lines.Blocks[i]
		wj, _ := json.Marshal(want)
		gj, _ := json.Marshal(got)
		if !bytes.Equal(wj, gj) {
			t.Fatalf("block %d:\n got %s\nwant %s", i, gj, wj)
		}
	}
	extra := lines.Blocks[len(doc.Blocks):]
	if len(extra) != 4 || extra[0].Content != "Now delete it" || !extra[2].IsError || extra[2].Output != "Tool execution denied by policy." ||
		extra[3].Type != conversation.BlockError || extra[3].Message != "[API Error: quota exceeded]" {
		t.Fatalf("extra turn %+v", extra)
	}
	if n := agenttest.CountType(events, conversation.TypeQueryCompleted); n != 1 {
		t.Fatalf("%d query:completed, want 1 (the first turn's)", n)
	}
	if n := agenttest.CountType(events, conversation.TypeError); n != 1 {
		t.Fatalf("%d error events, want 1", n)
	}
}

func TestJSONOutput(t *testing.T) {
	st, events := formattest.Reduce(t, "gemini-json", jsonOut)
	if texts := agenttest.BlocksOf(st.Blocks, conversation.BlockAssistantText); len(texts) != 1 || texts[0].Content != "The capital of France is Paris." {
		t.Fatalf("texts %+v", texts)
	}
	want := conversation.Usage{InputTokens: 15526 + 3814 + 43, OutputTokens: 20 + 113 + 7 + 45}
	if st.Usage != want || st.Model != "gemini-2.5-pro" {
		t.Fatalf("usage %+v model %q, want %+v", st.Usage, st.Model, want)
	}
	if agenttest.CountType(events, conversation.TypeQueryCompleted) != 1 {
		t.Fatal("want query:completed")
	}
	ev, err := gemini.ConvertJSONOutput([]byte(`{"session_id":"s9","error":{"type":"FatalAuthenticationError","message":"no key","code":41}}`))
	if err != nil {
		t.Fatal(err)
	}
	st = agenttest.CheckEvents(t, ev)
	if e := agenttest.BlocksOf(st.Blocks, conversation.BlockError); len(e) != 1 || e[0].Code != "FatalAuthenticationError" || agenttest.CountType(ev, conversation.TypeQueryFailed) != 1 {
		t.Fatalf("error output: %+v", st.Blocks)
	}
	if _, err := gemini.ConvertJSONOutput([]byte(`{"unrelated":true}`)); err == nil {
		t.Fatal("an object that is not a gemini result must be an error")
	}
}

func TestBadInputsAreSkipped(t *testing.T) {
	cases := []struct {
		format, input string
		warnLines     []int
	}{
		{"gemini-stream-json", "{\"type\":\"init\",\"session_id\":\"s\"}\n{bad\n{\"type\":\"tool_use\",\"tool_name\":\"x\"}\n{\"type\":\"message\",\"role\":\"assistant\",\"content\":\"hi\",\"delta\":true}\n", []int{2, 3}},
		{"gemini-session", "{\"sessionId\":\"s\"}\n[]\n{\"id\":\"m1\",\"type\":\"gemini\",\"content\":\"hi\"}\n", []int{2}},
		{"gemini-session", `{"sessionId":"s","messages":[{"id":"m1","type":"gemini","content":"hi"},{"id":7}]}`, nil},
		{"gemini-json", `{"response": "hi"`, []int{1}},
	}
	for _, tc := range cases {
		t.Run(tc.format, func(t *testing.T) {
			file := filepath.Join(t.TempDir(), "in")
			if err := os.WriteFile(file, []byte(tc.input), 0o644); err != nil {
				t.Fatal(err)
			}
			_, events, warns := formattest.Run(t, tc.format, file)
			var lines []int
			for _, w := range warns {
				lines = append(lines, w.Line)
			}
			if len(lines) != len(tc.warnLines) {
				t.Fatalf("warnings %v, want lines %v", warns, tc.warnLines)
			}
			for i := range lines {
				if lines[i] != tc.warnLines[i] {
					t.Fatalf("warnings %v, want lines %v", warns, tc.warnLines)
				}
			}
			st := agenttest.CheckEvents(t, events)
			if tc.format != "gemini-json" {
				if texts := agenttest.BlocksOf(st.Blocks, conversation.BlockAssistantText); len(texts) != 1 || texts[0].Content != "hi" {
					t.Fatalf("texts %+v", texts)
				}
			}
		})
	}
	if _, err := convert.Run(convert.Options{Format: "gemini-session", Files: []string{"testdata/missing.json"}}, &bytes.Buffer{}); err == nil {
		t.Fatal("missing file: want an error")
	}
}

// TestCapturedTwoProcesses converts a real Gemini CLI 0.61 run (against
// the mock model) and its --resume follow-up the way a live runner does,
// one converter per process with the turn's id as prefix: no block id
// repeats and each process's stats count once.
func TestCapturedTwoProcesses(t *testing.T) {
	var events []conversation.Event
	for i, f := range []string{"testdata/captured/gemini-stream-list.jsonl", "testdata/captured/gemini-stream-resume.jsonl"} {
		c := gemini.NewStreamJSONConverter(gemini.WithIDPrefix(fmt.Sprintf("q%d", i+1)))
		for _, l := range strings.Split(strings.TrimSpace(agenttest.ReadFile(t, f)), "\n") {
			ev, err := c.Convert([]byte(l))
			if err != nil {
				t.Fatal(err)
			}
			events = append(events, ev...)
		}
		if c.SessionID() != "0e06e12e-9bc1-4696-aac8-4d2ec144f6c3" {
			t.Fatalf("session %q", c.SessionID())
		}
	}
	st := agenttest.CheckEvents(t, events)
	if r := agenttest.FindBlock(t, st.Blocks, "run_shell_command__run_shell_command_1795310788199_0-result"); r.Output != "a.txt\nb.txt" || r.DurationMs != 538 {
		t.Fatalf("ls result %+v", r)
	}
	var texts []string
	for _, b := range agenttest.BlocksOf(st.Blocks, conversation.BlockAssistantText) {
		texts = append(texts, b.ID+"="+b.Content)
	}
	if strings.Join(texts, "|") != "q1-2=Listing.|q1-3=There are two files: a.txt and b.txt.|q2-2=Hello from the mock." {
		t.Fatalf("texts %v", texts)
	}
	if st.Usage != (conversation.Usage{InputTokens: 23580 + 11901, OutputTokens: 21 + 5}) {
		t.Fatalf("usage %+v", st.Usage)
	}
}

func TestCapturedSession(t *testing.T) {
	st, events := formattest.Reduce(t, "gemini-session", "testdata/captured/session-2026-11-22T01-26-0e06e12e.jsonl")
	users := agenttest.BlocksOf(st.Blocks, conversation.BlockUserMessage)
	if len(users) != 2 || users[0].Content != "list the files" || users[1].Content != "say hi" {
		t.Fatalf("user messages %+v (no session context, no tool responses)", users)
	}
	if r := agenttest.FindBlock(t, st.Blocks, "run_shell_command__run_shell_command_1795310788199_0-result"); r.Output != "a.txt\nb.txt" || r.IsError {
		t.Fatalf("ls result %+v", r)
	}
	var results []string
	for _, e := range events {
		if e.Type == conversation.TypeQueryCompleted {
			var qc conversation.QueryCompleted
			_ = json.Unmarshal(e.Payload, &qc)
			results = append(results, qc.Result)
		}
	}
	if len(results) != 2 || results[0] != "There are two files: a.txt and b.txt." || results[1] != "Hello from the mock." {
		t.Fatalf("turn ends %q", results)
	}
}

// TestSessionRewrittenHistory: a history rewritten on resume holds tool
// calls as functionCall/functionResponse parts only; they still become a
// tool_use and its result, and the call does not end the turn.
func TestSessionRewrittenHistory(t *testing.T) {
	line := `{"$set":{"messages":[` +
		`{"id":"u1","timestamp":"2026-01-01T00:00:00Z","type":"user","content":[{"text":"go"}]},` +
		`{"id":"g1","timestamp":"2026-01-01T00:00:01Z","type":"gemini","content":[{"text":"Reading."},{"functionCall":{"id":"c1","name":"read_file","args":{"path":"x"}}}]},` +
		`{"id":"g1_response","timestamp":"2026-01-01T00:00:02Z","type":"user","content":[{"functionResponse":{"id":"c1","name":"read_file","response":{"error":"no such file"}}}]},` +
		`{"id":"g2","timestamp":"2026-01-01T00:00:03Z","type":"gemini","content":[{"text":"It is missing."}]}]}}`
	c := gemini.NewSessionConverter()
	events, err := c.Convert([]byte(line))
	if err != nil {
		t.Fatal(err)
	}
	events = append(events, c.Flush()...)
	st := agenttest.CheckEvents(t, events)
	if u := agenttest.FindBlock(t, st.Blocks, "c1"); u.ToolName != "read_file" || u.Status != conversation.StatusError {
		t.Fatalf("tool_use %+v", u)
	}
	if r := agenttest.FindBlock(t, st.Blocks, "c1-result"); !r.IsError || r.Output != "no such file" {
		t.Fatalf("tool_result %+v", r)
	}
	var results []string
	for _, e := range events {
		if e.Type == conversation.TypeQueryCompleted {
			var qc conversation.QueryCompleted
			_ = json.Unmarshal(e.Payload, &qc)
			results = append(results, qc.Result)
		}
	}
	if len(results) != 1 || results[0] != "It is missing." {
		t.Fatalf("turn ends %q", results)
	}
}
