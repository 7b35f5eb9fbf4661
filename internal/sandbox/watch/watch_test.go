package watch

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"syscall"
	"testing"
	"time"

	"github.com/agentd/agentd/sandbox"
)

const waitLimit = 10 * time.Second

func sum(b []byte) string {
	h := sha256.Sum256(b)
	return hex.EncodeToString(h[:])
}

// write replaces root/rel atomically (written beside the tree, then
// renamed in), so a polling scan never sees it half-written.
func write(t *testing.T, root, rel, content string) {
	t.Helper()
	p := filepath.Join(root, rel)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	tmp := filepath.Join(t.TempDir(), "tmp")
	if err := os.WriteFile(tmp, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, p); err != nil {
		t.Fatal(err)
	}
}

func start(t *testing.T, root string, opts Options) (*Watcher, <-chan sandbox.FileEvent) {
	t.Helper()
	w, err := New(root, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = w.Close() })
	return w, w.Subscribe(t.Context())
}

// collect reads n events (failing after waitLimit), then whatever else
// arrives until none came for quiet: extras are then visible to the test.
// The wait for the expected events is generous because the machine may be
// loaded; only the quiet period is short.
func collect(t *testing.T, ch <-chan sandbox.FileEvent, n int, quiet time.Duration) []sandbox.FileEvent {
	t.Helper()
	var got []sandbox.FileEvent
	deadline := time.After(waitLimit)
	for len(got) < n {
		select {
		case e, ok := <-ch:
			if !ok {
				t.Fatalf("channel closed after %+v", got)
			}
			got = append(got, e)
		case <-deadline:
			t.Fatalf("got %d of %d events: %+v", len(got), n, got)
		}
	}
	for {
		select {
		case e, ok := <-ch:
			if !ok {
				return got
			}
			got = append(got, e)
		case <-time.After(quiet):
			return got
		}
	}
}

// until reads events until want has been seen (by op and path), returning
// everything read.
func until(t *testing.T, ch <-chan sandbox.FileEvent, op sandbox.Op, path string) []sandbox.FileEvent {
	t.Helper()
	var got []sandbox.FileEvent
	deadline := time.After(waitLimit)
	for {
		select {
		case e, ok := <-ch:
			if !ok {
				t.Fatalf("channel closed waiting for %s %s; got %+v", op, path, got)
			}
			got = append(got, e)
			if e.Op == op && e.Path == path {
				return got
			}
		case <-deadline:
			t.Fatalf("timed out waiting for %s %s; got %+v", op, path, got)
		}
	}
}

// modes are the watcher's modes to test: polling, and inotify where the
// system has it (haveInotify, set by inotify_linux_test.go).
func modes(t *testing.T) map[string]Options {
	m := map[string]Options{"poll": {Poll: true, PollInterval: 20 * time.Millisecond}}
	if haveInotify {
		m["inotify"] = Options{Debounce: 20 * time.Millisecond}
	}
	return m
}

