package claudecode

import (
	"os"
	"testing"

	"go.uber.org/goleak"
)

// TestMain runs the tests under goleak, or, when the binary was started as
// the fake Claude Code CLI (fakecli_test.go), acts as that CLI.
func TestMain(m *testing.M) {
	if os.Getenv(fakeEnv) != "" {
		os.Exit(runFakeCLI(os.Args[1:]))
	}
	goleak.VerifyTestMain(m,
		goleak.IgnoreAnyFunction("github.com/zishang520/socket.io/v3/pkg/queue.(*Queue).run"),
		goleak.IgnoreTopFunction("net/http.(*persistConn).readLoop"),
		goleak.IgnoreTopFunction("net/http.(*persistConn).writeLoop"),
	)
}
