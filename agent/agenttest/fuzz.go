package agenttest

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"github.com/agentd/agentd/conversation"
)

// LineConverter is what the live converters have in common: one line of
// CLI output in, events out.
type LineConverter interface {
	Convert([]byte) ([]conversation.Event, error)
}

// Seeds says what Seed adds from each file.
type Seeds struct {
	Whole bool // the file as one (multi-line) input
	Lines bool // each non-empty line
	// MaxLen, when set, leaves out inputs (files or lines) of MaxLen bytes
	// or more.
	MaxLen int
}

// Seed adds the files matching pattern to the fuzz corpus as s says; no
// file matching fails the fuzz test.
func Seed(f *testing.F, pattern string, s Seeds) {
	f.Helper()
	files, _ := filepath.Glob(pattern)
	if len(files) == 0 {
		f.Fatalf("no seed files match %s", pattern)
	}
	for _, name := range files {
		data, err := os.ReadFile(name)
		if err != nil {
			f.Fatal(err)
		}
		for _, in := range s.inputs(data) {
			f.Add(in)
		}
	}
}

// inputs are the seeds s takes from one file's data.
func (s Seeds) inputs(data []byte) [][]byte {
	fits := func(b []byte) bool { return s.MaxLen == 0 || len(b) < s.MaxLen }
	var out [][]byte
	if s.Whole && fits(data) {
		out = append(out, data)
	}
	if !s.Lines {
		return out
	}
	for _, l := range bytes.Split(data, []byte("\n")) {
		if len(l) > 0 && fits(l) {
			out = append(out, l)
		}
	}
	return out
}

// FuzzLines converts each line of data with c, then flushes it when c has
// a Flush method: a line that fails may give no events, and whatever comes
// out must keep the event invariants (CheckEvents). Nothing may panic.
func FuzzLines(t testing.TB, c LineConverter, data []byte) {
	t.Helper()
	var events []conversation.Event
	for _, l := range bytes.Split(data, []byte("\n")) {
		ev, err := c.Convert(l)
		if err != nil && len(ev) > 0 {
			t.Fatalf("error %v with %d events", err, len(ev))
		}
		events = append(events, ev...)
	}
	if f, ok := c.(interface{ Flush() []conversation.Event }); ok {
		events = append(events, f.Flush()...)
	}
	CheckEvents(t, events)
}

// FuzzDocument checks a whole-document converter's answer for one input:
// an error comes with no events, and the events keep the invariants.
func FuzzDocument(t testing.TB, events []conversation.Event, err error) {
	t.Helper()
	if err != nil && len(events) > 0 {
		t.Fatalf("error %v with events", err)
	}
	CheckEvents(t, events)
}

// BenchLines measures a converter's throughput over file, line by line as
// a live runner feeds it, with a new converter per iteration.
func BenchLines(b *testing.B, file string, newConv func() LineConverter) {
	b.Helper()
	data, err := os.ReadFile(file)
	if err != nil {
		b.Fatal(err)
	}
	lines := bytes.Split(bytes.TrimSpace(data), []byte("\n"))
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	for b.Loop() {
		c := newConv()
		for _, l := range lines {
			if _, err := c.Convert(l); err != nil {
				b.Fatal(err)
			}
		}
	}
}

// BenchDocument measures a whole-document converter over file.
func BenchDocument(b *testing.B, file string, convert func([]byte) ([]conversation.Event, error)) {
	b.Helper()
	data, err := os.ReadFile(file)
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := convert(data); err != nil {
			b.Fatal(err)
		}
	}
}
