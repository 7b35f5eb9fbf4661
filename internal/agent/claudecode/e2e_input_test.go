package claudecode_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentd/agentd"
	"github.com/agentd/agentd/conversation"
	"github.com/agentd/agentd/internal/agentdtest"
	"github.com/agentd/agentd/internal/sandbox/local"
	"github.com/agentd/agentd/profile"
	"github.com/agentd/agentd/sandbox"
)

// TestE2EWriteLargeInputBounded: the model calls Write with a content far
// over the output limit. The file in the workspace is complete (the CLI
// runs the tool with its own input); the tool_use block's input in the
// log is bounded, with the full input JSON as its artifact.
func TestE2EWriteLargeInputBounded(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: end-to-end test")
	}
	binDir := agentdtest.AgentBin(t, "claude")
	t.Parallel()
	var content strings.Builder
	for i := 0; content.Len() < 300_000; i++ {
		fmt.Fprintf(&content, "line %d of a large file\n", i)
	}
	quoted, _ := json.Marshal(content.String()) // YAML takes JSON's quoted strings
	script := `
rules:
  - name: write-big
    match: {userContains: "write big at ", noToolResult: true}
    reply:
      content:
        - type: tool_use
          name: Write
          input: {file_path: "{{slice lastUserText 13}}/big.txt", content: ` + string(quoted) + `}
  - name: done
    match: {toolResult: {name: Write}}
    reply: {text: "Big file written."}
default:
  text: "no rule for {{lastUserText}}"
`
	mock, url := agentdtest.MockLLM(t, script)
	const limit = 16 << 10
	srv := agentdtest.Start(t, agentd.Config{
		Env:         map[string]string{"ANTHROPIC_BASE_URL": url, "ANTHROPIC_API_KEY": "test-key"},
		Sandboxes:   map[string]sandbox.Provider{"local": local.New(local.Options{Path: binDir + ":/usr/local/bin:/usr/bin:/bin"})},
		Profiles:    []profile.Profile{autoProfile},
		DisableUI:   true,
		OutputLimit: limit,
	})
	e := &e2e{t: t, srv: srv, mock: mock, c: srv.Client}
	id := e.session("auto")
	ws := e.workspace(id)
	end, evs := e.turn(id, "write big at "+ws, nil)
	if done := mustComplete(t, end, evs); done.Result != "Big file written." {
		t.Fatalf("result %q", done.Result)
	}
	got, err := os.ReadFile(filepath.Join(ws, "big.txt"))
	if err != nil || string(got) != content.String() {
		t.Fatalf("big.txt: %d bytes, want %d (%v)", len(got), content.Len(), err)
	}
	for _, ev := range evs {
		if ev.Type == conversation.TypeBlockUpsert && len(ev.Payload) > limit+1024 {
			t.Fatalf("an upsert of %d bytes (limit %d)", len(ev.Payload), limit)
		}
	}
	var use *conversation.Block
	st := e.state(id)
	for i, b := range st.Blocks {
		if b.Type == conversation.BlockToolUse && b.ToolName == "Write" {
			use = &st.Blocks[i]
		}
	}
	if use == nil {
		t.Fatal("no Write block")
	}
	var in map[string]string
	tr := use.Truncated
	if json.Unmarshal(use.Input, &in) != nil || in["file_path"] != ws+"/big.txt" || !strings.Contains(in["content"], "bytes omitted") ||
		len(use.Input) > limit || tr == nil || tr.Field != "input" || tr.Artifact == nil {
		t.Fatalf("Write block: input of %d bytes, truncated %+v", len(use.Input), tr)
	}
	full, err := e.c.Artifact(context.Background(), id, tr.Artifact.SHA256)
	var whole map[string]string
	if err != nil || int64(len(full)) != tr.TotalBytes || json.Unmarshal(full, &whole) != nil || whole["content"] != content.String() ||
		!bytes.HasPrefix(full, []byte(`{`)) {
		t.Fatalf("artifact: %d bytes of %d (%v)", len(full), tr.TotalBytes, err)
	}
}
