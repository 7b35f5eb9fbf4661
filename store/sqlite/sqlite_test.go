package sqlite_test

import (
	"log/slog"
	"path/filepath"
	"testing"

	"go.uber.org/goleak"

	"github.com/agentd/agentd/store"
	"github.com/agentd/agentd/store/sqlite"
	"github.com/agentd/agentd/store/storetest"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// quiet drops the store's logs (migrations) from test output.
var quiet = slog.New(slog.DiscardHandler)

// openTemp opens a new store in t's temporary directory.
func openTemp(t testing.TB, opts ...sqlite.Option) *sqlite.Store {
	t.Helper()
	opts = append([]sqlite.Option{sqlite.WithLogger(quiet)}, opts...)
	s, err := sqlite.Open(t.Context(), filepath.Join(t.TempDir(), "agentd.db"), opts...)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	return s
}

func TestConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T) store.Store { return openTemp(t) })
}
