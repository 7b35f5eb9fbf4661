package executor

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/agentd/agentd/internal/executor/rpc"
	"github.com/agentd/agentd/sandbox"
)

const (
	// maxOutputChunk bounds the data of one exec.output notification.
	maxOutputChunk = 256 << 10
	// minWindow is the smallest flow-control window honoured.
	minWindow = 64 << 10
)

// execState is one process the executor started, from exec.start until
// exec.release.
type execState struct {
	tag       string
	argv      []string
	pid       int
	startedAt time.Time
	stdin     bool
	pty       bool
	proc      sandbox.Process
	streams   [2]*spool     // stdout, stderr
	done      chan struct{} // closed once exited and all output spooled
	// room is poked when spool space may have been freed for the pump
	// (output sent, subscription changed).
	room chan struct{}

	mu   sync.Mutex
	exit *sandbox.ExitStatus
	sub  *subscription // the connection receiving the output, if any
}

func streamIndex(s sandbox.Stream) int {
	if s == sandbox.Stderr {
		return 1
	}
	return 0
}

var streamNames = [2]sandbox.Stream{sandbox.Stdout, sandbox.Stderr}

func (x *execState) offsets() (first, end sandbox.Offsets) {
	f0, e0, _ := x.streams[0].state()
	f1, e1, _ := x.streams[1].state()
	return sandbox.Offsets{Stdout: f0, Stderr: f1}, sandbox.Offsets{Stdout: e0, Stderr: e1}
}

func (x *execState) exitStatus() *sandbox.ExitStatus {
	x.mu.Lock()
	defer x.mu.Unlock()
	return x.exit
}

func (x *execState) releaseSpools() {
	for _, s := range x.streams {
		if s != nil {
			_ = s.release()
		}
	}
}

// wake tells the current subscription that there is news (output, exit).
func (x *execState) wake() {
	x.mu.Lock()
	sub := x.sub
	x.mu.Unlock()
	if sub != nil {
		sub.poke()
	}
}

func (x *execState) pokeRoom() {
	select {
	case x.room <- struct{}{}:
	default:
	}
}

// pump moves the process's output into the spools.
//
// While a connection receives the output, the spool never overwrites what
// was not sent yet: the pump waits (and so, through the pipe, the process)
// — the same back-pressure a local process gets from a slow reader, and
// no output lost. With nobody attached it never waits: when the spool is
// full the oldest output is dropped, and a later exec.attach reports where
// the spool starts.
func (e *Executor) pump(x *execState) {
	defer e.bg.Done()
	for ch := range x.proc.Output() {
		i := streamIndex(ch.Stream)
		s := x.streams[i]
		data, off := ch.Data, ch.Offset
		for len(data) > 0 {
			n := min(len(data), int(max(1, s.capacity/2)))
			e.waitRoom(x, i, off, n)
			s.write(off, data[:n])
			x.wake()
			data, off = data[n:], off+int64(n)
		}
	}
	st, err := x.proc.Wait(context.Background())
	if err != nil {
		e.log.Error("executor: wait", "tag", x.tag, "err", err)
		st = sandbox.ExitStatus{Code: -1}
	}
	for _, s := range x.streams {
		s.close()
		if s.err != nil {
			e.log.Error("executor: spool write failed, output dropped", "tag", x.tag, "err", s.err)
		}
	}
	x.mu.Lock()
	x.exit = &st
	x.mu.Unlock()
	close(x.done)
	e.log.Info("executor: process exited", "tag", x.tag, "code", st.Code, "signal", st.Signal)
	x.wake()
}

// waitRoom waits until n bytes at off fit in stream i's spool without
// overwriting what the active subscription has not sent.
func (e *Executor) waitRoom(x *execState, i int, off int64, n int) {
	s := x.streams[i]
	for {
		x.mu.Lock()
		sub := x.sub
		x.mu.Unlock()
		if sub == nil || !sub.active() || off+int64(n)-s.capacity <= sub.sent[i].Load() {
			return
		}
		select {
		case <-x.room:
		case <-sub.stopCh:
		case <-sub.c.Context().Done():
		case <-sub.exited:
		case <-e.stopReq:
			return
		}
	}
}

// chunkPool holds the senders' read buffers (most processes send little,
// and a fresh 256 KiB per process costs more than the process's output).
var chunkPool = sync.Pool{New: func() any { b := make([]byte, maxOutputChunk); return &b }}

// subscription sends one process's output to one connection, from given
// offsets on, then exec.exit. With a window, at most that many bytes are
// sent beyond what the peer acknowledged with exec.ack.
type subscription struct {
	x      *execState
	c      *rpc.Conn
	window int64
	wakeCh chan struct{}
	stopCh chan struct{}
	exited chan struct{}

	mu        sync.Mutex
	started   bool
	isStopped bool

	acked [2]atomic.Int64
	// sent mirrors next for the pump (see waitRoom).
	sent [2]atomic.Int64
	// next and base are the sender goroutine's own.
	next [2]int64 // next offset to send
	base [2]int64 // start of the current contiguous run (after a gap)
}

