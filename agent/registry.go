package agent

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"time"
)

// Registry maps architecture names and aliases to architectures. It is safe
// for concurrent use.
type Registry struct {
	mu      sync.RWMutex
	archs   map[string]Architecture // by canonical name and alias
	names   []string                // canonical names
	aliases map[string][]string     // canonical name → aliases

	probeMu sync.Mutex // guards probes; never held while probing
	probes  map[string]probeResult
}

type probeResult struct {
	version string
	err     error
	at      time.Time
}

// probeTTL is how long a CLI probe (which runs `<cli> --version`, a second
// or more for some CLIs) is reused.
const probeTTL = time.Minute

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

// probe returns a cached probe result, probing when it is missing or old.
func (r *Registry) probe(ctx context.Context, name string, p Prober) (string, error) {
	r.probeMu.Lock()
	res, ok := r.probes[name]
	r.probeMu.Unlock()
	if ok && time.Since(res.at) < probeTTL {
		return res.version, res.err
	}
	v, err := p.Probe(ctx)
	if ctx.Err() != nil {
		return v, err // a cancelled probe says nothing about the CLI
	}
	r.probeMu.Lock()
	if r.probes == nil {
		r.probes = make(map[string]probeResult)
	}
	r.probes[name] = probeResult{v, err, time.Now()}
	r.probeMu.Unlock()
	return v, err
}

// Describe returns every architecture's description, sorted, with the
// agent CLIs probed (cached for a minute) concurrently.
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
	var wg sync.WaitGroup
	for i, a := range archs {
		out[i] = Info{Name: names[i], Aliases: aliases[i], Available: true}
		p, ok := a.(Prober)
		if !ok {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			v, err := r.probe(ctx, names[i], p)
			out[i].Version = v
			if err != nil {
				out[i].Available = false
				out[i].Problem = err.Error()
			}
		}()
	}
	wg.Wait()
	return out
}

// Check probes one architecture (cached like Describe): nil when it has no
// agent CLI to probe or the probe succeeds, else the probe's error (which
// matches ErrNotInstalled when the CLI is not on PATH).
func (r *Registry) Check(ctx context.Context, name string) error {
	a, ok := r.Lookup(name)
	if !ok {
		return fmt.Errorf("unknown architecture %q", name)
	}
	p, ok := a.(Prober)
	if !ok {
		return nil
	}
	_, err := r.probe(ctx, a.Name(), p)
	return err
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
