package agent

import (
	"fmt"
	"sort"
	"sync"
)

// Registry maps architecture names and aliases to architectures. It is safe
// for concurrent use.
type Registry struct {
	mu    sync.RWMutex
	archs map[string]Architecture // by canonical name and alias
	names []string                // canonical names
}

// NewRegistry returns an empty registry.
func NewRegistry() *Registry {
	return &Registry{archs: make(map[string]Architecture)}
}

// Register adds a under its name and the given aliases. Registering a name
// twice is a programming error and panics.
func (r *Registry) Register(a Architecture, aliases ...string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, n := range append([]string{a.Name()}, aliases...) {
		if _, dup := r.archs[n]; dup {
			panic(fmt.Sprintf("agent: architecture %q registered twice", n))
		}
		r.archs[n] = a
	}
	r.names = append(r.names, a.Name())
	sort.Strings(r.names)
}

// Lookup returns the architecture registered under name (canonical or alias).
func (r *Registry) Lookup(name string) (Architecture, bool) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	a, ok := r.archs[name]
	return a, ok
}

// Names returns the canonical names, sorted.
func (r *Registry) Names() []string {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return append([]string(nil), r.names...)
}
