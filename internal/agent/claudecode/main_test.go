package claudecode

import (
	"context"
	"fmt"
	"os"
	"testing"

	"github.com/agentd/agentd/agent/agenttest"
	"github.com/agentd/agentd/internal/executor"
)

// TestMain runs the tests under goleak, or, when the binary was started as
// the fake Claude Code CLI (fakecli_test.go), acts as that CLI, or as the
// executor of the restart tests.
func TestMain(m *testing.M) {
	if os.Getenv(fakeEnv) != "" {
		os.Exit(runFakeCLI(os.Args[1:]))
	}
	if os.Getenv(executorEnv) == "1" && len(os.Args) > 1 && os.Args[1] == "executor" {
		// The executor of the restart tests' sandbox (executor_test.go).
		if err := executor.Main(context.Background(), os.Args[2:]); err != nil {
			fmt.Fprintln(os.Stderr, "executor:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	agenttest.VerifyTestMain(m)
}
