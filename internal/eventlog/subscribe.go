package eventlog

import (
	"context"
	"sync"
)

// Subscription follows one session's events after a seq. Next and TryNext
// are not safe for concurrent use (one consumer per subscription); Close
// may be called from any goroutine.
//
// Live records reach it through a queue that grows with what is actually
// waiting (bounded by Options.QueueSize) instead of a channel allocated at
// its bound: an idle or keeping-up subscriber holds a few slots, not 4,096
// records the garbage collector would scan on every cycle.
type Subscription struct {
	log  *Log
	sl   *sessionLog
	last int64 // seq of the last record returned by Next

	// Consumer side, touched only by Next/TryNext.
	pending []*Record // records taken from the store or from queue, in order
	next    int       // index of pending's next record (those before are nil)
	live    bool      // registered with sl for live records

	wake chan struct{} // buffered(1): queue gained records or the subscription ended

	closed bool // Close was called; guarded by sl.mu

	followed bool // counted in the session's peer feed (Options.Peers); set before use

	mu     sync.Mutex // guards queue, queued, ended, err
	queue  []*Record  // published, not yet taken by the consumer
	queued int64      // bytes of JSON in queue
	ended  bool       // no record will be queued any more
	err    error      // why it ended
}

// DefaultQueueBytes is Options.QueueBytes' default: two of the largest
// events an agent's output line makes (64 MiB), so a subscriber that keeps
// up is never cut off by one.
const DefaultQueueBytes = 128 << 20

// Subscribe returns a subscription delivering the session's events with
// seq > after: first those already stored, then live ones as they are
// appended. The session need not exist yet.
func (l *Log) Subscribe(ctx context.Context, session string, after int64) (*Subscription, error) {
	if after < 0 {
		after = 0
	}
	select {
	case <-l.quit:
		return nil, ErrClosed
	default:
	}
	sl := l.session(session)
	s := &Subscription{log: l, sl: sl, last: after, wake: make(chan struct{}, 1)}
	if l.opts.Peers != nil {
		// Other servers' commits reach this subscription through the
		// session's peer feed, on before the subscription looks at what
		// was published (peers.go).
		if err := l.follow(sl); err != nil {
			return nil, err
		}
		s.followed = true
	}
	l.m.subs.Inc()
	return s, nil
}

// Last is the seq of the last event Next returned (or the after value).
func (s *Subscription) Last() int64 { return s.last }

// Next returns the next event. It blocks until one is available, ctx ends,
// or the subscription ends: ErrSlowConsumer when the subscriber fell
// behind, ErrClosed when the log closed, ErrSessionDeleted. Records queued
// before the end are returned first.
func (s *Subscription) Next(ctx context.Context) (Record, error) {
	for {
		r, ok, err := s.TryNext(ctx)
		if err != nil || ok {
			return r, err
		}
		select {
		case <-s.wake:
		case <-ctx.Done():
			return Record{}, ctx.Err()
		}
	}
}

// TryNext returns the next event if one is ready without waiting for live
// events (it may read the store while catching up); ok is false when
// nothing is ready. Used by writers that batch before flushing.
func (s *Subscription) TryNext(ctx context.Context) (r Record, ok bool, err error) {
	for {
		for s.next < len(s.pending) {
			p := s.pending[s.next]
			s.pending[s.next] = nil // the array is reused: hold no record
			s.next++
			if p.unencodable {
				// A stored event that cannot be encoded (written before
				// Append checked, or by another writer): passed over, so
				// that one bad event does not stop the session's stream.
				s.last = max(s.last, p.Event.Seq)
				continue
			}
			// Records published before we registered may repeat what the
			// replay already returned (the store is ahead of publication
			// between commit and publish): skip them.
			if p.Event.Seq > s.last {
				s.last = p.Event.Seq
				return *p, true, nil
			}
		}
		if !s.live {
			if err := s.catchUp(ctx); err != nil {
				return Record{}, false, err
			}
			continue
		}
		more, err := s.take()
		if !more {
			return Record{}, false, err
		}
	}
}

// take moves the queued live records to pending. It reports false when
// none were queued, with the end's error once the subscription ended.
func (s *Subscription) take() (bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.queue) == 0 {
		if s.ended {
			return false, s.err
		}
		return false, nil
	}
	// Swap arrays: the publisher appends into the one the consumer has
	// finished with (all nil by now), so a steady stream allocates nothing.
	s.pending, s.queue, s.next = s.queue, s.pending[:0], 0
	s.queued = 0
	return true, nil
}

// offerLocked queues rec for the subscriber; false when its queue is full,
// in records (max) or in bytes (Options.QueueBytes): the subscriber fell
// behind. sl.mu is held, and s is registered in sl, so it has not ended:
// end follows the removal from sl, under sl.mu.
func (s *Subscription) offerLocked(rec *Record, max int) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := int64(len(rec.JSON))
	if len(s.queue) >= max || (len(s.queue) > 0 && s.queued+n > s.log.opts.QueueBytes) {
		return false
	}
	s.queue = append(s.queue, rec)
	s.queued += n
	return true
}

