package codex_test

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"github.com/agentd/agentd/conversation"
	"github.com/agentd/agentd/internal/agent/codex"
)

type lineConverter interface {
	Convert([]byte) ([]conversation.Event, error)
}

// seedLines adds every line of the files matching pattern to the corpus,
// and the files whole (as multi-line inputs) when they are small.
func seedLines(f *testing.F, pattern string) {
	files, _ := filepath.Glob(pattern)
	if len(files) == 0 {
		f.Fatalf("no seed files match %s", pattern)
	}
	for _, name := range files {
		data, err := os.ReadFile(name)
		if err != nil {
			f.Fatal(err)
		}
		if len(data) < 64<<10 {
			f.Add(data)
		}
		for _, l := range bytes.Split(data, []byte("\n")) {
			if len(l) > 0 && len(l) < 64<<10 {
				f.Add(l)
			}
		}
	}
}

// fuzzLines converts each line of data with one converter: nothing may
// panic, and whatever comes out must keep the event invariants.
func fuzzLines(t *testing.T, c lineConverter, data []byte) {
	var events []conversation.Event
	for _, l := range bytes.Split(data, []byte("\n")) {
		ev, err := c.Convert(l)
		if err != nil && len(ev) > 0 {
			t.Fatalf("error %v with %d events", err, len(ev))
		}
		events = append(events, ev...)
	}
	checkEvents(t, events)
}

func FuzzExecJSONConverter(f *testing.F) {
	seedLines(f, "testdata/agent-output/*codex-exec-json*.jsonl")
	f.Fuzz(func(t *testing.T, data []byte) { fuzzLines(t, codex.NewExecJSONConverter(), data) })
}

func FuzzRolloutConverter(f *testing.F) {
	seedLines(f, "testdata/agent-output/*rollout-*.jsonl")
	f.Fuzz(func(t *testing.T, data []byte) { fuzzLines(t, codex.NewRolloutConverter(), data) })
}

func FuzzAppServerConverter(f *testing.F) {
	seedLines(f, "testdata/app-server/*.jsonl")
	f.Fuzz(func(t *testing.T, data []byte) { fuzzLines(t, codex.NewAppServerConverter(), data) })
}

// benchLines measures a converter's throughput over a file, line by line,
// as a live runner feeds it.
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

func BenchmarkExecJSONConverter(b *testing.B) {
	benchLines(b, "testdata/agent-output/agentcmd__codex-exec-json__stream-output-2.jsonl",
		func() lineConverter { return codex.NewExecJSONConverter() })
}

func BenchmarkRolloutConverter(b *testing.B) {
	benchLines(b, rollout, func() lineConverter { return codex.NewRolloutConverter() })
}

func BenchmarkAppServerConverter(b *testing.B) {
	benchLines(b, appTurns, func() lineConverter { return codex.NewAppServerConverter() })
}
