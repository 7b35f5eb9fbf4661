package codex_test

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/agentd/agentd/agent/agenttest"
	"github.com/agentd/agentd/conversation"
	"github.com/agentd/agentd/internal/agent/agenttest/formattest"
	"github.com/agentd/agentd/internal/convert"
)

var update = flag.Bool("update", false, "rewrite the golden files under testdata/golden")

// formatFiles maps each format to the test inputs it must convert cleanly.
var formatFiles = formattest.Formats{
	"codex-exec-json":  {"testdata/agent-output/*codex-exec-json*.jsonl", "testdata/captured/codex-exec-*.jsonl"},
	"codex-rollout":    {"testdata/agent-output/*rollout-*.jsonl", "testdata/captured/rollout-*.jsonl"},
	"codex-app-server": {"testdata/app-server/*.jsonl", "testdata/captured/codex-app-server-*.jsonl"},
}

func TestFormatsConvertTestdata(t *testing.T) {
	formattest.CheckCorpus(t, formatFiles, *update)
}

// TestCopiesMatchSharedTestdata: testdata/agent-output holds byte-for-byte
// copies of the shared agent output for this CLI, so the tests run without
// it; every shared file must have an identical copy that a format converts.
func TestCopiesMatchSharedTestdata(t *testing.T) {
	formattest.CheckSharedCopies(t, "codex", formatFiles)
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
			_, events, warns := formattest.Run(t, format, file)
			var lines []int
			for _, w := range warns {
				lines = append(lines, w.Line)
			}
			if !slices.Equal(lines, wantBad[format]) {
				t.Fatalf("warned lines %v, want %v (%v)", lines, wantBad[format], warns)
			}
			st := agenttest.CheckEvents(t, events)
			texts := agenttest.BlocksOf(st.Blocks, conversation.BlockAssistantText)
			if len(texts) != 1 || texts[0].Content != "hi" {
				t.Fatalf("assistant blocks %+v, want one saying hi", texts)
			}
		})
	}
}
