//go:build !race

package agentdtest

const raceEnabled = false
