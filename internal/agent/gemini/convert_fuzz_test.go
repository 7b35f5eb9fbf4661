package gemini_test

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"github.com/agentd/agentd/conversation"
	"github.com/agentd/agentd/internal/agent/gemini"
)

type lineConverter interface {
	Convert([]byte) ([]conversation.Event, error)
}

// seed adds the files matching pattern whole, and each of their lines, to
// the corpus.
func seed(f *testing.F, pattern string) {
	files, _ := filepath.Glob(pattern)
	if len(files) == 0 {
		f.Fatalf("no seed files match %s", pattern)
	}
	for _, name := range files {
		data, err := os.ReadFile(name)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
		for _, l := range bytes.Split(data, []byte("\n")) {
			if len(l) > 0 {
				f.Add(l)
			}
		}
	}
}

// fuzzLines converts each line of data with one converter (then flushes
// it): nothing may panic, and the output keeps the event invariants.
func fuzzLines(t *testing.T, c lineConverter, data []byte) {
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
	checkEvents(t, events)
}

func FuzzStreamJSONConverter(f *testing.F) {
	seed(f, "testdata/agent-output/*stream-json*.jsonl")
	f.Fuzz(func(t *testing.T, data []byte) { fuzzLines(t, gemini.NewStreamJSONConverter(), data) })
}

func FuzzSessionConverter(f *testing.F) {
	seed(f, "testdata/session-jsonl/*.jsonl")
	f.Fuzz(func(t *testing.T, data []byte) { fuzzLines(t, gemini.NewSessionConverter(), data) })
}

func FuzzSessionDocument(f *testing.F) {
	seed(f, "testdata/agent-output/*session-*.json")
	f.Fuzz(func(t *testing.T, data []byte) {
		ev, err := gemini.NewSessionConverter().ConvertDocument(data)
		if err != nil && len(ev) > 0 {
			t.Fatalf("error %v with events", err)
		}
		checkEvents(t, ev)
	})
}

func FuzzJSONOutput(f *testing.F) {
	seed(f, "testdata/agent-output/*output-format-json*.json")
	f.Fuzz(func(t *testing.T, data []byte) {
		ev, err := gemini.ConvertJSONOutput(data)
		if err != nil && len(ev) > 0 {
			t.Fatalf("error %v with events", err)
		}
		checkEvents(t, ev)
	})
}

func benchLines(b *testing.B, file string, newConv func() lineConverter) {
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

func BenchmarkStreamJSONConverter(b *testing.B) {
	benchLines(b, streamRead, func() lineConverter { return gemini.NewStreamJSONConverter() })
}

func BenchmarkSessionConverterLines(b *testing.B) {
	benchLines(b, sessionLines, func() lineConverter { return gemini.NewSessionConverter() })
}

func BenchmarkSessionDocument(b *testing.B) {
	data, err := os.ReadFile(sessionEdit)
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := gemini.NewSessionConverter().ConvertDocument(data); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkJSONOutput(b *testing.B) {
	data, err := os.ReadFile(jsonOut)
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := gemini.ConvertJSONOutput(data); err != nil {
			b.Fatal(err)
		}
	}
}
