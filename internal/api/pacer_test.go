package api

import (
	"context"
	"testing"
	"time"
)

// A pause lasts its interval (none without one) and ends with its
// context.
func TestPacer(t *testing.T) {
	var p pacer
	defer p.stop()
	ctx := context.Background()
	const iv = 50 * time.Millisecond
	for range 2 { // the timer is reused
		start := time.Now()
		if !p.pause(ctx, iv) {
			t.Fatal("pause failed")
		}
		if d := time.Since(start); d < iv*9/10 {
			t.Fatalf("paused only %v", d)
		}
	}
	start := time.Now()
	if !p.pause(ctx, 0) || time.Since(start) > iv/2 {
		t.Fatal("paused without an interval")
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if p.pause(cctx, time.Hour) || p.pause(cctx, 0) {
		t.Fatal("a pause outlived its context")
	}
}
