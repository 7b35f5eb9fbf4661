// Package watch reports file changes under a folder: recursive (every
// sub-folder is watched, new ones as they appear), debounced per path,
// filtered by an ignore list, with a polling fallback when inotify can't be
// used (always, on systems other than Linux: inotify_other.go). Every
// watcher of the process shares one inotify instance and one reader
// goroutine (inotify_linux.go); an idle watcher has no goroutine. It knows
// nothing of servers or sessions so that any sandbox backend,
// and the executor process, can use it.
package watch

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/agentd/agentd/sandbox"
)

// Defaults for Options fields left zero.
const (
	DefaultDebounce     = 50 * time.Millisecond
	DefaultPollInterval = time.Second
	DefaultHashLimit    = 8 << 20
	// DefaultBuffer is small because the channel is allocated whole for
	// every subscriber (56 bytes an event: 256 cost an idle session 14 KiB)
	// while bursts beyond it wait, merged per path, in the subscriber's
	// queue.
	DefaultBuffer = 16
)

// Options configure a Watcher. Zero values take the defaults above.
type Options struct {
	// Ignore lists patterns (see Ignore) never reported nor watched.
	// DefaultIgnore is not added implicitly.
	Ignore []string
	// Debounce is how long a path must stay quiet before its change is
	// reported; a burst of writes becomes one event.
	Debounce time.Duration
	// MaxDelay bounds how long a path that never stays quiet (a growing
	// log) waits to be reported. Default 20×Debounce.
	MaxDelay time.Duration
	// Poll forces polling instead of inotify.
	Poll bool
	// PollInterval is the scan period in polling mode.
	PollInterval time.Duration
	// HashLimit: files up to this size get a SHA256 in their events.
	// Negative disables hashing.
	HashLimit int64
	// Buffer is each subscriber's channel capacity; beyond it events wait
	// in a per-path coalescing queue (nothing is lost).
	Buffer int
	Logger *slog.Logger

	// failAdd, in tests, fails adding an inotify watch on path (to
	// simulate ENOSPC) when it returns an error.
	failAdd func(path string) error
}

