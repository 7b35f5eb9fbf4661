package watch

import (
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/agentd/agentd/sandbox"
)

// haveInotify: the watch tests run in inotify mode too.
const haveInotify = true

// inotifyFDs counts this process's open inotify descriptors.
func inotifyFDs(t *testing.T) int {
	t.Helper()
	fds, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Skip("no /proc/self/fd:", err)
	}
	n := 0
	for _, fd := range fds {
		if target, err := os.Readlink("/proc/self/fd/" + fd.Name()); err == nil && target == "anon_inode:inotify" {
			n++
		}
	}
	return n
}

// quiet fails if ch delivers anything within d.
func quiet(t *testing.T, name string, ch <-chan sandbox.FileEvent, d time.Duration) {
	t.Helper()
	for _, e := range collect(t, ch, 0, d) {
		t.Errorf("%s got an event that is not its own: %+v", name, e)
	}
}

func checkActive(t *testing.T, inotify, polling int) {
	t.Helper()
	if i, p := Active(); i != inotify || p != polling {
		t.Fatalf("Active() = %d inotify, %d polling; want %d, %d", i, p, inotify, polling)
	}
}

// Several watchers share one inotify instance; each hears only its own
// tree, and closing one leaves the others working.
func TestSharedInstance(t *testing.T) {
	if n := inotifyFDs(t); n != 0 {
		t.Fatalf("%d inotify instances open before the test", n)
	}
	opts := Options{Debounce: 10 * time.Millisecond}
	var ws []*Watcher
	var chs []<-chan sandbox.FileEvent
	var roots []string
	for range 3 {
		root := t.TempDir()
		w, ch := start(t, root, opts)
		ws, chs, roots = append(ws, w), append(chs, ch), append(roots, root)
	}
	if n := inotifyFDs(t); n != 1 {
		t.Fatalf("%d inotify instances for 3 watchers, want 1", n)
	}
	checkActive(t, 3, 0)
	for i, root := range roots {
		write(t, root, fmt.Sprintf("sub/only-%d", i), "x")
	}
	for i, ch := range chs {
		got := paths(collect(t, ch, 1, 150*time.Millisecond))
		if want := fmt.Sprintf("[created sub/only-%d]", i); fmt.Sprint(got) != want {
			t.Fatalf("watcher %d: events %v, want %s", i, got, want)
		}
	}

	// Closing one (an environment's Terminate) ends its channel only.
	if err := ws[0].Close(); err != nil {
		t.Fatal(err)
	}
	for range chs[0] {
	}
	checkActive(t, 2, 0)
	write(t, roots[0], "sub/after-close", "x")
	write(t, roots[1], "sub/after-close", "x")
	until(t, chs[1], sandbox.Created, "sub/after-close")
	quiet(t, "watcher 2", chs[2], 100*time.Millisecond)
	if n := inotifyFDs(t); n != 1 {
		t.Fatalf("%d inotify instances after closing one watcher, want 1", n)
	}
	// Its watches are gone from the instance.
	in := ws[1].instance()
	in.mu.Lock()
	for wd, refs := range in.wds {
		for _, r := range refs {
			if r.w == ws[0] {
				t.Errorf("closed watcher still holds watch %d (%s)", wd, r.rel)
			}
		}
	}
	in.mu.Unlock()

	// The last Close closes the instance.
	ws[1].Close()
	ws[2].Close()
	if n := inotifyFDs(t); n != 0 {
		t.Fatalf("%d inotify instances after every watcher closed", n)
	}
	checkActive(t, 0, 0)
	// A new watcher opens a new one.
	_, ch := start(t, roots[1], opts)
	write(t, roots[1], "again", "x")
	until(t, ch, sandbox.Created, "again")
}

func (w *Watcher) instance() *inotify {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.in
}

