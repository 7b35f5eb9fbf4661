package eventlog

import (
	"testing"
	"time"
)

// newTestPipeline is a pipelined writer's state over a log that has only
// its queue: enough for regather and gather, which start no batch.
func newTestPipeline() *pipeline {
	l := &Log{reqs: make(chan *appendReq, 1024), sessions: make(map[string]*sessionLog)}
	return &pipeline{l: l, held: make(map[*sessionLog][]*appendReq), busy: make(map[*sessionLog]bool)}
}

// regather takes what is queued, and with nothing queued returns at once
// with nothing ready.
func TestRegatherTakesQueuedAppends(t *testing.T) {
	p := newTestPipeline()
	p.regather(8)
	if len(p.ready) != 0 {
		t.Fatalf("%d ready from an empty queue", len(p.ready))
	}
	for i := range 5 {
		p.l.reqs <- &appendReq{session: string(rune('a' + i))}
	}
	p.regather(8)
	if len(p.ready) != 5 {
		t.Fatalf("%d ready, want the 5 queued", len(p.ready))
	}
}

// regather is bounded: appenders that never stop appending, and fewer
// ready than it hopes for, do not keep the next batch from starting.
func TestRegatherIsBounded(t *testing.T) {
	p := newTestPipeline()
	stop, stopped := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(stopped)
		for {
			select {
			case p.l.reqs <- &appendReq{session: "s"}:
			case <-stop:
				return
			}
		}
	}()
	defer func() { close(stop); <-stopped }()
	for len(p.l.reqs) == 0 {
		time.Sleep(time.Millisecond) // until the appender has queued some
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		p.regather(1 << 30)
	}()
	select {
	case <-done:
	case <-time.After(time.Minute):
		t.Fatal("regather did not return while appends kept coming")
	}
	if len(p.ready) == 0 {
		t.Fatal("regather took none of the appends")
	}
}
