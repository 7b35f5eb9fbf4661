package pgtest

import (
	"context"
	"os"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// The private server path, which CI (with $AGENTD_TEST_POSTGRES set) does
// not otherwise take: Start brings a server up that takes connections and
// a schema, and Stop removes everything.
func TestStartStop(t *testing.T) {
	if _, err := BinDir(); err != nil {
		if os.Getenv(EnvRequire) != "" {
			t.Fatal(err)
		}
		t.Skip(err)
	}
	s, err := Start(os.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := exec1(ctx, s.DSN, "CREATE SCHEMA probe; CREATE TABLE probe.t (x text COLLATE \"C\")"); err != nil {
		t.Fatal(err)
	}
	if err := s.Stop(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(s.dir); !os.IsNotExist(err) {
		t.Fatalf("the server's folder is still there: %v", err)
	}
	if err := exec1(ctx, s.DSN, "SELECT 1"); err == nil {
		t.Fatal("the server still answers after Stop")
	}
}