// Roots may overlap (a workspace inside another, two sessions on the same
// workspace): each watcher gets the events of its own tree, named relative
// to its root, and closing one keeps the shared kernel watches of the
// others.
func TestOverlappingRoots(t *testing.T) {
	outer := t.TempDir()
	inner := filepath.Join(outer, "sub")
	write(t, outer, "sub/keep", "1")
	opts := Options{Debounce: 10 * time.Millisecond}
	a, chA := start(t, outer, opts)
	b, chB := start(t, inner, opts)
	c, chC := start(t, outer, opts)
	// settle returns once every watcher has handled the events of the
	// changes made before (Sync: a barrier through the shared inotify
	// queue, then the worker handles what came before it): a new folder
	// is then watched.
	settle := func(id string) {
		t.Helper()
		for _, w := range []*Watcher{a, b, c} {
			if err := w.Sync(t.Context(), id); err != nil {
				t.Fatal(err)
			}
		}
	}

	write(t, outer, "sub/f", "x")
	for name, ch := range map[string]<-chan sandbox.FileEvent{"outer": chA, "same": chC} {
		if got := paths(collect(t, ch, 1, 100*time.Millisecond)); fmt.Sprint(got) != "[created sub/f]" {
			t.Fatalf("%s root: events %v", name, got)
		}
	}
	if got := paths(collect(t, chB, 1, 100*time.Millisecond)); fmt.Sprint(got) != "[created f]" {
		t.Fatalf("inner root: events %v", got)
	}

	write(t, outer, "top", "x")
	until(t, chA, sandbox.Created, "top")
	until(t, chC, sandbox.Created, "top")
	quiet(t, "inner root", chB, 100*time.Millisecond)

	// A folder moved inside the shared part is followed by everyone.
	if err := os.MkdirAll(filepath.Join(inner, "d"), 0o755); err != nil {
		t.Fatal(err)
	}
	settle("mkdir") // the new folder is watched
	if err := os.Rename(filepath.Join(inner, "d"), filepath.Join(inner, "e")); err != nil {
		t.Fatal(err)
	}
	settle("rename")
	write(t, inner, "e/g", "x")
	until(t, chA, sandbox.Created, "sub/e/g")
	until(t, chB, sandbox.Created, "e/g")
	until(t, chC, sandbox.Created, "sub/e/g")

	// Closing one watcher of the same root keeps the kernel watches the
	// others share.
	a.Close()
	write(t, outer, "sub/h", "x")
	until(t, chC, sandbox.Created, "sub/h")
	until(t, chB, sandbox.Created, "h")
	c.Close()
	write(t, outer, "sub/i", "x")
	until(t, chB, sandbox.Created, "i")
}

// One watcher out of inotify watches (ENOSPC) polls; the others keep
// inotify.
func TestFallbackOneWatcher(t *testing.T) {
	good, chGood := start(t, t.TempDir(), Options{Debounce: 10 * time.Millisecond})
	rootBad := t.TempDir()
	write(t, rootBad, "d/f", "1")
	bad, chBad := start(t, rootBad, Options{
		Debounce: 10 * time.Millisecond, PollInterval: 20 * time.Millisecond,
		failAdd: func(p string) error {
			if filepath.Base(p) == "d" {
				return fmt.Errorf("inotify_add_watch: %w", syscall.ENOSPC)
			}
			return nil
		},
	})
	if !bad.Polling() || good.Polling() {
		t.Fatalf("Polling(): ENOSPC watcher %v, other %v", bad.Polling(), good.Polling())
	}
	checkActive(t, 1, 1)
	if in := bad.instance(); in != nil {
		t.Fatal("a polling watcher still holds the inotify instance")
	}
	write(t, rootBad, "d/g", "2")
	until(t, chBad, sandbox.Created, "d/g")
	write(t, good.root, "x", "1")
	until(t, chGood, sandbox.Created, "x")
	quiet(t, "inotify watcher", chGood, 100*time.Millisecond)
}

// When no inotify instance can be opened (max_user_instances reached by
// other processes), New polls; once one can be, new watchers use it.
func TestInstanceLimit(t *testing.T) {
	orig := inotifyInit
	inotifyInit = func() (int, error) { return -1, unix.EMFILE }
	w, ch := start(t, t.TempDir(), Options{PollInterval: 20 * time.Millisecond})
	inotifyInit = orig
	if !w.Polling() {
		t.Fatal("not polling without an inotify instance")
	}
	checkActive(t, 0, 1)
	write(t, w.root, "f", "1")
	until(t, ch, sandbox.Created, "f")

	w2, ch2 := start(t, t.TempDir(), Options{Debounce: 10 * time.Millisecond})
	if w2.Polling() {
		t.Fatal("polling although inotify is available again")
	}
	checkActive(t, 1, 1)
	write(t, w2.root, "g", "1")
	until(t, ch2, sandbox.Created, "g")
	w.Close()
	checkActive(t, 1, 0)
}

