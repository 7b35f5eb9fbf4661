package watch

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"sync"

	"golang.org/x/sys/unix"
)

// One inotify instance serves every Watcher of the process in inotify mode.
// An instance per watcher cost each one a reader goroutine (fsnotify's keeps
// a 64 KiB array on its stack) and ran into fs.inotify.max_user_instances
// (128 by default, per user), beyond which watchers silently fell back to
// polling. The shared instance exists while at least one watcher uses it:
// the first opens it, the last closes it and waits for its reader, so an
// idle process holds no inotify descriptor and no goroutine.

// watchMask is what every folder watch asks for. Events about the watched
// folder itself (IN_DELETE_SELF, IN_MOVE_SELF) are left out: its parent
// reports them by name, and a self event arriving after the folder was
// moved back would drop the fresh watch. IN_ONLYDIR and IN_DONT_FOLLOW keep
// a folder swapped for a symlink from being watched outside the tree.
const watchMask = unix.IN_CREATE | unix.IN_MOVED_TO | unix.IN_MOVED_FROM | unix.IN_DELETE |
	unix.IN_MODIFY | unix.IN_ATTRIB | unix.IN_ONLYDIR | unix.IN_DONT_FOLLOW

// readBuffer is the reader's buffer: room for at least 2,000 events per
// read(2), allocated once per instance, not per watcher.
const readBuffer = 64 << 10

// maxInbox bounds a watcher's undelivered inotify events (its worker is
// behind: a large tree being written). Beyond it they are dropped for one
// rescan, as after a kernel queue overflow.
const maxInbox = 4096

// inotifyInit opens an instance; tests replace it to simulate the
// per-user instance limit.
var inotifyInit = func() (int, error) { return unix.InotifyInit1(unix.IN_CLOEXEC | unix.IN_NONBLOCK) }

// shared is the process's current instance, nil when no watcher uses one.
var shared struct {
	mu sync.Mutex
	in *inotify
}

// watchRef is one watcher's interest in a kernel watch: the same folder may
// be watched by several watchers (overlapping roots, two sessions on one
// workspace), and the kernel gives them the same watch descriptor.
type watchRef struct {
	w   *Watcher
	rel string
}

// inotify is one inotify instance shared by watchers. Its methods are safe
// for concurrent use; the reader never blocks on a watcher (delivery appends
// to the watcher's inbox).
type inotify struct {
	file *os.File
	fd   int
	done chan struct{} // closed when the reader has exited

	mu     sync.Mutex
	users  map[*Watcher]struct{}
	wds    map[int32][]watchRef
	closed bool
	sync   *syncPoint // made by the first barrier; nil until then
}

// syncPoint is a folder of the instance's own (under the system's temporary
// folder), watched for created files. A file created there makes an event
// that the kernel queues after every event queued before it: once the reader
// has routed that event, every earlier one is in its watcher's inbox. That
// is the barrier Sync needs, at the cost of a file created and removed.
type syncPoint struct {
	dir     string
	wd      int32
	n       uint64
	waiting map[string]chan bool // by file name; true: routed, false: lost
}

// acquireInotify returns the shared instance, opening it if none is open,
// and counts w as one of its users.
func acquireInotify(w *Watcher) (*inotify, error) {
	shared.mu.Lock()
	defer shared.mu.Unlock()
	if shared.in == nil {
		fd, err := inotifyInit()
		if err != nil {
			return nil, fmt.Errorf("inotify_init: %w", err)
		}
		in := &inotify{
			file:  os.NewFile(uintptr(fd), "inotify"),
			fd:    fd,
			done:  make(chan struct{}),
			users: make(map[*Watcher]struct{}),
			wds:   make(map[int32][]watchRef),
		}
		go in.read()
		shared.in = in
	}
	in := shared.in
	in.mu.Lock()
	in.users[w] = struct{}{}
	in.mu.Unlock()
	return in, nil
}

// release removes every watch w holds and w from the users; the last user
// closes the instance and waits for its reader to exit.
func (in *inotify) release(w *Watcher) {
	shared.mu.Lock()
	in.mu.Lock()
	in.removeAllLocked(w)
	delete(in.users, w)
	last := len(in.users) == 0
	var sp *syncPoint
	if last {
		in.closed = true
		if shared.in == in {
			shared.in = nil
		}
		sp, in.sync = in.sync, nil
		sp.loseLocked()
	}
	in.mu.Unlock()
	shared.mu.Unlock()
	if last {
		_ = in.file.Close() // wakes the reader with os.ErrClosed
		<-in.done
		sp.remove()
	}
}

