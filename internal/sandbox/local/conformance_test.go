package local

import (
	"testing"
	"time"

	"github.com/agentd/agentd/sandbox"
	"github.com/agentd/agentd/sandbox/sandboxtest"
)

func TestConformance(t *testing.T) {
	sandboxtest.Run(t, sandboxtest.Suite{NewProvider: func(testing.TB) sandbox.Provider {
		return New(Options{KillGrace: 300 * time.Millisecond})
	}})
}
