package executor

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"syscall"
	"testing"
	"time"

	"github.com/agentd/agentd/internal/executor/rpc"
	"github.com/agentd/agentd/sandbox"
)

// TestFSReadBounded: fs.read checks a file's size on the open file before
// reading it, so a file that cannot fit one message costs no memory, and
// it refuses what is not a regular file without blocking on it (a FIFO
// with no writer) or reading it (a device).
func TestFSReadBounded(t *testing.T) {
	const maxLine = 1 << 20
	te := startExecutor(t, func(c *Config) { c.MaxLine = maxLine })
	c := dialTest(t, te.socket, newRecorder(t))
	limit := maxFileBytes(maxLine)
	ws := te.workspace

	// Exactly the limit fits; one byte more does not.
	if err := os.WriteFile(filepath.Join(ws, "fits"), make([]byte, limit), 0o644); err != nil {
		t.Fatal(err)
	}
	if data, err := c.ReadFile(bg, "fits"); err != nil || int64(len(data)) != limit {
		t.Fatalf("a file of the limit (%d bytes): %d bytes, %v", limit, len(data), err)
	}
	if err := os.WriteFile(filepath.Join(ws, "over"), make([]byte, limit+1), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := c.ReadFile(bg, "over")
	wantCode(t, err, rpc.CodeTooLarge)
	if !errors.Is(err, sandbox.ErrTooLarge) {
		t.Fatalf("-32009 does not map to ErrTooLarge: %v", err)
	}

	// A big sparse file is refused without being read: the executor
	// allocates next to nothing (it used to read it whole, then fail).
	big := filepath.Join(ws, "big")
	f, err := os.Create(big)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(256 << 20); err != nil {
		t.Fatal(err)
	}
	f.Close()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	_, err = c.ReadFile(bg, "big")
	runtime.ReadMemStats(&after)
	wantCode(t, err, rpc.CodeTooLarge)
	if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 4<<20 {
		t.Fatalf("refusing a 256 MiB file allocated %d MiB", alloc>>20)
	}

	// Not regular files: refused at once, whatever waits behind them.
	if err := syscall.Mkfifo(filepath.Join(ws, "fifo"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("fifo", filepath.Join(ws, "to-fifo")); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(ws, "dir"), 0o755); err != nil {
		t.Fatal(err)
	}
	notRegular := []string{"fifo", "to-fifo", "dir", "."}
	if os.Getuid() == 0 {
		// A character device like /dev/null: reading it used to answer
		// as if it were an empty file (/dev/zero would never end).
		if err := syscall.Mknod(filepath.Join(ws, "null"), syscall.S_IFCHR|0o666, 1<<8|3); err != nil {
			t.Fatal(err)
		}
		notRegular = append(notRegular, "null")
	}
	for _, p := range notRegular {
		ctx, cancel := context.WithTimeout(bg, 5*time.Second)
		t0 := time.Now()
		_, err := c.ReadFile(ctx, p)
		cancel()
		wantCode(t, err, rpc.CodeNotRegular)
		if !errors.Is(err, sandbox.ErrNotRegular) || !errors.Is(err, sandbox.ErrInvalidPath) {
			t.Fatalf("%s: -32013 does not map to ErrNotRegular and ErrInvalidPath: %v", p, err)
		}
		if d := time.Since(t0); d > 2*time.Second {
			t.Fatalf("%s: refused after %v", p, d)
		}
	}
	// The executor still answers (nothing is stuck on the FIFO).
	if _, err := c.Ping(bg); err != nil {
		t.Fatal(err)
	}
}