func TestCreateModifyDelete(t *testing.T) {
	for name, opts := range modes(t) {
		t.Run(name, func(t *testing.T) {
			root := t.TempDir()
			write(t, root, "existing.txt", "old")
			w, ch := start(t, root, opts)
			if w.Polling() != opts.Poll {
				t.Fatalf("Polling() = %v", w.Polling())
			}

			// A poll may catch a write half-done (os.WriteFile truncates
			// first), so read until the final content shows.
			write(t, root, "a.txt", "hello")
			got := untilContent(t, ch, "a.txt", "hello")
			if got[0].Op != sandbox.Created || last(got).Size != 5 {
				t.Fatalf("events for a new file: %+v", got)
			}

			write(t, root, "a.txt", "hello world")
			got = untilContent(t, ch, "a.txt", "hello world")
			if got[0].Op != sandbox.Modified || last(got).Op != sandbox.Modified || last(got).Size != 11 {
				t.Fatalf("events for a modified file: %+v", got)
			}

			// A same-size rewrite within the same timestamp granule is
			// still a modification (hash comparison).
			write(t, root, "a.txt", "HELLO WORLD")
			if got = untilContent(t, ch, "a.txt", "HELLO WORLD"); last(got).Op != sandbox.Modified {
				t.Fatalf("same-size rewrite events %+v", got)
			}

			// The empty file is a file.
			write(t, root, "empty", "")
			e := last(until(t, ch, sandbox.Created, "empty"))
			if e.Size != 0 || e.SHA256 != sum(nil) {
				t.Fatalf("empty file event %+v", e)
			}

			if err := os.Remove(filepath.Join(root, "a.txt")); err != nil {
				t.Fatal(err)
			}
			e = last(until(t, ch, sandbox.Deleted, "a.txt"))
			if e.Size != 0 || e.SHA256 != "" {
				t.Fatalf("deleted event carries content: %+v", e)
			}

			// The baseline file was not reported; touching its mtime
			// without changing content reports nothing.
			for _, e := range collect(t, ch, 0, 150*time.Millisecond) {
				t.Errorf("unexpected event %+v", e)
			}
			future := time.Now().Add(time.Hour)
			if err := os.Chtimes(filepath.Join(root, "empty"), future, future); err != nil {
				t.Fatal(err)
			}
			for _, e := range collect(t, ch, 0, 150*time.Millisecond) {
				t.Errorf("event for a touch: %+v", e)
			}
		})
	}
}

// untilContent reads events until one for path carries content's hash and
// returns the events for path, checking none is a deletion.
func untilContent(t *testing.T, ch <-chan sandbox.FileEvent, path, content string) []sandbox.FileEvent {
	t.Helper()
	want := sum([]byte(content))
	var got []sandbox.FileEvent
	deadline := time.After(waitLimit)
	for {
		select {
		case e, ok := <-ch:
			if !ok {
				t.Fatalf("channel closed waiting for %s; got %+v", path, got)
			}
			if e.Path != path {
				continue
			}
			if e.Op == sandbox.Deleted {
				t.Fatalf("%s deleted while being written: %+v", path, append(got, e))
			}
			got = append(got, e)
			if e.SHA256 == want {
				return got
			}
		case <-deadline:
			t.Fatalf("timed out waiting for %s with %q; got %+v", path, content, got)
		}
	}
}

func last(evs []sandbox.FileEvent) sandbox.FileEvent { return evs[len(evs)-1] }

func TestNestedNewFolders(t *testing.T) {
	for name, opts := range modes(t) {
		t.Run(name, func(t *testing.T) {
			root := t.TempDir()
			_, ch := start(t, root, opts)
			// Created faster than any watch can be added on a/b/c.
			for i := range 3 {
				write(t, root, fmt.Sprintf("a/b/c/f%d", i), "x")
			}
			write(t, root, "a/top", "")
			if err := os.MkdirAll(filepath.Join(root, "a/empty/dir"), 0o755); err != nil {
				t.Fatal(err)
			}
			got := paths(collect(t, ch, 4, 200*time.Millisecond))
			want := []string{"created a/b/c/f0", "created a/b/c/f1", "created a/b/c/f2", "created a/top"}
			if fmt.Sprint(got) != fmt.Sprint(want) {
				t.Fatalf("events %v, want %v (folders are never reported)", got, want)
			}
			// The new deep folder is watched now.
			write(t, root, "a/b/c/later", "y")
			until(t, ch, sandbox.Created, "a/b/c/later")
		})
	}
}

func paths(evs []sandbox.FileEvent) []string {
	var out []string
	for _, e := range evs {
		out = append(out, string(e.Op)+" "+e.Path)
	}
	sort.Strings(out)
	return out
}

