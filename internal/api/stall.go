package api

import (
	"io"
	"sync/atomic"
	"time"
)

const (
	defaultWriteTimeout = 10 * time.Second
	defaultCloseTimeout = 2 * time.Second
	// stallChunk bounds one guarded socket write, so that the write
	// timeout measures a lack of progress, not the size of an event (one
	// may be 64 MiB): stuck means not 256 KiB in WriteTimeout.
	stallChunk = 256 << 10
)

// stallGuard finds a client that stopped taking data: a socket write (at
// most stallChunk bytes) that has not returned after the write timeout
// means its receive window and the server's send buffer are full. The
// guard then fires once: the socket's write deadline is set to the close
// timeout from now, which bounds the write in flight and the goodbye after
// it (a client that still reads, slowly, gets the rest of the frame and a
// close frame or error event; one that does not is cut off when it
// expires), and onStall runs, on the timer's goroutine: it must not block.
//
// Writes through one guard must not overlap (the connection serialises
// them); stalled and stop are safe for concurrent use.
type stallGuard struct {
	timeout, grace time.Duration
	setDeadline    func(time.Time) error
	onStall        atomic.Pointer[func()]
	timer          *time.Timer
	fired          atomic.Bool // the guard fired
	done           atomic.Bool // stop was called
}

func newStallGuard(timeout, grace time.Duration, setDeadline func(time.Time) error) *stallGuard {
	g := &stallGuard{timeout: timeout, grace: grace, setDeadline: setDeadline}
	g.timer = time.AfterFunc(time.Hour, g.fire)
	g.timer.Stop()
	return g
}

// notify sets what runs when the guard fires (nothing until set).
func (g *stallGuard) notify(f func()) { g.onStall.Store(&f) }

func (g *stallGuard) fire() {
	if g.done.Load() || g.fired.Swap(true) {
		return
	}
	_ = g.setDeadline(time.Now().Add(g.grace))
	if f := g.onStall.Load(); f != nil {
		(*f)()
	}
}

// stalled reports whether the guard fired.
func (g *stallGuard) stalled() bool { return g.fired.Load() }

// arm starts the timer before a blocking write; disarm stops it after.
func (g *stallGuard) arm() {
	if !g.fired.Load() && !g.done.Load() {
		g.timer.Reset(g.timeout)
	}
}

func (g *stallGuard) disarm() { g.timer.Stop() }

// stop disarms the guard for good (the connection is done).
func (g *stallGuard) stop() {
	g.done.Store(true)
	g.timer.Stop()
}

// guardedWriter writes to w in chunks of at most stallChunk, each under g.
type guardedWriter struct {
	w io.Writer
	g *stallGuard
}

func (gw guardedWriter) Write(p []byte) (int, error) {
	n := 0
	for n < len(p) {
		gw.g.arm()
		m, err := gw.w.Write(p[n:min(len(p), n+stallChunk)])
		gw.g.disarm()
		n += m
		if err != nil {
			return n, err
		}
	}
	return n, nil
}
