// Package eventlog is agentd's durable per-session event log.
//
// Append assigns each event the next seq of its session when, and only when,
// the event is stored: one writer goroutine takes every pending append, of
// every session, and stores them in one store transaction (group commit), so
// under load many events share one fsync. (For a store that asks for it the
// writer keeps several such commits in flight, each in a goroutine of its
// own, at most one per session: pipeline.go.) Only after the commit are the
// events published to subscribers.
//
// Subscribe(session, after) replays the stored events after a seq and then
// follows the live tail, with no gap and no duplicate at the seam. Each live
// subscriber has a bounded queue; a subscriber that falls behind is cut off
// with ErrSlowConsumer (never slowing the writer, the agent or other
// subscribers) and resumes with a new Subscribe from its last seq.
package eventlog

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/agentd/agentd/conversation"
	"github.com/agentd/agentd/store"
)

var (
	// ErrClosed: the log is closed (server shutting down).
	ErrClosed = errors.New("eventlog: closed")
	// ErrSlowConsumer: the subscriber fell behind its queue bound and was
	// disconnected; it should resubscribe after its last seq.
	ErrSlowConsumer = errors.New("eventlog: subscriber fell behind")
	// ErrSessionDeleted: the session was deleted while subscribed.
	ErrSessionDeleted = errors.New("eventlog: session deleted")
	// ErrInvalidEvent: Append was given an event it cannot store (unknown
	// type, or one JSON cannot carry); none of the call's events was stored.
	ErrInvalidEvent = errors.New("eventlog: invalid event")
)

// Record is a stored event and its JSON envelope, encoded once and shared by
// every subscriber. Neither may be modified.
type Record struct {
	Event conversation.Event
	JSON  []byte

	unencodable bool // passed over by subscribers (see TryNext)
}

// Options tune a Log. Zero values take the defaults.
type Options struct {
	// MaxBatch bounds the events per store transaction (default 2048).
	MaxBatch int
	// QueueSize bounds each live subscriber's queue (default 4096 events).
	QueueSize int
	// QueueBytes bounds the bytes (encoded envelopes) waiting in each live
	// subscriber's queue (default 128 MiB): one event may be tens of MiB,
	// so the record count alone bounds no memory. A record offered to an
	// empty queue always fits.
	QueueBytes int64
	// ReplayPage is the number of events read from the store at a time
	// while a subscriber catches up (default 1024).
	ReplayPage int
	// Now stamps events that carry no timestamp (default time.Now).
	Now func() time.Time
	// Registerer receives the log's metrics when set.
	Registerer prometheus.Registerer
	Logger     *slog.Logger

	// CommitDepth is how many group commits may be in flight at once (at
	// most one per session, so each session's seqs stay gap-free and its
	// events are published in order). 0: what the store asks for (a store
	// with an AppendConcurrency method, e.g. PostgreSQL, whose commits each
	// wait for a WAL flush), else 1 (SQLite: one writer connection).
	CommitDepth int
	// Peers, when set, connects the log to the other servers sharing its
	// store (a fleet; see peers.go): every commit is also published to
	// them, and subscribers get what they commit too.
	Peers Peers
	// PeerNotices publishes only the seq range of each commit on Peers,
	// and receivers read the events from the store, instead of the events
	// themselves (kept for comparison; see docs/benchmarks.md).
	PeerNotices bool
	// PeerMaxMessage bounds a message to Peers (default 256 KiB): a larger
	// commit is announced as a notice and read from the store.
	PeerMaxMessage int
}

// Log is the event log. All methods are safe for concurrent use.
//
// Locks, in the order they may be taken (a lock is only ever taken while
// holding those above it, never the other way):
//
//	Log.closeMu      read-held by Append while queueing; alone
//	Log.mu           the sessions map; alone (nothing is taken under it)
//	sessionLog.dmu   with Peers: follow/unfollow and the peer feed
//	sessionLog.mu    a session's subscribers and published mark
//	Subscription.mu  a subscription's queue
//
// Neither Log.mu nor sessionLog.mu nor Subscription.mu is ever held across
// a store call or a send to a client; the writer takes sessionLog.mu (to
// publish) and Subscription.mu (to queue), and nothing else.
type Log struct {
	store store.EventStore
	opts  Options
	log   *slog.Logger
	m     *metrics

	reqs chan *appendReq
	quit chan struct{} // closed by Close: stop accepting
	done chan struct{} // closed when the writer has drained and exited

	mu       sync.Mutex // guards sessions and closed; no other lock is taken under it
	sessions map[string]*sessionLog
	closed   bool

	closeMu sync.RWMutex // read-held while queueing a request (see Append); no other lock is taken under it
	closing bool         // guarded by closeMu

	depth int // group commits in flight at most (Options.CommitDepth)
}

