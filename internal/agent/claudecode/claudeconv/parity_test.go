package claudeconv

import (
	"io"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/agentd/agentd/agent/agenttest"
	"github.com/agentd/agentd/conversation"
)

// TestStreamTranscriptParity converts the live stream-json output of one run
// and the transcripts Claude Code saved for the same run, and checks that
// both reduce to the same blocks.
//
// Normalised, because the data differs for reasons outside the converter:
//   - Timestamps: stream-json lines carry none (the event log stamps them
//     live), transcript lines do. All block timestamps are cleared.
//   - The first user prompt: the harness that recorded the stream wrote the
//     prompt without the quotes the transcript has around the file names
//     ('subagent-test.txt'); same line (same uuid, same block id), slightly
//     different text. Its content is compared for non-emptiness only.
//   - The subagent's own text: CLI 2.0.73 forwarded only the subagent's
//     prompt, tool calls and tool results on stdout, not its assistant text
//     messages, which the subagent transcript has. The stream's subagent
//     blocks must equal the transcript's with those assistant_text blocks
//     removed, and nothing else may be missing.
func TestStreamTranscriptParity(t *testing.T) {
	var live recSink
	if err := ConvertStream(fileInput(t, streamDir+"/ai-systems__raw-sdk-messages__partial.jsonl"), &live); err != nil {
		t.Fatal(err)
	}
	if len(live.warnings) != 0 {
		t.Fatalf("stream warnings: %v", live.warnings)
	}
	var saved recSink
	if err := ConvertTranscript(fileInput(t, aiMain), []Input{fileInput(t, aiSub)}, &saved); err != nil {
		t.Fatal(err)
	}
	onlyIgnoredWarnings(t, saved.warnings)
	ls, ss := mustReduce(t, live.events), mustReduce(t, saved.events)

	const promptID = "5f2bf2be-de53-402d-842f-67aa80b0e847-0"
	normalise := func(blocks []conversation.Block) []conversation.Block {
		out := make([]conversation.Block, len(blocks))
		for i, b := range blocks {
			b.Timestamp = time.Time{}
			if b.ID == promptID {
				if b.Type != conversation.BlockUserMessage || b.Content == "" {
					t.Errorf("prompt block = %+v", b)
				}
				b.Content = ""
			}
			out[i] = b
		}
		return out
	}
	lm, sm := normalise(ls.Blocks), normalise(ss.Blocks)
	if !reflect.DeepEqual(lm, sm) {
		t.Errorf("main blocks differ\nlive:  %v\nsaved: %v", ids(lm), ids(sm))
		for i := range min(len(lm), len(sm)) {
			if !reflect.DeepEqual(lm[i], sm[i]) {
				t.Errorf("first difference at %d:\nlive  %+v\nsaved %+v", i, lm[i], sm[i])
				break
			}
		}
	}
	wantMain := []conversation.BlockType{"user_message", "assistant_text", "tool_use", "subagent", "tool_result",
		"skill_load", "assistant_text", "tool_use", "tool_result", "assistant_text"}
	var gotMain []conversation.BlockType
	for _, b := range sm {
		gotMain = append(gotMain, b.Type)
	}
	if !reflect.DeepEqual(gotMain, wantMain) {
		t.Errorf("main block types = %v, want %v", gotMain, wantMain)
	}

	if len(ls.Subagents) != 1 || len(ss.Subagents) != 1 {
		t.Fatalf("subagents: live %d, saved %d", len(ls.Subagents), len(ss.Subagents))
	}
	la, sa := ls.Subagents[0], ss.Subagents[0]
	if la.ID != sa.ID || la.AgentID != sa.AgentID || la.Status != sa.Status || la.Output != sa.Output ||
		la.DurationMs != sa.DurationMs || la.Prompt != sa.Prompt || la.SubagentType != sa.SubagentType || la.Description != sa.Description {
		t.Errorf("subagent differs\nlive  %+v\nsaved %+v", la, sa)
	}
	if la.AgentID != "a9b844f" || la.Status != conversation.StatusComplete {
		t.Errorf("subagent = %+v", la)
	}
	liveIDs := map[string]bool{}
	for _, b := range la.Blocks {
		liveIDs[b.ID] = true
	}
	var savedKept []conversation.Block
	for _, b := range sa.Blocks {
		if !liveIDs[b.ID] {
			if b.Type != conversation.BlockAssistantText {
				t.Errorf("saved subagent block %s (%s) missing from the stream", b.ID, b.Type)
			}
			continue
		}
		savedKept = append(savedKept, b)
	}
	if lb, sb := normalise(la.Blocks), normalise(savedKept); !reflect.DeepEqual(lb, sb) {
		t.Errorf("subagent blocks differ\nlive:  %+v\nsaved: %+v", lb, sb)
	}
	if len(savedKept) != 3 || len(sa.Blocks) != 5 {
		t.Errorf("subagent blocks: %d shared of %d saved", len(savedKept), len(sa.Blocks))
	}
}

