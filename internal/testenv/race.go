//go:build race

package testenv

// raceEnabled: this test binary was built with -race, and so is the agentd
// binary that Binary builds.
const raceEnabled = true
