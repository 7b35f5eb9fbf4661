package executor

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/agentd/agentd/internal/sandbox"
	"github.com/agentd/agentd/internal/sandbox/sandboxtest"
)

// TestReadFileUnderMemoryLimit: reading a 2 GiB file through an executor
// whose group may use 64 MiB returns ErrTooLarge (-32009) and the executor
// lives on; it used to read the file whole and be OOM-killed.
func TestReadFileUnderMemoryLimit(t *testing.T) {
	needRoot(t)
	p, dir := newTestProvider(t, func(o *Options) { o.Limits = sandbox.Limits{MemoryBytes: 64 << 20} })
	if p.cg == nil || !slices.Contains(p.cg.Controllers(), "memory") {
		t.Skipf("no memory controller: %s", p.LimitsEnforcement())
	}
	spec := sandbox.Spec{SessionID: "big", Workspace: filepath.Join(dir, "ws")}
	e := sandboxtest.Create(t, p, spec).(*Environment)
	f, err := os.Create(filepath.Join(spec.Workspace, "big"))
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(2 << 30); err != nil {
		t.Fatal(err)
	}
	f.Close()
	if _, err := e.ReadFile(bg, "big"); !errors.Is(err, sandbox.ErrTooLarge) {
		t.Fatalf("reading 2 GiB under a 64 MiB limit: %v", err)
	}
	if !e.Running() {
		t.Fatal("the executor died")
	}
	if _, err := e.client.Ping(bg); err != nil {
		t.Fatalf("executor after the read: %v", err)
	}
}
