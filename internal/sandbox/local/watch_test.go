package local

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/agentd/agentd/internal/sandbox/watch"
	"github.com/agentd/agentd/sandbox"
)

// events reads n events (generously bounded: the machine may be loaded),
// then more until none arrived for quiet; sorted as "op path", and the last
// event per path.
func events(t *testing.T, ch <-chan sandbox.FileEvent, n int, quiet time.Duration) ([]string, map[string]sandbox.FileEvent) {
	t.Helper()
	var out []string
	last := map[string]sandbox.FileEvent{}
	limit := time.After(10 * time.Second)
	for {
		wait := time.After(quiet)
		if len(out) < n {
			wait = limit
		}
		select {
		case e, ok := <-ch:
			if !ok {
				sort.Strings(out)
				return out, last
			}
			out = append(out, string(e.Op)+" "+e.Path)
			last[e.Path] = e
		case <-wait:
			sort.Strings(out)
			return out, last
		}
	}
}

func hexSum(s string) string {
	h := sha256.Sum256([]byte(s))
	return hex.EncodeToString(h[:])
}

func TestWatch(t *testing.T) {
	for _, poll := range []bool{false, true} {
		t.Run(fmt.Sprintf("poll=%v", poll), func(t *testing.T) {
			env := testEnv(t, Options{Watch: watch.Options{
				Debounce: 20 * time.Millisecond, Poll: poll, PollInterval: 30 * time.Millisecond,
			}})
			ctx := t.Context()
			if err := env.WriteFile(ctx, "before.txt", []byte("baseline"), 0); err != nil {
				t.Fatal(err)
			}
			ch, err := env.Watch(ctx)
			if err != nil {
				t.Fatal(err)
			}
			ch2, err := env.Watch(ctx)
			if err != nil {
				t.Fatal(err)
			}
			// Writes through the API are atomic renames: one event per
			// file, never the temporary name.
			if err := env.WriteFile(ctx, "a.txt", []byte("one"), 0); err != nil {
				t.Fatal(err)
			}
			if err := env.WriteFile(ctx, "empty", nil, 0); err != nil {
				t.Fatal(err)
			}
			if err := env.WriteFiles(ctx, []sandbox.File{{Path: "new/deep/x", Content: []byte("x")}, {Path: "new/y"}}); err != nil {
				t.Fatal(err)
			}
			if err := env.WriteFile(ctx, "node_modules/p/i.js", []byte("x"), 0); err != nil {
				t.Fatal(err)
			}
			got, last := events(t, ch, 4, 200*time.Millisecond)
			want := "created a.txt,created empty,created new/deep/x,created new/y"
			if strings.Join(got, ",") != want {
				t.Fatalf("events %v, want %s", got, want)
			}
			if e := last["a.txt"]; e.Size != 3 || e.SHA256 != hexSum("one") {
				t.Fatalf("a.txt event %+v", e)
			}
			if e := last["empty"]; e.Size != 0 || e.SHA256 != hexSum("") {
				t.Fatalf("empty file event %+v", e)
			}
			if got2, _ := events(t, ch2, 4, 100*time.Millisecond); strings.Join(got2, ",") != want {
				t.Fatalf("second watcher got %v", got2)
			}

			// Changes made by a process in the environment.
			run(t, env, sh(`echo two >> a.txt; rm before.txt; mkdir -p made/here && : > made/here/f`))
			got, last = events(t, ch, 3, 200*time.Millisecond)
			if strings.Join(got, ",") != "created made/here/f,deleted before.txt,modified a.txt" {
				t.Fatalf("events %v", got)
			}
			if e := last["a.txt"]; e.SHA256 != hexSum("one"+"two\n") {
				t.Fatalf("modified event %+v", e)
			}
			events(t, ch2, 3, 50*time.Millisecond)

			// Terminate closes every watch channel.
			if err := env.Terminate(context.Background()); err != nil {
				t.Fatal(err)
			}
			for range ch {
			}
			for range ch2 {
			}
		})
	}
}

