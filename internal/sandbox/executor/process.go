package executor

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/agentd/agentd/internal/executor/rpc"
	"github.com/agentd/agentd/sandbox"
)

// maxInput bounds the data of one exec.input call.
const maxInput = 4 << 20

// process is a process running in the executor, as seen by the server.
//
// The connection's reader hands chunks to push, which never blocks: the
// executor sends at most Options.Window bytes beyond what was acknowledged,
// so the queue stays bounded. A forwarder goroutine delivers the queue on
// Output and acknowledges what the consumer took (exec.ack). Chunks are
// deduplicated and checked by offset, so a replay after Attach may overlap
// what was already delivered.
type process struct {
	env *Environment
	tag string
	out chan sandbox.Chunk

	wake    chan struct{}
	abandon chan struct{} // closed to stop delivering (Terminate)
	done    chan struct{} // closed once out is closed and status/err are set
	abOnce  sync.Once

	mu       sync.Mutex
	queue    []sandbox.Chunk
	next     [2]int64 // next offset expected per stream
	consumed [2]int64 // delivered on out
	acked    [2]int64 // last acknowledged to the executor
	exit     *sandbox.ExitStatus
	err      error // set by fail: the process's fate is unknown
	status   sandbox.ExitStatus
	released bool
}

func newProcess(e *Environment, tag string, from sandbox.Offsets) *process {
	p := &process{
		env: e, tag: tag,
		out:     make(chan sandbox.Chunk),
		wake:    make(chan struct{}, 1),
		abandon: make(chan struct{}),
		done:    make(chan struct{}),
	}
	p.next = [2]int64{from.Stdout, from.Stderr}
	p.consumed, p.acked = p.next, p.next
	e.addLive(p)
	go p.forward()
	return p
}

func idx(s sandbox.Stream) int {
	if s == sandbox.Stderr {
		return 1
	}
	return 0
}

func (p *process) poke() {
	select {
	case p.wake <- struct{}{}:
	default:
	}
}

// push queues a chunk from the executor (on the connection's reader).
func (p *process) push(c sandbox.Chunk) {
	if c.Stream != sandbox.Stdout && c.Stream != sandbox.Stderr {
		return
	}
	i := idx(c.Stream)
	p.mu.Lock()
	if p.exit != nil || p.err != nil {
		p.mu.Unlock()
		return
	}
	end := c.Offset + int64(len(c.Data))
	if end <= p.next[i] {
		p.mu.Unlock()
		return // already have it (a replay overlapping the last delivery)
	}
	if c.Offset < p.next[i] {
		c.Data = c.Data[p.next[i]-c.Offset:]
		c.Offset = p.next[i]
	} else if c.Offset > p.next[i] {
		p.env.log.Warn("process output lost (dropped by the executor's spool)",
			"tag", p.tag, "stream", c.Stream, "from", p.next[i], "to", c.Offset)
	}
	p.next[i] = end
	p.queue = append(p.queue, c)
	p.mu.Unlock()
	p.poke()
}

// setExit records the exit; Output closes once the queue is delivered.
func (p *process) setExit(st sandbox.ExitStatus, end sandbox.Offsets) {
	p.mu.Lock()
	if p.exit == nil && p.err == nil {
		p.exit = &st
		if p.next[0] < end.Stdout || p.next[1] < end.Stderr {
			p.env.log.Warn("process exited with output never received",
				"tag", p.tag, "received", p.next, "end", end)
		}
	}
	p.mu.Unlock()
	p.poke()
}

// fail ends the process view with err (connection lost, re-attached
// elsewhere): Output closes after what is queued, Wait returns err.
func (p *process) fail(err error) {
	p.mu.Lock()
	if p.exit == nil && p.err == nil {
		p.err = err
	}
	p.mu.Unlock()
	p.poke()
}

// drop stops delivery at once, discarding undelivered output (Terminate:
// nobody may be reading).
func (p *process) drop(err error) {
	p.fail(err)
	p.abOnce.Do(func() { close(p.abandon) })
}

