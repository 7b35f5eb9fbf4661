package claudecode

import (
	"context"
	"strconv"
	"sync"
)

// controlRequests is the control-protocol bookkeeping of one CLI process:
// the ids of agentd's own requests (their answers are only logged, so
// none is kept), and the CLI's requests agentd is answering (can_use_tool,
// each by its own goroutine), which the CLI or the turn's end may
// withdraw. Its methods are safe for concurrent use.
type controlRequests struct {
	// prefix starts the ids of agentd's requests. Set before the process
	// begins: a server that re-attaches picks its own, so ids never repeat
	// an earlier server's.
	prefix string
	// answering counts the goroutines answering open requests.
	answering sync.WaitGroup

	mu   sync.Mutex // guards seq, open and every inflight.canceled
	seq  int
	open map[string]*inflight
}

// inflight is a control request of the CLI agentd is answering.
type inflight struct {
	cancel context.CancelFunc // ends the wait for the answer
	// canceled: withdrawn (by the CLI, or the turn ended): send no answer.
	// Guarded by controlRequests.mu.
	canceled bool
}

// nextID returns the id for a new request of agentd.
func (c *controlRequests) nextID() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.seq++
	return c.prefix + strconv.Itoa(c.seq)
}

// start registers the CLI's request id, to be answered by a goroutine the
// caller starts next and that calls finish at its end; cancel ends its wait.
func (c *controlRequests) start(id string, cancel context.CancelFunc) *inflight {
	in := &inflight{cancel: cancel}
	c.mu.Lock()
	if c.open == nil {
		c.open = make(map[string]*inflight)
	}
	c.open[id] = in
	c.mu.Unlock()
	c.answering.Add(1)
	return in
}

// finish ends the answering of request id (in, as start returned it).
func (c *controlRequests) finish(id string, in *inflight) {
	in.cancel()
	c.mu.Lock()
	delete(c.open, id)
	c.mu.Unlock()
	c.answering.Done()
}

// withdrawn reports whether in was withdrawn: no answer is to be sent.
func (c *controlRequests) withdrawn(in *inflight) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return in.canceled
}

// withdraw withdraws the CLI's request id (its control_cancel_request). It
// reports false when no such request is being answered.
func (c *controlRequests) withdraw(id string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	in := c.open[id]
	if in != nil {
		in.canceled = true
		in.cancel()
	}
	return in != nil
}

// withdrawAll withdraws every request being answered (the CLI moved on)
// and waits until their goroutines have ended.
func (c *controlRequests) withdrawAll() {
	c.mu.Lock()
	for _, in := range c.open {
		in.canceled = true
		in.cancel()
	}
	c.mu.Unlock()
	c.wait()
}

// wait waits until the goroutines answering requests have ended.
func (c *controlRequests) wait() { c.answering.Wait() }
