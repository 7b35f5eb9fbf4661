package watch

import (
	"sync"

	"github.com/agentd/agentd/sandbox"
)

// subscriber is one Subscribe call's delivery queue. The watcher pushes
// without ever blocking; events the channel has no room for wait in a queue
// that keeps one entry per path (a later event for the same path is merged
// into the waiting one; a Sync marker keeps its place and is never merged
// across), so a slow consumer costs memory bounded by the number of
// distinct paths (per marker waiting), never lost events. A forwarder
// goroutine runs only while that queue holds something: an idle subscriber
// is a channel and a few words.
type subscriber struct {
	out  chan sandbox.FileEvent
	stop chan struct{} // closed once to end delivery
	once sync.Once

	mu    sync.Mutex
	queue []*queued // in arrival order; dead entries are skipped
	// pending is the queued entry of each path that later events for the
	// path merge into. A Sync marker is a fence: entries before it leave
	// pending, so a change after the marker is never moved ahead of it.
	pending map[string]*queued
	fwd     chan struct{} // non-nil while a forwarder runs; closed when it exits
	closed  bool
}

type queued struct {
	ev   sandbox.FileEvent
	dead bool // merged away (created, then deleted before delivery)
}

func newSubscriber(buffer int) *subscriber {
	return &subscriber{
		out:  make(chan sandbox.FileEvent, buffer),
		stop: make(chan struct{}),
	}
}

// push queues ev for delivery. It never blocks on the consumer.
func (s *subscriber) push(ev sandbox.FileEvent) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return
	}
	// While a forwarder runs it holds older events: sending directly
	// would overtake them.
	if s.fwd == nil {
		select {
		case s.out <- ev:
			return
		default:
		}
	}
	if ev.Op == sandbox.Sync {
		s.queue = append(s.queue, &queued{ev: ev})
		clear(s.pending)
	} else if prev, ok := s.pending[ev.Path]; ok {
		merged, keep := merge(prev.ev, ev)
		if !keep {
			prev.dead = true
			delete(s.pending, ev.Path)
			return
		}
		// Keep the waiting entry's place in the queue.
		prev.ev = merged
		return
	} else {
		if s.pending == nil {
			s.pending = make(map[string]*queued)
		}
		q := &queued{ev: ev}
		s.pending[ev.Path] = q
		s.queue = append(s.queue, q)
	}
	if s.fwd == nil {
		s.fwd = make(chan struct{})
		go s.forward(s.fwd)
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
		s.queue[0] = nil
		s.queue = s.queue[1:]
		if q.dead {
			continue
		}
		if q.ev.Op != sandbox.Sync && s.pending[q.ev.Path] == q {
			delete(s.pending, q.ev.Path)
		}
		return q.ev, true
	}
	// Let the backing array and the map go: an idle subscriber keeps
	// nothing.
	s.queue, s.pending = nil, nil
	return sandbox.FileEvent{}, false
}

// forward delivers the queue until it is empty (then exits, leaving the
// next push to send directly or start another) or delivery stops.
func (s *subscriber) forward(done chan struct{}) {
	defer close(done)
	for {
		s.mu.Lock()
		ev, ok := s.nextLocked()
		if !ok {
			s.fwd = nil
			s.mu.Unlock()
			return
		}
		s.mu.Unlock()
		select {
		case s.out <- ev:
		case <-s.stop:
			return
		}
	}
}

// close ends delivery (undelivered events are discarded: the consumer asked
// to stop or the watcher is gone), waits for the forwarder if one runs and
// closes the channel. It is idempotent.
func (s *subscriber) close() {
	s.once.Do(func() {
		close(s.stop)
		s.mu.Lock()
		s.closed = true
		fwd := s.fwd
		s.mu.Unlock()
		if fwd != nil {
			<-fwd
		}
		s.mu.Lock()
		close(s.out)
		s.queue, s.pending = nil, nil
		s.mu.Unlock()
	})
}