// forward delivers the queue on out, in order.
func (p *process) forward() {
	defer p.env.forgetLive(p)
	defer close(p.done)
	defer close(p.out)
	window := p.env.p.opts.Window
	for {
		p.mu.Lock()
		if len(p.queue) > 0 {
			c := p.queue[0]
			p.queue[0] = sandbox.Chunk{}
			p.queue = p.queue[1:]
			p.mu.Unlock()
			select {
			case p.out <- c:
			case <-p.abandon:
				p.mu.Lock()
				p.queue = nil
				p.mu.Unlock()
				continue
			}
			i := idx(c.Stream)
			p.mu.Lock()
			p.consumed[i] = c.Offset + int64(len(c.Data))
			unacked := p.consumed[0] - p.acked[0] + p.consumed[1] - p.acked[1]
			ack := unacked >= window/4 && p.exit == nil && p.err == nil
			if ack {
				p.acked = p.consumed
			}
			offs := sandbox.Offsets{Stdout: p.consumed[0], Stderr: p.consumed[1]}
			p.mu.Unlock()
			if ack {
				_ = p.env.client.ExecAck(p.tag, offs)
			}
			continue
		}
		if p.exit != nil || p.err != nil {
			if p.exit != nil {
				p.status = *p.exit
			}
			p.mu.Unlock()
			return
		}
		p.mu.Unlock()
		select {
		case <-p.wake:
		case <-p.abandon:
		}
	}
}

func (p *process) Tag() string { return p.tag }

// Output delivers the output in order per stream, closed after the last
// chunk. It must be drained: the executor keeps output it could not send
// in its spool, so an unread Output holds up only this process's delivery.
func (p *process) Output() <-chan sandbox.Chunk { return p.out }

// Wait returns the exit status once the process exited and its output was
// delivered. The first successful Wait tells the executor it may forget
// the process (exec.release, sent in the background). If the connection to the executor was lost
// first, the error wraps sandbox.ErrGone (Recover, then Attach).
func (p *process) Wait(ctx context.Context) (sandbox.ExitStatus, error) {
	select {
	case <-p.done:
	case <-ctx.Done():
		return sandbox.ExitStatus{}, ctx.Err()
	}
	p.mu.Lock()
	err, st := p.err, p.status
	release := err == nil && !p.released
	p.released = true
	p.mu.Unlock()
	if err != nil {
		return sandbox.ExitStatus{}, fmt.Errorf("wait %s: %w", p.tag, err)
	}
	if release {
		p.env.unregister(p)
		p.env.releaseAsync(p.tag)
	}
	return st, nil
}

// Write writes to the process's stdin (or terminal).
func (p *process) Write(b []byte) (int, error) {
	n := 0
	for n < len(b) {
		m := min(len(b)-n, maxInput)
		if err := p.env.call(context.Background(), rpc.MethodExecInput, rpc.ExecInputParams{Tag: p.tag, Data: b[n : n+m]}, nil); err != nil {
			return n, err
		}
		n += m
	}
	return n, nil
}

// CloseStdin closes stdin (on a PTY: sends end-of-file, Ctrl-D).
func (p *process) CloseStdin() error {
	return p.env.call(context.Background(), rpc.MethodExecInput, rpc.ExecInputParams{Tag: p.tag, EOF: true}, nil)
}

// Signal signals the process's group.
func (p *process) Signal(sig os.Signal) error {
	s, ok := sig.(syscall.Signal)
	if !ok {
		return fmt.Errorf("signal %v: not a unix signal", sig)
	}
	name := unix.SignalName(s)
	if name == "" {
		name = strconv.Itoa(int(s))
	}
	err := p.env.call(context.Background(), rpc.MethodExecSignal, rpc.ExecSignalParams{Tag: p.tag, Signal: name}, nil)
	if errors.Is(err, sandbox.ErrNotFound) {
		return os.ErrProcessDone // exited and released, as the local backend says
	}
	return err
}

// Kill kills the process's group. Killing an exited process is not an
// error.
func (p *process) Kill() error {
	err := p.Signal(syscall.SIGKILL)
	if errors.Is(err, os.ErrProcessDone) {
		return nil
	}
	return err
}

// Resize changes the PTY size.
func (p *process) Resize(size sandbox.WindowSize) error {
	return p.env.call(context.Background(), rpc.MethodExecResize, rpc.ExecResizeParams{Tag: p.tag, Rows: size.Rows, Cols: size.Cols}, nil)
}
