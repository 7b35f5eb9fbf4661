package session

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/agentd/agentd/sandbox"
)

// syncTimeout bounds how long a turn's end waits for the workspace watcher
// to record the turn's changes; past it the turn ends anyway and the
// changes follow.
const syncTimeout = 10 * time.Second

// watchMarks lets a turn wait until an environment's watcher forwarder
// (forwardChanges) has recorded every change made before a point: the turn
// asks the environment for a Sync marker, and the forwarder reports the
// marker when it reads it, after everything before it. Safe for concurrent
// use.
type watchMarks struct {
	prefix string

	mu      sync.Mutex
	n       uint64
	waiting map[string]chan bool // true: reached; false: the forwarder stopped first
	ended   bool                 // the forwarder stopped: no marker will be reached
}

var errWatchEnded = errors.New("the workspace watch ended")

func newWatchMarks(sessionID string) *watchMarks {
	return &watchMarks{prefix: sessionID + "/", waiting: make(map[string]chan bool)}
}

// expect returns a new marker id and the channel that says whether the
// forwarder reached it (true) or stopped first (false).
func (w *watchMarks) expect() (string, <-chan bool, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.ended {
		return "", nil, errWatchEnded
	}
	w.n++
	id := fmt.Sprintf("%s%d", w.prefix, w.n)
	ch := make(chan bool, 1)
	w.waiting[id] = ch
	return id, ch, nil
}

// forget drops a marker nobody waits for any more.
func (w *watchMarks) forget(id string) {
	w.mu.Lock()
	delete(w.waiting, id)
	w.mu.Unlock()
}

// reached is called by the forwarder for each marker it reads; markers it
// did not hand out (another consumer's) are ignored.
func (w *watchMarks) reached(id string) {
	w.mu.Lock()
	ch := w.waiting[id]
	delete(w.waiting, id)
	w.mu.Unlock()
	if ch != nil {
		ch <- true
	}
}

// end releases every waiter: the forwarder stopped.
func (w *watchMarks) end() {
	w.mu.Lock()
	w.ended = true
	waiting := w.waiting
	w.waiting = nil
	w.mu.Unlock()
	for _, ch := range waiting {
		ch <- false
	}
}

// syncWorkspace returns once every workspace change made before the call
// is in the log (and, within the size bound, in the store): a turn's end
// waits for it, so that its file events come before its query:completed.
// An environment that cannot flush its watch returns at once.
func syncWorkspace(ctx context.Context, h *host) error {
	ws, ok := h.env.(sandbox.WatchSyncer)
	if !ok || h.marks == nil {
		return nil
	}
	id, reached, err := h.marks.expect()
	if err != nil {
		return err
	}
	if err := ws.SyncWatch(ctx, id); err != nil {
		h.marks.forget(id)
		return err
	}
	select {
	case ok := <-reached:
		if !ok {
			return errWatchEnded
		}
		return nil
	case <-ctx.Done():
		h.marks.forget(id)
		return ctx.Err()
	}
}

// syncTurnFiles is syncWorkspace at a turn's end, bounded by syncTimeout;
// a failure is logged, never the turn's.
func syncTurnFiles(h *host) {
	ctx, cancel := context.WithTimeout(context.Background(), syncTimeout)
	defer cancel()
	start := time.Now()
	err := syncWorkspace(ctx, h)
	switch {
	case err == nil:
		if d := time.Since(start); d > time.Second {
			h.log.Warn("recording the turn's workspace changes was slow", "ms", d.Milliseconds())
		}
	case errors.Is(err, errors.ErrUnsupported):
		h.log.Debug("the environment cannot flush its workspace watch", "err", err)
	case errors.Is(err, errWatchEnded), errors.Is(err, sandbox.ErrTerminated), errors.Is(err, sandbox.ErrGone):
		// The environment is going away; its end is reported elsewhere.
	default:
		h.log.Warn("workspace changes of the turn not all recorded before its end", "err", err)
	}
}
