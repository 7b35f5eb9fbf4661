package convert

import (
	"bufio"
	"bytes"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/agentd/agentd/conversation"
	"github.com/agentd/agentd/internal/convert/synth"
)

// BenchmarkClaudeTranscript converts a generated Claude Code transcript
// (renumbered copies of the largest shared one; AGENTD_BENCH_CONVERT_MB
// sets its size, default 50) with Run, as `agentd convert` does, to events
// and to blocks, output discarded. Target (issue 17): ≥ 150 MB/s to blocks
// on one core:
//
//	go test ./internal/convert -run '^$' -bench ClaudeTranscript -cpu 1 -count 5
//
// cpu-MB/s divides by the process's CPU time rather than wall time, so it
// holds on a loaded machine (the garbage collector's work is included).
func BenchmarkClaudeTranscript(b *testing.B) {
	in, size := synth.BenchClaudeTranscript(b)
	for _, mode := range []string{"events", "blocks", "events/encoder=encoding-json", "blocks/encoder=encoding-json"} {
		b.Run(mode, func(b *testing.B) {
			b.SetBytes(size)
			b.ReportAllocs()
			cpu := processCPU()
			for b.Loop() {
				var err error
				switch mode {
				case "events", "blocks":
					_, err = Run(Options{Format: "claude-transcript", Files: []string{in}, Blocks: mode == "blocks"}, io.Discard)
				default:
					err = runEncodingJSON(in, mode == "blocks/encoder=encoding-json", io.Discard)
				}
				if err != nil {
					b.Fatal(err)
				}
			}
			if d := processCPU() - cpu; d > 0 {
				b.ReportMetric(float64(size)*float64(b.N)/d.Seconds()/1e6, "cpu-MB/s")
			}
		})
	}
}

// runEncodingJSON is Run for claude-transcript with every output line
// written by json.Encoder instead of by hand (output.go), all else equal:
// the comparison of BenchmarkClaudeTranscript's encoder=encoding-json
// cases. TestEncodingJSONRunMatches checks it writes what Run writes.
func runEncodingJSON(file string, blocks bool, out io.Writer) error {
	fh, err := os.Open(file)
	if err != nil {
		return err
	}
	defer fh.Close()
	f, _ := Lookup("claude-transcript")
	w := bufio.NewWriterSize(out, 64<<10)
	enc := json.NewEncoder(w)
	if !blocks {
		if err := f.Convert([]Input{{Name: file, R: fh}}, &encoderEventSink{enc: enc}); err != nil {
			return err
		}
		return w.Flush()
	}
	s := &blocksSink{r: conversation.NewReducer()}
	if err := f.Convert([]Input{{Name: file, R: fh}}, s); err != nil {
		return err
	}
	type blockLine struct {
		ConversationID string             `json:"conversationId"`
		Block          conversation.Block `json:"block"`
	}
	for conv, b := range s.r.Blocks() {
		if err := enc.Encode(blockLine{conv, b}); err != nil {
			return err
		}
	}
	return w.Flush()
}

// encoderEventSink is eventSink with json.Encoder for the block events.
type encoderEventSink struct{ enc *json.Encoder }

func (s *encoderEventSink) Emit(e conversation.Event) error { return s.enc.Encode(e) }
func (s *encoderEventSink) Warn(string, int, error)         {}
func (s *encoderEventSink) EmitBlock(ctx conversation.Context, b *conversation.Block) error {
	e := conversation.Upsert(*b)
	e.Context = ctx
	return s.enc.Encode(e)
}
func (s *encoderEventSink) EmitDelta(ctx conversation.Context, id, text string) error {
	e := conversation.Delta(id, text)
	e.Context = ctx
	return s.enc.Encode(e)
}

// TestEncodingJSONRunMatches: the json.Encoder variant of the benchmark
// writes what Run writes, so the two measure the same output.
func TestEncodingJSONRunMatches(t *testing.T) {
	seed, err := synth.ReadClaudeSeed()
	if err != nil {
		t.Skip("shared test data not available:", err)
	}
	in := filepath.Join(t.TempDir(), "claude.jsonl")
	if _, err := synth.WriteClaudeTranscriptFile(in, seed, 2e6); err != nil {
		t.Fatal(err)
	}
	for _, blocks := range []bool{false, true} {
		var hand, std bytes.Buffer
		if _, err := Run(Options{Format: "claude-transcript", Files: []string{in}, Blocks: blocks}, &hand); err != nil {
			t.Fatal(err)
		}
		if err := runEncodingJSON(in, blocks, &std); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(hand.Bytes(), std.Bytes()) {
			t.Errorf("blocks=%v: json.Encoder output differs at line %d", blocks, firstDiffLine(hand.Bytes(), std.Bytes()))
		}
	}
}

// processCPU is the process's user and system CPU time so far.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
