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

// One model error reaches the user once, with the turn's code: Claude Code
// reports it as an error block (code "unknown"), an error event and the
// turn's failure.
func TestFailedTurnReportsItsErrorOnce(t *testing.T) {
	var out, errOut strings.Builder
	r := &renderer{out: &out, errOut: &errOut, blocks: map[string]*conversation.Block{}, shown: map[string]bool{}}
	r.apply(conversation.Upsert(conversation.Block{ID: "m-0", Type: conversation.BlockError, Status: conversation.StatusError, Message: "API Error: 400 refused", Code: "unknown"}))
	r.holdError("API Error: 400 refused", "MODEL_ERROR")
	msg := r.failure(&conversation.QueryFailed{QueryID: "q1", Error: "API Error: 400 refused", Code: "MODEL_ERROR"})
	if errOut.String() != "" || msg != "turn failed: API Error: 400 refused (MODEL_ERROR)" {
		t.Fatalf("stderr %q, failure %q", errOut.String(), msg)
	}
	// An error the failure does not repeat is printed, once, with its code.
	r.holdError("a tool broke", "TOOL")
	r.holdError("a tool broke", "TOOL")
	r.failure(&conversation.QueryFailed{Error: "something else", Code: "X"})
	if errOut.String() != "error: a tool broke (TOOL)\n" {
		t.Fatalf("stderr %q", errOut.String())
	}
	// Output that follows an error prints it first.
	r.holdError("transient", "")
	r.apply(conversation.Upsert(conversation.Block{ID: "t", Type: conversation.BlockAssistantText, Content: "go on"}))
	if !strings.HasSuffix(errOut.String(), "error: transient\n") {
		t.Fatalf("stderr %q", errOut.String())
	}
}

func TestServerURL(t *testing.T) {
	for in, want := range map[string]string{
		"": "http://127.0.0.1:8080", "127.0.0.1:9000": "http://127.0.0.1:9000", "0.0.0.0:80": "http://127.0.0.1:80",
		":7000": "http://127.0.0.1:7000", "[::]:7": "http://127.0.0.1:7", "example.test:1": "http://example.test:1",
	} {
		if got := ServerURL(in); got != want {
			t.Errorf("ServerURL(%q) = %q, want %q", in, got, want)
		}
	}
}

// Command output keeps its colours on a terminal and loses the escape
// codes anywhere else.
func TestOutputStripsEscapesWithoutColor(t *testing.T) {
	var out strings.Builder
	r := &renderer{out: &out, errOut: &out, blocks: map[string]*conversation.Block{}, shown: map[string]bool{}}
	r.apply(conversation.Upsert(conversation.Block{ID: "t1", Type: conversation.BlockToolUse, ToolName: "shell", ToolUseID: "t1", Status: conversation.StatusComplete, Input: []byte(`{"command":"x"}`)}))
	r.apply(conversation.Upsert(conversation.Block{ID: "t1-result", Type: conversation.BlockToolResult, ToolUseID: "t1", Status: conversation.StatusPending}))
	r.apply(conversation.Delta("t1-result", "\x1b[31mred\x1b[0m \x1b]0;title\x07plain\n"))
	r.finish()
	if got := out.String(); strings.Contains(got, "\x1b") || !strings.Contains(got, "red plain") {
		t.Fatalf("output %q", got)
	}
	out.Reset()
	r = &renderer{out: &out, errOut: &out, color: true}
	if got := r.plain("\x1b[31mred\x1b[0m"); got != "\x1b[31mred\x1b[0m" {
		t.Fatalf("terminal output lost its colours: %q", got)
	}
}
