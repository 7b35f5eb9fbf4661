package eventlog

import "runtime"

// The pipelined writer keeps several group commits in flight (depth > 1),
// for stores whose commit waits on something other than this process: a
// PostgreSQL commit waits about a millisecond for its WAL flush, and with
// one commit in flight the log would store at most a batch per flush.
//
// A session has at most one batch in flight. Its later appends wait
// (held) until that batch has been stored, published and answered, or
// failed and its seqs given back; then they are numbered from where it
// ended. So each session's seqs stay gap-free and its events are
// published in seq order, while other sessions' batches go on.

// pipeline is the pipelined writer's state; only its goroutine touches it.
type pipeline struct {
	l        *Log
	ready    []*appendReq                 // in arrival order; none of a busy session
	held     map[*sessionLog][]*appendReq // a busy session's later appends, in order
	busy     map[*sessionLog]bool         // sessions with a batch in flight
	inflight int
	landed   chan flight
}

// flight is a batch's outcome, returned to the writer.
type flight struct {
	marks []mark
	out   outcome
}

func (l *Log) pipelined() {
	defer close(l.done)
	p := &pipeline{
		l: l, held: make(map[*sessionLog][]*appendReq), busy: make(map[*sessionLog]bool),
		landed: make(chan flight, l.depth),
	}
	quit := l.quit
	for {
		p.launch()
		if quit == nil && p.inflight == 0 && len(p.ready) == 0 {
			return // closed and drained (nothing is held without a flight)
		}
		select {
		case r := <-l.reqs:
			p.add(r)
			if p.inflight == 0 {
				// As the one-commit writer does: let appenders about to
				// queue go first, so the batch carries their events too.
				runtime.Gosched()
			}
			p.gather()
		case f := <-p.landed:
			p.land(f)
			if p.inflight == 0 {
				// The appenders this batch answered often append again at
				// once: let them queue before the next batch starts, or it
				// carries only those that waited during the flight, and
				// the appenders settle into two halves committed in turn
				// (half the events per commit; docs/benchmarks.md).
				p.regather(len(f.marks))
			}
		case <-quit:
			// Close queued nothing after this (see Append): take the rest.
			quit = nil
			p.gather()
		}
	}
}

// regatherRounds bounds regather's yields.
const regatherRounds = 8

// regather gives the appenders a landed batch answered (about answered
// sessions) the chance to append again before the next batch starts: it
// yields and gathers, again while each yield brought appends and fewer
// sessions than answered are ready, at most regatherRounds times. One
// yield lets only the goroutines queued on this P run: with 64 appenders
// the next batch then carried about 45 of their events, and every commit
// costs a WAL flush (docs/benchmarks.md).
func (p *pipeline) regather(answered int) {
	for range regatherRounds {
		n := len(p.ready)
		runtime.Gosched()
		p.gather()
		if len(p.ready) == n || len(p.ready) >= answered {
			return
		}
	}
}

// gather adds whatever else is queued.
func (p *pipeline) gather() {
	for {
		select {
		case r := <-p.l.reqs:
			p.add(r)
		default:
			return
		}
	}
}

func (p *pipeline) add(r *appendReq) {
	r.sl = p.l.session(r.session)
	if p.busy[r.sl] {
		p.held[r.sl] = append(p.held[r.sl], r)
		return
	}
	p.ready = append(p.ready, r)
}

// flightMin is how many events must be ready to start a batch while
// another is in flight, or flightMinAppends appends (of any size). Fewer
// wait for it, as with one commit in flight: splitting what is ready into
// small concurrent commits costs CPU per commit (on a machine where the
// store shares the cores, it slowed appends down; docs/benchmarks.md),
// while a batch of this size pays for its own. Many one-event appends
// (many sessions printing) rarely reach 64 during one flight: from 32 of
// them a second commit stored 10-20 % more events/s, where lowering
// flightMin itself to 32 cost big appends (8 x 16 events) 15-23 %.
const (
	flightMin        = 64
	flightMinAppends = 32
)

// launch starts batches while there is room in flight and work ready.
func (p *pipeline) launch() {
	l := p.l
	for p.inflight < l.depth && len(p.ready) > 0 && (p.inflight == 0 || len(p.ready) >= flightMinAppends || p.readyEvents() >= flightMin) {
		var batch, rest []*appendReq
		var deferred map[*sessionLog]bool // sessions with an append left for later: keep their order
		n := 0
		for _, r := range p.ready {
			if deferred[r.sl] || (n > 0 && n+len(r.events) > l.opts.MaxBatch) {
				if deferred == nil {
					deferred = make(map[*sessionLog]bool)
				}
				deferred[r.sl] = true
				rest = append(rest, r)
				continue
			}
			batch = append(batch, r)
			n += len(r.events)
		}
		p.ready = rest
		live, marks, all := l.assign(batch)
		if len(all) == 0 {
			continue
		}
		for _, mk := range marks {
			p.busy[mk.sl] = true
		}
		// What remains ready of the sessions now in flight waits for them.
		kept := p.ready[:0]
		for _, r := range p.ready {
			if p.busy[r.sl] {
				p.held[r.sl] = append(p.held[r.sl], r)
				continue
			}
			kept = append(kept, r)
		}
		p.ready = kept
		p.inflight++
		go func() { p.landed <- flight{marks: marks, out: l.storeBatch(live, all)} }()
	}
}

func (p *pipeline) readyEvents() int {
	n := 0
	for _, r := range p.ready {
		n += len(r.events)
	}
	return n
}

// land takes a batch's outcome: seqs given back if it was not stored, its
// sessions free again, their held appends ready (after the batch's own
// appends to store again, if it was fenced).
func (p *pipeline) land(f flight) {
	p.inflight--
	if !f.out.stored {
		p.l.undo(f.marks, f.out)
	}
	var next []*appendReq
	next = append(next, f.out.again...)
	for _, mk := range f.marks {
		delete(p.busy, mk.sl)
	}
	for _, mk := range f.marks {
		next = append(next, p.held[mk.sl]...)
		delete(p.held, mk.sl)
	}
	p.ready = append(next, p.ready...)
}
