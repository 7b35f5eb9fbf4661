package claudeconv

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentd/agentd/conversation"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/")

// run is one conversion of shared test data.
type run struct {
	name   string
	stream bool     // stream-json, else transcript
	files  []string // relative to the testdata root
	golden string   // testdata/<golden>.golden.jsonl, if any
}

// allRuns covers every shared Claude Code file, the paired ones together.
func allRuns(t *testing.T) []run {
	t.Helper()
	runs := []run{
		{name: "ai-systems-stream", stream: true, files: []string{"claude-stream-json/ai-systems__raw-sdk-messages__partial.jsonl"}, golden: "ai-systems-stream"},
		{name: "ai-systems-transcript", files: []string{"claude-session-jsonl/ai-systems__main-transcript.jsonl", "claude-session-jsonl/ai-systems__subagent-transcript.jsonl"}, golden: "ai-systems-transcript"},
		{name: "agent-runtime-transcript", files: []string{"claude-session-jsonl/agent-runtime__0bfd826f-14ed-4e00-8015-75bf5f7fe33f.jsonl", "claude-session-jsonl/agent-runtime__agent-6d933f1b.jsonl"}, golden: "agent-runtime-transcript"},
		{name: "inline-sidechains", files: []string{"claude-session-jsonl/claude-code-viewer__5c0375b4-57a5-4f26-b12d-d022ee4e51b7.jsonl"}, golden: "inline-sidechains"},
		{name: "stream-2plus2", stream: true, files: []string{"claude-stream-json/agentcmd-doc__stream-json__2plus2.jsonl"}, golden: "stream-2plus2"},
		{name: "single-assistant-message", stream: true, files: []string{"claude-stream-json/gleam-sdk__single-messages/assistant_message.json"}, golden: "single-assistant-message"},
	}
	// The recordings of the current CLI kept in this package.
	for _, r := range []string{"subagent-retry", "skill-error-subagent"} {
		dir := filepath.Join("testdata", "cli-2.1.197", r)
		subs, _ := filepath.Glob(filepath.Join(dir, "subagents", "*.jsonl"))
		runs = append(runs,
			run{name: r + "-stream", stream: true, files: []string{filepath.Join(dir, "stream.jsonl")}, golden: "cli-2.1.197-" + r + "-stream"},
			run{name: r + "-transcript", files: append([]string{filepath.Join(dir, "session.jsonl")}, subs...), golden: "cli-2.1.197-" + r + "-transcript"})
	}
	// Every file on its own as well.
	for _, dir := range []string{"claude-stream-json", "claude-session-jsonl"} {
		err := filepath.WalkDir(filepath.Join(testdataRoot, dir), func(path string, d os.DirEntry, err error) error {
			if err != nil || d.IsDir() {
				return err
			}
			rel, _ := filepath.Rel(testdataRoot, path)
			runs = append(runs, run{name: rel, stream: dir == "claude-stream-json", files: []string{rel}})
			return nil
		})
		if err != nil {
			t.Skipf("shared test data not available: %v", err)
		}
	}
	return runs
}

func (r run) convert(t *testing.T) *recSink {
	t.Helper()
	var s recSink
	var inputs []Input
	for _, f := range r.files {
		if !strings.HasPrefix(f, "testdata"+string(filepath.Separator)) {
			f = filepath.Join(testdataRoot, f)
		}
		inputs = append(inputs, fileInput(t, f))
	}
	var err error
	if r.stream {
		for _, in := range inputs {
			if err = ConvertStream(in, &s); err != nil {
				break
			}
		}
	} else {
		err = ConvertTranscripts(inputs, &s)
	}
	if err != nil {
		t.Fatalf("%s: %v", r.name, err)
	}
	return &s
}

// encode writes a conversion as the golden files hold it: one event per
// line, then the warnings.
func encode(t *testing.T, s *recSink) []byte {
	t.Helper()
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	for _, e := range s.events {
		if err := enc.Encode(e); err != nil {
			t.Fatalf("encode %s: %v", e.Type, err)
		}
	}
	for _, w := range s.warnings {
		fmt.Fprintf(&buf, "# warning %s:%d: %v\n", w.file, w.line, w.err)
	}
	return buf.Bytes()
}

