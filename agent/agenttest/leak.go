package agenttest

import (
	"os"
	"testing"

	"go.uber.org/goleak"
)

// VerifyTestMain runs the tests, then fails them on goroutines left
// behind, apart from those that outlive a test server by design: the
// socket.io queue and idle HTTP keep-alive connections.
func VerifyTestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		goleak.IgnoreAnyFunction("github.com/zishang520/socket.io/v3/pkg/queue.(*Queue).run"),
		goleak.IgnoreTopFunction("net/http.(*persistConn).readLoop"),
		goleak.IgnoreTopFunction("net/http.(*persistConn).writeLoop"),
	)
}

// Main is a TestMain for a package whose test binary also plays an agent
// CLI: when fake (the package's Fake…Main) played it, the process exits;
// otherwise the tests run under VerifyTestMain.
func Main(m *testing.M, fake func() bool) {
	if fake() {
		os.Exit(0)
	}
	VerifyTestMain(m)
}
