package codex_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentd/agentd/conversation"
	"github.com/agentd/agentd/internal/convert"
)

var update = flag.Bool("update", false, "rewrite the golden files under testdata/golden")

// formatFiles maps each format to the test inputs it must convert cleanly.
var formatFiles = map[string][]string{
	"codex-exec-json":  {"testdata/agent-output/*codex-exec-json*.jsonl", "testdata/captured/codex-exec-*.jsonl"},
	"codex-rollout":    {"testdata/agent-output/*rollout-*.jsonl", "testdata/captured/rollout-*.jsonl"},
	"codex-app-server": {"testdata/app-server/*.jsonl", "testdata/captured/codex-app-server-*.jsonl"},
}

// runFormat converts file through the registered format, as `agentd
// convert` does, and returns the output bytes, the events and the warnings.
func runFormat(t testing.TB, format, file string) ([]byte, []conversation.Event, []convert.Warning) {
	t.Helper()
	var buf bytes.Buffer
	warns, err := convert.Run(convert.Options{Format: format, Files: []string{file}}, &buf)
	if err != nil {
		t.Fatalf("convert %s %s: %v", format, file, err)
	}
	var events []conversation.Event
	sc := bufio.NewScanner(bytes.NewReader(buf.Bytes()))
	sc.Buffer(nil, 64<<20)
	for sc.Scan() {
		var e conversation.Event
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			t.Fatalf("output line %q: %v", sc.Text(), err)
		}
		events = append(events, e)
	}
	return buf.Bytes(), events, warns
}

// checkEvents asserts the invariants every converter keeps: known event
// types, payloads that decode, a block id never reused for a block of
// another type or conversation, no delta before its block, and a log the
// reducer accepts.
func checkEvents(t testing.TB, events []conversation.Event) conversation.State {
	t.Helper()
	type owner struct {
		typ  conversation.BlockType
		conv string
	}
	owners := map[string]owner{}
	for i, e := range events {
		if !e.Type.Valid() {
			t.Fatalf("event %d: unknown type %q", i, e.Type)
		}
		p, err := e.Decode()
		if err != nil {
			t.Fatalf("event %d: %v", i, err)
		}
		switch p := p.(type) {
		case *conversation.BlockUpsert:
			b := p.Block
			if b.ID == "" || b.Type == "" {
				t.Fatalf("event %d: block without id or type: %+v", i, b)
			}
			o, ok := owners[b.ID]
			if !ok {
				owners[b.ID] = owner{b.Type, e.Context.ConversationID}
			} else if o.typ != b.Type || o.conv != e.Context.ConversationID {
				t.Fatalf("event %d: block id %q reused: %v in %q, now %v in %q", i, b.ID, o.typ, o.conv, b.Type, e.Context.ConversationID)
			}
		case *conversation.BlockDelta:
			o, ok := owners[p.BlockID]
			if !ok {
				t.Fatalf("event %d: delta to unknown block %q", i, p.BlockID)
			}
			if o.conv != e.Context.ConversationID {
				t.Fatalf("event %d: delta to %q in conversation %q, block is in %q", i, p.BlockID, e.Context.ConversationID, o.conv)
			}
		}
	}
	st, err := conversation.Reduce(events)
	if err != nil {
		t.Fatalf("reduce: %v", err)
	}
	return st
}

func TestFormatsConvertTestdata(t *testing.T) {
	for format, patterns := range formatFiles {
		var files []string
		for _, pattern := range patterns {
			m, err := filepath.Glob(pattern)
			if err != nil || len(m) == 0 {
				t.Fatalf("%s: no test inputs match %s", format, pattern)
			}
			files = append(files, m...)
		}
		for _, file := range files {
			t.Run(format+"/"+filepath.Base(file), func(t *testing.T) {
				out, events, warns := runFormat(t, format, file)
				if len(warns) > 0 {
					t.Fatalf("warnings: %v", warns)
				}
				if len(events) == 0 {
					t.Fatal("no events")
				}
				checkEvents(t, events)
				again, _, _ := runFormat(t, format, file)
				if !bytes.Equal(out, again) {
					t.Fatal("converting the same file twice gave different bytes")
				}
				golden := filepath.Join("testdata", "golden", format, strings.TrimSuffix(filepath.Base(file), filepath.Ext(file))+".events.jsonl")
				if *update {
					if err := os.MkdirAll(filepath.Dir(golden), 0o755); err != nil {
						t.Fatal(err)
					}
					if err := os.WriteFile(golden, out, 0o644); err != nil {
						t.Fatal(err)
					}
					return
				}
				want, err := os.ReadFile(golden)
				if err != nil {
					t.Fatalf("%v (run go test -update to create it)", err)
				}
				if !bytes.Equal(out, want) {
					t.Fatalf("output differs from %s (run go test -update after checking the change)", golden)
				}
			})
		}
	}
}

