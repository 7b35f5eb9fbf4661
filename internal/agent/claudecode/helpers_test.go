package claudecode

import (
	"path/filepath"

	"github.com/agentd/agentd/internal/convert/synth"
)

// The shared agent output lives outside the repository; AGENTD_TESTDATA
// points elsewhere when it moves (synth.SharedRoot). Tests that need it
// skip without it.
var (
	testdataRoot = synth.SharedRoot()
	streamDir    = filepath.Join(testdataRoot, "claude-stream-json")
	sessionDir   = filepath.Join(testdataRoot, "claude-session-jsonl")
)