func TestMovedAndRemovedFolders(t *testing.T) {
	for name, opts := range modes(t) {
		t.Run(name, func(t *testing.T) {
			root := t.TempDir()
			write(t, root, "old/sub/f", "1")
			write(t, root, "gone/g", "2")
			outside := t.TempDir()
			write(t, outside, "in/h", "3")
			_, ch := start(t, root, opts)

			if err := os.Rename(filepath.Join(root, "old"), filepath.Join(root, "new")); err != nil {
				t.Fatal(err)
			}
			if err := os.RemoveAll(filepath.Join(root, "gone")); err != nil {
				t.Fatal(err)
			}
			if err := os.Rename(filepath.Join(outside, "in"), filepath.Join(root, "in")); err != nil {
				t.Fatal(err)
			}
			got := paths(collect(t, ch, 4, 200*time.Millisecond))
			want := []string{"created in/h", "created new/sub/f", "deleted gone/g", "deleted old/sub/f"}
			if fmt.Sprint(got) != fmt.Sprint(want) {
				t.Fatalf("events %v, want %v", got, want)
			}
			// Writes under the moved folder are reported under its new
			// name, not the stale one.
			write(t, root, "new/sub/f", "changed")
			e := last(until(t, ch, sandbox.Modified, "new/sub/f"))
			if e.SHA256 != sum([]byte("changed")) {
				t.Fatalf("event %+v", e)
			}
		})
	}
}

func TestIgnoredPaths(t *testing.T) {
	for name, opts := range modes(t) {
		t.Run(name, func(t *testing.T) {
			root := t.TempDir()
			opts.Ignore = DefaultIgnore
			write(t, root, ".git/HEAD", "ref")
			w, ch := start(t, root, opts)
			write(t, root, ".git/objects/ab/cdef", "blob")
			write(t, root, "node_modules/pkg/index.js", "x")
			write(t, root, "sub/node_modules/p/i.js", "x")
			write(t, root, ".claude/projects/-w/s.jsonl", "{}")
			write(t, root, ".claude/settings.json", "{}")
			got := paths(collect(t, ch, 1, 200*time.Millisecond))
			if fmt.Sprint(got) != "[created .claude/settings.json]" {
				t.Fatalf("events %v", got)
			}
			if !opts.Poll {
				// Ignored folders get no inotify watch.
				w.Close()
				for d := range w.dirs {
					if w.ignore.Match(d) {
						t.Errorf("ignored folder %s is watched", d)
					}
				}
			}
		})
	}
}

