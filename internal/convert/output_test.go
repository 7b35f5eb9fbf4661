package convert

import (
	"bufio"
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/agentd/agentd/conversation"
	"github.com/agentd/agentd/internal/convert/synth"
)

// plainSink collects events as a Sink that is not a claudeconv.BlockSink:
// every block event comes encoded, as the converters give them to anyone.
type plainSink struct{ events []conversation.Event }

func (s *plainSink) Emit(e conversation.Event) error { s.events = append(s.events, e); return nil }
func (s *plainSink) Warn(string, int, error)         {}

// referenceOutput is what Run wrote before its output was written by hand:
// every event through json.Encoder; for blocks, conversation.Reduce over all
// of them and each block through json.Encoder.
func referenceOutput(t *testing.T, format string, files []string, blocks bool) []byte {
	t.Helper()
	f, _ := Lookup(format)
	var inputs []Input
	for _, file := range files {
		fh, err := os.Open(file)
		if err != nil {
			t.Fatal(err)
		}
		defer fh.Close()
		inputs = append(inputs, Input{Name: file, R: fh})
	}
	var s plainSink
	if err := f.Convert(inputs, &s); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	enc := json.NewEncoder(&out)
	if !blocks {
		for _, e := range s.events {
			if err := enc.Encode(e); err != nil {
				t.Fatal(err)
			}
		}
		return out.Bytes()
	}
	st, _ := conversation.Reduce(s.events)
	type blockLine struct {
		ConversationID string             `json:"conversationId"`
		Block          conversation.Block `json:"block"`
	}
	for _, b := range st.Blocks {
		enc.Encode(blockLine{conversation.MainConversation, b})
	}
	for _, sub := range st.Subagents {
		for _, b := range sub.Blocks {
			enc.Encode(blockLine{sub.ID, b})
		}
	}
	return out.Bytes()
}

// TestOutputMatchesEncodingJSON: for every test input of every format, Run
// writes exactly what json.Encoder wrote for the same events and blocks
// (the hand-written output, the typed block path and the incremental
// reduction change nothing).
func TestOutputMatchesEncodingJSON(t *testing.T) {
	inputs := map[string][]string{
		"claude-stream-json": {filepath.Join(synth.SharedRoot(), "claude-stream-json", "*"), filepath.Join(synth.SharedRoot(), "claude-stream-json", "*", "*"), "../agent/claudecode/claudeconv/testdata/cli-*/*/stream.jsonl"},
		"claude-transcript":  {filepath.Join(synth.SharedRoot(), "claude-session-jsonl", "*"), "../agent/claudecode/claudeconv/testdata/cli-*/*/session.jsonl"},
		"codex-exec-json":    {"../agent/codex/testdata/agent-output/*codex-exec-json*.jsonl", "../agent/codex/testdata/captured/codex-exec-*.jsonl"},
		"codex-rollout":      {"../agent/codex/testdata/agent-output/*rollout-*.jsonl", "../agent/codex/testdata/captured/rollout-*.jsonl"},
		"codex-app-server":   {"../agent/codex/testdata/app-server/*.jsonl", "../agent/codex/testdata/captured/codex-app-server-*.jsonl"},
		"gemini-stream-json": {"../agent/gemini/testdata/agent-output/*stream-json*.jsonl", "../agent/gemini/testdata/captured/gemini-stream-*.jsonl"},
		"gemini-session":     {"../agent/gemini/testdata/agent-output/*session-*.json", "../agent/gemini/testdata/session-jsonl/*.jsonl"},
		"gemini-json":        {"../agent/gemini/testdata/agent-output/*output-format-json*.json"},
		"opencode-events":    {"../agent/opencode/testdata/agent-output/*sse-events*.jsonl", "../agent/opencode/testdata/captured/opencode-events.sse.txt"},
		"opencode-export":    {"../agent/opencode/testdata/agent-output/*transcript*.json", "../agent/opencode/testdata/captured/opencode-export.json"},
	}
	for format, patterns := range inputs {
		if _, ok := Lookup(format); !ok {
			t.Errorf("format %s is not registered", format)
			continue
		}
		n := 0
		for _, p := range patterns {
			files, _ := filepath.Glob(p)
			for _, file := range files {
				if fi, err := os.Stat(file); err != nil || fi.IsDir() {
					continue
				}
				n++
				group := []string{file}
				if filepath.Base(file) == "session.jsonl" {
					subs, _ := filepath.Glob(filepath.Join(filepath.Dir(file), "subagents", "*.jsonl"))
					group = append(group, subs...)
				}
				for _, blocks := range []bool{false, true} {
					var got bytes.Buffer
					if _, err := Run(Options{Format: format, Files: group, Blocks: blocks}, &got); err != nil {
						t.Fatalf("%s %s: %v", format, file, err)
					}
					if want := referenceOutput(t, format, group, blocks); !bytes.Equal(got.Bytes(), want) {
						t.Errorf("%s %s blocks=%v: output differs from json.Encoder's at line %d",
							format, file, blocks, firstDiffLine(got.Bytes(), want))
					}
				}
			}
		}
		if n == 0 {
			t.Errorf("%s: no test inputs", format)
		}
	}
}

func firstDiffLine(a, b []byte) int {
	sa, sb := bufio.NewScanner(bytes.NewReader(a)), bufio.NewScanner(bytes.NewReader(b))
	sa.Buffer(nil, 64<<20)
	sb.Buffer(nil, 64<<20)
	for line := 1; ; line++ {
		okA, okB := sa.Scan(), sb.Scan()
		if !okA || !okB || !bytes.Equal(sa.Bytes(), sb.Bytes()) {
			return line
		}
	}
}
