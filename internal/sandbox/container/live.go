package container

import "sync"

// Live is the set of containers this process started or re-attached to
// and has not removed, by name (and id, where the engine has both):
// Collect leaves them alone, even those no session records yet. Safe for
// concurrent use; the zero value is an empty set.
type Live struct {
	mu sync.Mutex
	m  map[string]struct{}
}

// Add adds names to the set.
func (l *Live) Add(names ...string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.m == nil {
		l.m = map[string]struct{}{}
	}
	for _, n := range names {
		l.m[n] = struct{}{}
	}
}

// Remove takes names out of the set.
func (l *Live) Remove(names ...string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, n := range names {
		delete(l.m, n)
	}
}

// Has reports whether name is in the set.
func (l *Live) Has(name string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	_, ok := l.m[name]
	return ok
}