// barrier returns once every event the kernel queued for this instance
// before the call has been delivered to its watcher's inbox (see
// syncPoint). An error means no barrier could be made or it was lost (the
// instance closed, its folder removed): the caller must compare the whole
// tree instead.
func (in *inotify) barrier(ctx context.Context) error {
	in.mu.Lock()
	if in.closed {
		in.mu.Unlock()
		return os.ErrClosed
	}
	if in.sync == nil {
		sp, err := in.newSyncPointLocked()
		if err != nil {
			in.mu.Unlock()
			return err
		}
		in.sync = sp
	}
	sp := in.sync
	sp.n++
	name := strconv.FormatUint(sp.n, 10)
	done := make(chan bool, 1)
	sp.waiting[name] = done
	in.mu.Unlock()

	p := filepath.Join(sp.dir, name)
	f, err := os.OpenFile(p, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err == nil {
		_ = f.Close()
		_ = os.Remove(p) // IN_DELETE is not watched there
	}
	if err != nil {
		in.mu.Lock()
		delete(sp.waiting, name)
		in.mu.Unlock()
		return fmt.Errorf("inotify barrier: %w", err)
	}
	select {
	case ok := <-done:
		if !ok {
			return errors.New("inotify barrier lost")
		}
		return nil
	case <-ctx.Done():
		in.mu.Lock()
		delete(sp.waiting, name)
		in.mu.Unlock()
		return ctx.Err()
	}
}

func (in *inotify) newSyncPointLocked() (*syncPoint, error) {
	dir, err := os.MkdirTemp("", "agentd-watch-sync-")
	if err != nil {
		return nil, fmt.Errorf("inotify barrier: %w", err)
	}
	wd, err := unix.InotifyAddWatch(in.fd, dir, unix.IN_CREATE|unix.IN_ONLYDIR|unix.IN_DONT_FOLLOW)
	if err != nil {
		_ = os.Remove(dir)
		return nil, fmt.Errorf("inotify barrier: watch %s: %w", dir, err)
	}
	return &syncPoint{dir: dir, wd: int32(wd), waiting: make(map[string]chan bool)}, nil
}

// loseLocked answers every waiter "lost" (in.mu held: barriers that gave
// up remove themselves under it). sp may be nil. The sends do not block:
// each channel has room for its one answer.
func (sp *syncPoint) loseLocked() {
	if sp == nil {
		return
	}
	for name, ch := range sp.waiting {
		ch <- false
		delete(sp.waiting, name)
	}
}

// remove removes the folder once the instance no longer uses it. sp may be
// nil.
func (sp *syncPoint) remove() {
	if sp != nil {
		_ = os.RemoveAll(sp.dir)
	}
}

// add watches the folder at path for w, which knows it as rel, and returns
// the kernel's watch descriptor.
func (in *inotify) add(w *Watcher, rel, path string) (int32, error) {
	in.mu.Lock()
	defer in.mu.Unlock()
	if in.closed {
		return -1, os.ErrClosed
	}
	wd, err := unix.InotifyAddWatch(in.fd, path, watchMask)
	if err != nil {
		return -1, err
	}
	refs := in.wds[int32(wd)]
	for _, r := range refs {
		if r.w == w && r.rel == rel {
			return int32(wd), nil
		}
	}
	in.wds[int32(wd)] = append(refs, watchRef{w: w, rel: rel})
	return int32(wd), nil
}

// remove drops w's interest in wd under rel; the kernel watch goes with the
// last interest.
func (in *inotify) remove(w *Watcher, wd int32, rel string) {
	in.mu.Lock()
	defer in.mu.Unlock()
	in.removeLocked(w, wd, rel)
}

func (in *inotify) removeLocked(w *Watcher, wd int32, rel string) {
	refs := in.wds[wd]
	for i, r := range refs {
		if r.w == w && r.rel == rel {
			refs = append(refs[:i], refs[i+1:]...)
			break
		}
	}
	if len(refs) > 0 {
		in.wds[wd] = refs
		return
	}
	if _, ok := in.wds[wd]; ok {
		delete(in.wds, wd)
		// Fails harmlessly when the kernel dropped the watch already (the
		// folder is gone; its IN_IGNORED is on the way).
		_, _ = unix.InotifyRmWatch(in.fd, uint32(wd))
	}
}

func (in *inotify) removeAllLocked(w *Watcher) {
	for wd, refs := range in.wds {
		for _, r := range refs {
			if r.w == w {
				in.removeLocked(w, wd, r.rel)
			}
		}
	}
}

// deliver queues an inotify event; called by the shared reader.
func (w *Watcher) deliver(ev rawEvent) {
	w.post(func() {
		switch {
		case ev.kind == kindRescan:
			w.needRescan = true
		case len(w.inbox) >= maxInbox:
			// The worker is far behind: a rescan settles the lot.
			w.inbox = nil
			w.needRescan = true
		case !w.needRescan:
			w.inbox = append(w.inbox, ev)
		}
	})
}

// lose tells the watcher its inotify instance is gone.
func (w *Watcher) lose(err error) { w.post(func() { w.lost = err }) }

// delivery is one event bound for one watcher, or (w nil) a barrier to
// release once everything routed before it is delivered.
type delivery struct {
	w       *Watcher
	ev      rawEvent
	barrier chan bool
}

// read is the instance's one reader goroutine: it routes each event to
// every watcher interested in its folder. Routing happens under in.mu
// (against concurrent add and remove); delivery after it is released.
func (in *inotify) read() {
	defer close(in.done)
	buf := make([]byte, readBuffer)
	var out []delivery
	for {
		n, err := in.file.Read(buf)
		if err != nil {
			if errors.Is(err, os.ErrClosed) {
				return
			}
			if errors.Is(err, unix.EINTR) {
				continue
			}
			// Nothing more will come from this instance: new watchers
			// open another, and every user falls back to polling (each
			// logs why) and releases this one.
			shared.mu.Lock()
			if shared.in == in {
				shared.in = nil
			}
			shared.mu.Unlock()
			in.broadcast(func(w *Watcher) { w.lose(fmt.Errorf("inotify read: %w", err)) })
			in.mu.Lock()
			sp := in.sync
			in.sync = nil
			sp.loseLocked()
			in.mu.Unlock()
			sp.remove()
			return
		}
		out = in.route(buf[:n], out[:0])
		for _, d := range out {
			if d.barrier != nil {
				d.barrier <- true
				continue
			}
			d.w.deliver(d.ev)
		}
		clear(out) // drop references to watchers and names
	}
}

// route parses the events in buf and appends one delivery per interested
// watcher.
func (in *inotify) route(buf []byte, out []delivery) []delivery {
	in.mu.Lock()
	defer in.mu.Unlock()
	var overflow bool
	for off := 0; off+unix.SizeofInotifyEvent <= len(buf); {
		wd := int32(binary.NativeEndian.Uint32(buf[off:]))
		mask := binary.NativeEndian.Uint32(buf[off+4:])
		nameLen := binary.NativeEndian.Uint32(buf[off+12:])
		start := off + unix.SizeofInotifyEvent
		end := start + int(min(nameLen, uint32(len(buf)-start)))
		name := buf[start:end]
		for len(name) > 0 && name[len(name)-1] == 0 {
			name = name[:len(name)-1]
		}
		off = end
		switch {
		case mask&unix.IN_Q_OVERFLOW != 0:
			overflow = true
			continue
		case in.sync != nil && wd == in.sync.wd:
			sp := in.sync
			if mask&unix.IN_IGNORED != 0 {
				// Its folder is gone (a temporary files cleaner): the
				// next barrier makes another.
				in.sync = nil
				// A barrier whose file was made had its event routed
				// before this; those left never made theirs.
				for name, ch := range sp.waiting {
					delete(sp.waiting, name)
					ch <- false
				}
				continue
			}
			if ch := sp.waiting[string(name)]; ch != nil {
				delete(sp.waiting, string(name))
				out = append(out, delivery{barrier: ch})
			}
			continue
		case mask&unix.IN_IGNORED != 0:
			// The kernel dropped the watch (folder deleted, file system
			// unmounted); the parent's event tells its watchers.
			delete(in.wds, wd)
			continue
		case len(name) == 0:
			continue // about the watched folder itself
		}
		var k kind
		switch {
		case mask&(unix.IN_CREATE|unix.IN_MOVED_TO) != 0:
			k = kindCreate
		case mask&(unix.IN_DELETE|unix.IN_MOVED_FROM) != 0:
			k = kindRemove
		case mask&(unix.IN_MODIFY|unix.IN_ATTRIB) != 0:
			k = kindChange
		default:
			continue
		}
		isDir := mask&unix.IN_ISDIR != 0
		base := string(name)
		for _, r := range in.wds[wd] {
			rel := base
			if r.rel != "." {
				rel = r.rel + "/" + base
			}
			out = append(out, delivery{w: r.w, ev: rawEvent{rel: rel, kind: k, dir: isDir}})
		}
	}
	if overflow {
		// The kernel dropped events: every watcher compares its tree with
		// what it knows. Barriers waiting may have lost their event; the
		// rescan, which their watchers do first, covers what they wait
		// for, so they are released after it is queued.
		for w := range in.users {
			out = append(out, delivery{w: w, ev: rawEvent{kind: kindRescan}})
		}
		if sp := in.sync; sp != nil {
			for name, ch := range sp.waiting {
				delete(sp.waiting, name)
				out = append(out, delivery{barrier: ch})
			}
		}
	}
	return out
}

func (in *inotify) broadcast(f func(*Watcher)) {
	in.mu.Lock()
	users := make([]*Watcher, 0, len(in.users))
	for w := range in.users {
		users = append(users, w)
	}
	in.mu.Unlock()
	for _, w := range users {
		f(w)
	}
}
