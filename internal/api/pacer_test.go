package api

import (
	"context"
	"testing"
	"time"
)

// A stream's first write goes at once, as does one after a pause; a write
// that follows another closer than the interval waits for the rest of it.
func TestPacer(t *testing.T) {
	var p pacer
	defer p.stop()
	ctx := context.Background()
	const iv = 50 * time.Millisecond
	start := time.Now()
	if !p.wait(ctx, iv) || time.Since(start) > iv/2 {
		t.Fatal("the first write waited")
	}
	p.flushed()
	start = time.Now()
	if !p.wait(ctx, iv) {
		t.Fatal("wait failed")
	}
	if d := time.Since(start); d < iv*8/10 {
		t.Fatalf("a write right after another waited only %v", d)
	}
	p.flushed()
	time.Sleep(iv)
	start = time.Now()
	p.wait(ctx, iv)
	if d := time.Since(start); d > iv/2 {
		t.Fatalf("a write after a pause waited %v", d)
	}
	p.flushed()
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if p.wait(cctx, time.Hour) {
		t.Fatal("wait outlived its context")
	}
	// Without an interval nothing waits.
	p.flushed()
	start = time.Now()
	if !p.wait(ctx, 0) || time.Since(start) > iv/2 {
		t.Fatal("waited without an interval")
	}
}
