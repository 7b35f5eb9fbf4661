package claudecode

const (
	testdataRoot = "/work/shared/testdata/agent-output"
	streamDir    = testdataRoot + "/claude-stream-json"
	sessionDir   = testdataRoot + "/claude-session-jsonl"
)
