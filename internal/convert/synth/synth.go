// Package synth builds large inputs for the converters' benchmarks from a
// real recorded one, so a 100 MB transcript never has to be committed: the
// same seed and size always give the same bytes.
package synth

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"testing"
)

// ClaudeSeed is the shared transcript the figures were measured
// on: the largest real Claude Code transcript in the shared test data
// (774 KB, 438 lines, CLI 1.0.98 with inline subagent lines).
const ClaudeSeed = "claude-session-jsonl/claude-code-viewer__fe5e1c67-53e7-4862-81ae-d0e013e3270b.jsonl"

// SharedRoot is the shared agent output: AGENTD_TESTDATA, by default
// /work/shared/testdata/agent-output (as the converters' tests use it).
func SharedRoot() string {
	if root := os.Getenv("AGENTD_TESTDATA"); root != "" {
		return root
	}
	return "/work/shared/testdata/agent-output"
}

// ReadClaudeSeed reads ClaudeSeed from SharedRoot.
func ReadClaudeSeed() ([]byte, error) {
	return os.ReadFile(filepath.Join(SharedRoot(), ClaudeSeed))
}

// Copies is the number of copies of a seed of seedLen bytes that make at
// least size bytes (50 MB of the 774 KB seed: 65 copies).
func Copies(seedLen int, size int64) int {
	if seedLen <= 0 || size <= 0 {
		return 1
	}
	return int((size + int64(seedLen) - 1) / int64(seedLen))
}

var (
	// uuidRE matches the uuids of lines, sessions and agents.
	uuidRE = regexp.MustCompile(`[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-([0-9a-f]{12})`)
	// apiIDRE matches the Anthropic API's ids: messages, requests, tool calls.
	apiIDRE = regexp.MustCompile(`\b(?:msg|req|toolu|srvtoolu)_[0-9A-Za-z]+`)
)

// WriteClaudeTranscript writes n copies of seed, a Claude Code transcript,
// one after the other, with the ids renumbered in every copy but the
// first: each uuid's last 12 hex digits get k×0x9E3779B97F4A added (mod
// 2^48), each API id (msg_…, req_…, toolu_…) gets the suffix "c<k>". The
// same id gets the same new id everywhere in a copy, so the copies are n
// sessions' worth of distinct messages, tool calls and subagents that
// convert like the seed does: the same blocks, with other ids. The session
// id is a uuid too, so each copy is its own session on the lines that name
// one; the converter treats the file as one run.
func WriteClaudeTranscript(w io.Writer, seed []byte, n int) (int64, error) {
	if len(seed) == 0 {
		return 0, errors.New("synth: empty seed")
	}
	if seed[len(seed)-1] != '\n' {
		seed = append(seed[:len(seed):len(seed)], '\n')
	}
	ids := findIDs(seed)
	var total int64
	buf := make([]byte, 0, len(seed)+len(seed)/16)
	for k := range n {
		buf = renumber(buf[:0], seed, ids, k)
		m, err := w.Write(buf)
		total += int64(m)
		if err != nil {
			return total, fmt.Errorf("synth: write copy %d: %w", k, err)
		}
	}
	return total, nil
}

// ClaudeTranscript returns WriteClaudeTranscript's output for at least size
// bytes.
func ClaudeTranscript(seed []byte, size int64) ([]byte, error) {
	n := Copies(len(seed), size)
	var b bytes.Buffer
	b.Grow(n * (len(seed) + len(seed)/16))
	if _, err := WriteClaudeTranscript(&b, seed, n); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

// WriteClaudeTranscriptFile writes at least size bytes of renumbered
// copies of the seed to path and returns how many bytes it wrote.
func WriteClaudeTranscriptFile(path string, seed []byte, size int64) (int64, error) {
	f, err := os.Create(path)
	if err != nil {
		return 0, fmt.Errorf("synth: %w", err)
	}
	n, err := WriteClaudeTranscript(f, seed, Copies(len(seed), size))
	if cerr := f.Close(); err == nil && cerr != nil {
		err = fmt.Errorf("synth: %w", cerr)
	}
	return n, err
}

// BenchClaudeTranscript writes, in tb's temporary folder, a transcript of
// the size AGENTD_BENCH_CONVERT_MB asks for (default 50 MB) and returns its
// path and size. It skips tb when the shared seed is not available.
func BenchClaudeTranscript(tb testing.TB) (string, int64) {
	tb.Helper()
	seed, err := ReadClaudeSeed()
	if err != nil {
		tb.Skip("shared test data not available:", err)
	}
	mb := 50.0
	if s := os.Getenv("AGENTD_BENCH_CONVERT_MB"); s != "" {
		if mb, err = strconv.ParseFloat(s, 64); err != nil {
			tb.Fatal(err)
		}
	}
	path := filepath.Join(tb.TempDir(), "claude.jsonl")
	size, err := WriteClaudeTranscriptFile(path, seed, int64(mb*1e6))
	if err != nil {
		tb.Fatal(err)
	}
	return path, size
}

const uuidStep = 0x9E3779B97F4A // 48 bits of the golden ratio: copies never meet

// id is one id in the seed: the bytes [start,end) are replaced in each copy;
// for a uuid they are its last 12 hex digits, whose value is tail.
type id struct {
	start, end int
	uuid       bool
	tail       uint64
}

// findIDs lists the ids of seed in order.
func findIDs(seed []byte) []id {
	var ids []id
	for _, m := range uuidRE.FindAllSubmatchIndex(seed, -1) {
		tail, _ := strconv.ParseUint(string(seed[m[2]:m[3]]), 16, 64)
		ids = append(ids, id{start: m[2], end: m[3], uuid: true, tail: tail})
	}
	for _, m := range apiIDRE.FindAllIndex(seed, -1) {
		ids = append(ids, id{start: m[0], end: m[1]})
	}
	slices.SortFunc(ids, func(a, b id) int { return a.start - b.start })
	return ids
}

// renumber appends seed to dst with copy k's ids.
func renumber(dst, seed []byte, ids []id, k int) []byte {
	if k == 0 {
		return append(dst, seed...)
	}
	suffix := "c" + strconv.Itoa(k)
	last := 0
	for _, x := range ids {
		if x.uuid {
			dst = append(dst, seed[last:x.start]...)
			dst = fmt.Appendf(dst, "%012x", (x.tail+uint64(k)*uuidStep)&(1<<48-1))
		} else {
			dst = append(dst, seed[last:x.end]...)
			dst = append(dst, suffix...)
		}
		last = x.end
	}
	return append(dst, seed[last:]...)
}
