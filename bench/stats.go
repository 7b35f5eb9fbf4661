// Package bench holds agentd's core runtime benchmarks (issue 2): event
// append with group commit, WebSocket fan-out, stdout-to-client latency,
// idle session memory and session create → ready. The benchmarks are in the
// package's tests (go test -bench); docs/benchmarks.md has the commands and
// the figures measured. This file holds the small pure helpers they share:
// percentiles, the timestamp-line parser of the latency benchmark and the
// seq reader of the fan-out clients.
package bench

import (
	"bytes"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Summary describes a sample of durations.
type Summary struct {
	N                  int
	P50, P95, P99, Max time.Duration
}

// Summarize sorts samples in place and returns their percentiles
// (nearest-rank). An empty sample gives the zero Summary.
func Summarize(samples []time.Duration) Summary {
	if len(samples) == 0 {
		return Summary{}
	}
	slices.Sort(samples)
	return Summary{
		N:   len(samples),
		P50: Percentile(samples, 50),
		P95: Percentile(samples, 95),
		P99: Percentile(samples, 99),
		Max: samples[len(samples)-1],
	}
}

// Percentile returns the nearest-rank p-th percentile (0 < p <= 100) of
// sorted, or 0 when it is empty.
func Percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	// Nearest rank: the smallest value with at least p% of the sample at or
	// below it.
	rank := int(p/100*float64(len(sorted)) + 0.999999999)
	rank = min(max(rank, 1), len(sorted))
	return sorted[rank-1]
}

// String formats the summary in milliseconds.
func (s Summary) String() string {
	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	return fmt.Sprintf("n=%d p50=%.3fms p95=%.3fms p99=%.3fms max=%.3fms", s.N, ms(s.P50), ms(s.P95), ms(s.P99), ms(s.Max))
}

// ErrBadStamp: a complete output line is not a Unix-nanosecond timestamp.
var ErrBadStamp = errors.New("bench: output line is not a nanosecond timestamp")

// StampLines turns streamed command output made of lines that each hold a
// Unix time in nanoseconds (`date +%s%N`) into latencies: the time a line
// was received minus the time it carries. Output may arrive split anywhere;
// a partial line is kept until its newline arrives. Not safe for concurrent
// use.
type StampLines struct {
	partial []byte
}

// Feed adds received output and appends to lat one latency per line it
// completes. A line that is not a timestamp fails with ErrBadStamp (the
// lines before it are still returned); the parser stays usable.
func (s *StampLines) Feed(text string, received time.Time, lat []time.Duration) ([]time.Duration, error) {
	s.partial = append(s.partial, text...)
	var bad error
	for {
		i := bytes.IndexByte(s.partial, '\n')
		if i < 0 {
			break
		}
		line := strings.TrimSpace(string(s.partial[:i]))
		s.partial = s.partial[i+1:]
		if line == "" {
			continue
		}
		ns, err := strconv.ParseInt(line, 10, 64)
		if err != nil || ns <= 0 {
			if bad == nil {
				bad = fmt.Errorf("%w: %q", ErrBadStamp, truncate(line, 40))
			}
			continue
		}
		lat = append(lat, received.Sub(time.Unix(0, ns)))
	}
	if len(s.partial) == 0 {
		s.partial = nil // let a drained buffer go
	}
	return lat, bad
}

// Pending reports whether a partial line is waiting for its newline.
func (s *StampLines) Pending() bool { return len(s.partial) > 0 }

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

// eventFramePrefix starts every event frame of /api/ws: the envelope's
// first field is its seq (conversation.Event's field order).
var eventFramePrefix = []byte(`{"op":"event","event":{"seq":`)

// FrameSeq returns the seq of a /api/ws event frame without decoding the
// rest of it; ok is false for other frames (ack, error, pong) and for
// malformed ones.
func FrameSeq(frame []byte) (seq int64, ok bool) {
	rest, found := bytes.CutPrefix(frame, eventFramePrefix)
	if !found {
		return 0, false
	}
	n := 0
	for n < len(rest) && n < 19 && rest[n] >= '0' && rest[n] <= '9' {
		n++
	}
	if n == 0 || n >= len(rest) || rest[n] != ',' {
		return 0, false
	}
	v, err := strconv.ParseInt(string(rest[:n]), 10, 64)
	if err != nil || v <= 0 {
		return 0, false
	}
	return v, true
}
