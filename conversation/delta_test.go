package conversation_test

import (
	"testing"

	"github.com/agentd/agentd/conversation"
)

// A block:delta appends to the text field the contract names for the
// block's type: Output for tool_result and subagent blocks, Content for
// every other type; the other field stays as it was. Checked for every
// block type, in the main conversation and a subagent's, through Apply and
// ApplyDelta.
func TestDeltaTargetEveryBlockType(t *testing.T) {
	toOutput := map[conversation.BlockType]bool{
		conversation.BlockToolResult: true,
		conversation.BlockSubagent:   true,
	}
	for _, typ := range conversation.BlockTypes {
		for _, conv := range []string{"", "task1"} {
			for _, via := range []string{"Apply", "ApplyDelta"} {
				t.Run(string(typ)+"/"+conv+"/"+via, func(t *testing.T) {
					r := conversation.NewReducer()
					apply := func(e conversation.Event) {
						t.Helper()
						if conv != "" {
							e = e.In(conv)
						}
						if err := r.Apply(e); err != nil {
							t.Fatal(err)
						}
					}
					if conv != "" {
						apply(conversation.NewEvent(conversation.SubagentSpawned{ToolUseID: conv, Prompt: "p"}).In(""))
					}
					apply(conversation.Upsert(conversation.Block{ID: "b", Type: typ, Content: "c:", Output: "o:"}))
					for _, d := range []string{"ab", "cd"} {
						if via == "Apply" {
							apply(conversation.Delta("b", d))
						} else if err := r.ApplyDelta(conv, "b", d); err != nil {
							t.Fatal(err)
						}
					}
					st := r.State()
					blocks := st.Blocks
					if conv != "" {
						if len(st.Subagents) != 1 {
							t.Fatalf("%d subagents", len(st.Subagents))
						}
						blocks = st.Subagents[0].Blocks
					}
					if len(blocks) != 1 {
						t.Fatalf("%d blocks", len(blocks))
					}
					b := blocks[0]
					wantContent, wantOutput := "c:abcd", "o:"
					if toOutput[typ] {
						wantContent, wantOutput = "c:", "o:abcd"
					}
					if b.Content != wantContent || b.Output != wantOutput {
						t.Fatalf("%s block after deltas: content %q output %q, want %q %q", typ, b.Content, b.Output, wantContent, wantOutput)
					}
				})
			}
		}
	}
}