// sessionLog is one session's in-memory tail: the next seq to assign (only
// touched by the writer goroutine) and the live subscribers.
type sessionLog struct {
	id      string
	nextSeq int64 // 0 until loaded from the store; writer goroutine only
	// fenceGen is the lease generation of the last fenced append (writer
	// goroutine only): a new one means the session may have been written
	// by another server since, so nextSeq is loaded again.
	fenceGen int64

	// mu guards published, subs, followed and each subscription's closed
	// flag. The writer takes it to publish, so it is never held across a
	// store call (catchUp reads the store's tail first, then takes it and
	// reconciles). Subscription.mu may be taken inside it, never the other
	// way.
	mu        sync.Mutex
	published int64 // highest seq offered to the subscribers (or known stored, see catchUp)
	subs      map[*Subscription]struct{}

	// With Peers (peers.go): dmu orders the peer feed's deliveries with
	// follow and unfollow, and guards follows and stopFollow. It is held
	// across store reads (the feed's resync and gap fills, follow's first
	// resync) but never taken by the writer, whose deliveries take only mu
	// (see deliver). mu may be taken inside dmu, never the other way.
	dmu        sync.Mutex
	follows    int    // subscriptions following the session's peer feed
	stopFollow func() // ends the peer feed
	followed   bool   // the feed is on and published tracks the store; guarded by mu
}

type appendReq struct {
	ctx     context.Context
	session string
	sl      *sessionLog // set by the pipelined writer
	fence   int64       // lease generation; 0: unfenced
	events  []conversation.Event
	start   time.Time
	done    chan error // buffered(1)
}

