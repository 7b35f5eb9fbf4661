package convert

import (
	"crypto/sha256"
	"encoding/hex"
	"path/filepath"
	"testing"

	"github.com/agentd/agentd/internal/convert/synth"
)

// TestBigClaudeTranscriptUnchanged converts the generated 50 MB transcript
// the speed benchmarks use (65 renumbered copies of the largest shared one;
// 7 copies, 5 MB, with -short) to events and to blocks and compares the
// output's SHA-256 with the output of the converter before its speed-up
// (commit dca6832): the optimised paths write the same bytes. (The blocks'
// hashes were taken again when reduced blocks got the fields their type
// requires and the timestamp of their event; TestOutputMatchesEncodingJSON
// checks those bytes against json.Encoder's.)
func TestBigClaudeTranscriptUnchanged(t *testing.T) {
	seed, err := synth.ReadClaudeSeed()
	if err != nil {
		t.Skip("shared test data not available:", err)
	}
	mb, want := int64(50), map[bool]string{
		false: "c06f31c99d0a8f68f6c72d73fa4f95ed6a8fcaca82796853a9860104424f2044",
		true:  "efdea74be68fc2d858f330e41472ac76540dbad359d2b1cb37f05e7a23ccd166",
	}
	if testing.Short() {
		mb, want = 5, map[bool]string{
			false: "0d42ce15a5668518621107c5cb2b65f6a312a34dbf502fb64d44d831fa03e818",
			true:  "1a860d1cc0462c3e252c04c062cd9ecbc24f4251fcfe09a5655e4db85f5fa0d3",
		}
	}
	in := filepath.Join(t.TempDir(), "claude.jsonl")
	if _, err := synth.WriteClaudeTranscriptFile(in, seed, mb*1e6); err != nil {
		t.Fatal(err)
	}
	for _, blocks := range []bool{false, true} {
		h := sha256.New()
		warnings, err := Run(Options{Format: "claude-transcript", Files: []string{in}, Blocks: blocks}, h)
		if err != nil {
			t.Fatal(err)
		}
		if n := synth.Copies(len(seed), mb*1e6); len(warnings) != n {
			t.Errorf("blocks=%v: %d warnings, want %d (one summary line per copy)", blocks, len(warnings), n)
		}
		if got := hex.EncodeToString(h.Sum(nil)); got != want[blocks] {
			t.Errorf("blocks=%v: output SHA-256 %s, want %s", blocks, got, want[blocks])
		}
	}
}
