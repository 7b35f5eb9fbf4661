package claudeconv

import (
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"testing/iotest"

	"github.com/agentd/agentd/agent/agenttest"
	"github.com/agentd/agentd/conversation"
)

type warning struct {
	file string
	line int
	err  error
}

// recSink records what a conversion gives.
type recSink struct {
	events   []conversation.Event
	warnings []warning
	failAt   int // Emit fails on this event (1-based) when > 0
}

func (s *recSink) Emit(e conversation.Event) error {
	if s.failAt > 0 && len(s.events)+1 == s.failAt {
		return errors.New("sink full")
	}
	s.events = append(s.events, e)
	return nil
}

func (s *recSink) Warn(file string, line int, err error) {
	s.warnings = append(s.warnings, warning{file, line, err})
}

func fileInput(t testing.TB, path string) Input {
	t.Helper()
	data, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) && strings.HasPrefix(path, testdataRoot) {
		t.Skipf("shared test data not available: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	return Input{Name: filepath.Base(path), R: bytes.NewReader(data)}
}

func strInput(name, s string) Input { return Input{Name: name, R: strings.NewReader(s)} }

// onlyIgnoredWarnings fails unless every warning is an ignored bookkeeping
// line.
func onlyIgnoredWarnings(t *testing.T, ws []warning) {
	t.Helper()
	for _, w := range ws {
		if !errors.Is(w.err, ErrIgnored) {
			t.Errorf("unexpected warning %s:%d: %v", w.file, w.line, w.err)
		}
	}
}

var (
	aiMain = sessionDir + "/ai-systems__main-transcript.jsonl"
	aiSub  = sessionDir + "/ai-systems__subagent-transcript.jsonl"
	arMain = sessionDir + "/agent-runtime__0bfd826f-14ed-4e00-8015-75bf5f7fe33f.jsonl"
	arSub  = sessionDir + "/agent-runtime__agent-6d933f1b.jsonl"
)

func TestTranscriptSubagentFileMatchedByPrompt(t *testing.T) {
	var s recSink
	if err := ConvertTranscript(fileInput(t, aiMain), []Input{fileInput(t, aiSub)}, &s); err != nil {
		t.Fatal(err)
	}
	if len(s.warnings) != 1 || !errors.Is(s.warnings[0].err, ErrIgnored) || s.warnings[0].line != 1 {
		t.Fatalf("warnings = %v, want the queue-operation line 1", s.warnings)
	}
	st := mustReduce(t, s.events)
	sa := subagentByID(t, st, "toolu_01H79rxPSUkpfuuZFosbzSsv")
	want := []string{"da32c939-f337-44ec-9d6d-241d3b6d8524-0", "msg_01TmxCSNQrgzCGZyToK7WNDn-0",
		"toolu_01Bb4hjvMovhc3JagmreVnSi", "toolu_01Bb4hjvMovhc3JagmreVnSi-result", "msg_01SpXkwU9HUVrkQVhFbFx4my-0"}
	if got := ids(sa.Blocks); !reflect.DeepEqual(got, want) {
		t.Fatalf("subagent blocks = %v\nwant %v", got, want)
	}
	if sa.AgentID != "a9b844f" || sa.Status != conversation.StatusComplete || sa.DurationMs != 2330 || sa.SubagentType != "general-purpose" {
		t.Fatalf("subagent = %+v", sa)
	}
	// The subagent's lines are emitted before its completion, as live.
	completedAt, lastSub := -1, -1
	for i, e := range s.events {
		if e.Type == conversation.TypeSubagentCompleted {
			completedAt = i
		}
		if e.Context.ConversationID == sa.ID {
			lastSub = i
		}
	}
	if lastSub < 0 || completedAt < lastSub {
		t.Fatalf("subagent events end at %d, completion at %d", lastSub, completedAt)
	}
	if len(st.Subagents) != 1 {
		t.Fatalf("subagents = %d", len(st.Subagents))
	}
	// Usage comes from the assistant lines.
	if st.Usage.OutputTokens == 0 || st.Model != "claude-sonnet-4-5-20250929" {
		t.Fatalf("usage %+v model %q", st.Usage, st.Model)
	}
}

func TestTranscriptSubagentFileMatchedByAgentID(t *testing.T) {
	// Given in the "wrong" order, roles found from the content.
	var s recSink
	if err := ConvertTranscripts([]Input{fileInput(t, arSub), fileInput(t, arMain)}, &s); err != nil {
		t.Fatal(err)
	}
	onlyIgnoredWarnings(t, s.warnings)
	st := mustReduce(t, s.events)
	sa := subagentByID(t, st, "toolu_018pvWxLiTRRGjSE7aDVEuxF")
	if len(sa.Blocks) != 6 || sa.AgentID != "6d933f1b" || sa.SubagentType != "Explore" {
		t.Fatalf("subagent = %+v with %v", sa, ids(sa.Blocks))
	}
	for _, b := range st.Blocks {
		if strings.HasPrefix(b.ID, "toolu_01HMnC7") {
			t.Fatalf("subagent block %s in main", b.ID)
		}
	}
}

func TestTranscriptStandaloneSubagentFile(t *testing.T) {
	var s recSink
	if err := ConvertTranscripts([]Input{fileInput(t, arSub)}, &s); err != nil {
		t.Fatal(err)
	}
	st := mustReduce(t, s.events)
	if len(st.Blocks) != 0 || len(st.Subagents) != 1 || st.Subagents[0].ID != "agent-6d933f1b" || len(st.Subagents[0].Blocks) != 6 {
		t.Fatalf("standalone subagent: main %v, subagents %+v", ids(st.Blocks), st.Subagents)
	}
	// A file named agent-<id>.jsonl whose lines lack agentId is a subagent
	// file too, identified by its name.
	s = recSink{}
	line := `{"type":"assistant","isSidechain":true,"uuid":"u1","message":{"id":"m1","content":[{"type":"text","text":"hi"}]}}`
	if err := ConvertTranscripts([]Input{strInput("x/subagents/agent-a1b2.jsonl", line)}, &s); err != nil {
		t.Fatal(err)
	}
	if st := mustReduce(t, s.events); len(st.Subagents) != 1 || st.Subagents[0].ID != "agent-a1b2" {
		t.Fatalf("named subagent file: %+v", st.Subagents)
	}
}

func TestTranscriptInlineSidechains(t *testing.T) {
	for _, tc := range []struct {
		file      string
		subagents map[string]int // id → blocks
	}{
		{"claude-code-viewer__5c0375b4-57a5-4f26-b12d-d022ee4e51b7.jsonl", map[string]int{
			"toolu_018t5jce2ZNoGr2ADsHGQife": 0, // failed before it started
			"toolu_014YF9TXhDRR7BnpasNJ7gjC": 7, "toolu_01LKfUwrsnof18CpWZQcJH44": 15}},
		{"claude-code-viewer__fe5e1c67-53e7-4862-81ae-d0e013e3270b.jsonl", map[string]int{
			"toolu_014i9ThHMNShCHocf9xMKasf": 86, "toolu_01EbxY94wRUAGyMLj5wh699C": 98, "toolu_01LS6tcVd796SbQKmZqeVnWY": 21,
			"toolu_017rjDpjVPeNFmAEXNTkoP55": 65, "toolu_01EPom7jESzNbU8coiKjzVGS": 135}},
	} {
		t.Run(tc.file, func(t *testing.T) {
			var s recSink
			if err := ConvertTranscripts([]Input{fileInput(t, filepath.Join(sessionDir, tc.file))}, &s); err != nil {
				t.Fatal(err)
			}
			onlyIgnoredWarnings(t, s.warnings)
			st := mustReduce(t, s.events)
			got := map[string]int{}
			for _, sa := range st.Subagents {
				got[sa.ID] = len(sa.Blocks)
				if len(sa.Blocks) > 0 {
					// The first block is the prompt the Task call gave.
					if first := sa.Blocks[0]; first.Type != conversation.BlockUserMessage || first.Content != sa.Prompt {
						t.Errorf("%s starts with %s %q, want its prompt", sa.ID, first.Type, first.Content)
					}
				}
			}
			for _, sa := range st.Subagents {
				if _, ok := tc.subagents[sa.ID]; !ok {
					t.Errorf("unexpected subagent %s (%d blocks)", sa.ID, len(sa.Blocks))
				}
			}
			for id, n := range tc.subagents {
				if got[id] != n {
					t.Errorf("subagent %s: %d blocks, want %d", id, got[id], n)
				}
			}
			for _, b := range st.Blocks {
				if b.Type == conversation.BlockSubagent && b.Status == conversation.StatusPending {
					t.Errorf("subagent %s never completed", b.ID)
				}
			}
		})
	}
}

func TestTranscriptBadAndDuplicateLines(t *testing.T) {
	lines := strings.Join([]string{
		`{"type":"summary","summary":"s","leafUuid":"x"}`,
		`{"type":"user","uuid":"u1","timestamp":"2025-01-01T00:00:00Z","message":{"role":"user","content":"hi"}}`,
		`{"type":"assistant","uuid":"a1","message":{"id":"m1","content":[{"type":"text","text":"hel`,
		``,
		`{"type":"assistant","uuid":"a2","message":{"id":"m1","content":[{"type":"text","text":"hello"}],"usage":{"input_tokens":10,"output_tokens":1}}}`,
		`{"type":"assistant","uuid":"a3","message":{"id":"m1","content":[{"type":"tool_use","id":"toolu_1","name":"Bash","input":{"command":"ls"}}],"usage":{"input_tokens":10,"output_tokens":7}}}`,
		`{"type":"assistant","uuid":"a2","message":{"id":"m1","content":[{"type":"text","text":"hello"}],"usage":{"input_tokens":10,"output_tokens":1}}}`,
		`{"type":"system","subtype":"api_error","level":"error","uuid":"e1","error":{"status":529,"message":"overloaded"},"retryInMs":558.9,"retryAttempt":1,"maxRetries":10}`,
		`{"type":"system","subtype":"compact_boundary","uuid":"c1","compactMetadata":{"trigger":"manual","preTokens":99}}`,
		`{"type":"system","subtype":"local_command","uuid":"l1","content":"<local-command-stdout>done</local-command-stdout>"}`,
		"{\"type\":\"user\",\"uuid\":\"u2\",\"message\":{\"content\":[{\"type\":\"tool_result\",\"tool_use_id\":\"toolu_1\",\"content\":\"a.go\"}]}}\r",
	}, "\n")
	var s recSink
	if err := ConvertTranscripts([]Input{strInput("s.jsonl", lines)}, &s); err != nil {
		t.Fatal(err)
	}
	if len(s.warnings) != 2 || !errors.Is(s.warnings[0].err, ErrIgnored) || s.warnings[0].line != 1 ||
		!errors.Is(s.warnings[1].err, ErrMalformed) || s.warnings[1].line != 3 || s.warnings[1].file != "s.jsonl" {
		t.Fatalf("warnings = %+v", s.warnings)
	}
	st := mustReduce(t, s.events)
	if got, want := ids(st.Blocks), []string{"u1-0", "m1-0", "toolu_1", "c1-0", "l1-0", "toolu_1-result"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("ids = %v, want %v (the truncated line is skipped; the repeated a2 converts once)", got, want)
	}
	// Usage: the message's lines repeat its usage; it counts once, at its
	// largest.
	if st.Usage.InputTokens != 10 || st.Usage.OutputTokens != 7 {
		t.Fatalf("usage = %+v", st.Usage)
	}
	var retry string
	for _, e := range agenttest.OfType(s.events, conversation.TypeLog) {
		if p := payload[conversation.LogEvent](t, e); strings.HasPrefix(p.Message, "API request failed") {
			retry = p.Message
		}
	}
	if retry != "API request failed: overloaded (HTTP 529); retry 1/10 in 558 ms" {
		t.Fatalf("retry log = %q", retry)
	}
	if b := blockByID(t, st.Blocks, "c1-0"); !strings.Contains(b.Message, "manual, 99 tokens") {
		t.Fatalf("compact = %+v", b)
	}
	if b := blockByID(t, st.Blocks, "l1-0"); b.Subtype != "local_command" || !strings.Contains(b.Message, "done") {
		t.Fatalf("local command = %+v", b)
	}
}

func TestTranscriptReadAndSinkErrors(t *testing.T) {
	boom := errors.New("disk gone")
	err := ConvertTranscript(Input{Name: "m", R: iotest.ErrReader(boom)}, nil, &recSink{})
	if !errors.Is(err, boom) {
		t.Fatalf("read error = %v", err)
	}
	err = ConvertTranscripts([]Input{fileInput(t, aiMain), {Name: "bad", R: iotest.ErrReader(boom)}}, &recSink{})
	if !errors.Is(err, boom) {
		t.Fatalf("read error = %v", err)
	}
	s := &recSink{failAt: 3}
	if err := ConvertTranscript(fileInput(t, aiMain), []Input{fileInput(t, aiSub)}, s); err == nil || len(s.events) != 2 {
		t.Fatalf("sink error = %v after %d events", err, len(s.events))
	}
	s = &recSink{failAt: 3}
	if err := ConvertStream(fileInput(t, streamDir+"/ai-systems__raw-sdk-messages__partial.jsonl"), s); err == nil || len(s.events) != 2 {
		t.Fatalf("stream sink error = %v after %d events", err, len(s.events))
	}
	if err := ConvertStream(Input{Name: "x", R: iotest.ErrReader(boom)}, &recSink{}); !errors.Is(err, boom) {
		t.Fatalf("stream read error = %v", err)
	}
}

func TestSplitLines(t *testing.T) {
	pretty := "{\n  \"type\": \"result\",\n  \"result\": \"4\"\n}\n"
	got := splitLines([]byte(pretty))
	if len(got) != 1 || got[0].no != 1 || !bytes.Equal(got[0].b, bytes.TrimSpace([]byte(pretty))) {
		t.Fatalf("pretty document = %+v", got)
	}
	got = splitLines([]byte(`[{"type":"a"}, {"type":"b"}]`))
	if len(got) != 2 || string(got[1].b) != `{"type":"b"}` {
		t.Fatalf("array document = %+v", got)
	}
	got = splitLines([]byte("{\"a\":1}\r\n\n  \n{\"b\":2}\n{\"c\":"))
	if len(got) != 3 || got[0].no != 1 || got[1].no != 4 || string(got[1].b) != `{"b":2}` || got[2].no != 5 {
		t.Fatalf("lines = %+v", got)
	}
	// An incomplete first line that is not one document stays lines.
	got = splitLines([]byte("{\n\"a\":1\n"))
	if len(got) != 2 {
		t.Fatalf("broken document = %+v", got)
	}
	if got := splitLines(nil); len(got) != 0 {
		t.Fatalf("empty = %+v", got)
	}
}

// TestLineReaderMatchesSplitLines: reading an input as it goes gives the
// lines splitLines gives for the whole input, whatever the reads return,
// with lines longer than the reader's buffer, and for inputs that are one
// JSON document.
func TestLineReaderMatchesSplitLines(t *testing.T) {
	long := `{"type":"user","message":{"content":"` + strings.Repeat("x", 600<<10) + `"}}`
	inputs := []string{
		"",
		"\n\n  \n",
		"{\"a\":1}\r\n\n  \n{\"b\":2}\n{\"c\":",
		"{\"a\":1}\n" + long + "\n{\"b\":2}",
		long,
		"\n  \n{\n  \"type\": \"result\",\n  \"result\": \"4\"\n}\n",
		"\n[{\"type\":\"a\"},\n {\"type\":\"b\"}]",
		"{\n\"a\":1\n",
		"[1,\n",
		"not json\n{\"a\":1}",
	}
	if data, err := os.ReadFile(aiMain); err == nil {
		inputs = append(inputs, string(data))
	}
	for i, in := range inputs {
		want := splitLines([]byte(in))
		for name, r := range map[string]io.Reader{
			"bytes": strings.NewReader(in),
			"one":   iotest.OneByteReader(strings.NewReader(in)),
			"half":  iotest.HalfReader(strings.NewReader(in)),
		} {
			lr := newLineReader(r)
			got := readLines(lr)
			if lr.err != nil || len(got) != len(want) {
				t.Fatalf("input %d, %s: %d lines, want %d (%v)", i, name, len(got), len(want), lr.err)
			}
			for j := range got {
				if got[j].no != want[j].no || !bytes.Equal(got[j].b, want[j].b) {
					t.Fatalf("input %d, %s: line %d is %d %.40q, want %d %.40q", i, name, j, got[j].no, got[j].b, want[j].no, want[j].b)
				}
			}
		}
	}
	boom := errors.New("boom")
	lr := newLineReader(io.MultiReader(strings.NewReader("{\"a\":1}\n{\"b\""), iotest.ErrReader(boom)))
	if ln, ok := lr.next(); !ok || string(ln.b) != `{"a":1}` {
		t.Fatalf("first line %q %v", ln.b, ok)
	}
	if _, ok := lr.next(); ok || !errors.Is(lr.err, boom) {
		t.Fatalf("after the error: %v %v", ok, lr.err)
	}
}

func TestTranscriptBackgroundSubagentNotification(t *testing.T) {
	main := strings.Join([]string{
		`{"type":"assistant","uuid":"a1","message":{"id":"m1","content":[{"type":"tool_use","id":"toolu_bg","name":"Agent","input":{"prompt":"scan","subagent_type":"Explore","run_in_background":true}}]}}`,
		`{"type":"user","uuid":"u1","message":{"content":[{"type":"tool_result","tool_use_id":"toolu_bg","content":"Async agent launched successfully."}]},"toolUseResult":{"isAsync":true,"status":"async_launched","agentId":"a77"}}`,
		`{"type":"progress","uuid":"p1","data":{"type":"agent_progress"}}`,
		`{"type":"user","uuid":"u2","isMeta":true,"message":{"content":"<task-notification>\n<task-id>a77</task-id>\n<status>completed</status>\n<summary>Agent \"scan\" completed</summary>\n<result>Found 3 files.</result>\n</task-notification>"}}`,
	}, "\n")
	sub := `{"type":"user","uuid":"s1","isSidechain":true,"agentId":"a77","message":{"content":"scan"}}` + "\n" +
		`{"type":"assistant","uuid":"s2","isSidechain":true,"agentId":"a77","message":{"id":"sm","content":[{"type":"text","text":"Found 3 files."}]}}`
	var s recSink
	if err := ConvertTranscripts([]Input{strInput("main.jsonl", main), strInput("subagents/agent-a77.jsonl", sub)}, &s); err != nil {
		t.Fatal(err)
	}
	if len(s.warnings) != 0 {
		t.Fatalf("warnings: %v", s.warnings)
	}
	st := mustReduce(t, s.events)
	sa := subagentByID(t, st, "toolu_bg")
	if sa.Status != conversation.StatusComplete || sa.Output != "Found 3 files." || sa.AgentID != "a77" || len(sa.Blocks) != 2 {
		t.Fatalf("background subagent = %+v", sa)
	}
	if b := blockByID(t, st.Blocks, "u2-0"); b.Type != conversation.BlockSystem || b.Subtype != "task_notification" || b.Message != `Agent "scan" completed` {
		t.Fatalf("notification block = %+v", b)
	}
	if n := len(agenttest.OfType(s.events, conversation.TypeLog)); n != 1 { // the background launch note; progress lines give nothing
		t.Fatalf("logs = %d", n)
	}
}

func TestTranscriptSidechainRootPointingAtMain(t *testing.T) {
	lines := strings.Join([]string{
		`{"type":"assistant","uuid":"a1","message":{"id":"m1","content":[{"type":"tool_use","id":"toolu_t","name":"Task","input":{"prompt":"do it"}}]}}`,
		`{"type":"user","uuid":"s1","parentUuid":"a1","isSidechain":true,"message":{"content":"do it"}}`,
		`{"type":"assistant","uuid":"s2","parentUuid":"s1","isSidechain":true,"message":{"id":"sm","content":[{"type":"text","text":"done"}]}}`,
		`{"type":"user","uuid":"u1","parentUuid":"a1","message":{"content":[{"type":"tool_result","tool_use_id":"toolu_t","content":"done"}]}}`,
		`{"type":"assistant","uuid":"x1","isSidechain":true,"message":{"id":"xm","content":[{"type":"text","text":"orphan"}]}}`,
	}, "\n")
	var s recSink
	if err := ConvertTranscripts([]Input{strInput("main.jsonl", lines)}, &s); err != nil {
		t.Fatal(err)
	}
	st := mustReduce(t, s.events)
	if got := ids(st.Blocks); !reflect.DeepEqual(got, []string{"toolu_t"}) {
		t.Fatalf("main = %v", got)
	}
	if got := ids(subagentByID(t, st, "toolu_t").Blocks); !reflect.DeepEqual(got, []string{"s1-0", "sm-0"}) {
		t.Fatalf("subagent = %v", got)
	}
	// A sidechain nothing identifies keeps its own conversation rather
	// than polluting main.
	if got := ids(subagentByID(t, st, "sidechain-x1").Blocks); !reflect.DeepEqual(got, []string{"xm-0"}) {
		t.Fatalf("orphan sidechain = %v", got)
	}
}

// readLines reads lr to its end; each line is a copy.
func readLines(lr *lineReader) []numberedLine {
	var got []numberedLine
	for {
		ln, ok := lr.next()
		if !ok {
			return got
		}
		got = append(got, numberedLine{ln.no, bytes.Clone(ln.b)})
	}
}

// FuzzLineReader: lineReader gives splitLines's lines for any input, read
// in chunks of any size.
func FuzzLineReader(f *testing.F) {
	f.Add([]byte("{\"a\":1}\r\n\n  \n{\"b\":2}\n{\"c\":"), uint8(3))
	f.Add([]byte("\n  {\n  \"type\": \"result\"\n}\n"), uint8(1))
	f.Add([]byte("[{\"a\":1},\n{\"b\":2}]"), uint8(7))
	f.Fuzz(func(t *testing.T, data []byte, chunk uint8) {
		want := splitLines(data)
		lr := newLineReader(&chunkReader{data: data, n: int(chunk%16) + 1})
		got := readLines(lr)
		if lr.err != nil || len(got) != len(want) {
			t.Fatalf("%d lines, want %d (%v)", len(got), len(want), lr.err)
		}
		for i := range got {
			if got[i].no != want[i].no || !bytes.Equal(got[i].b, want[i].b) {
				t.Fatalf("line %d: %d %q, want %d %q", i, got[i].no, got[i].b, want[i].no, want[i].b)
			}
		}
	})
}

// chunkReader returns at most n bytes per Read.
type chunkReader struct {
	data []byte
	n    int
}

func (r *chunkReader) Read(p []byte) (int, error) {
	if len(r.data) == 0 {
		return 0, io.EOF
	}
	n := copy(p[:min(len(p), r.n)], r.data)
	r.data = r.data[n:]
	return n, nil
}