// Lost events (kernel queue overflow, or a worker far behind) lead to a
// rescan that reports what was missed and renews the watches without
// duplicating them.
func TestLostEventsRescan(t *testing.T) {
	root := t.TempDir()
	write(t, root, "a/missed", "1")
	w, ch := start(t, root, Options{Debounce: 10 * time.Millisecond})
	// Pretend the creation of a/missed was never heard of.
	w.mu.Lock()
	delete(w.known, "a/missed")
	w.mu.Unlock()
	w.deliver(rawEvent{kind: kindRescan})
	until(t, ch, sandbox.Created, "a/missed")

	// An overrun inbox is dropped for a rescan too. Holding mu stops the
	// worker after it took at most one batch (of at most maxInbox events),
	// so at least maxInbox+2 events meet a full inbox; none of them names
	// a/missed, only a rescan finds it.
	w.mu.Lock()
	delete(w.known, "a/missed")
	for range 2*maxInbox + 2 {
		w.deliver(rawEvent{rel: "nothing", kind: kindChange})
	}
	w.inMu.Lock()
	n := len(w.inbox)
	w.inMu.Unlock()
	w.mu.Unlock()
	if n > maxInbox {
		t.Fatalf("inbox holds %d events, bound %d", n, maxInbox)
	}
	until(t, ch, sandbox.Created, "a/missed")

	in := w.instance()
	in.mu.Lock()
	refs := 0
	for _, rs := range in.wds {
		for _, r := range rs {
			if r.w == w {
				refs++
			}
		}
	}
	in.mu.Unlock()
	if refs != 2 { // the root and a
		t.Fatalf("%d watches after rescans, want 2", refs)
	}
	write(t, root, "a/later", "2")
	until(t, ch, sandbox.Created, "a/later")
}

