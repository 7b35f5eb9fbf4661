//go:build !linux

package cgroup

import (
	"errors"
	"fmt"
	"os/exec"
)

// Start fails: control groups are a Linux feature. (Detect, reading
// /proc/self/mountinfo, finds none elsewhere, so no Group is made there
// but in tests.)
func (g *Group) Start(*exec.Cmd) error {
	return fmt.Errorf("cgroup: start in %s: control groups need Linux: %w", g.name, errors.ErrUnsupported)
}
