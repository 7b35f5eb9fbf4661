package codex_test

import (
	"testing"

	"github.com/agentd/agentd/agent/agenttest"
	"github.com/agentd/agentd/internal/agent/codex"
)

// seeds: every line of the sample files, and the files whole (as
// multi-line inputs) when they are small.
var seeds = agenttest.Seeds{Whole: true, Lines: true, MaxLen: 64 << 10}

func FuzzExecJSONConverter(f *testing.F) {
	agenttest.Seed(f, "testdata/agent-output/*codex-exec-json*.jsonl", seeds)
	f.Fuzz(func(t *testing.T, data []byte) { agenttest.FuzzLines(t, codex.NewExecJSONConverter(), data) })
}

func FuzzRolloutConverter(f *testing.F) {
	agenttest.Seed(f, "testdata/agent-output/*rollout-*.jsonl", seeds)
	f.Fuzz(func(t *testing.T, data []byte) { agenttest.FuzzLines(t, codex.NewRolloutConverter(), data) })
}

func FuzzAppServerConverter(f *testing.F) {
	agenttest.Seed(f, "testdata/app-server/*.jsonl", seeds)
	f.Fuzz(func(t *testing.T, data []byte) { agenttest.FuzzLines(t, codex.NewAppServerConverter(), data) })
}

func BenchmarkExecJSONConverter(b *testing.B) {
	agenttest.BenchLines(b, "testdata/agent-output/agentcmd__codex-exec-json__stream-output-2.jsonl",
		func() agenttest.LineConverter { return codex.NewExecJSONConverter() })
}

func BenchmarkRolloutConverter(b *testing.B) {
	agenttest.BenchLines(b, rollout, func() agenttest.LineConverter { return codex.NewRolloutConverter() })
}

func BenchmarkAppServerConverter(b *testing.B) {
	agenttest.BenchLines(b, appTurns, func() agenttest.LineConverter { return codex.NewAppServerConverter() })
}
