package claudeconv

import (
	"os"
	"path/filepath"
)

// The shared agent output lives outside the repository; AGENTD_TESTDATA
// points elsewhere when it moves. Tests that need it skip without it.
var (
	testdataRoot = testdataDir()
	streamDir    = filepath.Join(testdataRoot, "claude-stream-json")
	sessionDir   = filepath.Join(testdataRoot, "claude-session-jsonl")
)

func testdataDir() string {
	if d := os.Getenv("AGENTD_TESTDATA"); d != "" {
		return d
	}
	return "/work/shared/testdata/agent-output"
}
