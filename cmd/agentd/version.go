package main

import (
	"runtime/debug"

	"github.com/agentd/agentd"
)

// versionFromBuildInfo sets agentd.Version, when no -ldflags stamped it,
// to the module version the Go toolchain recorded: what `go install
// github.com/agentd/agentd/cmd/agentd@v1.2.3` builds reports v1.2.3
// (and a build in a checkout its pseudo-version) instead of "dev".
func versionFromBuildInfo() {
	if agentd.Version != "dev" {
		return
	}
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
		agentd.Version = bi.Main.Version
	}
}