// New starts a log over st. Close stops it.
func New(st store.EventStore, opts Options) *Log {
	if opts.MaxBatch <= 0 {
		opts.MaxBatch = 2048
	}
	if opts.QueueSize <= 0 {
		opts.QueueSize = 4096
	}
	if opts.QueueBytes <= 0 {
		opts.QueueBytes = DefaultQueueBytes
	}
	if opts.ReplayPage <= 0 {
		opts.ReplayPage = 1024
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	l := &Log{
		store:    st,
		opts:     opts,
		log:      opts.Logger,
		m:        newMetrics(opts.Registerer),
		reqs:     make(chan *appendReq, 1024),
		quit:     make(chan struct{}),
		done:     make(chan struct{}),
		sessions: make(map[string]*sessionLog),
		depth:    opts.CommitDepth,
	}
	if l.depth <= 0 {
		l.depth = 1
		if c, ok := st.(concurrentAppender); ok {
			l.depth = max(1, c.AppendConcurrency())
		}
	}
	if opts.PeerMaxMessage <= 0 {
		l.opts.PeerMaxMessage = 256 << 10
	}
	if l.depth > 1 {
		go l.pipelined()
	} else {
		go l.writer()
	}
	return l
}

// concurrentAppender is implemented by stores whose appends may run
// concurrently (each on a connection of its own) and gain from it: the
// number is how many group commits the log keeps in flight.
type concurrentAppender interface {
	AppendConcurrency() int
}

// Append stores events for session and returns them with their seqs and
// context filled in, after they are durable and published. Unset context
// fields get defaults: SessionID = session, ConversationID = main, Source =
// server, Timestamp = now (ms precision). On error none of the events were
// stored. An event that could not be encoded for subscribers (a payload
// that is not JSON, a timestamp outside what RFC 3339 can carry) is refused
// here, in the caller's goroutine, with ErrInvalidEvent: the writer only
// ever holds events it can publish, so one bad event never costs another
// appender its events nor the process its writer.
func (l *Log) Append(ctx context.Context, session string, events ...conversation.Event) ([]conversation.Event, error) {
	return l.append(ctx, session, 0, events)
}

// AppendFenced is Append for the holder of the session's lease: the events
// are stored only while generation (what store.LeaseStore.AcquireLease
// returned) is still the lease's, checked in the store transaction; once
// another server has taken the session over it fails with an error
// matching store.ErrFenced and stores nothing. Other sessions' events in
// the same group commit are stored all the same.
func (l *Log) AppendFenced(ctx context.Context, session string, generation int64, events ...conversation.Event) ([]conversation.Event, error) {
	if generation <= 0 {
		return nil, fmt.Errorf("eventlog: append: lease generation %d, want > 0", generation)
	}
	return l.append(ctx, session, generation, events)
}

// append queues events for the writer; fence is the lease generation, 0
// for an unfenced append.
func (l *Log) append(ctx context.Context, session string, fence int64, events []conversation.Event) ([]conversation.Event, error) {
	if len(events) == 0 {
		return nil, nil
	}
	if session == "" {
		return nil, errors.New("eventlog: append without session id")
	}
	for i := range events {
		if !events[i].Type.Valid() {
			return nil, fmt.Errorf("%w: unknown event type %q", ErrInvalidEvent, events[i].Type)
		}
		if err := checkEncodable(events[i]); err != nil {
			return nil, fmt.Errorf("%w: %s event %d of %d: %v", ErrInvalidEvent, events[i].Type, i+1, len(events), err)
		}
	}
	r := &appendReq{ctx: ctx, session: session, fence: fence, events: events, start: time.Now(), done: make(chan error, 1)}
	// closeMu makes "queued" and "closed" exclusive: a request queued under
	// the read lock is seen by the writer's final drain, and none is queued
	// after Close. The send cannot block for long: until closed, the writer
	// keeps taking requests.
	l.closeMu.RLock()
	if l.closing {
		l.closeMu.RUnlock()
		return nil, ErrClosed
	}
	select {
	case l.reqs <- r:
	case <-ctx.Done():
		l.closeMu.RUnlock()
		return nil, ctx.Err()
	}
	l.closeMu.RUnlock()
	// Once queued, the request is always answered: the writer drains the
	// queue before exiting. Waiting past ctx would be wrong too: the events
	// may be committed, and the caller must learn their seqs.
	if err := <-r.done; err != nil {
		return nil, err
	}
	return r.events, nil
}

// LastSeq returns the highest published seq of a session.
func (l *Log) LastSeq(ctx context.Context, session string) (int64, error) {
	sl := l.session(session)
	sl.mu.Lock()
	p, followed := sl.published, sl.followed
	sl.mu.Unlock()
	// In a fleet another server may have appended since: only a session
	// whose peer feed is on is known here.
	if p > 0 && (l.opts.Peers == nil || followed) {
		return p, nil
	}
	return l.store.LastSeq(ctx, session)
}

// Read returns up to limit stored events after a seq (limit <= 0: all).
func (l *Log) Read(ctx context.Context, session string, after int64, limit int) ([]conversation.Event, error) {
	return l.store.ReadEvents(ctx, session, after, limit)
}

// Forget drops a deleted session's tail and disconnects its subscribers
// with ErrSessionDeleted.
func (l *Log) Forget(session string) {
	l.mu.Lock()
	sl := l.sessions[session]
	delete(l.sessions, session)
	l.mu.Unlock()
	if sl != nil {
		sl.closeAll(ErrSessionDeleted)
	}
}

// Close stops accepting appends, finishes storing and publishing those
// already queued, and disconnects every subscriber with ErrClosed.
func (l *Log) Close() error {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		<-l.done
		return nil
	}
	l.closed = true
	l.mu.Unlock()
	l.closeMu.Lock()
	l.closing = true
	l.closeMu.Unlock()
	close(l.quit)
	<-l.done
	l.mu.Lock()
	all := make([]*sessionLog, 0, len(l.sessions))
	for _, sl := range l.sessions {
		all = append(all, sl)
	}
	l.mu.Unlock()
	for _, sl := range all {
		sl.closeAll(ErrClosed)
		if l.opts.Peers != nil {
			// Subscriptions not closed by their users stop their feed.
			sl.dmu.Lock()
			sl.follows = 0
			l.stopFollowLocked(sl)
			sl.dmu.Unlock()
		}
	}
	return nil
}

