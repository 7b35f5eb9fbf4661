package executor

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/agentd/agentd/internal/executor/rpc"
	"github.com/agentd/agentd/sandbox"
)

// maxQueuedEvents bounds the events waiting for a slow Watch reader; beyond
// it the oldest are dropped (the watcher already coalesces per path).
const maxQueuedEvents = 10000

// watchSub is one Watch call: the connection's reader pushes events, a
// goroutine delivers them on the caller's channel.
type watchSub struct {
	id    string
	ch    chan sandbox.FileEvent
	wake  chan struct{}
	ended chan struct{}
	once  sync.Once

	mu      sync.Mutex
	queue   []sandbox.FileEvent
	dropped int
}

func (w *watchSub) push(ev sandbox.FileEvent) {
	w.mu.Lock()
	if len(w.queue) >= maxQueuedEvents {
		w.queue = w.queue[1:]
		w.dropped++
	}
	w.queue = append(w.queue, ev)
	w.mu.Unlock()
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

// end stops the watch from the connection's side (lost, terminated).
func (w *watchSub) end() { w.once.Do(func() { close(w.ended) }) }

// Watch reports workspace changes until ctx ends (or the environment
// terminates, or the connection is lost), then closes the channel.
func (e *Environment) Watch(ctx context.Context) (<-chan sandbox.FileEvent, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	w := &watchSub{
		id: newTag(), ch: make(chan sandbox.FileEvent, 64),
		wake: make(chan struct{}, 1), ended: make(chan struct{}),
	}
	e.mu.Lock()
	if e.terminated || e.lost != nil {
		err := e.lost
		if e.terminated {
			err = sandbox.ErrTerminated
		}
		e.mu.Unlock()
		return nil, err
	}
	e.watches[w.id] = w // before the call: events may precede the reply
	e.mu.Unlock()
	if err := e.call(ctx, rpc.MethodFSWatch, rpc.FSWatchParams{WatchID: w.id}, nil); err != nil {
		e.mu.Lock()
		delete(e.watches, w.id)
		e.mu.Unlock()
		return nil, fmt.Errorf("watch: %w", err)
	}
	go e.deliverEvents(ctx, w)
	return w.ch, nil
}

// SyncWatch implements sandbox.WatchSyncer through fs.sync: the executor
// reports the changes made so far on every watch, then the marker (an
// fs.event with op "sync"), which reaches the Watch channels in order. An
// executor that predates fs.sync (method not found) or whose environment
// cannot flush its watch (unsupported) gives errors.ErrUnsupported.
func (e *Environment) SyncWatch(ctx context.Context, id string) error {
	err := e.call(ctx, rpc.MethodFSSync, rpc.FSSyncParams{Marker: id}, nil)
	var re *rpc.Error
	if errors.As(err, &re) && (re.Code == rpc.CodeMethodNotFound || re.Code == rpc.CodeUnsupported) {
		return fmt.Errorf("sync watch: %w: %v", errors.ErrUnsupported, err)
	}
	return err
}

func (e *Environment) deliverEvents(ctx context.Context, w *watchSub) {
	defer close(w.ch)
	defer func() {
		e.mu.Lock()
		_, registered := e.watches[w.id]
		delete(e.watches, w.id)
		e.mu.Unlock()
		if registered {
			uctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			_ = e.call(uctx, rpc.MethodFSUnwatch, rpc.WatchParams{WatchID: w.id}, nil)
			cancel()
		}
	}()
	for {
		w.mu.Lock()
		q := w.queue
		w.queue = nil
		if w.dropped > 0 {
			e.log.Warn("file events dropped for a slow watcher", "dropped", w.dropped)
			w.dropped = 0
		}
		w.mu.Unlock()
		for _, ev := range q {
			select {
			case w.ch <- ev:
			case <-ctx.Done():
				return
			case <-w.ended:
				return
			}
		}
		select {
		case <-w.wake:
		case <-ctx.Done():
			return
		case <-w.ended:
			return
		}
	}
}