// TestPartialMessagesDoNotChangeBlocks: a consumer that drops the
// stream_event lines (no --include-partial-messages) ends with the same
// blocks as one that gets them.
func TestPartialMessagesDoNotChangeBlocks(t *testing.T) {
	in := fileInput(t, streamDir+"/ai-systems__raw-sdk-messages__partial.jsonl")
	data, _ := io.ReadAll(in.R)
	full, plain := NewStreamConverter(), NewStreamConverter()
	var all, without []conversation.Event
	deltas := 0
	for _, ln := range splitLines(data) {
		ev, err := full.Convert(ln.b)
		if err != nil {
			t.Fatal(err)
		}
		all = append(all, ev...)
		deltas += len(agenttest.OfType(ev, conversation.TypeBlockDelta))
		var l wireLine
		var s scanner
		if decodeLine(&s, ln.b, &l) == nil && l.Type == "stream_event" {
			continue
		}
		ev, err = plain.Convert(ln.b)
		if err != nil {
			t.Fatal(err)
		}
		without = append(without, ev...)
	}
	if deltas < 100 {
		t.Fatalf("only %d deltas from a stream with partial messages", deltas)
	}
	a, b := mustReduce(t, all), mustReduce(t, without)
	if !reflect.DeepEqual(a.Blocks, b.Blocks) || !reflect.DeepEqual(a.Subagents, b.Subagents) {
		t.Fatalf("blocks differ with and without partial messages\nwith:    %v\nwithout: %v", ids(a.Blocks), ids(b.Blocks))
	}
}

// TestStreamTranscriptParityCurrentCLI does the same for runs recorded with
// Claude Code 2.1.197 (testdata/cli-2.1.197, see its README). Normalised:
//   - timestamps (the stream's assistant lines carry none);
//   - the prompt: `claude -p` does not echo it on stdout, so the
//     transcript's first user_message has no stream counterpart;
//   - the subagent's own text, which the CLI still does not forward on
//     stdout (only its prompt, tool calls and results), as in 2.0.73.
//
// Everything else must be identical: thinking, text, the Skill call and
// its skill_load, the failed Bash result, the subagent block and the
// subagent's tool blocks.
func TestStreamTranscriptParityCurrentCLI(t *testing.T) {
	for _, run := range []string{"subagent-retry", "skill-error-subagent"} {
		t.Run(run, func(t *testing.T) {
			dir := filepath.Join("testdata", "cli-2.1.197", run)
			var live recSink
			if err := ConvertStream(fileInput(t, filepath.Join(dir, "stream.jsonl")), &live); err != nil {
				t.Fatal(err)
			}
			if len(live.warnings) != 0 {
				t.Fatalf("stream warnings: %v", live.warnings)
			}
			subs, _ := filepath.Glob(filepath.Join(dir, "subagents", "agent-*.jsonl"))
			inputs := []Input{fileInput(t, filepath.Join(dir, "session.jsonl"))}
			for _, s := range subs {
				inputs = append(inputs, fileInput(t, s))
			}
			var saved recSink
			if err := ConvertTranscripts(inputs, &saved); err != nil {
				t.Fatal(err)
			}
			onlyIgnoredWarnings(t, saved.warnings)
			ls, ss := mustReduce(t, live.events), mustReduce(t, saved.events)

			clear := func(blocks []conversation.Block) []conversation.Block {
				out := slices.Clone(blocks)
				for i := range out {
					out[i].Timestamp = time.Time{}
				}
				return out
			}
			sm := clear(ss.Blocks)
			if len(sm) == 0 || sm[0].Type != conversation.BlockUserMessage || sm[0].Content != "please do the job" {
				t.Fatalf("transcript does not start with the prompt: %v", ids(sm))
			}
			if lm := clear(ls.Blocks); !reflect.DeepEqual(lm, sm[1:]) {
				t.Errorf("main blocks differ\nlive:  %v\nsaved: %v", ids(lm), ids(sm[1:]))
				for i := range min(len(lm), len(sm)-1) {
					if !reflect.DeepEqual(lm[i], sm[i+1]) {
						t.Errorf("first difference:\nlive  %+v\nsaved %+v", lm[i], sm[i+1])
						break
					}
				}
			}
			if len(ls.Subagents) != 1 || len(ss.Subagents) != 1 {
				t.Fatalf("subagents: live %d, saved %d", len(ls.Subagents), len(ss.Subagents))
			}
			la, sa := ls.Subagents[0], ss.Subagents[0]
			if la.ID != sa.ID || la.AgentID != sa.AgentID || la.AgentID == "" || la.Status != conversation.StatusComplete ||
				la.Status != sa.Status || la.Output != sa.Output || la.Output != "Subagent finished: sub-ran." || la.DurationMs != sa.DurationMs {
				t.Errorf("subagent differs\nlive  %+v\nsaved %+v", la, sa)
			}
			var kept []conversation.Block
			for _, b := range sa.Blocks {
				if b.Type == conversation.BlockAssistantText {
					continue
				}
				kept = append(kept, b)
			}
			if lb, sb := clear(la.Blocks), clear(kept); !reflect.DeepEqual(lb, sb) || len(lb) != 3 {
				t.Errorf("subagent blocks differ\nlive:  %v\nsaved: %v", ids(lb), ids(sb))
			}
			// What the run contains, so a converter change that drops it fails.
			types := map[conversation.BlockType]int{}
			for _, b := range sm {
				types[b.Type]++
			}
			if types[conversation.BlockThinking] != 1 || types[conversation.BlockSubagent] != 1 || types[conversation.BlockAssistantText] < 2 {
				t.Errorf("main block types = %v", types)
			}
			if run == "skill-error-subagent" {
				if types[conversation.BlockSkillLoad] != 1 {
					t.Errorf("no skill_load block: %v", types)
				}
				var failed int
				for _, b := range sm {
					if b.Type == conversation.BlockToolResult && b.IsError && b.Output == "Exit code 3\nfailing" {
						failed++
					}
				}
				if failed != 1 {
					t.Errorf("failed Bash result not found")
				}
			}
			if run == "subagent-retry" {
				var retried bool
				for _, e := range agenttest.OfType(live.events, conversation.TypeLog) {
					p := payload[conversation.LogEvent](t, e)
					retried = retried || (p.Level == conversation.LevelWarn && strings.Contains(p.Message, "HTTP 529"))
				}
				if !retried {
					t.Error("the api_retry line gave no warning log")
				}
			}
		})
	}
}