// A burst of writes to one file is coalesced (one event, unless the writer
// was descheduled for longer than Debounce), the last carrying the final
// content.
func TestBurstCoalesced(t *testing.T) {
	root := t.TempDir()
	_, ch := start(t, root, Options{Debounce: 50 * time.Millisecond, MaxDelay: time.Minute})
	p := filepath.Join(root, "burst.log")
	f, err := os.Create(p)
	if err != nil {
		t.Fatal(err)
	}
	var content []byte
	for i := range 1000 {
		line := fmt.Appendf(nil, "line %d\n", i)
		content = append(content, line...)
		if _, err := f.Write(line); err != nil {
			t.Fatal(err)
		}
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	got := collect(t, ch, 1, 300*time.Millisecond)
	for e := last(got); e.Size != int64(len(content)); e = last(got) {
		got = append(got, collect(t, ch, 1, 0)...) // the rest of a split burst
	}
	if len(got) > 5 {
		t.Fatalf("%d events for a 1000-write burst: %+v", len(got), got)
	}
	if got[0].Op != sandbox.Created {
		t.Fatalf("first event %+v", got[0])
	}
	e := last(got)
	if e.Size != int64(len(content)) || e.SHA256 != sum(content) {
		t.Fatalf("final event %+v does not carry the final content (%d bytes)", e, len(content))
	}
}

// A file written without pause is still reported within MaxDelay.
func TestMaxDelay(t *testing.T) {
	root := t.TempDir()
	_, ch := start(t, root, Options{Debounce: 30 * time.Millisecond, MaxDelay: 100 * time.Millisecond})
	f, err := os.Create(filepath.Join(root, "grow"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	stop := time.After(600 * time.Millisecond)
	n := 0
	ticker := time.NewTicker(5 * time.Millisecond)
	defer ticker.Stop()
loop:
	for {
		select {
		case <-stop:
			break loop
		case <-ticker.C:
			fmt.Fprintln(f, "x")
		case <-ch:
			n++
		}
	}
	if n < 2 {
		t.Fatalf("%d events while writing continuously for 600ms with MaxDelay 100ms", n)
	}
}

// Running out of inotify watches (ENOSPC) switches to polling without
// losing changes.
func TestFallbackOnENOSPC(t *testing.T) {
	root := t.TempDir()
	write(t, root, "d1/f", "1")
	adds := 0
	opts := Options{
		PollInterval: 20 * time.Millisecond,
		failAdd: func(p string) error {
			adds++
			if adds > 1 {
				return fmt.Errorf("inotify_add_watch: %w", syscall.ENOSPC)
			}
			return nil
		},
	}
	w, ch := start(t, root, opts)
	if !w.Polling() {
		t.Fatal("not polling after ENOSPC")
	}
	write(t, root, "d1/g", "2")
	write(t, root, "d1/f", "changed")
	got := paths(collect(t, ch, 2, 200*time.Millisecond))
	if fmt.Sprint(got) != "[created d1/g modified d1/f]" {
		t.Fatalf("events %v", got)
	}
}

func TestSubscribers(t *testing.T) {
	root := t.TempDir()
	w, err := New(root, Options{Debounce: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	ctx1, cancel1 := context.WithCancel(t.Context())
	ch1 := w.Subscribe(ctx1)
	ch2 := w.Subscribe(t.Context())
	write(t, root, "x", "1")
	until(t, ch1, sandbox.Created, "x")
	until(t, ch2, sandbox.Created, "x")

	cancel1()
	for range ch1 { // must close
	}
	write(t, root, "y", "1")
	until(t, ch2, sandbox.Created, "y")

	// Closing the watcher closes the remaining channels; later
	// subscriptions get a closed channel.
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	for range ch2 {
	}
	if _, ok := <-w.Subscribe(t.Context()); ok {
		t.Fatal("subscription after Close delivered an event")
	}
	if err := w.Close(); err != nil {
		t.Fatal("second Close:", err)
	}
}

// A consumer that reads nothing must not stall the watcher for others.
func TestSlowSubscriberDoesNotBlock(t *testing.T) {
	root := t.TempDir()
	w, ch := start(t, root, Options{Debounce: 5 * time.Millisecond, Buffer: 1})
	_ = w.Subscribe(t.Context()) // never read
	for i := range 50 {
		write(t, root, fmt.Sprintf("f%02d", i), "x")
	}
	got := collect(t, ch, 50, 200*time.Millisecond)
	if len(got) != 50 {
		t.Fatalf("reader got %d of 50 events", len(got))
	}
}

func TestNewErrors(t *testing.T) {
	if _, err := New(filepath.Join(t.TempDir(), "missing"), Options{}); err == nil {
		t.Fatal("New on a missing folder succeeded")
	}
	f := filepath.Join(t.TempDir(), "file")
	write(t, filepath.Dir(f), "file", "")
	if _, err := New(f, Options{}); err == nil {
		t.Fatal("New on a file succeeded")
	}
}

// A FIFO or a symlink in the tree is not a file and must not stall hashing.
func TestSpecialFilesSkipped(t *testing.T) {
	for name, opts := range modes(t) {
		t.Run(name, func(t *testing.T) {
			root := t.TempDir()
			_, ch := start(t, root, opts)
			if err := syscall.Mkfifo(filepath.Join(root, "fifo"), 0o644); err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink("/dev/zero", filepath.Join(root, "zero")); err != nil {
				t.Fatal(err)
			}
			write(t, root, "after", "1")
			got := paths(collect(t, ch, 1, 200*time.Millisecond))
			if fmt.Sprint(got) != "[created after]" {
				t.Fatalf("events %v", got)
			}
		})
	}
}