func (l *Log) session(id string) *sessionLog {
	l.mu.Lock()
	defer l.mu.Unlock()
	sl, ok := l.sessions[id]
	if !ok {
		sl = &sessionLog{id: id, subs: make(map[*Subscription]struct{})}
		l.sessions[id] = sl
	}
	return sl
}

// writer is the single goroutine that assigns seqs and stores events.
func (l *Log) writer() {
	defer close(l.done)
	for {
		var first *appendReq
		select {
		case first = <-l.reqs:
		case <-l.quit:
			// Drain what was queued before Close.
			for {
				select {
				case r := <-l.reqs:
					l.commit(l.gather(r))
				default:
					return
				}
			}
		}
		// Let the goroutines that are ready to run go first: under load
		// they are often appenders about to queue (a line read while this
		// writer was busy), and one commit then carries their events too.
		// With nothing else ready it returns at once.
		runtime.Gosched()
		batch := l.gather(first)
		l.commit(batch)
		// The appenders just answered will often append again at once: when
		// this batch had several, let them run before gathering the next, so
		// the next commit carries their events together instead of one each.
		if len(batch) > 1 {
			runtime.Gosched()
		}
	}
}

// gather collects first and whatever else is queued, up to MaxBatch events.
func (l *Log) gather(first *appendReq) []*appendReq {
	batch := []*appendReq{first}
	n := len(first.events)
	for n < l.opts.MaxBatch {
		select {
		case r := <-l.reqs:
			batch = append(batch, r)
			n += len(r.events)
		default:
			return batch
		}
	}
	return batch
}

func (l *Log) commit(batch []*appendReq) {
	live, marks, all := l.assign(batch)
	if len(all) == 0 {
		return
	}
	out := l.storeBatch(live, all)
	if !out.stored {
		l.undo(marks, out)
	}
	if len(out.again) > 0 {
		l.commit(out.again)
	}
}

// mark is a session's next seq before a batch numbered its events.
type mark struct {
	sl   *sessionLog
	prev int64
}

// assign numbers the events of batch (writer goroutine): each session's
// next seqs, and the context defaults. Requests whose caller gave up,
// stale fences and sessions whose last seq cannot be read are answered
// here and left out of live; all holds live's events in order.
func (l *Log) assign(batch []*appendReq) (live []*appendReq, marks []mark, all []conversation.Event) {
	// Requests whose caller gave up before we started are dropped unstored.
	live = batch[:0]
	for _, r := range batch {
		if err := r.ctx.Err(); err != nil {
			r.done <- err
			continue
		}
		live = append(live, r)
	}
	live = l.dropStaleFences(live)
	if len(live) == 0 {
		return nil, nil, nil
	}
	now := l.opts.Now().UTC().Truncate(time.Millisecond)
	seen := make(map[*sessionLog]bool)
	ok := live[:0]
	for _, r := range live {
		sl := r.sl
		if sl == nil {
			sl = l.session(r.session)
		}
		if r.fence > 0 && r.fence != sl.fenceGen && !seen[sl] {
			// A generation new to this log: another server may have
			// written the session since we last did.
			sl.fenceGen, sl.nextSeq = r.fence, 0
		}
		if sl.nextSeq == 0 {
			last, err := l.store.LastSeq(r.ctx, r.session)
			if err != nil {
				r.done <- fmt.Errorf("eventlog: load last seq: %w", err)
				continue
			}
			sl.nextSeq = last + 1
		}
		if !seen[sl] {
			seen[sl] = true
			marks = append(marks, mark{sl, sl.nextSeq})
		}
		for i := range r.events {
			e := &r.events[i]
			e.Seq = sl.nextSeq
			sl.nextSeq++
			e.Context.SessionID = r.session
			if e.Context.ConversationID == "" {
				e.Context.ConversationID = conversation.MainConversation
			}
			if e.Context.Source == "" {
				e.Context.Source = conversation.SourceServer
			}
			if e.Context.Timestamp.IsZero() {
				e.Context.Timestamp = now
			}
			if len(e.Payload) == 0 {
				e.Payload = json.RawMessage("{}")
			}
		}
		all = append(all, r.events...)
		ok = append(ok, r)
	}
	return ok, marks, all
}

