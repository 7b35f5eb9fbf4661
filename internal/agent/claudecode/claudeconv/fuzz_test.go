package claudeconv

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/agentd/agentd/conversation"
)

// checkEvents asserts what must hold for any input: payloads are valid JSON
// of their type and the events reduce without error (no delta to an unknown
// block, no block without an id).
func checkEvents(t *testing.T, events []conversation.Event) {
	t.Helper()
	for _, e := range events {
		if !json.Valid(e.Payload) {
			t.Fatalf("invalid %s payload: %q", e.Type, e.Payload)
		}
		if _, err := e.Decode(); err != nil {
			t.Fatalf("%s payload does not decode: %v", e.Type, err)
		}
	}
	if _, err := conversation.Reduce(events); err != nil {
		t.Fatalf("events do not reduce: %v", err)
	}
}

// seedLines adds every line of the shared Claude Code files as a seed.
func seedLines(f *testing.F, add func(line []byte)) {
	for _, dir := range []string{streamDir, sessionDir, "testdata/cli-2.1.197/*", "testdata/cli-2.1.197/*/subagents"} {
		paths, _ := filepath.Glob(filepath.Join(dir, "*.json*"))
		for _, p := range paths {
			data, err := os.ReadFile(p)
			if err != nil {
				continue
			}
			for _, ln := range splitLines(data) {
				if len(ln.b) < 4096 { // keep the corpus quick to mutate
					add(ln.b)
				}
			}
		}
	}
}

// FuzzStreamConverter feeds a sequence of lines (separated by newlines in
// the fuzz input) through one converter: it must never panic, and what it
// emits must always be valid and reducible.
func FuzzStreamConverter(f *testing.F) {
	var prev []byte
	seedLines(f, func(line []byte) {
		f.Add(append(append(bytes.Clone(prev), '\n'), line...))
		prev = line
	})
	f.Add([]byte(lineMsgStart + "\n" + lineTextStart + "\n" + lineDelta1 + "\n" + lineText))
	f.Add([]byte(lineTask + "\n" + lineSubPrompt + "\n" + lineSubTool + "\n" + lineSubResult + "\n" + lineTaskDone))
	f.Fuzz(func(t *testing.T, data []byte) {
		c := NewStreamConverter()
		var all []conversation.Event
		for _, ln := range bytes.Split(data, []byte("\n")) {
			ev, err := c.Convert(ln)
			if err != nil && ev != nil {
				t.Fatalf("a skipped line gave events")
			}
			all = append(all, ev...)
		}
		checkEvents(t, all)
	})
}

// FuzzTranscript converts a main transcript and a subagent file (the fuzz
// input split at the first 0x00 byte).
func FuzzTranscript(f *testing.F) {
	main, _ := os.ReadFile(aiMain)
	sub, _ := os.ReadFile(aiSub)
	f.Add(append(append(bytes.Clone(main), 0), sub...))
	inline, _ := os.ReadFile(filepath.Join(sessionDir, "claude-code-viewer__5c0375b4-57a5-4f26-b12d-d022ee4e51b7.jsonl"))
	f.Add(inline)
	arm, _ := os.ReadFile(arMain)
	ars, _ := os.ReadFile(arSub)
	f.Add(append(append(bytes.Clone(arm), 0), ars...))
	seedLines(f, func(line []byte) { f.Add(line) })
	f.Fuzz(func(t *testing.T, data []byte) {
		m, s, _ := bytes.Cut(data, []byte{0})
		var sink recSink
		err := ConvertTranscripts([]Input{
			{Name: "main.jsonl", R: bytes.NewReader(m)},
			{Name: "agent-x.jsonl", R: bytes.NewReader(s)},
		}, &sink)
		if err != nil {
			t.Fatalf("conversion failed outright: %v", err)
		}
		checkEvents(t, sink.events)
		// A BlockSink gets the same events, the blocks typed.
		var typed typedRecSink
		if err := ConvertTranscripts([]Input{
			{Name: "main.jsonl", R: bytes.NewReader(m)},
			{Name: "agent-x.jsonl", R: bytes.NewReader(s)},
		}, &typed); err != nil {
			t.Fatalf("conversion to a BlockSink failed: %v", err)
		}
		sameEvents(t, typed.events, sink.events)
		var plain recSink
		typed.events = nil
		if ConvertStream(Input{Name: "s", R: bytes.NewReader(m)}, &plain) != nil ||
			ConvertStream(Input{Name: "s", R: bytes.NewReader(m)}, &typed) != nil {
			t.Fatal("stream conversion failed outright")
		}
		sameEvents(t, typed.events, plain.events)
	})
}

// typedRecSink is a BlockSink recording what it gets as events: a typed
// block as conversation.Upsert makes its event.
type typedRecSink struct{ events []conversation.Event }

func (s *typedRecSink) Emit(e conversation.Event) error { s.events = append(s.events, e); return nil }
func (s *typedRecSink) Warn(string, int, error)         {}
func (s *typedRecSink) EmitBlock(ctx conversation.Context, b *conversation.Block) error {
	e := conversation.Upsert(*b)
	e.Context = ctx
	s.events = append(s.events, e)
	return nil
}
func (s *typedRecSink) EmitDelta(ctx conversation.Context, id, text string) error {
	e := conversation.Delta(id, text)
	e.Context = ctx
	s.events = append(s.events, e)
	return nil
}

// sameEvents requires the same events, payloads byte for byte.
func sameEvents(t *testing.T, got, want []conversation.Event) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%d events, want %d", len(got), len(want))
	}
	for i := range got {
		g, w := got[i], want[i]
		gc, wc := g.Context, w.Context
		sameCtx := gc.SessionID == wc.SessionID && gc.ConversationID == wc.ConversationID &&
			gc.Source == wc.Source && gc.Timestamp.Equal(wc.Timestamp) && (gc.Actor == nil) == (wc.Actor == nil)
		if g.Type != w.Type || !sameCtx || !bytes.Equal(g.Payload, w.Payload) {
			t.Fatalf("event %d: %s %s %+v, want %s %s %+v", i, g.Type, g.Payload, g.Context, w.Type, w.Payload, w.Context)
		}
	}
}
