package executor

import (
	"log/slog"
	"os"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	if s := os.Getenv("EXECUTOR_TEST_DIAL"); s != "" {
		dialForTest(s)
	}
	if os.Getenv("EXECUTOR_TEST_NETOFF") != "" {
		netOffForTest()
	}
	if s := os.Getenv("EXECUTOR_TEST_SWITCH"); s != "" {
		switchUserForTest(s)
	}
	if os.Getenv("AGENTD_TEST_LOG") == "" {
		slog.SetDefault(slog.New(slog.DiscardHandler))
	}
	goleak.VerifyTestMain(m)
}

// shortTempDir is a temporary folder with a short path: Unix socket paths
// are limited to 108 bytes, and t.TempDir's are long.
func shortTempDir(t testing.TB) string {
	t.Helper()
	d, err := os.MkdirTemp("", "ex")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(d) })
	return d
}
