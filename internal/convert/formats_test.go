package convert

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentd/agentd/conversation"
)

const runJSON = "../agent/opencode/testdata/run-json"

// `opencode run --format json` output captured from the pinned CLI: its
// text, thinking and tool call become blocks, the steps' tokens usage, and
// the end of the output ends the turn.
func TestOpenCodeRunJSON(t *testing.T) {
	var out bytes.Buffer
	warnings, err := Run(Options{Format: "opencode-run-json", Files: []string{filepath.Join(runJSON, "shell-probe-thinking.jsonl")}, Blocks: true}, &out)
	if err != nil || len(warnings) > 0 {
		t.Fatalf("%v %v", err, warnings)
	}
	var kinds []string
	for _, l := range strings.Split(strings.TrimSpace(out.String()), "\n") {
		var bl struct {
			Block conversation.Block `json:"block"`
		}
		if err := json.Unmarshal([]byte(l), &bl); err != nil {
			t.Fatal(err)
		}
		b := bl.Block
		switch b.Type {
		case conversation.BlockToolUse:
			kinds = append(kinds, "tool "+b.ToolName+" "+string(b.Input))
		case conversation.BlockToolResult:
			kinds = append(kinds, "result "+b.Output)
		default:
			kinds = append(kinds, string(b.Type)+" "+b.Content)
		}
	}
	want := []string{
		"thinking A shell command will tell.",
		"assistant_text Running the **probe**.",
		`tool bash {"command":"echo probe-ran \u0026\u0026 echo second line","description":"Run the probe"}`,
		"result probe-ran\nsecond line\n",
		"assistant_text The probe ran for openai.",
	}
	if strings.Join(kinds, "|") != strings.Join(want, "|") {
		t.Fatalf("blocks:\n%s\nwant:\n%s", strings.Join(kinds, "\n"), strings.Join(want, "\n"))
	}
	out.Reset()
	if _, err := Run(Options{Format: "opencode-run-json", Files: []string{filepath.Join(runJSON, "shell-probe.jsonl")}}, &out); err != nil {
		t.Fatal(err)
	}
	var evs []conversation.Event
	for _, l := range strings.Split(strings.TrimSpace(out.String()), "\n") {
		var e conversation.Event
		json.Unmarshal([]byte(l), &e)
		evs = append(evs, e)
	}
	st, err := conversation.Reduce(evs)
	if err != nil {
		t.Fatal(err)
	}
	if st.Usage.InputTokens != 7489+7590 || st.Usage.OutputTokens != 35+7 {
		t.Fatalf("usage %+v", st.Usage)
	}
	if last := evs[len(evs)-1]; last.Type != conversation.TypeQueryCompleted {
		t.Fatalf("last event %s", last.Type)
	}
}

func TestOpenCodeRunJSONModelError(t *testing.T) {
	var out bytes.Buffer
	if _, err := Run(Options{Format: "opencode-run-json", Files: []string{filepath.Join(runJSON, "model-error.jsonl")}}, &out); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	var last conversation.Event
	json.Unmarshal([]byte(lines[len(lines)-1]), &last)
	var f conversation.QueryFailed
	json.Unmarshal(last.Payload, &f)
	if last.Type != conversation.TypeQueryFailed || f.Code != "APIError" || f.Error != "mock-llm refuses this request" {
		t.Fatalf("end %s %s", last.Type, last.Payload)
	}
	if !strings.Contains(lines[0], `"type":"error"`) {
		t.Fatalf("first event %s", lines[0])
	}
}

// A file that yields no events with the chosen format is an error naming
// the format, not an empty success.
func TestNoEventsIsAnError(t *testing.T) {
	dir := t.TempDir()
	f := filepath.Join(dir, "run.jsonl")
	os.WriteFile(f, []byte(`{"type":"step_start","part":{"id":"p","type":"step-start"}}`+"\n"), 0o644)
	// OpenCode run output read as Claude Code's stream: nothing.
	var out bytes.Buffer
	_, err := Run(Options{Format: "claude-stream-json", Files: []string{filepath.Join(runJSON, "shell-probe.jsonl")}, RequireEvents: true}, &out)
	if !errors.Is(err, ErrNoEvents) || !strings.Contains(err.Error(), "claude-stream-json") {
		t.Fatalf("wrong format: %v", err)
	}
	// Without RequireEvents (library use) it is not an error.
	if _, err := Run(Options{Format: "claude-stream-json", Files: []string{filepath.Join(runJSON, "shell-probe.jsonl")}}, &out); err != nil {
		t.Fatal(err)
	}
	empty := filepath.Join(dir, "empty.jsonl")
	os.WriteFile(empty, nil, 0o644)
	if _, err := Run(Options{Format: "opencode-run-json", Files: []string{empty}, RequireEvents: true}, &out); !errors.Is(err, ErrNoEvents) {
		t.Fatalf("empty file: %v", err)
	}
}

func TestFormatsListed(t *testing.T) {
	fs := Formats()
	if len(fs) < 10 {
		t.Fatalf("%d formats", len(fs))
	}
	for i, f := range fs {
		if f.Description == "" || strings.Contains(f.Description, "\n") {
			t.Errorf("%s: description %q", f.Name, f.Description)
		}
		if i > 0 && fs[i-1].Name >= f.Name {
			t.Errorf("not sorted at %s", f.Name)
		}
	}
}
