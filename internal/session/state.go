package session

import (
	"context"
	"sync"

	"github.com/agentd/agentd/conversation"
	"github.com/agentd/agentd/internal/eventlog"
)

// stateCache keeps reducers of recently read sessions so GET
// /api/sessions/{id} only reads and folds the events appended since the
// last read. The log stays the only source of truth: a cached reducer only
// ever moves forward along it.
type stateCache struct {
	log *eventlog.Log
	max int

	mu      sync.Mutex // guards entries, tick
	entries map[string]*stateEntry
	tick    uint64
}

type stateEntry struct {
	mu   sync.Mutex // serialises folding into r
	r    *conversation.Reducer
	used uint64 // guarded by stateCache.mu
}

func newStateCache(l *eventlog.Log, max int) *stateCache {
	return &stateCache{log: l, max: max, entries: make(map[string]*stateEntry)}
}

const statePage = 4096

func (c *stateCache) get(ctx context.Context, id string) (conversation.State, error) {
	var st conversation.State
	err := c.visit(ctx, id, func(r *conversation.Reducer) { st = r.State() })
	return st, err
}

// visit folds the events appended since the last read into id's cached
// reducer and calls f with it (which must not change it or keep it).
func (c *stateCache) visit(ctx context.Context, id string, f func(*conversation.Reducer)) error {
	c.mu.Lock()
	e, ok := c.entries[id]
	if !ok {
		if len(c.entries) >= c.max {
			c.evictLocked()
		}
		e = &stateEntry{r: conversation.NewReducer()}
		c.entries[id] = e
	}
	c.tick++
	e.used = c.tick
	c.mu.Unlock()

	e.mu.Lock()
	defer e.mu.Unlock()
	for {
		evs, err := c.log.Read(ctx, id, e.r.LastSeq(), statePage)
		if err != nil {
			return err
		}
		for _, ev := range evs {
			// A malformed event is skipped: one bad payload must not hide the
			// rest of the conversation.
			_ = e.r.Apply(ev)
		}
		if len(evs) < statePage {
			break
		}
	}
	f(e.r)
	return nil
}

func (c *stateCache) evictLocked() {
	var oldest string
	var min uint64
	for id, e := range c.entries {
		if oldest == "" || e.used < min {
			oldest, min = id, e.used
		}
	}
	delete(c.entries, oldest)
}

func (c *stateCache) forget(id string) {
	c.mu.Lock()
	delete(c.entries, id)
	c.mu.Unlock()
}
