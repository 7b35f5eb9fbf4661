package claudecode

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/agentd/agentd/agent"
	"github.com/agentd/agentd/conversation"
)

// benchStream is a recorded Claude Code run with partial messages, as
// stdout lines.
func benchStream(b *testing.B) [][]byte {
	data, err := os.ReadFile(filepath.Join(streamDir, "ai-systems__raw-sdk-messages__partial.jsonl"))
	if err != nil {
		b.Skip(err)
	}
	var lines [][]byte
	for _, l := range bytes.Split(data, []byte("\n")) {
		if len(bytes.TrimSpace(l)) > 0 {
			lines = append(lines, l)
		}
	}
	return lines
}

// benchRunner is a runner whose process is fed lines directly (the
// recording's subagent has no transcript here: do not wait for one).
func benchRunner(b *testing.B) (*testHost, *runner) {
	h := newTestHost(b, "")
	return h, newRunner(Options{FlushTimeout: time.Nanosecond}.withDefaults(), h, materialized{})
}

// BenchmarkReaderLines measures the reader's cost per stdout line (convert,
// batch, store one line per batch: the worst case) in a local sandbox and
// in a resumable one (block tracking, deferral, checkpoints). The
// difference is what surviving restarts costs while nothing restarts.
func BenchmarkReaderLines(b *testing.B) {
	lines := benchStream(b)
	for _, mode := range []struct {
		name      string
		resumable bool
	}{{"local", false}, {"resumable", true}} {
		b.Run(mode.name, func(b *testing.B) {
			h, r := benchRunner(b)
			b.ReportAllocs()
			for b.Loop() {
				p := newProcess(r, &stubProc{}, "t", false, mode.resumable)
				p.shared.turnQuery = "q1"
				for i, l := range lines {
					p.handleLine(cliLine{Data: l, End: int64(i)})
					p.flush()
				}
				p.flushAll()
				h.mu.Lock()
				h.events = h.events[:0]
				h.mu.Unlock()
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(lines)), "ns/line")
		})
	}
}

// BenchmarkReplayFilter measures a resumed turn's catch-up: the whole
// recorded run converted again and checked against the reduced state of a
// log that already holds all of it (nothing is emitted).
func BenchmarkReplayFilter(b *testing.B) {
	lines := benchStream(b)
	h, r := benchRunner(b)
	p := newProcess(r, &stubProc{}, "t", false, true)
	p.shared.turnQuery = "q1"
	for i, l := range lines {
		p.handleLine(cliLine{Data: l, End: int64(i)})
		p.flush()
	}
	p.flushAll()
	st, err := conversation.Reduce(h.allEvents())
	if err != nil {
		b.Fatal(err)
	}
	stored := len(h.allEvents())
	b.ReportAllocs()
	for b.Loop() {
		p := newProcess(r, &stubProc{}, "t", false, true)
		p.shared.turnQuery = "q1"
		p.rd.filter = newReplayFilter(st, "q1")
		for i, l := range lines {
			p.handleLine(cliLine{Data: l, End: int64(i)})
			p.flush()
		}
		p.flushAll()
	}
	if n := len(h.allEvents()); n != stored {
		b.Fatalf("the replay emitted %d events", n-stored)
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(lines)), "ns/line")
}

// BenchmarkResumeFakeCLI measures a restart's cost to a turn with the
// executor sandbox and the fake CLI: re-attach over a new connection
// (Recover), a new runner (Start), and Resume of a finished "hello" turn
// until it returns (replay, nothing to emit).
func BenchmarkResumeFakeCLI(b *testing.B) {
	w := newExecWorld(b, nil)
	h := w.host(w.env)
	r := startOn(b, h)
	if _, err := userTurn(b, h, r, "q1", "hello"); err != nil {
		b.Fatal(err)
	}
	r.Detach()
	var lat []time.Duration
	for b.Loop() {
		start := time.Now()
		next := w.successor(h, -1)
		r2 := startOn(b, next)
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		res, err := r2.Resume(ctx, agent.Turn{QueryID: "q1", Content: "hello"}, next.reduce(b))
		cancel()
		if err != nil || res.Result != "turn 1" {
			b.Fatalf("%q %v", res.Result, err)
		}
		lat = append(lat, time.Since(start))
		r2.Detach()
	}
	reportQuantiles(b, lat)
}

func reportQuantiles(b *testing.B, lat []time.Duration) {
	if len(lat) == 0 {
		return
	}
	s := append([]time.Duration(nil), lat...)
	for i := 1; i < len(s); i++ {
		for j := i; j > 0 && s[j] < s[j-1]; j-- {
			s[j], s[j-1] = s[j-1], s[j]
		}
	}
	b.ReportMetric(float64(s[len(s)/2].Microseconds())/1000, "p50-ms")
	b.ReportMetric(float64(s[len(s)*99/100].Microseconds())/1000, "p99-ms")
}