func newSubscription(x *execState, c *rpc.Conn, from sandbox.Offsets, window int64) *subscription {
	if window > 0 && window < minWindow {
		window = minWindow
	}
	s := &subscription{
		x: x, c: c, window: window,
		wakeCh: make(chan struct{}, 1),
		stopCh: make(chan struct{}),
		exited: make(chan struct{}),
	}
	s.next = [2]int64{from.Stdout, from.Stderr}
	s.base = s.next
	s.sent[0].Store(from.Stdout)
	s.sent[1].Store(from.Stderr)
	s.acked[0].Store(from.Stdout)
	s.acked[1].Store(from.Stderr)
	return s
}

func (s *subscription) poke() {
	select {
	case s.wakeCh <- struct{}{}:
	default:
	}
}

// start starts the sender goroutine, unless the subscription was stopped.
func (s *subscription) start(e *Executor) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.isStopped || s.started {
		return
	}
	s.started = true
	e.bg.Add(1)
	go s.run(e)
}

// stop ends the subscription: the sender checks stopCh before each send.
// It returns a channel closed once the sender goroutine has ended (at
// once if it never started).
func (s *subscription) stop() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.isStopped {
		s.isStopped = true
		close(s.stopCh)
		if !s.started {
			close(s.exited)
		}
	}
	return s.exited
}

func (s *subscription) ack(o sandbox.Offsets) {
	for i, v := range [2]int64{o.Stdout, o.Stderr} {
		for {
			old := s.acked[i].Load()
			if v <= old || s.acked[i].CompareAndSwap(old, v) {
				break
			}
		}
	}
	s.poke()
}

// budget is how many bytes may be sent now.
func (s *subscription) budget() int64 {
	if s.window <= 0 {
		return maxOutputChunk
	}
	var out int64
	for i := range 2 {
		out += max(0, s.next[i]-max(s.acked[i].Load(), s.base[i]))
	}
	return min(maxOutputChunk, s.window-out)
}

func (s *subscription) stopped() bool {
	select {
	case <-s.stopCh:
		return true
	default:
		return false
	}
}

// active reports whether the subscription still sends: the pump then
// waits for it rather than drop what it has not sent.
func (s *subscription) active() bool {
	return !isClosed(s.stopCh) && !isClosed(s.c.Context().Done()) && !isClosed(s.exited)
}

// run is the sender goroutine.
func (s *subscription) run(e *Executor) {
	defer e.bg.Done()
	defer s.x.pokeRoom()
	defer close(s.exited)
	bp := chunkPool.Get().(*[]byte)
	defer chunkPool.Put(bp)
	buf := *bp
	doneCh := s.x.done
	for {
		progress := false
		for i := range 2 {
			b := s.budget()
			if b <= 0 {
				break
			}
			start, n, err := s.x.streams[i].read(s.next[i], buf[:b])
			if err != nil {
				e.log.Error("executor: spool", "tag", s.x.tag, "err", err)
				return
			}
			if start > s.next[i] {
				e.log.Warn("executor: output dropped from the spool before it was sent",
					"tag", s.x.tag, "stream", streamNames[i], "from", s.next[i], "to", start)
				s.next[i], s.base[i] = start, start
				s.sent[i].Store(start)
			}
			if n == 0 {
				continue
			}
			if s.stopped() {
				return
			}
			if err := s.c.NotifyOutput(s.x.tag, streamNames[i], start, buf[:n]); err != nil {
				return
			}
			s.next[i] = start + int64(n)
			s.sent[i].Store(s.next[i])
			s.x.pokeRoom()
			progress = true
		}
		if progress {
			continue
		}
		select {
		case <-s.x.done:
			_, end := s.x.offsets()
			if s.next[0] >= end.Stdout && s.next[1] >= end.Stderr {
				st := s.x.exitStatus()
				if s.stopped() {
					return
				}
				_ = s.c.Notify(rpc.MethodExecExit, rpc.ExecExitParams{Tag: s.x.tag, Code: st.Code, Signal: st.Signal, End: end})
				return
			}
		default:
		}
		select {
		case <-s.wakeCh:
		case <-s.stopCh:
			return
		case <-s.c.Context().Done():
			return
		case <-doneCh:
			doneCh = nil // seen; the check above runs next
		}
	}
}

// subscribe makes c the receiver of x's output from from on, replacing the
// previous subscription. The sender starts when start is called (after the
// reply went out).
func (e *Executor) subscribe(x *execState, c *rpc.Conn, from sandbox.Offsets, window int64) (start func()) {
	sub := newSubscription(x, c, from, window)
	x.mu.Lock()
	old := x.sub
	x.sub = sub
	x.mu.Unlock()
	defer x.pokeRoom()
	if old != nil {
		exited := old.stop()
		if old.c == c {
			// Same connection: its last chunk in flight goes out before
			// anything of the new subscription.
			<-exited
		}
	}
	return func() { sub.start(e) }
}
