package watch

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/agentd/agentd/sandbox"
)

// BenchmarkEventLatency is the time from a write to its event with the
// default 50 ms debounce: debounce plus the watcher's own overhead.
func BenchmarkEventLatency(b *testing.B) {
	root := b.TempDir()
	w, err := New(root, Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer w.Close()
	ch := w.Subscribe(b.Context())
	p := filepath.Join(root, "f")
	i := 0
	for b.Loop() {
		i++
		if err := os.WriteFile(p, fmt.Appendf(nil, "%d", i), 0o644); err != nil {
			b.Fatal(err)
		}
		select {
		case <-ch:
		case <-time.After(10 * time.Second):
			b.Fatal("no event")
		}
	}
}

// BenchmarkRescan is one polling scan of an unchanged tree of 10,000 files
// in 100 folders (what polling mode costs every interval).
func BenchmarkRescan(b *testing.B) {
	root := settledTree(b)
	w, err := New(root, Options{Poll: true, PollInterval: time.Hour})
	if err != nil {
		b.Fatal(err)
	}
	w.Close() // drive the scan by hand, without the timer
	w.mu.Lock()
	defer w.mu.Unlock()
	for b.Loop() {
		w.rescanLocked()
	}
	if len(w.known) != 10000 {
		b.Fatalf("%d files known", len(w.known))
	}
}

// BenchmarkSync is a Sync with inotify, from the call to the marker read,
// on a tree of 10,000 files in 100 folders where one file changed: what a
// turn's end waits for (a whole-tree comparison, whose inotify half renews
// each folder's watch).
func BenchmarkSync(b *testing.B) {
	root := settledTree(b)
	w, err := New(root, Options{Debounce: time.Hour, MaxDelay: time.Hour})
	if err != nil {
		b.Fatal(err)
	}
	defer w.Close()
	ch := w.Subscribe(b.Context())
	p := filepath.Join(root, "d00", "f00")
	i := 0
	for b.Loop() {
		i++
		if err := os.WriteFile(p, fmt.Appendf(nil, "%d", i), 0o644); err != nil {
			b.Fatal(err)
		}
		if err := w.Sync(b.Context(), "m"); err != nil {
			b.Fatal(err)
		}
		for ev := range ch {
			if ev.Op == sandbox.Sync {
				break
			}
		}
	}
}

// settledTree makes 10,000 files in 100 folders, old enough to need no
// hashing when compared.
func settledTree(b *testing.B) string {
	root := b.TempDir()
	for d := range 100 {
		dir := filepath.Join(root, fmt.Sprintf("d%02d", d))
		if err := os.Mkdir(dir, 0o755); err != nil {
			b.Fatal(err)
		}
		for f := range 100 {
			if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("f%02d", f)), []byte("content"), 0o644); err != nil {
				b.Fatal(err)
			}
		}
	}
	old := time.Now().Add(-time.Hour) // settled files: no hashing needed
	_ = filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			_ = os.Chtimes(p, old, old)
		}
		return nil
	})
	return root
}
