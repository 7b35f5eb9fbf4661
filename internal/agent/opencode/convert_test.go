package opencode_test

import (
	"flag"
	"testing"

	"github.com/agentd/agentd/internal/agent/agenttest/formattest"
)

var update = flag.Bool("update", false, "rewrite the golden files under testdata/golden")

// formatFiles maps each format to the test inputs it must convert cleanly.
var formatFiles = formattest.Formats{
	"opencode-events": {"testdata/agent-output/*sse-events*.jsonl", "testdata/captured/opencode-events.sse.txt"},
	"opencode-export": {"testdata/agent-output/*transcript*.json", "testdata/captured/opencode-export.json"},
}

func TestFormatsConvertTestdata(t *testing.T) {
	formattest.CheckCorpus(t, formatFiles, *update)
}

// TestCopiesMatchSharedTestdata: testdata/agent-output holds byte-for-byte
// copies of the shared agent output for this CLI, so the tests run without
// it; every shared file must have an identical copy that a format converts.
func TestCopiesMatchSharedTestdata(t *testing.T) {
	formattest.CheckSharedCopies(t, "opencode", formatFiles)
}