// outcome is what storing a batch came to.
type outcome struct {
	stored bool
	// again are requests to number and store again (the batch was fenced:
	// the other sessions' requests).
	again []*appendReq
	// reload names the sessions whose next seq must be read from the store
	// again (nil with reloadAll).
	reload    map[string]bool
	reloadAll bool
}

// storeBatch stores the events assign numbered in one store call, then
// publishes them and answers their appenders. It touches no writer-only
// state, so the pipelined writer runs it in a goroutine of its own.
func (l *Log) storeBatch(live []*appendReq, all []conversation.Event) outcome {
	start := time.Now()
	// The store write is not bound to any one caller's context: it carries
	// every caller's events.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	err := l.store.AppendEvents(ctx, all, fences(live)...)
	cancel()
	l.m.observeCommit(len(all), time.Since(start), err)
	if fe := (*store.FencedError)(nil); errors.As(err, &fe) && len(fe.Sessions) > 0 {
		// Nothing was stored. The stale sessions' fenced appends fail;
		// everything else is stored again, with seqs assigned anew.
		stale := make(map[string]bool, len(fe.Sessions))
		for _, id := range fe.Sessions {
			stale[id] = true
		}
		var again []*appendReq
		for _, r := range live {
			if r.fence > 0 && stale[r.session] {
				r.done <- fmt.Errorf("eventlog: store events: %w", err)
				continue
			}
			again = append(again, r)
		}
		if len(again) < len(live) { // else a store naming sessions it was not given: fail below
			// Another server writes the stale sessions: reload their seqs.
			l.log.Warn("event append fenced: lease lost to another server", "sessions", fe.Sessions)
			return outcome{again: again, reload: stale}
		}
	}
	if err != nil {
		l.log.Error("event append failed", "events", len(all), "err", err)
		for _, r := range live {
			r.done <- fmt.Errorf("eventlog: store events: %w", err)
		}
		// Nothing of the batch was stored: the seqs are given back. On a
		// seq conflict another writer owns the session; reload next time.
		return outcome{reloadAll: errors.Is(err, store.ErrSeqConflict)}
	}
	l.publishBatch(live)
	for _, r := range live {
		l.m.latency.Observe(time.Since(r.start).Seconds())
		r.done <- nil
	}
	return outcome{stored: true}
}

// undo gives back the seqs of a batch that was not stored (writer
// goroutine).
func (l *Log) undo(marks []mark, out outcome) {
	for _, mk := range marks {
		mk.sl.nextSeq = mk.prev
		if out.reloadAll || out.reload[mk.sl.id] {
			mk.sl.nextSeq = 0
		}
	}
}

// publishBatch publishes a stored batch, each session's events at once.
func (l *Log) publishBatch(live []*appendReq) {
	if len(live) == 1 || l.opts.Peers == nil {
		for _, r := range live {
			l.publishSession(r.session, r.sl, r.events)
		}
		return
	}
	// One peer message per session and commit: gather each session's
	// events (their seqs follow each other in request order).
	type group struct {
		sl     *sessionLog
		events []conversation.Event
	}
	var order []string
	groups := make(map[string]*group)
	for _, r := range live {
		g := groups[r.session]
		if g == nil {
			g = &group{sl: r.sl}
			groups[r.session] = g
			order = append(order, r.session)
		}
		g.events = append(g.events, r.events...)
	}
	for _, id := range order {
		l.publishSession(id, groups[id].sl, groups[id].events)
	}
}

// publishSession publishes one session's stored events: to the local
// subscribers, and with Peers to the other servers.
func (l *Log) publishSession(id string, sl *sessionLog, events []conversation.Event) {
	if sl == nil {
		sl = l.session(id)
	}
	if l.opts.Peers == nil {
		sl.publish(l, events)
		return
	}
	l.publishPeers(sl, events)
}

