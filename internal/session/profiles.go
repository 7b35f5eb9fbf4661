package session

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"

	"github.com/agentd/agentd/profile"
	"github.com/agentd/agentd/store"
)

// Profiles resolves agent profiles from three places, highest priority
// first: the profiles folder, the store, the built-in default. It is safe
// for concurrent use.
type Profiles struct {
	store store.ProfileStore
	mu    sync.RWMutex
	dir   map[string]profile.Profile
}

// NewProfiles returns a resolver over st with the folder profiles given.
func NewProfiles(st store.ProfileStore, folder []profile.Profile) *Profiles {
	p := &Profiles{store: st, dir: make(map[string]profile.Profile)}
	for _, f := range folder {
		p.dir[f.ID] = f
	}
	return p
}

// Get returns the profile with id ("" means default).
func (p *Profiles) Get(ctx context.Context, id string) (profile.Profile, error) {
	if id == "" {
		id = profile.DefaultID
	}
	p.mu.RLock()
	f, ok := p.dir[id]
	p.mu.RUnlock()
	if ok {
		return f, nil
	}
	if p.store != nil {
		sp, err := p.store.LoadAgentProfile(ctx, id)
		if err == nil {
			return sp, nil
		}
		if !errors.Is(err, store.ErrNotFound) {
			return profile.Profile{}, fmt.Errorf("load profile: %w", err)
		}
	}
	if id == profile.DefaultID {
		return profile.Default(), nil
	}
	return profile.Profile{}, fmt.Errorf("%w: %q", ErrProfileNotFound, id)
}

// List returns every profile, sorted by id, default included.
func (p *Profiles) List(ctx context.Context) ([]profile.Profile, error) {
	all := map[string]profile.Profile{profile.DefaultID: profile.Default()}
	if p.store != nil {
		sps, err := p.store.ListAgentProfiles(ctx)
		if err != nil {
			return nil, fmt.Errorf("list profiles: %w", err)
		}
		for _, sp := range sps {
			all[sp.ID] = sp
		}
	}
	p.mu.RLock()
	for id, f := range p.dir {
		all[id] = f
	}
	p.mu.RUnlock()
	out := make([]profile.Profile, 0, len(all))
	for _, v := range all {
		out = append(out, v)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out, nil
}
