// Package watch reports file changes under a folder: recursive (every
// sub-folder is watched, new ones as they appear), debounced per path,
// filtered by an ignore list, with a polling fallback when inotify can't be
// used. It knows nothing of servers or sessions so that any sandbox backend,
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

	"github.com/fsnotify/fsnotify"
	"golang.org/x/sys/unix"

	"github.com/agentd/agentd/internal/sandbox"
)

// Defaults for Options fields left zero.
const (
	DefaultDebounce     = 50 * time.Millisecond
	DefaultPollInterval = time.Second
	DefaultHashLimit    = 8 << 20
	DefaultBuffer       = 256
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
	// in a per-path coalescing queue.
	Buffer int
	Logger *slog.Logger

	// addWatch replaces fsnotify's Add in tests (to simulate ENOSPC).
	addWatch func(w *fsnotify.Watcher, path string) error
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
	if o.addWatch == nil {
		o.addWatch = func(w *fsnotify.Watcher, path string) error { return w.Add(path) }
	}
}

// Watcher watches one folder tree. Subscribe and Close are safe for
// concurrent use; everything else runs on the watcher's own goroutine, which
// never blocks on a subscriber.
type Watcher struct {
	root   string // absolute, cleaned
	opts   Options
	ignore *Ignore
	log    *slog.Logger

	polling atomic.Bool

	// Owned by the loop goroutine (and by New before the loop starts).
	fsw         *fsnotify.Watcher
	ticker      *time.Ticker
	known       map[string]fileState // regular files, by relative path
	dirs        map[string]struct{}  // folders walked (and watched in inotify mode)
	pending     map[string]*pendingPath
	timer       *time.Timer
	timerArmed  bool
	switchedErr error // why inotify was abandoned

	mu     sync.Mutex
	subs   map[*subscriber]func() bool // value: stops the ctx AfterFunc
	closed bool

	stop      chan struct{}
	done      chan struct{}
	closeOnce sync.Once
}

type pendingPath struct {
	first, due time.Time
}

// eventBuffer is the fsnotify channel's size. The kernel's own queue
// (fs.inotify.max_queued_events, 16384 by default) absorbs bursts, and an
// overflow is handled by a rescan, so this only smooths the hand-off: at
// 4096 events (40 bytes each) it cost every session with a watched
// workspace 160 KiB of heap (bench.BenchmarkSessionMemory).
const eventBuffer = 128

// New starts watching root, an existing folder. Changes are reported from
// the moment New returns; what exists then is the baseline, not reported.
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
		dirs:    make(map[string]struct{}),
		pending: make(map[string]*pendingPath),
		timer:   time.NewTimer(time.Hour),
		subs:    make(map[*subscriber]func() bool),
		stop:    make(chan struct{}),
		done:    make(chan struct{}),
	}
	w.timer.Stop()
	if opts.Poll {
		w.startPolling(errors.New("polling requested"))
	} else if w.fsw, err = fsnotify.NewBufferedWatcher(eventBuffer); err != nil {
		w.fsw = nil
		w.startPolling(err)
	}
	now := time.Now()
	w.walk(".", func(rel string, info fs.FileInfo) {
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
	go w.run()
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
	w.mu.Lock()
	if w.closed {
		w.mu.Unlock()
		s.close()
		return s.out
	}
	w.subs[s] = func() bool { return true }
	w.mu.Unlock()
	stop := context.AfterFunc(ctx, func() { w.unsubscribe(s) })
	w.mu.Lock()
	if _, ok := w.subs[s]; ok {
		w.subs[s] = stop
	}
	w.mu.Unlock()
	return s.out
}

func (w *Watcher) unsubscribe(s *subscriber) {
	w.mu.Lock()
	stop, ok := w.subs[s]
	delete(w.subs, s)
	w.mu.Unlock()
	if ok {
		stop()
	}
	s.close()
}

// Close stops watching and closes every subscriber's channel. It is
// idempotent and returns once the watcher's goroutines have exited.
func (w *Watcher) Close() error {
	w.closeOnce.Do(func() {
		close(w.stop)
		<-w.done
		w.mu.Lock()
		w.closed = true
		subs := w.subs
		w.subs = nil
		w.mu.Unlock()
		for s, stop := range subs {
			stop()
			s.close()
		}
	})
	return nil
}

func (w *Watcher) run() {
	defer close(w.done)
	defer func() {
		w.timer.Stop()
		if w.fsw != nil {
			_ = w.fsw.Close()
		}
		if w.ticker != nil {
			w.ticker.Stop()
		}
	}()
	for {
		var (
			events <-chan fsnotify.Event
			errs   <-chan error
			tick   <-chan time.Time
		)
		if w.fsw != nil {
			events, errs = w.fsw.Events, w.fsw.Errors
		}
		if w.ticker != nil {
			tick = w.ticker.C
		}
		select {
		case <-w.stop:
			return
		case ev, ok := <-events:
			if !ok {
				w.startPolling(errors.New("inotify watcher closed"))
				continue
			}
			w.handle(ev)
		case err, ok := <-errs:
			switch {
			case !ok:
				w.startPolling(errors.New("inotify watcher closed"))
			case errors.Is(err, fsnotify.ErrEventOverflow):
				// The kernel dropped events: compare the tree with what we
				// know instead.
				w.log.Warn("watch: inotify queue overflow, rescanning")
				w.rescan()
			default:
				w.log.Warn("watch: inotify error", "err", err)
			}
		case <-w.timer.C:
			w.timerArmed = false
			w.flushDue()
		case <-tick:
			w.rescan()
		}
	}
}

// startPolling abandons inotify. Pending paths are dropped: the scans
// compare the whole tree with the known state, which covers them.
func (w *Watcher) startPolling(why error) {
	if w.polling.Swap(true) {
		return
	}
	w.switchedErr = why
	if !w.opts.Poll {
		w.log.Warn("watch: falling back to polling", "err", why, "interval", w.opts.PollInterval)
	}
	if w.fsw != nil {
		_ = w.fsw.Close()
		w.fsw = nil
	}
	clear(w.pending)
	w.timer.Stop()
	w.timerArmed = false
	w.ticker = time.NewTicker(w.opts.PollInterval)
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

// walk visits every non-ignored folder (watching it first, in inotify mode,
// so nothing created while it is listed is missed) and every regular file
// below rel.
func (w *Watcher) walk(rel string, file func(rel string, info fs.FileInfo)) {
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
			w.watchDir(r)
		case d.Type().IsRegular():
			info, err := d.Info()
			if err == nil {
				file(r, info)
			}
		}
		return nil
	})
}