func (o *Options) defaults() {
	if o.Debounce <= 0 {
		o.Debounce = DefaultDebounce
	}
	if o.MaxDelay <= 0 {
		o.MaxDelay = 20 * o.Debounce
	}
	if o.MaxDelay < o.Debounce {
		o.MaxDelay = o.Debounce
	}
	if o.PollInterval <= 0 {
		o.PollInterval = DefaultPollInterval
	}
	if o.HashLimit == 0 {
		o.HashLimit = DefaultHashLimit
	}
	if o.Buffer <= 0 {
		o.Buffer = DefaultBuffer
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
}

// Watcher watches one folder tree. Subscribe and Close are safe for
// concurrent use.
//
// A Watcher has no goroutine of its own while nothing happens: the shared
// inotify reader appends events to its inbox, and its timers (debounce,
// polling interval) post to the same inbox; whoever posts to an inbox
// nobody is working on starts a worker goroutine, which settles everything
// posted and exits. Neither the reader nor a timer ever blocks on a worker,
// and a worker never blocks on a subscriber.
type Watcher struct {
	root   string // absolute, cleaned
	opts   Options
	ignore *Ignore
	log    *slog.Logger

	polling atomic.Bool

	// mu guards the tree state below. It is held by the one worker (and
	// by New and Close); the methods named …Locked need it.
	mu         sync.Mutex
	in         *inotify             // the shared instance; nil when polling
	known      map[string]fileState // regular files, by relative path
	dirs       map[string]int32     // folders walked → inotify watch (-1: none)
	pending    map[string]*pendingPath
	timer      *time.Timer // debounce; posts timerFired
	timerArmed bool
	pollTimer  *time.Timer // polling interval; posts pollDue

	// inMu guards the inbox: what the next worker must do. It is a leaf
	// lock, held for no call out, so posting never waits on a worker.
	inMu       sync.Mutex
	inbox      []rawEvent
	needRescan bool  // events were lost: compare the whole tree
	timerFired bool  // the debounce timer went off
	pollDue    bool  // the polling interval went off
	lost       error // inotify is gone: poll
	syncs      []syncReq
	busy       bool // a worker is running
	closed     bool
	workers    sync.WaitGroup

	subMu      sync.Mutex
	subs       map[*subscriber]func() bool // value: stops the ctx AfterFunc
	subsClosed bool

	closeOnce sync.Once
}

type pendingPath struct {
	first, due time.Time
}

// syncReq is a Sync call waiting for the worker.
type syncReq struct {
	id   string
	full bool       // compare the whole tree (no inotify barrier)
	done chan error // buffered(1)
}

// ErrClosed: the watcher was closed.
var ErrClosed = errors.New("watch: closed")

// New starts watching root, an existing folder. Changes are reported from
// the moment New returns; what exists then is the baseline, not reported.
// In inotify mode the watcher uses the process's shared inotify instance
// (one for every Watcher); it polls when asked to, or when no instance can
// be opened (fs.inotify.max_user_instances) or no more watches added
// (fs.inotify.max_user_watches).
func New(root string, opts Options) (*Watcher, error) {
	opts.defaults()
	abs, err := filepath.Abs(root)
	if err != nil {
		return nil, fmt.Errorf("watch %s: %w", root, err)
	}
	info, err := os.Stat(abs)
	if err != nil {
		return nil, fmt.Errorf("watch %s: %w", root, err)
	}
	if !info.IsDir() {
		return nil, fmt.Errorf("watch %s: not a folder", root)
	}
	w := &Watcher{
		root:    abs,
		opts:    opts,
		ignore:  NewIgnore(opts.Ignore),
		log:     opts.Logger.With("root", abs),
		known:   make(map[string]fileState),
		dirs:    make(map[string]int32),
		pending: make(map[string]*pendingPath),
		subs:    make(map[*subscriber]func() bool),
	}
	w.timer = time.AfterFunc(time.Hour, func() { w.post(func() { w.timerFired = true }) })
	w.timer.Stop()
	// Held through the first walk: events for folders watched so far wait
	// for it in the inbox.
	w.mu.Lock()
	defer w.mu.Unlock()
	if opts.Poll {
		w.startPollingLocked(errors.New("polling requested"))
	} else if w.in, err = acquireInotify(w); err != nil {
		w.startPollingLocked(err)
	} else {
		activeInotify.Add(1)
	}
	now := time.Now()
	w.walkLocked(".", func(rel string, info fs.FileInfo) {
		st := stateOf(info, now)
		if !st.stable() && w.opts.HashLimit >= 0 && st.size <= w.opts.HashLimit {
			// Recently written: remember content so a same-size,
			// same-mtime rewrite is still noticed when polling.
			if h, err := w.observe(rel, now); err == nil {
				st = h
			}
		}
		w.known[rel] = st
	})
	return w, nil
}

// Polling reports whether the watcher scans periodically instead of using
// inotify (forced, or inotify failed or ran out of watches).
func (w *Watcher) Polling() bool { return w.polling.Load() }

// Subscribe returns a channel of changes from now on. It is closed when ctx
// ends or the watcher closes. A slow reader never blocks the watcher: beyond
// the channel's buffer, undelivered changes to the same path are merged into
// their net effect (created+modified = created, created+deleted = nothing,
// deleted+created = modified).
func (w *Watcher) Subscribe(ctx context.Context) <-chan sandbox.FileEvent {
	s := newSubscriber(w.opts.Buffer)
	w.subMu.Lock()
	if w.subsClosed {
		w.subMu.Unlock()
		s.close()
		return s.out
	}
	w.subs[s] = func() bool { return true }
	w.subMu.Unlock()
	stop := context.AfterFunc(ctx, func() { w.unsubscribe(s) })
	w.subMu.Lock()
	if _, ok := w.subs[s]; ok {
		w.subs[s] = stop
	}
	w.subMu.Unlock()
	return s.out
}

func (w *Watcher) unsubscribe(s *subscriber) {
	w.subMu.Lock()
	stop, ok := w.subs[s]
	delete(w.subs, s)
	w.subMu.Unlock()
	if ok {
		stop()
	}
	s.close()
}

// Close stops watching and closes every subscriber's channel. It is
// idempotent and returns once the watcher's goroutines have exited (and,
// if it was the last user of the shared inotify instance, the instance's
// reader too).
func (w *Watcher) Close() error {
	w.closeOnce.Do(func() {
		w.inMu.Lock()
		w.closed = true
		w.inbox = nil
		syncs := w.syncs
		w.syncs = nil
		w.inMu.Unlock()
		for _, r := range syncs {
			r.done <- ErrClosed
		}
		w.workers.Wait()
		w.mu.Lock()
		w.timer.Stop()
		if w.pollTimer != nil {
			w.pollTimer.Stop()
		}
		in := w.in
		w.in = nil
		w.mu.Unlock()
		if in != nil {
			in.release(w)
			activeInotify.Add(-1)
		} else if w.polling.Load() {
			activePolling.Add(-1)
		}
		w.subMu.Lock()
		w.subsClosed = true
		subs := w.subs
		w.subs = nil
		w.subMu.Unlock()
		for s, stop := range subs {
			stop()
			s.close()
		}
	})
	return nil
}

// Sync reports every change made before the call to every subscriber,
// without waiting for the debounce, followed by a FileEvent{Op:
// sandbox.Sync, Path: id}: a subscriber that reads the marker has read
// every change made before Sync was called. It returns once the markers
// are queued (or ctx ends, or the watcher closes: ErrClosed).
//
// With inotify it first passes a barrier through the shared instance's
// event queue (see syncPoint), so every event of an earlier change is in
// the inbox; then the worker settles every path waiting for its debounce.
// When polling, or when no barrier can be made, the worker compares the
// whole tree with what it knows instead (a walk: a stat per file).
func (w *Watcher) Sync(ctx context.Context, id string) error {
	w.mu.Lock()
	in := w.in
	w.mu.Unlock()
	full := true
	if in != nil {
		err := in.barrier(ctx)
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if err != nil {
			w.log.Debug("watch: no inotify barrier; comparing the tree", "err", err)
		}
		full = err != nil
	}
	r := syncReq{id: id, full: full, done: make(chan error, 1)}
	posted := false
	w.post(func() {
		w.syncs = append(w.syncs, r)
		posted = true
	})
	if !posted {
		return ErrClosed
	}
	select {
	case err := <-r.done:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// post records work for the watcher (mark runs under inMu) and starts a
// worker unless one is running. It never blocks on a worker.
func (w *Watcher) post(mark func()) {
	w.inMu.Lock()
	if w.closed {
		w.inMu.Unlock()
		return
	}
	mark()
	start := !w.busy
	if start {
		w.busy = true
		w.workers.Add(1)
	}
	w.inMu.Unlock()
	if start {
		go w.work()
	}
}

// work settles everything posted, until the inbox stays empty.
func (w *Watcher) work() {
	defer w.workers.Done()
	for {
		w.inMu.Lock()
		batch, rescan, fired, poll, lost, syncs := w.inbox, w.needRescan, w.timerFired, w.pollDue, w.lost, w.syncs
		w.inbox, w.needRescan, w.timerFired, w.pollDue, w.lost, w.syncs = nil, false, false, false, nil, nil
		if w.closed || (len(batch) == 0 && !rescan && !fired && !poll && lost == nil && len(syncs) == 0) {
			w.busy = false
			w.inMu.Unlock()
			for _, r := range syncs {
				r.done <- ErrClosed
			}
			return
		}
		w.inMu.Unlock()

		w.mu.Lock()
		if lost != nil {
			w.startPollingLocked(lost)
		}
		if w.in != nil { // events are moot once polling: scans cover them
			if rescan {
				w.log.Warn("watch: inotify events lost, rescanning")
				w.rescanLocked()
			} else {
				for _, ev := range batch {
					w.handleLocked(ev)
				}
			}
		}
		if fired {
			w.timerArmed = false
			w.flushDueLocked()
		}
		if poll && w.polling.Load() {
			w.rescanLocked()
			w.pollTimer.Reset(w.opts.PollInterval)
		}
		if len(syncs) > 0 {
			full := w.in == nil // polling (or fell back to it since)
			for _, r := range syncs {
				full = full || r.full
			}
			w.syncLocked(full)
			for _, r := range syncs {
				w.mark(r.id)
				r.done <- nil
			}
		}
		w.mu.Unlock()
	}
}

// syncLocked reports every change whose event is in: the paths waiting
// for their debounce, at once; with full, then also whatever a comparison
// of the whole tree finds.
func (w *Watcher) syncLocked(full bool) {
	if len(w.pending) > 0 {
		due := make([]string, 0, len(w.pending))
		for rel := range w.pending {
			due = append(due, rel)
		}
		clear(w.pending)
		sort.Strings(due)
		for _, rel := range due {
			w.settleLocked(rel)
		}
	}
	if full {
		w.rescanLocked()
	}
}

// startPollingLocked abandons inotify. Pending paths are dropped: the scans
// compare the whole tree with the known state, which covers them.
func (w *Watcher) startPollingLocked(why error) {
	if w.polling.Swap(true) {
		return
	}
	if !w.opts.Poll && !errors.Is(why, errNoInotify) {
		w.log.Warn("watch: falling back to polling", "err", why, "interval", w.opts.PollInterval)
	}
	if w.in != nil {
		w.in.release(w)
		w.in = nil
		activeInotify.Add(-1)
	}
	activePolling.Add(1)
	for rel := range w.dirs {
		w.dirs[rel] = -1
	}
	clear(w.pending)
	w.timer.Stop()
	w.timerArmed = false
	w.pollTimer = time.AfterFunc(w.opts.PollInterval, func() { w.post(func() { w.pollDue = true }) })
}

func (w *Watcher) abs(rel string) string {
	if rel == "." {
		return w.root
	}
	return w.root + "/" + rel
}

func (w *Watcher) rel(name string) (string, bool) {
	if name == w.root {
		return ".", true
	}
	r, ok := strings.CutPrefix(name, w.root+"/")
	return r, ok && r != ""
}

// walkLocked visits every non-ignored folder (watching it first, in inotify
// mode, so nothing created while it is listed is missed) and every regular
// file below rel.
func (w *Watcher) walkLocked(rel string, file func(rel string, info fs.FileInfo)) {
	start := w.abs(rel)
	_ = filepath.WalkDir(start, func(p string, d fs.DirEntry, err error) error {
		r, ok := w.rel(p)
		if !ok {
			return nil
		}
		if err != nil {
			// Vanished or unreadable: skip it; a later event or scan
			// settles it.
			if d != nil && d.IsDir() {
				return fs.SkipDir
			}
			return nil
		}
		if r != "." && w.ignore.Match(r) {
			if d.IsDir() {
				return fs.SkipDir
			}
			return nil
		}
		switch {
		case d.IsDir():
			w.watchDirLocked(r)
		case d.Type().IsRegular():
			info, err := d.Info()
			if err == nil {
				file(r, info)
			}
		}
		return nil
	})
}

func (w *Watcher) watchDirLocked(rel string) {
	if w.in == nil {
		w.dirs[rel] = -1
		return
	}
	p := w.abs(rel)
	var (
		wd  int32 = -1
		err error
	)
	if w.opts.failAdd != nil {
		err = w.opts.failAdd(p)
	}
	if err == nil {
		wd, err = w.in.add(w, rel, p)
	}
	if old, ok := w.dirs[rel]; ok && old >= 0 && old != wd {
		w.in.remove(w, old, rel) // the name now holds another folder
	}
	w.dirs[rel] = wd
	switch {
	case err == nil:
	case errors.Is(err, unix.ENOSPC), errors.Is(err, unix.EMFILE), errors.Is(err, unix.ENOMEM):
		w.startPollingLocked(fmt.Errorf("watch %s: %w", rel, err))
	default:
		// Usually the folder vanished meanwhile; its parent's event
		// settles that.
		w.log.Debug("watch: add failed", "path", rel, "err", err)
	}
}

func (w *Watcher) handleLocked(ev rawEvent) {
	rel := ev.rel
	if rel == "" || rel == "." || w.ignore.Match(rel) {
		return
	}
	if ev.kind == kindRemove {
		if _, isDir := w.dirs[rel]; isDir {
			w.dropTreeLocked(rel)
		}
	}
	if ev.kind == kindCreate && ev.dir {
		// A new (or moved-in) folder: watch it and report what is
		// already inside.
		w.walkLocked(rel, func(r string, _ fs.FileInfo) { w.markPendingLocked(r) })
		if _, wasFile := w.known[rel]; !wasFile {
			return
		}
	}
	w.markPendingLocked(rel)
}

// dropTreeLocked forgets a folder that was removed or moved away: its stale
// watches go (a moved folder's watches would otherwise report under the old
// name) and every file known below it is re-examined.
func (w *Watcher) dropTreeLocked(rel string) {
	prefix := rel + "/"
	for d, wd := range w.dirs {
		if d == rel || strings.HasPrefix(d, prefix) {
			delete(w.dirs, d)
			if w.in != nil && wd >= 0 {
				w.in.remove(w, wd, d)
			}
		}
	}
	for f := range w.known {
		if strings.HasPrefix(f, prefix) {
			w.markPendingLocked(f)
		}
	}
}

func (w *Watcher) markPendingLocked(rel string) {
	if w.in == nil {
		return // polling: the next scan reports it
	}
	now := time.Now()
	due := now.Add(w.opts.Debounce)
	if p, ok := w.pending[rel]; ok {
		if limit := p.first.Add(w.opts.MaxDelay); due.After(limit) {
			due = limit
		}
		p.due = due
	} else {
		w.pending[rel] = &pendingPath{first: now, due: due}
	}
	if !w.timerArmed {
		w.timer.Reset(w.opts.Debounce)
		w.timerArmed = true
	}
}

func (w *Watcher) flushDueLocked() {
	now := time.Now()
	var due []string
	for rel, p := range w.pending {
		if !p.due.After(now) {
			due = append(due, rel)
			delete(w.pending, rel)
		}
	}
	sort.Strings(due)
	for _, rel := range due {
		w.settleLocked(rel)
	}
	if len(w.pending) == 0 || w.timerArmed {
		return
	}
	var next time.Time
	for _, p := range w.pending {
		if next.IsZero() || p.due.Before(next) {
			next = p.due
		}
	}
	w.timer.Reset(max(time.Until(next), time.Millisecond))
	w.timerArmed = true
}

// settleLocked compares one path with what is known about it and reports
// the difference.
func (w *Watcher) settleLocked(rel string) {
	prev, had := w.known[rel]
	info, err := os.Lstat(w.abs(rel))
	switch {
	case err == nil && info.Mode().IsRegular():
		cur, err := w.observe(rel, time.Now())
		if err != nil {
			w.forgetLocked(rel, had)
			return
		}
		w.known[rel] = cur
		if !had {
			w.emit(sandbox.Created, rel, cur)
		} else if changed(prev, cur) {
			w.emit(sandbox.Modified, rel, cur)
		}
	case err == nil && info.IsDir():
		w.forgetLocked(rel, had)
		if _, ok := w.dirs[rel]; !ok {
			w.walkLocked(rel, func(r string, _ fs.FileInfo) { w.markPendingLocked(r) })
		}
	default:
		w.forgetLocked(rel, had)
	}
}

func (w *Watcher) forgetLocked(rel string, had bool) {
	if had {
		delete(w.known, rel)
		w.emit(sandbox.Deleted, rel, fileState{})
	}
}

// rescanLocked compares the whole tree with the known state: every poll
// interval, and after inotify events were lost (in which case every folder's
// watch is renewed).
func (w *Watcher) rescanLocked() {
	now := time.Now()
	seen := make(map[string]struct{}, len(w.known))
	var old map[string]int32
	if w.in != nil {
		old, w.dirs = w.dirs, make(map[string]int32, len(w.dirs))
	} else {
		clear(w.dirs)
	}
	w.walkLocked(".", func(rel string, info fs.FileInfo) {
		seen[rel] = struct{}{}
		prev, had := w.known[rel]
		quick := stateOf(info, now)
		if had && quick.size == prev.size && quick.mtime == prev.mtime {
			if prev.stable() || w.opts.HashLimit < 0 || quick.size > w.opts.HashLimit {
				return
			}
		}
		cur, err := w.observe(rel, now)
		if err != nil {
			delete(seen, rel)
			return
		}
		w.known[rel] = cur
		if !had {
			w.emit(sandbox.Created, rel, cur)
		} else if changed(prev, cur) {
			w.emit(sandbox.Modified, rel, cur)
		}
	})
	for d, wd := range old {
		if cur, ok := w.dirs[d]; wd >= 0 && w.in != nil && (!ok || cur != wd) {
			w.in.remove(w, wd, d) // folders gone or replaced
		}
	}
	var gone []string
	for rel := range w.known {
		if _, ok := seen[rel]; !ok {
			gone = append(gone, rel)
		}
	}
	sort.Strings(gone)
	for _, rel := range gone {
		w.forgetLocked(rel, true)
	}
}

// mark hands a Sync marker to every subscriber; it never blocks.
func (w *Watcher) mark(id string) {
	ev := sandbox.FileEvent{Op: sandbox.Sync, Path: id}
	w.subMu.Lock()
	defer w.subMu.Unlock()
	for s := range w.subs {
		s.push(ev)
	}
}

// emit hands an event to every subscriber; it never blocks.
func (w *Watcher) emit(op sandbox.Op, rel string, st fileState) {
	ev := sandbox.FileEvent{Op: op, Path: rel}
	if op != sandbox.Deleted {
		ev.Size, ev.SHA256 = st.size, st.sha
	}
	w.subMu.Lock()
	defer w.subMu.Unlock()
	for s := range w.subs {
		s.push(ev)
	}
}