func TestWatchContext(t *testing.T) {
	env := testEnv(t, Options{})
	ctx, cancel := context.WithCancel(t.Context())
	ch, err := env.Watch(ctx)
	if err != nil {
		t.Fatal(err)
	}
	cancel()
	for range ch { // closes
	}
	if _, err := env.Watch(ctx); err == nil {
		t.Fatal("Watch with a cancelled ctx succeeded")
	}
	// The environment's watcher still serves new calls.
	ch, err = env.Watch(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(env.WorkDir(), "f"), []byte("1"), 0o644); err != nil {
		t.Fatal(err)
	}
	if got, _ := events(t, ch, 1, 200*time.Millisecond); strings.Join(got, ",") != "created f" {
		t.Fatalf("events %v", got)
	}
}

// Spec.Ignore adds to the provider's list; an empty provider list ignores
// only what the spec says.
func TestIgnoreLists(t *testing.T) {
	p := New(Options{Ignore: []string{}})
	e, err := p.Create(t.Context(), sandbox.Spec{Workspace: t.TempDir(), Ignore: []string{"dist"}})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Terminate(context.Background())
	for _, f := range []string{".git/HEAD", "dist/x.js", "src/x.go"} {
		if err := e.WriteFile(t.Context(), f, nil, 0); err != nil {
			t.Fatal(err)
		}
	}
	list, err := e.List(t.Context(), "", true)
	if err != nil {
		t.Fatal(err)
	}
	if got := paths(list); got != ".git/ .git/HEAD src/ src/x.go" {
		t.Fatalf("listing %s", got)
	}
}

// Environments share the process's inotify instance: each hears only its
// own workspace, and terminating one leaves the other's watch working.
func TestWatchSharedBetweenEnvironments(t *testing.T) {
	opts := Options{Watch: watch.Options{Debounce: 20 * time.Millisecond}}
	a, b := testEnv(t, opts), testEnv(t, opts)
	ctx := t.Context()
	chA, err := a.Watch(ctx)
	if err != nil {
		t.Fatal(err)
	}
	chB, err := b.Watch(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if ino, poll := watch.Active(); ino != 2 || poll != 0 {
		t.Fatalf("watch.Active() = %d inotify, %d polling; want 2, 0", ino, poll)
	}
	if err := a.WriteFile(ctx, "only-a", []byte("a"), 0); err != nil {
		t.Fatal(err)
	}
	if err := b.WriteFile(ctx, "only-b", []byte("b"), 0); err != nil {
		t.Fatal(err)
	}
	if got, _ := events(t, chA, 1, 150*time.Millisecond); strings.Join(got, ",") != "created only-a" {
		t.Fatalf("a got %v", got)
	}
	if got, _ := events(t, chB, 1, 150*time.Millisecond); strings.Join(got, ",") != "created only-b" {
		t.Fatalf("b got %v", got)
	}

	if err := a.Terminate(context.Background()); err != nil {
		t.Fatal(err)
	}
	for range chA {
	}
	run(t, b, sh(`echo x > after`))
	if got, _ := events(t, chB, 1, 150*time.Millisecond); strings.Join(got, ",") != "created after" {
		t.Fatalf("b after a's Terminate got %v", got)
	}
	if ino, _ := watch.Active(); ino != 1 {
		t.Fatalf("%d inotify watchers after one Terminate, want 1", ino)
	}
}

// SyncWatch: with no watch open it has nothing to do; with one, the
// changes before it come before its marker; after Terminate it says so.
func TestSyncWatch(t *testing.T) {
	env := testEnv(t, Options{Watch: watch.Options{Debounce: time.Hour, MaxDelay: time.Hour}})
	if err := env.SyncWatch(t.Context(), "none"); err != nil {
		t.Fatalf("SyncWatch without a watch: %v", err)
	}
	ch, err := env.Watch(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if err := env.WriteFile(t.Context(), "a.txt", []byte("a"), 0); err != nil {
		t.Fatal(err)
	}
	if err := env.SyncWatch(t.Context(), "m"); err != nil {
		t.Fatal(err)
	}
	if e := <-ch; e.Op != sandbox.Created || e.Path != "a.txt" {
		t.Fatalf("first event %+v", e)
	}
	if e := <-ch; e.Op != sandbox.Sync || e.Path != "m" {
		t.Fatalf("second event %+v, want the marker", e)
	}
	if err := env.Terminate(t.Context()); err != nil {
		t.Fatal(err)
	}
	if err := env.SyncWatch(t.Context(), "late"); !errors.Is(err, sandbox.ErrTerminated) {
		t.Fatalf("SyncWatch after Terminate: %v", err)
	}
}
