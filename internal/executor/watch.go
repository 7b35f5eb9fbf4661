package executor

import (
	"context"
	"strconv"

	"github.com/agentd/agentd/internal/executor/rpc"
	"github.com/agentd/agentd/sandbox"
)

// watch forwards the environment's file events to one connection as
// fs.event notifications, until fs.unwatch or the connection closes.
type watch struct {
	id     string
	cancel context.CancelFunc
	done   chan struct{}
}

// stop ends the watch and waits until no more events will be sent.
func (w *watch) stop() {
	w.cancel()
	<-w.done
}

// watch starts a watch; events flow once the reply went out.
func (e *Executor) watch(c *rpc.Conn, id string, req *rpc.Request) (any, error) {
	ctx, cancel := context.WithCancel(c.Context())
	ch, err := e.cfg.Env.Watch(ctx)
	if err != nil {
		cancel()
		return nil, errorFor(err)
	}
	e.mu.Lock()
	cs := e.conns[c]
	if cs == nil || e.stopping {
		e.mu.Unlock()
		cancel()
		for range ch {
		}
		return nil, rpc.Errorf(rpc.CodeTerminated, "fs.watch: connection closing")
	}
	if id == "" {
		e.seq++
		id = "w" + strconv.Itoa(e.seq)
	}
	if cs.watches[id] != nil {
		e.mu.Unlock()
		cancel()
		for range ch {
		}
		return nil, rpc.Errorf(rpc.CodeExists, "fs.watch: watch %q exists", id)
	}
	w := &watch{id: id, cancel: cancel, done: make(chan struct{})}
	cs.watches[w.id] = w
	e.bg.Add(1)
	e.mu.Unlock()
	req.AfterReply(func() { go w.forward(e, c, ctx, ch) })
	return rpc.FSWatchResult{WatchID: w.id}, nil
}

// forward sends the environment's events as fs.event notifications until
// the environment closes ch (after ctx ended).
func (w *watch) forward(e *Executor, c *rpc.Conn, ctx context.Context, ch <-chan sandbox.FileEvent) {
	defer e.bg.Done()
	defer close(w.done)
	for ev := range ch {
		if ctx.Err() != nil {
			continue
		}
		if err := c.Notify(rpc.MethodFSEvent, fsEvent(w.id, ev)); err != nil {
			w.cancel()
		}
	}
}

func fsEvent(id string, ev sandbox.FileEvent) rpc.FSEventParams {
	return rpc.FSEventParams{WatchID: id, Op: ev.Op, Path: ev.Path, Size: ev.Size, SHA256: ev.SHA256}
}

// sync has every watch report the changes made so far, then the marker
// (fs.event {op:"sync"}); the watches' forwarders send it like any event,
// in order.
func (e *Executor) sync(ctx context.Context, marker string) (any, error) {
	if marker == "" {
		return nil, rpc.Errorf(rpc.CodeInvalidParams, "fs.sync: marker is required")
	}
	ws, ok := e.cfg.Env.(sandbox.WatchSyncer)
	if !ok {
		return nil, rpc.Errorf(rpc.CodeUnsupported, "fs.sync: the environment cannot flush its watch")
	}
	if err := ws.SyncWatch(ctx, marker); err != nil {
		return nil, errorFor(err)
	}
	return rpc.OKResult{OK: true}, nil
}

func (e *Executor) unwatch(c *rpc.Conn, id string) (any, error) {
	e.mu.Lock()
	var w *watch
	if cs := e.conns[c]; cs != nil {
		w = cs.watches[id]
		delete(cs.watches, id)
	}
	e.mu.Unlock()
	if w == nil {
		return nil, rpc.Errorf(rpc.CodeNotFound, "fs.unwatch: no watch %q", id)
	}
	w.stop()
	return rpc.OKResult{OK: true}, nil
}
