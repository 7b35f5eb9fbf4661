package watch

import (
	"sync"

	"github.com/agentd/agentd/internal/sandbox"
)

// subscriber is one Subscribe call's delivery queue. The watcher's loop
// pushes without ever blocking; events the channel has no room for wait in
// a queue that keeps one entry per path (a later event for the same path is
// merged into the waiting one), so a slow consumer costs memory bounded by
// the number of distinct paths, never lost events.
type subscriber struct {
	out  chan sandbox.FileEvent
	wake chan struct{} // capacity 1: "the queue changed"
	stop chan struct{} // closed once to end delivery
	once sync.Once
	done chan struct{} // closed when the forwarder has exited and out is closed

	mu       sync.Mutex
	queue    []queued // in arrival order; stale entries are skipped
	pending  map[string]queued
	seq      uint64
	inflight bool // the forwarder holds an event it is trying to send
	closed   bool
}

type queued struct {
	ev  sandbox.FileEvent
	seq uint64
}

func newSubscriber(buffer int) *subscriber {
	s := &subscriber{
		out:     make(chan sandbox.FileEvent, buffer),
		wake:    make(chan struct{}, 1),
		stop:    make(chan struct{}),
		done:    make(chan struct{}),
		pending: make(map[string]queued),
	}
	go s.forward()
	return s
}

// push queues ev for delivery. It never blocks on the consumer.
func (s *subscriber) push(ev sandbox.FileEvent) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return
	}
	if len(s.pending) == 0 && !s.inflight {
		select {
		case s.out <- ev:
			return
		default:
		}
	}
	if prev, ok := s.pending[ev.Path]; ok {
		merged, keep := merge(prev.ev, ev)
		if !keep {
			delete(s.pending, ev.Path)
			return
		}
		// Keep the waiting entry's place in the queue.
		s.pending[ev.Path] = queued{ev: merged, seq: prev.seq}
		return
	}
	s.seq++
	q := queued{ev: ev, seq: s.seq}
	s.pending[ev.Path] = q
	s.queue = append(s.queue, q)
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// merge folds next into an undelivered prev for the same path, so the
// consumer sees the net change. keep=false means nothing is left to say
// (a file created and deleted before the consumer heard of it).
func merge(prev, next sandbox.FileEvent) (sandbox.FileEvent, bool) {
	switch {
	case prev.Op == sandbox.Created && next.Op == sandbox.Deleted:
		return sandbox.FileEvent{}, false
	case prev.Op == sandbox.Created:
		next.Op = sandbox.Created
	case prev.Op == sandbox.Deleted && next.Op != sandbox.Deleted,
		prev.Op == sandbox.Modified && next.Op == sandbox.Created:
		next.Op = sandbox.Modified // the consumer knew it existed
	}
	return next, true
}

// next pops the oldest live queue entry.
func (s *subscriber) nextLocked() (sandbox.FileEvent, bool) {
	for len(s.queue) > 0 {
		q := s.queue[0]
		s.queue[0] = queued{}
		s.queue = s.queue[1:]
		if cur, ok := s.pending[q.ev.Path]; ok && cur.seq == q.seq {
			delete(s.pending, q.ev.Path)
			return cur.ev, true
		}
	}
	s.queue = nil // let the backing array go
	return sandbox.FileEvent{}, false
}

func (s *subscriber) forward() {
	defer func() {
		s.mu.Lock()
		s.closed = true
		close(s.out)
		s.mu.Unlock()
		close(s.done)
	}()
	for {
		s.mu.Lock()
		ev, ok := s.nextLocked()
		s.inflight = ok
		s.mu.Unlock()
		if !ok {
			select {
			case <-s.wake:
				continue
			case <-s.stop:
				return
			}
		}
		select {
		case s.out <- ev:
		case <-s.stop:
			return
		}
		s.mu.Lock()
		s.inflight = false
		s.mu.Unlock()
	}
}

// close ends delivery (undelivered events are discarded: the consumer asked
// to stop or the watcher is gone) and waits for the channel to be closed.
func (s *subscriber) close() {
	s.once.Do(func() { close(s.stop) })
	<-s.done
}