// dropStaleFences fails the fenced requests of a session whose fence is
// lower than another request's of the same session in batch (a
// generation only grows, so the lower one is stale) and returns the rest;
// a session's fence in the store call is then one generation.
func (l *Log) dropStaleFences(batch []*appendReq) []*appendReq {
	var top map[string]int64
	for _, r := range batch {
		if r.fence > 0 {
			if top == nil {
				top = make(map[string]int64)
			}
			top[r.session] = max(top[r.session], r.fence)
		}
	}
	if top == nil {
		return batch
	}
	kept := make([]*appendReq, 0, len(batch))
	for _, r := range batch {
		if r.fence > 0 && r.fence < top[r.session] {
			r.done <- fmt.Errorf("eventlog: store events: %w", &store.FencedError{Sessions: []string{r.session}})
			continue
		}
		kept = append(kept, r)
	}
	return kept
}

// fences returns the store fences of batch: one per session with fenced
// requests (dropStaleFences left one generation per session).
func fences(batch []*appendReq) []store.Fence {
	var out []store.Fence
	var seen map[string]bool
	for _, r := range batch {
		if r.fence == 0 || seen[r.session] {
			continue
		}
		if seen == nil {
			seen = make(map[string]bool)
		}
		seen[r.session] = true
		out = append(out, store.Fence{SessionID: r.session, Generation: r.fence})
	}
	return out
}

// publish hands events to every live subscriber without blocking; a
// subscriber whose queue is full is cut off.
func (sl *sessionLog) publish(l *Log, events []conversation.Event) {
	sl.mu.Lock()
	defer sl.mu.Unlock()
	if n := events[len(events)-1].Seq; n > sl.published {
		sl.published = n
	}
	if len(sl.subs) == 0 {
		return
	}
	var cut []*Subscription
	for _, e := range events {
		b, err := Encode(e)
		if err != nil {
			// Append checked every event, so this is a bug; it is stored,
			// so subscribers that replay skip it too (see TryNext).
			l.log.Error("event cannot be encoded; not published", "session", sl.id, "seq", e.Seq, "err", err)
		}
		rec := &Record{Event: e, JSON: b, unencodable: err != nil}
		cut = sl.deliverLocked(l, rec, cut)
	}
	// One wake-up per subscriber for the whole batch.
	for s := range sl.subs {
		s.signal()
	}
}

// deliverLocked offers rec to every subscriber and cuts off, as slow
// consumers, those whose queue is full. cut is scratch space, returned
// empty for the next record.
func (sl *sessionLog) deliverLocked(l *Log, rec *Record, cut []*Subscription) []*Subscription {
	for s := range sl.subs {
		if !s.offerLocked(rec, l.opts.QueueSize) {
			cut = append(cut, s)
		}
	}
	for _, s := range cut {
		l.m.slow.Inc()
		sl.dropLocked(s, ErrSlowConsumer)
	}
	return cut[:0]
}

// dropLocked unregisters s; its consumer gets what was queued, then err.
func (sl *sessionLog) dropLocked(s *Subscription, err error) {
	if _, ok := sl.subs[s]; !ok {
		return
	}
	delete(sl.subs, s)
	s.end(err)
}

func (sl *sessionLog) closeAll(err error) {
	sl.mu.Lock()
	defer sl.mu.Unlock()
	for s := range sl.subs {
		sl.dropLocked(s, err)
	}
}

// Encode returns the JSON envelope of e. It fails only for what
// checkEncodable refuses.
func Encode(e conversation.Event) ([]byte, error) {
	b, err := json.Marshal(e)
	if err != nil {
		return nil, fmt.Errorf("eventlog: encode %s event %d: %w", e.Type, e.Seq, err)
	}
	return b, nil
}

// checkEncodable returns why Encode would fail on e (once the writer has
// filled in its context), or nil. Payloads are not assumed to be valid:
// conversation.NewEvent makes them with json.Marshal, but converters also
// write them by hand (claudecode's jsonenc.go) or pass an agent's JSON
// through, so each is checked here. Of an Event's fields only two can make
// json.Marshal fail: a raw payload that is not JSON, and a timestamp that
// RFC 3339 cannot carry (a year outside 0–9999, a zone offset of a day or
// more); strings always encode. FuzzAppendCheck holds the two together.
func checkEncodable(e conversation.Event) error {
	if len(e.Payload) > 0 && !json.Valid(e.Payload) {
		return errors.New("payload is not valid JSON")
	}
	var buf [64]byte
	if _, err := e.Context.Timestamp.AppendText(buf[:0]); err != nil {
		return fmt.Errorf("timestamp: %w", err)
	}
	return nil
}
