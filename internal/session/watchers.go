package session

import (
	"context"
	"sync"
)

// watchers fans session-list changes out to WatchSessions callers. Sends
// never block: a watcher whose buffer is full is closed (it re-lists).
type watchers struct {
	mu   sync.Mutex
	subs map[chan Summary]struct{}
}

func (w *watchers) add(ctx context.Context) <-chan Summary {
	ch := make(chan Summary, 256)
	w.mu.Lock()
	if w.subs == nil {
		w.subs = make(map[chan Summary]struct{})
	}
	w.subs[ch] = struct{}{}
	w.mu.Unlock()
	go func() {
		<-ctx.Done()
		w.remove(ch)
	}()
	return ch
}

func (w *watchers) remove(ch chan Summary) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if _, ok := w.subs[ch]; ok {
		delete(w.subs, ch)
		close(ch)
	}
}

func (w *watchers) notify(s Summary) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for ch := range w.subs {
		select {
		case ch <- s:
		default:
			delete(w.subs, ch)
			close(ch)
		}
	}
}

func (w *watchers) closeAll() {
	w.mu.Lock()
	defer w.mu.Unlock()
	for ch := range w.subs {
		delete(w.subs, ch)
		close(ch)
	}
}
