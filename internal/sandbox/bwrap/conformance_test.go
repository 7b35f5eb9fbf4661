package bwrap

import (
	"path/filepath"
	"testing"

	"github.com/agentd/agentd/sandbox"
	conformance "github.com/agentd/agentd/sandbox/sandboxtest"
)

func TestConformance(t *testing.T) {
	var dir string // the sub-test's folder, which the sandbox's user may enter
	conformance.Run(t, conformance.Suite{
		NewProvider: func(t testing.TB) sandbox.Provider {
			p, d := newProvider(t, nil)
			dir = d
			return p
		},
		Spec: func(_ testing.TB, spec *sandbox.Spec) { spec.Workspace = filepath.Join(dir, "ws") },
	})
}