// FellBehind ends the subscription as a slow consumer, for a transport
// that found its client stuck (a socket write blocked past its deadline)
// rather than its queue full. Next returns what was queued, then
// ErrSlowConsumer. The subscription is counted in
// agentd_event_slow_consumers_total if this call ends it: not when the
// queue bound cut it off already (counted then), nor after Close or
// another end. Safe for concurrent use.
func (s *Subscription) FellBehind() {
	s.sl.mu.Lock()
	defer s.sl.mu.Unlock()
	if s.closed {
		return
	}
	delete(s.sl.subs, s)
	s.mu.Lock()
	ended := s.ended
	if !ended {
		s.ended, s.err = true, ErrSlowConsumer
	}
	s.mu.Unlock()
	if !ended {
		s.log.m.slow.Inc()
	}
	s.signal()
}

// CountSlowConsumer counts, in agentd_event_slow_consumers_total, a
// consumer that was cut off for falling behind and holds no subscription
// (a WebSocket that follows only the session list).
func (l *Log) CountSlowConsumer() { l.m.slow.Inc() }

// signal wakes the consumer if it waits.
func (s *Subscription) signal() {
	select {
	case s.wake <- struct{}{}:
	default: // a wake-up is pending already
	}
}

// end stops queueing: the consumer gets what was queued, then err.
func (s *Subscription) end(err error) {
	s.mu.Lock()
	if !s.ended {
		s.ended, s.err = true, err
	}
	s.mu.Unlock()
	s.signal()
}

// catchUp either registers the subscription for live events (when it has
// seen everything published) or loads the next page of stored events.
//
// It never reads the store while holding sl.mu, which the writer takes to
// publish: the store's tail is read first, then the lock is taken again
// and the two reconciled (see goLive).
func (s *Subscription) catchUp(ctx context.Context) error {
	sl := s.sl
	sl.mu.Lock()
	if s.closed {
		sl.mu.Unlock()
		return ErrClosed
	}
	if s.last >= sl.published {
		if sl.published > 0 || s.log.opts.Peers != nil {
			// The tail is known here (with Peers, follow made the
			// published mark the store's tail before this subscription
			// looked at it, and every commit since is delivered).
			return s.goLiveLocked()
		}
		sl.mu.Unlock()
		// Nothing was published in this process: the store may hold an
		// earlier process's events. Read its tail without the lock.
		stored, err := s.log.store.LastSeq(ctx, sl.id)
		if err != nil {
			return err
		}
		sl.mu.Lock()
		if s.closed {
			sl.mu.Unlock()
			return ErrClosed
		}
		// Record the tail so later checks stay in memory. Without Peers
		// this is safe even if the writer stored events meanwhile that it
		// has not published yet (stored may count them): publish offers
		// every event to every live subscriber whatever the mark says,
		// and those that replayed them pass them over as already seen.
		// (With Peers a delivery at or below the mark is taken as made, so
		// the mark is never moved from here; Peers is handled above.)
		sl.published = max(sl.published, stored)
		if s.last >= sl.published {
			return s.goLiveLocked()
		}
	}
	sl.mu.Unlock()

	events, err := s.log.store.ReadEvents(ctx, sl.id, s.last, s.log.opts.ReplayPage)
	if err != nil {
		return err
	}
	if len(events) == 0 {
		// The store has nothing after s.last yet publication is ahead: the
		// events are being published right now; retry via the live path.
		sl.mu.Lock()
		if s.last >= sl.published {
			sl.mu.Unlock()
			return nil
		}
		sl.mu.Unlock()
		return ErrClosed
	}
	recs := make([]Record, len(events))
	s.pending, s.next = s.pending[:0], 0
	for i, e := range events {
		b, err := Encode(e)
		if err != nil {
			s.log.log.Warn("stored event cannot be encoded; skipped", "session", sl.id, "seq", e.Seq, "err", err)
		}
		recs[i] = Record{Event: e, JSON: b, unencodable: err != nil}
		s.pending = append(s.pending, &recs[i])
	}
	return nil
}

// goLiveLocked (sl.mu held, released on return) registers the subscription
// for live events. The caller checked that it has returned every published
// seq: published seqs are contiguous and everything up to s.last was
// returned, so from here the live queue continues without a gap, and what
// is published later but was stored earlier (at or below s.last) is passed
// over by TryNext.
func (s *Subscription) goLiveLocked() error {
	defer s.sl.mu.Unlock()
	select {
	case <-s.log.quit:
		return ErrClosed
	default:
	}
	s.live = true
	s.sl.subs[s] = struct{}{}
	return nil
}

// Close ends the subscription. Next then returns ErrClosed.
func (s *Subscription) Close() {
	s.sl.mu.Lock()
	if s.closed {
		s.sl.mu.Unlock()
		return
	}
	s.closed = true
	s.log.m.subs.Dec()
	delete(s.sl.subs, s)
	s.end(ErrClosed)
	s.sl.mu.Unlock()
	if s.followed {
		s.log.unfollow(s.sl)
	}
}