// reduceFile converts and reduces one test input.
func reduceFile(t *testing.T, format, file string) (conversation.State, []conversation.Event) {
	t.Helper()
	_, events, warns := runFormat(t, format, file)
	if len(warns) > 0 {
		t.Fatalf("warnings: %v", warns)
	}
	return checkEvents(t, events), events
}

func blocksOf(bs []conversation.Block, typ conversation.BlockType) []conversation.Block {
	var out []conversation.Block
	for _, b := range bs {
		if b.Type == typ {
			out = append(out, b)
		}
	}
	return out
}

func findBlock(t *testing.T, bs []conversation.Block, id string) conversation.Block {
	t.Helper()
	for _, b := range bs {
		if b.ID == id {
			return b
		}
	}
	t.Fatalf("no block %q", id)
	return conversation.Block{}
}

func countType(events []conversation.Event, typ conversation.EventType) int {
	n := 0
	for _, e := range events {
		if e.Type == typ {
			n++
		}
	}
	return n
}

func TestUnknownFormatFileMissing(t *testing.T) {
	_, err := convert.Run(convert.Options{Format: "codex-rollout", Files: []string{"testdata/does-not-exist.jsonl"}}, &bytes.Buffer{})
	if err == nil {
		t.Fatal("missing file: want an error")
	}
}

// TestBadLinesAreSkipped feeds each format a file mixing good and bad
// lines: each bad line is one warning with its line number, and the good
// lines around it still convert.
func TestBadLinesAreSkipped(t *testing.T) {
	cases := map[string]string{
		"codex-exec-json": `{"type":"thread.started","thread_id":"t1"}
not json
{"type":"item.completed","item":{"type":"agent_message","text":"no id"}}
{"type":"item.completed","item":{"id":"item_0","type":"agent_message","text":"hi"}}
`,
		"codex-rollout": `{"timestamp":"2025-01-01T00:00:00Z","type":"session_meta","payload":{"id":"s1"}}
{"timestamp":"2025-01-01T00:00:01Z","type":"response_item","payload":"oops"}
{"timestamp":"2025-01-01T00:00:02Z","type":"response_item","payload":{"type":"message","role":"assistant","content":[{"type":"output_text","text":"hi"}]}}
`,
		"codex-app-server": `{"method":"item/completed","params":{"threadId":"t","turnId":"u","item":{"type":"agentMessage","text":"no id"}}}
{"method":"thread/started","params":{}}
[1,2]
{"method":"item/completed","params":{"threadId":"t","turnId":"u","item":{"type":"agentMessage","id":"m","text":"hi"}}}
`,
	}
	wantBad := map[string][]int{"codex-exec-json": {2, 3}, "codex-rollout": {2}, "codex-app-server": {1, 2, 3}}
	for format, input := range cases {
		t.Run(format, func(t *testing.T) {
			file := filepath.Join(t.TempDir(), "in.jsonl")
			if err := os.WriteFile(file, []byte(input), 0o644); err != nil {
				t.Fatal(err)
			}
			_, events, warns := runFormat(t, format, file)
			var lines []int
			for _, w := range warns {
				lines = append(lines, w.Line)
			}
			if !equalInts(lines, wantBad[format]) {
				t.Fatalf("warned lines %v, want %v (%v)", lines, wantBad[format], warns)
			}
			st := checkEvents(t, events)
			texts := blocksOf(st.Blocks, conversation.BlockAssistantText)
			if len(texts) != 1 || texts[0].Content != "hi" {
				t.Fatalf("assistant blocks %+v, want one saying hi", texts)
			}
		})
	}
}

func equalInts(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
