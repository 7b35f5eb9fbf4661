package eventlog

import (
	"context"
)

// Subscription follows one session's events after a seq. Next is not safe
// for concurrent use (one consumer per subscription); Close may be called
// from any goroutine.
type Subscription struct {
	log     *Log
	sl      *sessionLog
	last    int64 // seq of the last record returned by Next
	pending []Record
	live    chan Record // nil while replaying; owned by sl.mu once registered
	err     error       // set under sl.mu before live is closed
	closed  bool
}

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
	l.m.subs.Inc()
	return &Subscription{log: l, sl: l.session(session), last: after}, nil
}

// Last is the seq of the last event Next returned (or the after value).
func (s *Subscription) Last() int64 { return s.last }

// Next returns the next event. It blocks until one is available, ctx ends,
// or the subscription ends: ErrSlowConsumer when the subscriber fell
// behind, ErrClosed when the log closed, ErrSessionDeleted.
func (s *Subscription) Next(ctx context.Context) (Record, error) {
	for {
		if len(s.pending) > 0 {
			r := s.pending[0]
			s.pending = s.pending[1:]
			if r.Event.Seq <= s.last {
				continue
			}
			s.last = r.Event.Seq
			return r, nil
		}
		if s.live == nil {
			if err := s.catchUp(ctx); err != nil {
				return Record{}, err
			}
			continue
		}
		select {
		case r, ok := <-s.live:
			if !ok {
				return Record{}, s.endErr()
			}
			// Records published before we registered may repeat what the
			// replay already returned (the store is ahead of publication
			// between commit and publish): skip them.
			if r.Event.Seq <= s.last {
				continue
			}
			s.last = r.Event.Seq
			return r, nil
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
		for len(s.pending) > 0 {
			r = s.pending[0]
			s.pending = s.pending[1:]
			if r.Event.Seq > s.last {
				s.last = r.Event.Seq
				return r, true, nil
			}
		}
		if s.live == nil {
			if err := s.catchUp(ctx); err != nil {
				return Record{}, false, err
			}
			if len(s.pending) > 0 || s.live == nil {
				continue
			}
		}
		select {
		case r, open := <-s.live:
			if !open {
				return Record{}, false, s.endErr()
			}
			if r.Event.Seq <= s.last {
				continue
			}
			s.last = r.Event.Seq
			return r, true, nil
		default:
			return Record{}, false, nil
		}
	}
}

func (s *Subscription) endErr() error {
	s.sl.mu.Lock()
	defer s.sl.mu.Unlock()
	if s.err != nil {
		return s.err
	}
	return ErrClosed
}

// catchUp either registers the subscription for live events (when it has
// seen everything published) or loads the next page of stored events.
func (s *Subscription) catchUp(ctx context.Context) error {
	s.sl.mu.Lock()
	if s.closed {
		s.sl.mu.Unlock()
		return ErrClosed
	}
	if s.last >= s.sl.published {
		// Published seqs are contiguous and everything up to s.last was
		// returned, so from here the live queue continues without a gap.
		// An empty session (published 0) also lands here: a LastSeq check
		// against the store covers a tail published by an earlier process.
		stored, err := s.storedTailLocked(ctx)
		if err != nil {
			s.sl.mu.Unlock()
			return err
		}
		if s.last >= stored {
			select {
			case <-s.log.quit:
				s.sl.mu.Unlock()
				return ErrClosed
			default:
			}
			s.live = make(chan Record, s.log.opts.QueueSize)
			s.sl.subs[s] = struct{}{}
			s.sl.mu.Unlock()
			return nil
		}
	}
	s.sl.mu.Unlock()

	events, err := s.log.store.ReadEvents(ctx, s.sl.id, s.last, s.log.opts.ReplayPage)
	if err != nil {
		return err
	}
	if len(events) == 0 {
		// The store has nothing after s.last yet publication is ahead: the
		// events are being published right now; retry via the live path.
		s.sl.mu.Lock()
		if s.last >= s.sl.published {
			s.sl.mu.Unlock()
			return nil
		}
		s.sl.mu.Unlock()
		return ErrClosed
	}
	s.pending = make([]Record, len(events))
	for i, e := range events {
		s.pending[i] = Record{Event: e, JSON: Encode(e)}
	}
	return nil
}

// storedTailLocked returns the highest seq that is stored or published.
// When nothing was published in this process it asks the store, so a
// subscriber after a restart replays the history before going live.
func (s *Subscription) storedTailLocked(ctx context.Context) (int64, error) {
	if s.sl.published > 0 {
		return s.sl.published, nil
	}
	last, err := s.log.store.LastSeq(ctx, s.sl.id)
	if err != nil {
		return 0, err
	}
	if last > s.sl.published {
		// Nothing was appended by this process yet, so the store's tail is
		// the published tail: record it so later checks are in memory.
		s.sl.published = last
	}
	return last, nil
}

// Close ends the subscription. Next then returns ErrClosed.
func (s *Subscription) Close() {
	s.sl.mu.Lock()
	defer s.sl.mu.Unlock()
	if s.closed {
		return
	}
	s.closed = true
	s.log.m.subs.Dec()
	if _, ok := s.sl.subs[s]; ok {
		delete(s.sl.subs, s)
		s.err = ErrClosed
		close(s.live)
	}
}
