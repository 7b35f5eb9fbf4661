package container

import (
	"context"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/agentd/agentd/internal/sandbox/warmpool"
	"github.com/agentd/agentd/sandbox"
)

// Named is a container started ahead, named in logs.
type Named interface{ Name() string }

// Pools are a container backend's warm pools (internal/sandbox/warmpool,
// keyed by Shape): the default shape's filled from the start, the others
// from their first session on, and, for Describe, the profiles whose
// sessions asked for each shape. A nil *Pools, a backend without warm
// pools, claims and lists nothing. Safe for concurrent use.
type Pools[W Named] struct {
	pool *warmpool.Pool[Shape, W]
	def  Shape
	stop func(context.Context, Shape, W)
	log  *slog.Logger
	noun string // "container", "pod"

	mu       sync.Mutex
	profiles map[Shape]map[string]bool // profiles that asked for each shape
}

// PoolOptions are how a backend starts and stops the containers of its
// warm pools.
type PoolOptions[W Named] struct {
	// Start starts a container of a shape, for no session yet; Stop
	// removes one never claimed, within StopTimeout.
	Start       func(context.Context, Shape) (W, error)
	Stop        func(context.Context, Shape, W)
	StopTimeout time.Duration
	// Log is the backend's; Noun what it calls a container ("pod").
	Log  *slog.Logger
	Noun string
}

// NewPools makes the warm pools o asks for: nil without WarmPool.
func NewPools[W Named](o *Options, po PoolOptions[W]) (*Pools[W], error) {
	if o.WarmPool <= 0 {
		return nil, nil
	}
	pool, err := warmpool.New(warmpool.Options[Shape, W]{
		Size: o.WarmPool, MaxKeys: o.MaxPools, Start: po.Start, Stop: po.Stop,
		StopTimeout: po.StopTimeout, KeyString: Shape.String, Logger: o.Logger,
	})
	if err != nil {
		return nil, err
	}
	return &Pools[W]{
		pool: pool, def: o.DefaultShape(), stop: po.Stop, log: po.Log, noun: po.Noun,
		profiles: map[Shape]map[string]bool{},
	}, nil
}

// Fill has the default shape's pool filled: after Collect, or at the
// first Create when the server did not call Collect.
func (p *Pools[W]) Fill() {
	if p == nil {
		return
	}
	_ = p.pool.Warm(p.def)
}

// Claim notes that profile asked for sh, then hands the ready containers
// of sh to claim, one at a time, until one is claimed: its environment. A
// container claim fails with is stopped and the next one tried, while
// more (when set) says one started ahead can still serve and ctx has not
// ended (its error then). nil, nil: none was claimed, the caller starts a
// container of its own.
func (p *Pools[W]) Claim(ctx context.Context, sh Shape, profile string, more func() bool, claim func(W) (sandbox.Environment, error)) (sandbox.Environment, error) {
	if p == nil {
		return nil, nil
	}
	p.note(sh, profile)
	p.Fill()
	for more == nil || more() {
		w, ok := p.pool.Take(sh)
		if !ok {
			return nil, nil
		}
		e, err := claim(w)
		if err == nil {
			return e, nil
		}
		p.log.Warn("warm "+p.noun+" unusable", p.noun, w.Name(), "err", err)
		p.stop(context.WithoutCancel(ctx), sh, w)
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
	}
	return nil, nil
}

func (p *Pools[W]) note(sh Shape, profile string) {
	if profile == "" {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	m := p.profiles[sh]
	if m == nil {
		m = map[string]bool{}
		p.profiles[sh] = m
	}
	m[profile] = true
}

// Infos is the pools' state for Describe, with the image, limits and
// profiles of the shapes this process knows (the default one, those
// sessions asked for).
func (p *Pools[W]) Infos() []sandbox.PoolInfo {
	if p == nil {
		return nil
	}
	byKey := map[string]Shape{}
	profiles := map[Shape][]string{}
	p.mu.Lock()
	for s, m := range p.profiles {
		byKey[s.String()] = s
		for prof := range m {
			profiles[s] = append(profiles[s], prof)
		}
	}
	p.mu.Unlock()
	byKey[p.def.String()] = p.def
	var infos []sandbox.PoolInfo
	for _, st := range p.pool.Stats() {
		pi := sandbox.PoolInfo{
			Key: st.Key, Size: st.Size, Ready: st.Ready, Starting: st.Starting,
			Claims: st.Takes, Misses: st.Misses, Failures: st.Failures, LastError: st.LastError, LastStartMS: st.LastStartMS,
		}
		if s, ok := byKey[st.Key]; ok {
			pi.Image, pi.Limits, pi.Profiles = s.Image, s.Limits, profiles[s]
			slices.Sort(pi.Profiles)
		}
		infos = append(infos, pi)
	}
	return infos
}

// Close drains the pools: the containers started ahead are stopped.
func (p *Pools[W]) Close(ctx context.Context) error {
	if p == nil {
		return nil
	}
	return p.pool.Close(ctx)
}
