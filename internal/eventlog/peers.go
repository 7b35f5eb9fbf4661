package eventlog

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/agentd/agentd/conversation"
)

// Peers carries committed events between the servers of a fleet, which
// share one store (internal/bus implements it over NATS). Nothing it
// carries is trusted beyond what the store holds: a message only ever
// announces events that are stored, and a receiver that sees a gap, or is
// told it may have missed messages, reads the store.
//
// With Peers a session's subscribers on any server get every event of the
// session, whichever server appended it, with the same guarantees as on
// the server that did: replay then live, no gap, no duplicate at the seam,
// slow consumers cut off. Each server keeps publishing to its own
// subscribers directly; a server only receives what others publish.
type Peers interface {
	// Publish sends msg to the servers following session. It must not
	// block for long; messages of one session are published one after
	// the other, in commit order.
	Publish(session string, msg []byte) error
	// Follow calls deliver with every message other servers publish for
	// session, in their order, from one goroutine at a time, until stop;
	// and with nil whenever messages may have been lost. Once it returns,
	// every later publication is delivered or reported lost.
	Follow(session string, deliver func(msg []byte)) (stop func(), err error)
}

// publishPeers publishes one session's stored events to the other servers
// and then to this server's subscribers (a fleet).
func (l *Log) publishPeers(sl *sessionLog, events []conversation.Event) {
	recs := make([]*Record, len(events))
	for i, e := range events {
		b, err := Encode(e)
		if err != nil {
			// Append checked every event, so this is a bug; passed over
			// by subscribers (see TryNext) and by peers' receivers.
			l.log.Error("event cannot be encoded; not published", "session", sl.id, "seq", e.Seq, "err", err)
		}
		recs[i] = &Record{Event: e, JSON: b, unencodable: err != nil}
	}
	first, last := events[0].Seq, events[len(events)-1].Seq
	// Other servers first: their clients are the farther away.
	msg := encodePeerMsg(recs, first, last, l.opts.PeerNotices, l.opts.PeerMaxMessage)
	if err := l.opts.Peers.Publish(sl.id, msg); err != nil {
		// Followers on other servers see the gap with the next message.
		l.log.Warn("publish to peers", "session", sl.id, "seq", first, "err", err)
	}
	l.deliver(sl, recs, first, last)
}

// deliver brings the session's subscribers up to last (at least): recs
// (events first..last, or nil for a notice) when they continue what was
// published, else the stored events after what was published (a gap: a
// message missed, a notice) followed by what of recs is newer. Without
// subscribers it only moves the published mark: a new subscriber replays
// from the store up to it.
//
// It takes only sl.mu, and never holds it across the store read that fills
// a gap, so the writer (which delivers its own commits here) never waits on
// a store read made for another delivery. Deliveries may therefore run
// concurrently (the writer's and the peer feed's): published only grows,
// and each delivery publishes only records that continue it (a gap is read
// from a mark at or below the current one, through last at least), so the
// subscribers' stream stays contiguous and without repeats.
func (l *Log) deliver(sl *sessionLog, recs []*Record, first, last int64) {
	sl.mu.Lock()
	p := sl.published
	if last <= p {
		sl.mu.Unlock()
		return // delivered already
	}
	if len(sl.subs) == 0 {
		sl.published = last
		sl.mu.Unlock()
		return
	}
	if recs != nil && first <= p+1 {
		sl.publishRecordsLocked(l, recs)
		sl.mu.Unlock()
		return
	}
	sl.mu.Unlock()
	fill, err := l.readStored(sl.id, p, last)
	sl.mu.Lock()
	defer sl.mu.Unlock()
	if err != nil {
		if sl.published >= last {
			return // another delivery got there meanwhile
		}
		// Subscribers cannot get a contiguous stream from here: cut them
		// off, as slow consumers, to resume from their last seq.
		l.log.Error("fill a gap in a session's stream from the store", "session", sl.id, "after", p, "err", err)
		for s := range sl.subs {
			sl.dropLocked(s, ErrSlowConsumer)
		}
		return
	}
	if n := len(fill); n > 0 {
		top := fill[n-1].Event.Seq
		for _, r := range recs {
			if r.Event.Seq > top {
				fill = append(fill, r)
			}
		}
	} else {
		fill = recs
	}
	l.m.gapFills.Inc()
	sl.publishRecordsLocked(l, fill)
}