func TestAllFilesConvert(t *testing.T) {
	for _, r := range allRuns(t) {
		t.Run(r.name, func(t *testing.T) {
			s := r.convert(t)
			if len(s.events) == 0 {
				t.Fatal("no events")
			}
			onlyIgnoredWarnings(t, s.warnings)
			for _, e := range s.events {
				if !json.Valid(e.Payload) {
					t.Fatalf("invalid payload for %s: %s", e.Type, e.Payload)
				}
				if !e.Type.Valid() {
					t.Fatalf("unknown event type %q", e.Type)
				}
				if _, err := e.Decode(); err != nil {
					t.Fatalf("payload does not decode: %v", err)
				}
			}
			if _, err := conversation.Reduce(s.events); err != nil {
				t.Fatalf("reduce: %v", err)
			}
			checkBlockIDs(t, s.events)
		})
	}
}

// checkBlockIDs fails when two different blocks share an id in one
// conversation (an id upserted with another type, or completed twice with
// different text), or a delta addresses a block not opened before.
func checkBlockIDs(t *testing.T, events []conversation.Event) {
	t.Helper()
	type seen struct {
		typ      conversation.BlockType
		complete bool
		text     string
	}
	convs := map[string]map[string]*seen{}
	for i, e := range events {
		conv := e.Context.ConversationID
		if convs[conv] == nil {
			convs[conv] = map[string]*seen{}
		}
		blocks := convs[conv]
		switch e.Type {
		case conversation.TypeBlockUpsert:
			b := payload[conversation.BlockUpsert](t, e).Block
			if b.ID == "" || b.Type == "" {
				t.Fatalf("event %d: block without id or type: %s", i, e.Payload)
			}
			text := b.Content + b.Output + b.Message
			prev, ok := blocks[b.ID]
			if !ok {
				blocks[b.ID] = &seen{typ: b.Type, complete: b.Status == conversation.StatusComplete, text: text}
				continue
			}
			if prev.typ != b.Type {
				t.Fatalf("event %d: %s/%s is a %s and a %s", i, conv, b.ID, prev.typ, b.Type)
			}
			if prev.complete && b.Status == conversation.StatusComplete && text != "" && prev.text != "" && text != prev.text {
				t.Fatalf("event %d: %s/%s completed twice with different text", i, conv, b.ID)
			}
			if b.Status == conversation.StatusComplete {
				prev.complete = true
				if text != "" {
					prev.text = text
				}
			}
		case conversation.TypeBlockDelta:
			d := payload[conversation.BlockDelta](t, e)
			if _, ok := blocks[d.BlockID]; !ok {
				t.Fatalf("event %d: delta to unknown block %s/%s", i, conv, d.BlockID)
			}
		}
	}
}

func TestDeterministic(t *testing.T) {
	for _, r := range allRuns(t) {
		t.Run(r.name, func(t *testing.T) {
			a, b := encode(t, r.convert(t)), encode(t, r.convert(t))
			if !bytes.Equal(a, b) {
				t.Fatal("converting twice gave different bytes")
			}
		})
	}
}

func TestGolden(t *testing.T) {
	for _, r := range allRuns(t) {
		if r.golden == "" {
			continue
		}
		t.Run(r.name, func(t *testing.T) {
			got := encode(t, r.convert(t))
			path := filepath.Join("testdata", r.golden+".golden.jsonl")
			if *update {
				if err := os.WriteFile(path, got, 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			want, err := os.ReadFile(path)
			if err != nil {
				t.Fatalf("%v (run go test -run TestGolden -update to create it)", err)
			}
			if !bytes.Equal(got, want) {
				gl, wl := strings.Split(string(got), "\n"), strings.Split(string(want), "\n")
				for i := range min(len(gl), len(wl)) {
					if gl[i] != wl[i] {
						t.Fatalf("%s differs at line %d:\n got %s\nwant %s\n(go test -run TestGolden -update rewrites it)", path, i+1, gl[i], wl[i])
					}
				}
				t.Fatalf("%s: %d lines, want %d", path, len(gl), len(wl))
			}
		})
	}
}

// TestWarningsAreOnlyBookkeeping lists exactly which shared lines are
// skipped: summary, file-history-snapshot and queue-operation lines.
func TestWarningsAreOnlyBookkeeping(t *testing.T) {
	counts := map[string]int{}
	for _, r := range allRuns(t) {
		if len(r.files) != 1 {
			continue
		}
		for _, w := range r.convert(t).warnings {
			if !errors.Is(w.err, ErrIgnored) {
				t.Errorf("%s:%d: %v", w.file, w.line, w.err)
			}
			counts[strings.TrimPrefix(w.err.Error(), ErrIgnored.Error()+": ")]++
		}
	}
	want := map[string]int{"summary line": 17, "file-history-snapshot line": 3, "queue-operation line": 1}
	for k, n := range want {
		if counts[k] != n {
			t.Errorf("%s: %d warnings, want %d", k, counts[k], n)
		}
	}
	if len(counts) != len(want) {
		t.Errorf("warnings = %v", counts)
	}
}
