package convert

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentd/agentd/conversation"
	"github.com/agentd/agentd/internal/agent/claudecode/claudeconv"
)

const claudeTestdata = "/work/shared/testdata/agent-output"

// TestClaudeFormatsConvertEverySharedFile runs every shared Claude Code file
// through convert.Run, events and blocks. Allowed warnings: only the
// bookkeeping lines a transcript carries (summary, file-history-snapshot,
// queue-operation), which the converter skips on purpose.
func TestClaudeFormatsConvertEverySharedFile(t *testing.T) {
	for format, dir := range map[string]string{"claude-stream-json": "claude-stream-json", "claude-transcript": "claude-session-jsonl"} {
		var files []string
		err := filepath.WalkDir(filepath.Join(claudeTestdata, dir), func(p string, d os.DirEntry, err error) error {
			if err == nil && !d.IsDir() {
				files = append(files, p)
			}
			return err
		})
		if err != nil || len(files) == 0 {
			t.Skipf("shared test data not available: %v", err)
		}
		for _, f := range files {
			for _, blocks := range []bool{false, true} {
				var out bytes.Buffer
				warnings, err := Run(Options{Format: format, Files: []string{f}, Blocks: blocks}, &out)
				if err != nil {
					t.Errorf("%s %s: %v", format, f, err)
					continue
				}
				for _, w := range warnings {
					if !errors.Is(w.Err, claudeconv.ErrIgnored) {
						t.Errorf("%s: unexpected warning %v", format, w)
					}
				}
				lines := 0
				sc := bufio.NewScanner(&out)
				sc.Buffer(nil, 16<<20)
				for sc.Scan() {
					lines++
					if blocks {
						var bl struct {
							ConversationID string             `json:"conversationId"`
							Block          conversation.Block `json:"block"`
						}
						if err := json.Unmarshal(sc.Bytes(), &bl); err != nil || bl.Block.ID == "" || bl.ConversationID == "" {
							t.Fatalf("%s: bad block line %q: %v", f, sc.Text(), err)
						}
					} else {
						var e conversation.Event
						if err := json.Unmarshal(sc.Bytes(), &e); err != nil || !e.Type.Valid() {
							t.Fatalf("%s: bad event line %q: %v", f, sc.Text(), err)
						}
					}
				}
				if lines == 0 && !blocks { // a lone result or init line has events but no blocks
					t.Errorf("%s: no events", f)
				}
			}
		}
	}
}

func TestClaudeTranscriptGroupsSubagentFiles(t *testing.T) {
	dir := filepath.Join(claudeTestdata, "claude-session-jsonl")
	if _, err := os.Stat(dir); err != nil {
		t.Skipf("shared test data not available: %v", err)
	}
	var out bytes.Buffer
	_, err := Run(Options{Format: "claude-transcript", Blocks: true, Files: []string{
		filepath.Join(dir, "ai-systems__subagent-transcript.jsonl"),
		filepath.Join(dir, "ai-systems__main-transcript.jsonl"),
	}}, &out)
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(out.String(), `"conversationId":"toolu_01H79rxPSUkpfuuZFosbzSsv"`); n != 5 {
		t.Fatalf("subagent blocks in its conversation: %d, want 5\n%s", n, out.String())
	}
}

func TestClaudeFormatsRegistered(t *testing.T) {
	for _, name := range []string{"claude-stream-json", "claude-transcript"} {
		f, ok := Lookup(name)
		if !ok || f.Description == "" || f.Convert == nil {
			t.Errorf("format %s: %+v, %v", name, f, ok)
		}
	}
	if _, err := Run(Options{Format: "claude-transcript", Files: []string{"/nonexistent/x.jsonl"}}, &bytes.Buffer{}); err == nil {
		t.Error("missing file converted without error")
	}
}
