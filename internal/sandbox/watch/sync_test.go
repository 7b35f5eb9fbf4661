package watch

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/agentd/agentd/sandbox"
)

// untilMarker reads ch up to the Sync marker id and returns what came
// before it (ops and paths).
func untilMarker(t *testing.T, ch <-chan sandbox.FileEvent, id string) []string {
	t.Helper()
	var got []string
	deadline := time.After(waitLimit)
	for {
		select {
		case e, ok := <-ch:
			if !ok {
				t.Fatalf("channel closed before marker %s, after %q", id, got)
			}
			if e.Op == sandbox.Sync {
				if e.Path != id {
					t.Fatalf("marker %q, want %q", e.Path, id)
				}
				slices.Sort(got)
				return got
			}
			got = append(got, string(e.Op)+" "+e.Path)
		case <-deadline:
			t.Fatalf("no marker %s; got %q", id, got)
		}
	}
}

// Sync reports the changes made before it at once, whatever the debounce
// and the polling interval, and then its marker, on every subscriber.
func TestSync(t *testing.T) {
	all := modes(t)
	// No temporary folder for the barrier: Sync compares the whole tree.
	if haveInotify {
		all["inotify-no-barrier"] = all["inotify"]
	}
	for name, opts := range all {
		t.Run(name, func(t *testing.T) {
			if name == "inotify-no-barrier" {
				t.Setenv("TMPDIR", filepath.Join(t.TempDir(), "missing"))
				if in, _ := Active(); in != 0 {
					t.Fatalf("%d inotify watchers open: the shared instance may have its barrier already", in)
				}
			}
			root := t.TempDir()
			write(t, root, "old.txt", "old")
			write(t, root, "gone.txt", "gone")
			opts.Debounce, opts.MaxDelay, opts.PollInterval = time.Hour, time.Hour, time.Hour
			w, ch := start(t, root, opts)
			ch2 := w.Subscribe(t.Context())

			write(t, root, "new.txt", "new")
			write(t, root, "dir/deep/file.txt", "deep")
			if err := os.WriteFile(filepath.Join(root, "old.txt"), []byte("changed"), 0o644); err != nil {
				t.Fatal(err)
			}
			if err := os.Remove(filepath.Join(root, "gone.txt")); err != nil {
				t.Fatal(err)
			}
			if err := w.Sync(t.Context(), "m1"); err != nil {
				t.Fatal(err)
			}
			want := []string{"created dir/deep/file.txt", "created new.txt", "deleted gone.txt", "modified old.txt"}
			for i, c := range []<-chan sandbox.FileEvent{ch, ch2} {
				if got := untilMarker(t, c, "m1"); !slices.Equal(got, want) {
					t.Fatalf("subscriber %d before the marker: %q, want %q", i+1, got, want)
				}
			}
			// Nothing is reported twice when the debounced events come due:
			// a second sync finds nothing new.
			if err := w.Sync(t.Context(), "m2"); err != nil {
				t.Fatal(err)
			}
			if got := untilMarker(t, ch, "m2"); len(got) != 0 {
				t.Fatalf("second sync reported %q", got)
			}
		})
	}
}

// Many changes right before Sync, with a reader that has not read: all of
// them come before the marker (inotify events not yet routed are found by
// the comparison of the tree).
func TestSyncBurst(t *testing.T) {
	root := t.TempDir()
	w, ch := start(t, root, Options{Debounce: time.Hour, MaxDelay: time.Hour})
	var want []string
	for i := range 300 {
		p := filepath.Join("d", string(rune('a'+i%26)), "f"+string(rune('0'+i%10))+string(rune('a'+i/10)))
		if err := os.MkdirAll(filepath.Join(root, filepath.Dir(p)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(root, p), []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
		want = append(want, "created "+p)
	}
	if err := w.Sync(t.Context(), "m"); err != nil {
		t.Fatal(err)
	}
	slices.Sort(want)
	if got := untilMarker(t, ch, "m"); !slices.Equal(got, want) {
		t.Fatalf("before the marker %d events, want %d", len(got), len(want))
	}
}

func TestSyncAfterClose(t *testing.T) {
	w, _ := start(t, t.TempDir(), Options{})
	w.Close()
	if err := w.Sync(t.Context(), "m"); !errors.Is(err, ErrClosed) {
		t.Fatalf("Sync after Close: %v", err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	w2, _ := start(t, t.TempDir(), Options{})
	if err := w2.Sync(ctx, "m"); err != nil && !errors.Is(err, context.Canceled) {
		t.Fatalf("Sync with an ended context: %v", err)
	}
}