// readStored reads the session's stored events after seq after, through
// last at least (all of them: pages until the store has no more).
func (l *Log) readStored(id string, after, last int64) ([]*Record, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var out []*Record
	for {
		evs, err := l.store.ReadEvents(ctx, id, after, l.opts.ReplayPage)
		if err != nil {
			return nil, err
		}
		for _, e := range evs {
			b, err := Encode(e)
			out = append(out, &Record{Event: e, JSON: b, unencodable: err != nil})
			after = e.Seq
		}
		if len(evs) < l.opts.ReplayPage || after >= last {
			if after < last {
				return nil, fmt.Errorf("the store has seq %d, a peer announced %d", after, last)
			}
			return out, nil
		}
	}
}

// publishRecordsLocked (sl.mu held) queues recs after what was published
// for every subscriber, cutting off those whose queue is full. recs follow
// each other; those at or below published are passed over, and the first
// above it must be published+1 (else, a bug, the subscribers are cut off
// rather than given a stream with a hole).
func (sl *sessionLog) publishRecordsLocked(l *Log, recs []*Record) {
	var cut []*Subscription
	for _, rec := range recs {
		if rec.Event.Seq <= sl.published {
			continue
		}
		if rec.Event.Seq != sl.published+1 {
			l.log.Error("delivery would leave a gap; subscribers cut off", "session", sl.id, "published", sl.published, "seq", rec.Event.Seq)
			for s := range sl.subs {
				sl.dropLocked(s, ErrSlowConsumer)
			}
			sl.published = recs[len(recs)-1].Event.Seq
			return
		}
		sl.published = rec.Event.Seq
		cut = sl.deliverLocked(l, rec, cut)
	}
	for s := range sl.subs {
		s.signal()
	}
}

// fromPeer handles a message another server published for the session
// (nil: messages may have been lost). It runs on the Peers' delivery
// goroutine and holds sl.dmu, so it is ordered with follow and unfollow;
// the writer never takes sl.dmu, so a store read made here (a gap, a
// resync) delays this session's feed and its Subscribe and Close calls,
// never the writer.
func (l *Log) fromPeer(sl *sessionLog, msg []byte) {
	sl.dmu.Lock()
	defer sl.dmu.Unlock()
	if sl.follows == 0 {
		return // no longer followed
	}
	l.m.peerMsgs.Inc()
	if msg == nil {
		l.resyncLocked(sl)
		return
	}
	recs, first, last, err := decodePeerMsg(msg)
	if err != nil {
		l.log.Warn("malformed message from a peer; reading the store", "session", sl.id, "err", err)
		l.resyncLocked(sl)
		return
	}
	l.deliver(sl, recs, first, last)
}

// resyncLocked (sl.dmu held) brings the subscribers up to the store's
// tail: when the feed starts and when messages may have been lost. It reads
// the store with sl.dmu held (never sl.mu).
func (l *Log) resyncLocked(sl *sessionLog) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	last, err := l.store.LastSeq(ctx, sl.id)
	cancel()
	if err != nil {
		l.log.Error("read a session's last seq", "session", sl.id, "err", err)
		sl.mu.Lock()
		for s := range sl.subs {
			sl.dropLocked(s, ErrSlowConsumer)
		}
		sl.mu.Unlock()
		return
	}
	l.deliver(sl, nil, 0, last)
}