func (w *Watcher) watchDir(rel string) {
	w.dirs[rel] = struct{}{}
	if w.fsw == nil {
		return
	}
	err := w.opts.addWatch(w.fsw, w.abs(rel))
	switch {
	case err == nil:
	case errors.Is(err, unix.ENOSPC), errors.Is(err, unix.EMFILE), errors.Is(err, unix.ENOMEM):
		w.startPolling(fmt.Errorf("watch %s: %w", rel, err))
	default:
		// Usually the folder vanished meanwhile; its parent's event
		// settles that.
		w.log.Debug("watch: add failed", "path", rel, "err", err)
	}
}

func (w *Watcher) handle(ev fsnotify.Event) {
	rel, ok := w.rel(ev.Name)
	if !ok || rel == "." || w.ignore.Match(rel) {
		return
	}
	if ev.Has(fsnotify.Remove) || ev.Has(fsnotify.Rename) {
		if _, isDir := w.dirs[rel]; isDir {
			w.dropTree(rel)
		}
	}
	if ev.Has(fsnotify.Create) {
		if info, err := os.Lstat(ev.Name); err == nil && info.IsDir() {
			// A new (or moved-in) folder: watch it and report what is
			// already inside.
			w.walk(rel, func(r string, _ fs.FileInfo) { w.markPending(r) })
			if _, wasFile := w.known[rel]; !wasFile {
				return
			}
		}
	}
	w.markPending(rel)
}

// dropTree forgets a folder that was removed or moved away: its stale
// watches go (a moved folder's watches would otherwise report under the old
// name) and every file known below it is re-examined.
func (w *Watcher) dropTree(rel string) {
	prefix := rel + "/"
	for d := range w.dirs {
		if d == rel || strings.HasPrefix(d, prefix) {
			delete(w.dirs, d)
			if w.fsw != nil {
				_ = w.fsw.Remove(w.abs(d))
			}
		}
	}
	for f := range w.known {
		if strings.HasPrefix(f, prefix) {
			w.markPending(f)
		}
	}
}

func (w *Watcher) markPending(rel string) {
	if w.fsw == nil {
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

func (w *Watcher) flushDue() {
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
		w.settle(rel)
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

// settle compares one path with what is known about it and reports the
// difference.
func (w *Watcher) settle(rel string) {
	prev, had := w.known[rel]
	info, err := os.Lstat(w.abs(rel))
	switch {
	case err == nil && info.Mode().IsRegular():
		cur, err := w.observe(rel, time.Now())
		if err != nil {
			w.forget(rel, had)
			return
		}
		w.known[rel] = cur
		if !had {
			w.emit(sandbox.Created, rel, cur)
		} else if changed(prev, cur) {
			w.emit(sandbox.Modified, rel, cur)
		}
	case err == nil && info.IsDir():
		w.forget(rel, had)
		if _, ok := w.dirs[rel]; !ok {
			w.walk(rel, func(r string, _ fs.FileInfo) { w.markPending(r) })
		}
	default:
		w.forget(rel, had)
	}
}

func (w *Watcher) forget(rel string, had bool) {
	if had {
		delete(w.known, rel)
		w.emit(sandbox.Deleted, rel, fileState{})
	}
}

// rescan compares the whole tree with the known state: every poll tick, and
// after an inotify queue overflow.
func (w *Watcher) rescan() {
	now := time.Now()
	seen := make(map[string]struct{}, len(w.known))
	clear(w.dirs)
	w.walk(".", func(rel string, info fs.FileInfo) {
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
	var gone []string
	for rel := range w.known {
		if _, ok := seen[rel]; !ok {
			gone = append(gone, rel)
		}
	}
	sort.Strings(gone)
	for _, rel := range gone {
		w.forget(rel, true)
	}
}

func (w *Watcher) emit(op sandbox.Op, rel string, st fileState) {
	ev := sandbox.FileEvent{Op: op, Path: rel}
	if op != sandbox.Deleted {
		ev.Size, ev.SHA256 = st.size, st.sha
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	for s := range w.subs {
		s.push(ev) // never blocks
	}
}
