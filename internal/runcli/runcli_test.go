package runcli

import (
	"strings"
	"testing"

	"go.uber.org/goleak"

	"github.com/agentd/agentd/conversation"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// A Claude Code tool call opens pending without input, then completes
// with it: the renderer announces it once, with its input.
func TestToolCallAnnouncedOnceWithItsInput(t *testing.T) {
	var out strings.Builder
	r := &renderer{out: &out, errOut: &out, blocks: map[string]*conversation.Block{}, shown: map[string]bool{}}
	r.apply(conversation.Upsert(conversation.Block{ID: "t1", Type: conversation.BlockToolUse, Status: conversation.StatusPending, ToolName: "Bash", ToolUseID: "t1"}))
	if out.Len() != 0 {
		t.Fatalf("announced before its input: %q", out.String())
	}
	r.apply(conversation.Upsert(conversation.Block{ID: "t1", Type: conversation.BlockToolUse, Status: conversation.StatusComplete, ToolName: "Bash", ToolUseID: "t1", Input: []byte(`{"command":"ls -l"}`)}))
	r.apply(conversation.Upsert(conversation.Block{ID: "t1", Type: conversation.BlockToolUse, Status: conversation.StatusComplete}))
	r.apply(conversation.Upsert(conversation.Block{ID: "t1-result", Type: conversation.BlockToolResult, Status: conversation.StatusComplete, ToolUseID: "t1", Output: "total 0\n"}))
	r.finish()
	got := out.String()
	if strings.Count(got, "• Bash ls -l") != 1 || !strings.Contains(got, "✓ Bash") || !strings.Contains(got, "total 0") {
		t.Fatalf("output %q", got)
	}
}
