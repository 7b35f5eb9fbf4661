package gemini_test

import (
	"testing"

	"github.com/agentd/agentd/agent/agenttest"
	"github.com/agentd/agentd/conversation"
	"github.com/agentd/agentd/internal/agent/gemini"
)

// seeds: the sample files whole, and each of their lines.
var seeds = agenttest.Seeds{Whole: true, Lines: true}

func FuzzStreamJSONConverter(f *testing.F) {
	agenttest.Seed(f, "testdata/agent-output/*stream-json*.jsonl", seeds)
	f.Fuzz(func(t *testing.T, data []byte) { agenttest.FuzzLines(t, gemini.NewStreamJSONConverter(), data) })
}

func FuzzSessionConverter(f *testing.F) {
	agenttest.Seed(f, "testdata/session-jsonl/*.jsonl", seeds)
	f.Fuzz(func(t *testing.T, data []byte) { agenttest.FuzzLines(t, gemini.NewSessionConverter(), data) })
}

func FuzzSessionDocument(f *testing.F) {
	agenttest.Seed(f, "testdata/agent-output/*session-*.json", seeds)
	f.Fuzz(func(t *testing.T, data []byte) {
		ev, err := gemini.NewSessionConverter().ConvertDocument(data)
		agenttest.FuzzDocument(t, ev, err)
	})
}

func FuzzJSONOutput(f *testing.F) {
	agenttest.Seed(f, "testdata/agent-output/*output-format-json*.json", seeds)
	f.Fuzz(func(t *testing.T, data []byte) {
		ev, err := gemini.ConvertJSONOutput(data)
		agenttest.FuzzDocument(t, ev, err)
	})
}

func BenchmarkStreamJSONConverter(b *testing.B) {
	agenttest.BenchLines(b, streamRead, func() agenttest.LineConverter { return gemini.NewStreamJSONConverter() })
}

func BenchmarkSessionConverterLines(b *testing.B) {
	agenttest.BenchLines(b, sessionLines, func() agenttest.LineConverter { return gemini.NewSessionConverter() })
}

func BenchmarkSessionDocument(b *testing.B) {
	agenttest.BenchDocument(b, sessionEdit, func(data []byte) ([]conversation.Event, error) {
		return gemini.NewSessionConverter().ConvertDocument(data)
	})
}

func BenchmarkJSONOutput(b *testing.B) {
	agenttest.BenchDocument(b, jsonOut, gemini.ConvertJSONOutput)
}
