//go:build !linux

package wiring

import (
	"errors"
	"strings"
	"testing"
)

// Off Linux the executor and bwrap backends refuse to start, saying why,
// rather than half-working.
func TestHostIsolationNeedsLinux(t *testing.T) {
	for _, name := range []string{"executor", "bwrap"} {
		s := &Server{cfg: Config{Sandbox: name}}
		_, err := s.builtinSandbox(name, t.TempDir())
		if !errors.Is(err, errors.ErrUnsupported) || !strings.Contains(err.Error(), "the "+name+" sandbox needs Linux") {
			t.Errorf("%s: %v", name, err)
		}
	}
}
