package opencode_test

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"github.com/agentd/agentd/agent/agenttest"
	"github.com/agentd/agentd/conversation"
	"github.com/agentd/agentd/internal/agent/agenttest/formattest"
	"github.com/agentd/agentd/internal/agent/opencode"
	"github.com/agentd/agentd/internal/convert"
)

func TestBadInputsAreSkipped(t *testing.T) {
	cases := []struct {
		format, input string
		warnLines     []int
	}{
		{"opencode-events", `{"type":"message.part.updated","properties":{"part":{"id":"p1","sessionID":"s","messageID":"m","type":"text","text":"hi","time":{"start":1,"end":2}}}}
{"type":"message.part.updated","properties":{}}
not json
{"properties":{}}
{"type":"message.updated","properties":{"info":{"role":"user"}}}
{"type":"message.part.delta","properties":{"sessionID":"s","delta":"x"}}
`, []int{2, 3, 4, 5, 6}},
		{"opencode-export", `{"info":{"id":"s"},"messages":[{"info":{"id":"m","sessionID":"s","role":"assistant","time":{"created":1}},"parts":[7,{"id":"p1","type":"text","text":"hi","time":{"start":1,"end":2}}]},{"info":"bad","parts":[]}]}`, nil},
		{"opencode-export", `{"messages":[]}`, []int{1}},
	}
	for _, tc := range cases {
		t.Run(tc.format, func(t *testing.T) {
			file := filepath.Join(t.TempDir(), "in")
			if err := os.WriteFile(file, []byte(tc.input), 0o644); err != nil {
				t.Fatal(err)
			}
			_, events, warns := formattest.Run(t, tc.format, file)
			if len(warns) != len(tc.warnLines) {
				t.Fatalf("warnings %v, want lines %v", warns, tc.warnLines)
			}
			for i, w := range warns {
				if w.Line != tc.warnLines[i] {
					t.Fatalf("warnings %v, want lines %v", warns, tc.warnLines)
				}
			}
			st := agenttest.CheckEvents(t, events)
			if tc.warnLines == nil || tc.format == "opencode-events" {
				if texts := agenttest.BlocksOf(st.Blocks, conversation.BlockAssistantText); len(texts) != 1 || texts[0].Content != "hi" {
					t.Fatalf("texts %+v", texts)
				}
			}
		})
	}
	if _, err := convert.Run(convert.Options{Format: "opencode-export", Files: []string{"testdata/missing.json"}}, &bytes.Buffer{}); err == nil {
		t.Fatal("missing file: want an error")
	}
}

// TestChildSessionLinking: a child session is linked to its task call by
// session.created (parentID) even before the call's metadata names it; a
// child no call claims keeps a conversation of its own.
func TestChildSessionLinking(t *testing.T) {
	lines := []string{
		`{"type":"session.created","properties":{"info":{"id":"ses_p"}}}`,
		`{"type":"message.part.updated","properties":{"part":{"id":"prt_task","sessionID":"ses_p","messageID":"m1","type":"tool","callID":"call_t","tool":"task","state":{"status":"pending","input":{},"raw":""}}}}`,
		`{"type":"session.created","properties":{"info":{"id":"ses_c","parentID":"ses_p"}}}`,
		`{"type":"message.part.updated","properties":{"part":{"id":"prt_c1","sessionID":"ses_c","messageID":"m2","type":"text","text":"child says hi","time":{"start":5,"end":6}}}}`,
		`{"type":"session.created","properties":{"info":{"id":"ses_orphan","parentID":"ses_p"}}}`,
		`{"type":"message.part.updated","properties":{"part":{"id":"prt_o1","sessionID":"ses_orphan","messageID":"m3","type":"text","text":"orphan","time":{"start":5,"end":6}}}}`,
		`{"type":"message.part.updated","properties":{"part":{"id":"prt_task","sessionID":"ses_p","messageID":"m1","type":"tool","callID":"call_t","tool":"task","state":{"status":"error","input":{"prompt":"p","description":"d","subagent_type":"general"},"error":"boom","time":{"start":1,"end":9}}}}}`,
	}
	c := opencode.NewEventsConverter()
	events := agenttest.ConvertLines(t, c, lines...)
	st := agenttest.CheckEvents(t, events)
	if len(st.Subagents) != 2 || st.Subagents[0].ID != "call_t" || st.Subagents[0].Blocks[0].Content != "child says hi" ||
		st.Subagents[0].Status != conversation.StatusError || st.Subagents[0].AgentID != "ses_c" {
		t.Fatalf("subagents %+v", st.Subagents)
	}
	if st.Subagents[1].ID != "ses_orphan" || st.Subagents[1].Blocks[0].Content != "orphan" {
		t.Fatalf("orphan %+v", st.Subagents[1])
	}
	if b := agenttest.FindBlock(t, st.Blocks, "call_t"); b.Status != conversation.StatusError || b.Output != "boom" {
		t.Fatalf("task block %+v", b)
	}
}

func FuzzEventsConverter(f *testing.F) {
	agenttest.Seed(f, "testdata/agent-output/*sse-events*.jsonl", agenttest.Seeds{Lines: true})
	f.Fuzz(func(t *testing.T, data []byte) { agenttest.FuzzLines(t, opencode.NewEventsConverter(), data) })
}

func FuzzExport(f *testing.F) {
	agenttest.Seed(f, "testdata/agent-output/*transcript*.json", agenttest.Seeds{Whole: true})
	f.Add([]byte(`{"info":{"id":"s"},"messages":[{"info":{"id":"m","sessionID":"s","role":"assistant","time":{"created":1},"finish":"stop"},"parts":[{"id":"p","type":"tool","callID":"c","tool":"task","state":{"status":"completed","input":{"prompt":"x"},"output":"y","time":{"start":1,"end":2}}}]}]}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		ev, err := opencode.ConvertExport(data)
		agenttest.FuzzDocument(t, ev, err)
	})
}

func BenchmarkEventsConverter(b *testing.B) {
	agenttest.BenchLines(b, sseEvents, func() agenttest.LineConverter { return opencode.NewEventsConverter() })
}

func BenchmarkExport(b *testing.B) {
	agenttest.BenchDocument(b, exportFile, func(doc []byte) ([]conversation.Event, error) {
		return opencode.ConvertExport(doc)
	})
}