// An idle watcher has no goroutine: only the shared reader runs.
func TestIdleWatchersHaveNoGoroutine(t *testing.T) {
	before := runtime.NumGoroutine()
	for range 20 {
		w, _ := start(t, t.TempDir(), Options{Debounce: 5 * time.Millisecond})
		write(t, w.root, "f", "x") // some work first, then idle
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		// The reader, and the ctx watch of nothing: Subscribe's AfterFunc
		// starts no goroutine until ctx ends.
		n := runtime.NumGoroutine() - before
		if n <= 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("20 idle watchers hold %d goroutines, want 1 (the shared reader)", n)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Watchers opened and closed concurrently, with writes going on: no race,
// no leak (goleak in TestMain), every one hears its own file.
func TestConcurrentWatchers(t *testing.T) {
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for i := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			root := t.TempDir()
			w, err := New(root, Options{Debounce: 5 * time.Millisecond})
			if err != nil {
				errs <- err
				return
			}
			defer w.Close()
			ch := w.Subscribe(t.Context())
			name := fmt.Sprintf("f%d", i)
			if err := os.WriteFile(filepath.Join(root, name), []byte("x"), 0o644); err != nil {
				errs <- err
				return
			}
			for {
				select {
				case e := <-ch:
					if e.Path != name {
						errs <- fmt.Errorf("watcher %d got %+v", i, e)
						return
					}
					return
				case <-time.After(waitLimit):
					errs <- fmt.Errorf("watcher %d: no event", i)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

// event encodes one inotify event as the kernel does.
func event(wd int32, mask uint32, name string) []byte {
	n := 0
	if name != "" {
		n = (len(name) + 1 + 15) / 16 * 16 // NUL-terminated, padded
	}
	b := make([]byte, unix.SizeofInotifyEvent+n)
	binary.NativeEndian.PutUint32(b[0:], uint32(wd))
	binary.NativeEndian.PutUint32(b[4:], mask)
	binary.NativeEndian.PutUint32(b[12:], uint32(n))
	copy(b[unix.SizeofInotifyEvent:], name)
	return b
}

func TestRoute(t *testing.T) {
	w1, w2 := &Watcher{}, &Watcher{}
	in := &inotify{
		users: map[*Watcher]struct{}{w1: {}, w2: {}},
		wds: map[int32][]watchRef{
			1: {{w: w1, rel: "."}},
			2: {{w: w1, rel: "sub"}, {w: w2, rel: "."}},
		},
	}
	var buf []byte
	buf = append(buf, event(1, unix.IN_CREATE, "a")...)
	buf = append(buf, event(2, unix.IN_CREATE|unix.IN_ISDIR, "dir")...)
	buf = append(buf, event(2, unix.IN_MODIFY, "long-name-of-a-file")...)
	buf = append(buf, event(1, unix.IN_MOVED_FROM, "b")...)
	buf = append(buf, event(2, unix.IN_DELETE, "c")...)
	buf = append(buf, event(3, unix.IN_CREATE, "unknown-wd")...)
	buf = append(buf, event(1, unix.IN_ATTRIB, "")...)       // about the folder itself
	buf = append(buf, event(2, unix.IN_CLOSE_WRITE, "x")...) // not asked for
	buf = append(buf, event(1, unix.IN_IGNORED, "")...)
	got := in.route(buf, nil)
	want := []delivery{
		{w: w1, ev: rawEvent{rel: "a", kind: kindCreate}},
		{w: w1, ev: rawEvent{rel: "sub/dir", kind: kindCreate, dir: true}},
		{w: w2, ev: rawEvent{rel: "dir", kind: kindCreate, dir: true}},
		{w: w1, ev: rawEvent{rel: "sub/long-name-of-a-file", kind: kindChange}},
		{w: w2, ev: rawEvent{rel: "long-name-of-a-file", kind: kindChange}},
		{w: w1, ev: rawEvent{rel: "b", kind: kindRemove}},
		{w: w1, ev: rawEvent{rel: "sub/c", kind: kindRemove}},
		{w: w2, ev: rawEvent{rel: "c", kind: kindRemove}},
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("route:\n got %v\nwant %v", got, want)
	}
	if _, ok := in.wds[1]; ok {
		t.Fatal("IN_IGNORED did not forget the watch")
	}
	// An overflow reaches every user, once.
	got = in.route(append(event(-1, unix.IN_Q_OVERFLOW, ""), event(-1, unix.IN_Q_OVERFLOW, "")...), nil)
	if len(got) != 2 || got[0].ev.kind != kindRescan || got[1].ev.kind != kindRescan || got[0].w == got[1].w {
		t.Fatalf("overflow deliveries %v", got)
	}
	// A truncated buffer is not read past its end.
	if got := in.route(event(2, unix.IN_CREATE, "abc")[:unix.SizeofInotifyEvent+2], nil); len(got) != 2 || got[0].ev.rel != "sub/ab" {
		t.Fatalf("truncated event: %v", got)
	}
}

// FuzzRoute: whatever the bytes, routing neither panics nor produces an
// event with an empty or dotted name.
func FuzzRoute(f *testing.F) {
	f.Add(event(1, unix.IN_CREATE, "a"))
	f.Add(append(event(1, unix.IN_MOVED_TO|unix.IN_ISDIR, "dir"), event(-1, unix.IN_Q_OVERFLOW, "")...))
	f.Add([]byte{1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 255, 255, 255, 255})
	f.Fuzz(func(t *testing.T, buf []byte) {
		w := &Watcher{}
		in := &inotify{
			users: map[*Watcher]struct{}{w: {}},
			wds:   map[int32][]watchRef{1: {{w: w, rel: "."}}, 2: {{w: w, rel: "sub"}}},
		}
		for _, d := range in.route(buf, nil) {
			if d.ev.kind != kindRescan && (d.ev.rel == "" || d.ev.rel == "sub/") {
				t.Fatalf("delivery without a name: %+v", d)
			}
		}
	})
}

// The barrier's folder removed from under it (a temporary files cleaner):
// Sync still reports everything, and the next barrier makes a new folder.
func TestSyncBarrierFolderRemoved(t *testing.T) {
	root := t.TempDir()
	w, ch := start(t, root, Options{Debounce: time.Hour, MaxDelay: time.Hour})
	if err := w.Sync(t.Context(), "m0"); err != nil {
		t.Fatal(err)
	}
	untilMarker(t, ch, "m0")
	w.mu.Lock()
	in := w.in
	w.mu.Unlock()
	in.mu.Lock()
	dir := in.sync.dir
	in.mu.Unlock()
	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	for i, name := range []string{"a.txt", "b.txt"} {
		write(t, root, name, name)
		id := "m" + name
		if err := w.Sync(t.Context(), id); err != nil {
			t.Fatal(err)
		}
		if got := untilMarker(t, ch, id); !slices.Equal(got, []string{"created " + name}) {
			t.Fatalf("sync %d after the folder went: %q", i+1, got)
		}
	}
	in.mu.Lock()
	sp := in.sync
	in.mu.Unlock()
	if sp == nil || sp.dir == dir {
		t.Fatal("no new barrier folder")
	}
}
