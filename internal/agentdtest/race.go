//go:build race

package agentdtest

// raceEnabled: this test binary was built with -race, and so is the agentd
// binary that Binary builds.
const raceEnabled = true