// follow starts (or counts one more user of) the session's peer feed. It
// returns once the feed is on and the published mark is the store's tail,
// so a subscriber that goes live afterwards misses nothing.
func (l *Log) follow(sl *sessionLog) error {
	sl.dmu.Lock()
	defer sl.dmu.Unlock()
	sl.follows++
	if sl.follows > 1 {
		return nil
	}
	stop, err := l.opts.Peers.Follow(sl.id, func(msg []byte) { l.fromPeer(sl, msg) })
	if err != nil {
		sl.follows--
		return fmt.Errorf("eventlog: follow session on peers: %w", err)
	}
	sl.stopFollow = stop
	l.resyncLocked(sl)
	sl.mu.Lock()
	sl.followed = true
	sl.mu.Unlock()
	return nil
}

// unfollow ends one user of the session's peer feed; the last stops it.
func (l *Log) unfollow(sl *sessionLog) {
	sl.dmu.Lock()
	defer sl.dmu.Unlock()
	sl.follows--
	if sl.follows > 0 {
		return
	}
	sl.follows = 0
	l.stopFollowLocked(sl)
}

func (l *Log) stopFollowLocked(sl *sessionLog) {
	if sl.stopFollow != nil {
		sl.stopFollow()
		sl.stopFollow = nil
	}
	sl.mu.Lock()
	sl.followed = false
	sl.mu.Unlock()
}

// Peer messages: a header line "E <first> <last>" followed by the events'
// envelopes, one a line (compact JSON has no newline), or a notice, the
// header "N <first> <last>" alone: the events are read from the store.

func encodePeerMsg(recs []*Record, first, last int64, notice bool, maxBytes int) []byte {
	size := 32
	for _, r := range recs {
		size += len(r.JSON) + 1
		if r.unencodable {
			notice = true // receivers read the store and skip it there
		}
	}
	if notice || size > maxBytes {
		return fmt.Appendf(nil, "N %d %d\n", first, last)
	}
	b := make([]byte, 0, size)
	b = fmt.Appendf(b, "E %d %d\n", first, last)
	for _, r := range recs {
		b = append(append(b, r.JSON...), '\n')
	}
	return b
}

var errPeerMsg = errors.New("malformed peer message")

// decodePeerMsg returns a message's events (nil for a notice) and range.
func decodePeerMsg(msg []byte) (recs []*Record, first, last int64, err error) {
	head, body, _ := bytes.Cut(msg, []byte{'\n'})
	f := bytes.Fields(head)
	if len(f) != 3 || (string(f[0]) != "E" && string(f[0]) != "N") {
		return nil, 0, 0, fmt.Errorf("%w: header %q", errPeerMsg, head)
	}
	if first, err = strconv.ParseInt(string(f[1]), 10, 64); err != nil || first <= 0 {
		return nil, 0, 0, fmt.Errorf("%w: header %q", errPeerMsg, head)
	}
	if last, err = strconv.ParseInt(string(f[2]), 10, 64); err != nil || last < first {
		return nil, 0, 0, fmt.Errorf("%w: header %q", errPeerMsg, head)
	}
	if string(f[0]) == "N" {
		return nil, first, last, nil
	}
	if last-first >= int64(len(body)) { // at least a byte per event: bounds the slice
		return nil, 0, 0, fmt.Errorf("%w: %d events in %d bytes", errPeerMsg, last-first+1, len(body))
	}
	recs = make([]*Record, 0, last-first+1)
	all := make([]Record, last-first+1)
	for seq := first; seq <= last; seq++ {
		line, rest, ok := bytes.Cut(body, []byte{'\n'})
		if !ok {
			return nil, 0, 0, fmt.Errorf("%w: %d events, want %d", errPeerMsg, seq-first, last-first+1)
		}
		body = rest
		r := &all[seq-first]
		if err := json.Unmarshal(line, &r.Event); err != nil {
			return nil, 0, 0, fmt.Errorf("%w: event %d: %v", errPeerMsg, seq, err)
		}
		if r.Event.Seq != seq {
			return nil, 0, 0, fmt.Errorf("%w: event seq %d, want %d", errPeerMsg, r.Event.Seq, seq)
		}
		r.JSON = line
		recs = append(recs, r)
	}
	if len(body) != 0 {
		return nil, 0, 0, fmt.Errorf("%w: %d bytes after the last event", errPeerMsg, len(body))
	}
	return recs, first, last, nil
}
