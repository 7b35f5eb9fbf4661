package convert

import (
	"io"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

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
	seed, err := synth.ReadClaudeSeed()
	if err != nil {
		b.Skip("shared test data not available:", err)
	}
	mb := 50.0
	if s := os.Getenv("AGENTD_BENCH_CONVERT_MB"); s != "" {
		if mb, err = strconv.ParseFloat(s, 64); err != nil {
			b.Fatal(err)
		}
	}
	in := filepath.Join(b.TempDir(), "claude.jsonl")
	size, err := synth.WriteClaudeTranscriptFile(in, seed, int64(mb*1e6))
	if err != nil {
		b.Fatal(err)
	}
	for _, mode := range []string{"events", "blocks"} {
		b.Run(mode, func(b *testing.B) {
			b.SetBytes(size)
			b.ReportAllocs()
			cpu := processCPU()
			for b.Loop() {
				if _, err := Run(Options{Format: "claude-transcript", Files: []string{in}, Blocks: mode == "blocks"}, io.Discard); err != nil {
					b.Fatal(err)
				}
			}
			if d := processCPU() - cpu; d > 0 {
				b.ReportMetric(float64(size)*float64(b.N)/d.Seconds()/1e6, "cpu-MB/s")
			}
		})
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
