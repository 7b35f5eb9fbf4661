package claudecode

// FakeCLIDir is fakeCLIDir for the external tests (benchmarks against the
// fake CLI).
var FakeCLIDir = fakeCLIDir
