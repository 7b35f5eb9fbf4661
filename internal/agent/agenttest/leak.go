package agenttest

import (
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
