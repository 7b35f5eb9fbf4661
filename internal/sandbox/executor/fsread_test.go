package executor

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"slices"
	"syscall"
	"testing"

	"github.com/agentd/agentd/internal/sandbox/sandboxtest"
	"github.com/agentd/agentd/sandbox"
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

// TestOpenFile: a live executor environment hands out workspace files to
// stream (the server opens them on the host): regular files of any size,
// nothing else.
func TestOpenFile(t *testing.T) {
	p, dir := newTestProvider(t, nil)
	spec := sandbox.Spec{SessionID: "open", Workspace: filepath.Join(dir, "ws")}
	e := sandboxtest.Create(t, p, spec).(*Environment)
	ws := spec.Workspace
	f, err := os.Create(filepath.Join(ws, "big"))
	if err != nil {
		t.Fatal(err)
	}
	f.Truncate(64 << 20) // over what fs.read can move
	f.Close()
	syscall.Mkfifo(filepath.Join(ws, "fifo"), 0o644)
	os.Symlink("/etc/passwd", filepath.Join(ws, "out"))
	r, err := e.OpenFile(bg, "big")
	if err != nil {
		t.Fatal(err)
	}
	n, err := io.Copy(io.Discard, r)
	r.Close()
	if err != nil || n != 64<<20 || r.Info().Size != 64<<20 {
		t.Fatalf("big: %d bytes, %v", n, err)
	}
	if _, err := e.OpenFile(bg, "fifo"); !errors.Is(err, sandbox.ErrNotRegular) {
		t.Fatalf("fifo: %v", err)
	}
	if _, err := e.OpenFile(bg, "out"); !errors.Is(err, sandbox.ErrInvalidPath) {
		t.Fatalf("link out: %v", err)
	}
	if err := e.Terminate(bg); err != nil {
		t.Fatal(err)
	}
	if _, err := e.OpenFile(bg, "big"); !errors.Is(err, sandbox.ErrTerminated) {
		t.Fatalf("after Terminate: %v", err)
	}
}
