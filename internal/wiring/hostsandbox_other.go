//go:build !linux

package wiring

import (
	"errors"
	"fmt"
)

// hostIsolationSupported fails: the executor and bwrap backends isolate
// sessions with Linux features (cgroups, user switching, bubblewrap's
// namespaces), and are neither built nor tested elsewhere.
func hostIsolationSupported(name string) error {
	return fmt.Errorf("the %s sandbox needs Linux (cgroups, user switching, namespaces); use --sandbox local here: %w",
		name, errors.ErrUnsupported)
}
