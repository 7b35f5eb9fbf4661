package executor

import (
	"testing"

	"github.com/agentd/agentd/sandbox"
	conformance "github.com/agentd/agentd/sandbox/sandboxtest"
)

func TestConformance(t *testing.T) {
	conformance.Run(t, conformance.Suite{NewProvider: func(t testing.TB) sandbox.Provider {
		p, _ := newTestProvider(t, nil)
		return p
	}})
}
