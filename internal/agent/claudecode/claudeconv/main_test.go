package claudeconv

import (
	"testing"

	"github.com/agentd/agentd/agent/agenttest"
)

func TestMain(m *testing.M) { agenttest.VerifyTestMain(m) }
