package agent

import (
	"context"
	"fmt"
	"sort"
	"sync"
)

// Registry maps architecture names and aliases to architectures. It is safe
// for concurrent use.
type Registry struct {
	mu      sync.RWMutex
	archs   map[string]Architecture // by canonical name and alias
	names   []string                // canonical names
	aliases map[string][]string     // canonical name → aliases
}

// NewRegistry returns an empty registry.
func NewRegistry() *Registry {
	return &Registry{archs: make(map[string]Architecture), aliases: make(map[string][]string)}
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
	r.aliases[a.Name()] = append([]string(nil), aliases...)
	sort.Strings(r.names)
}

// Describe probes every architecture (concurrently callers beware: probes
// run agent CLIs with --version) and returns their descriptions, sorted.
func (r *Registry) Describe(ctx context.Context) []Info {
	r.mu.RLock()
	names := append([]string(nil), r.names...)
	archs := make([]Architecture, len(names))
	aliases := make([][]string, len(names))
	for i, n := range names {
		archs[i] = r.archs[n]
		aliases[i] = append([]string{}, r.aliases[n]...)
	}
	r.mu.RUnlock()
	out := make([]Info, len(names))
	for i, a := range archs {
		info := Info{Name: names[i], Aliases: aliases[i], Available: true}
		if p, ok := a.(Prober); ok {
			v, err := p.Probe(ctx)
			info.Version = v
			if err != nil {
				info.Available = false
				info.Problem = err.Error()
			}
		}
		out[i] = info
	}
	return out
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
