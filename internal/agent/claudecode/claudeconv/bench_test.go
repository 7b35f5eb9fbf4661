package claudeconv

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/agentd/agentd/conversation"
)

// discardSink counts what it is given.
type discardSink struct{ events, warnings int }

func (s *discardSink) Emit(conversation.Event) error { s.events++; return nil }
func (s *discardSink) Warn(string, int, error)       { s.warnings++ }

// BenchmarkTranscript measures conversion throughput on the largest shared
// transcript (774 KB, 438 lines, inline subagents). Target: ≥ 150 MB/s on
// one core (go test -bench Transcript -cpu 1).
func BenchmarkTranscript(b *testing.B) {
	data, err := os.ReadFile(filepath.Join(sessionDir, "claude-code-viewer__fe5e1c67-53e7-4862-81ae-d0e013e3270b.jsonl"))
	if err != nil {
		b.Skip(err)
	}
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	cpu := startCPU()
	for b.Loop() {
		var s discardSink
		if err := ConvertTranscript(Input{Name: "t", R: bytes.NewReader(data)}, nil, &s); err != nil {
			b.Fatal(err)
		}
	}
	cpu.report(b, len(data))
}

// cpuClock measures the process's CPU time, so throughput can be reported
// independently of other load on a shared machine (wall-clock MB/s from
// SetBytes drops when other processes compete for the cores).
type cpuClock struct{ start time.Duration }

func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func startCPU() cpuClock { return cpuClock{processCPU()} }

// report adds cpu-MB/s: bytes converted per second of CPU time.
func (c cpuClock) report(b *testing.B, size int) {
	if d := processCPU() - c.start; d > 0 {
		b.ReportMetric(float64(size)*float64(b.N)/d.Seconds()/1e6, "cpu-MB/s")
	}
}

// BenchmarkStream measures the stream converter on a recorded run with
// partial messages.
func BenchmarkStream(b *testing.B) {
	data, err := os.ReadFile(filepath.Join(streamDir, "ai-systems__raw-sdk-messages__partial.jsonl"))
	if err != nil {
		b.Skip(err)
	}
	lines := bytes.Split(data, []byte("\n"))
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	cpu := startCPU()
	for b.Loop() {
		c := NewStreamConverter()
		for _, l := range lines {
			c.Convert(l)
		}
	}
	cpu.report(b, len(data))
}

// BenchmarkScannerValidate and BenchmarkJSONValid compare the scanner's
// validation of every line of the large transcript with json.Valid's.
func BenchmarkScannerValidate(b *testing.B) {
	benchLines(b, func(line []byte) {
		var s scanner
		s.reset(line)
		s.skip()
		s.end()
	})
}

func BenchmarkJSONValid(b *testing.B) {
	benchLines(b, func(line []byte) { json.Valid(line) })
}

func benchLines(b *testing.B, fn func([]byte)) {
	data, err := os.ReadFile(filepath.Join(sessionDir, "claude-code-viewer__fe5e1c67-53e7-4862-81ae-d0e013e3270b.jsonl"))
	if err != nil {
		b.Skip(err)
	}
	lines := splitLines(data)
	b.SetBytes(int64(len(data)))
	cpu := startCPU()
	for b.Loop() {
		for _, l := range lines {
			fn(l.b)
		}
	}
	cpu.report(b, len(data))
}
