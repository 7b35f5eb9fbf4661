// Package warmpool keeps sandbox environments started ahead of the
// sessions that will claim them, so that a new session does not wait for a
// container to start. It knows nothing of containers: a backend gives it a
// function that starts one item of a kind (a key: the image and limits an
// environment is made with) and one that discards an item never claimed.
//
// A Pool holds up to Size ready items per key, for at most MaxKeys keys
// (the least recently used key's items are discarded when another key
// comes). Take hands out a ready item at once or reports a miss; either way
// the key's pool is refilled in the background, one start at a time per
// key, with a growing pause after failed starts. Close stops the refills
// and discards every item left.
package warmpool

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"sync"
	"time"
)

// Defaults for Options fields left zero.
const (
	DefaultMaxKeys     = 4
	DefaultMinBackoff  = time.Second
	DefaultMaxBackoff  = time.Minute
	DefaultStopTimeout = 30 * time.Second
)

// ErrClosed is returned by Warm after Close.
var ErrClosed = errors.New("warmpool: closed")

// Options configure a Pool. Start and Stop are required.
type Options[K comparable, T any] struct {
	// Size is how many ready items each key keeps (0: none; the pool then
	// only counts misses).
	Size int
	// MaxKeys bounds how many keys have items at once (default 4).
	MaxKeys int
	// Start makes one item of key, ready for use. ctx ends at Close.
	Start func(ctx context.Context, key K) (T, error)
	// Stop discards an item that was never taken (at Close, or when its
	// key was evicted). It must not fail the pool: log what goes wrong.
	Stop func(ctx context.Context, key K, item T)
	// MinBackoff and MaxBackoff bound the pause after a failed start,
	// doubled with each failure in a row (defaults 1 s and 1 min).
	MinBackoff, MaxBackoff time.Duration
	// StopTimeout bounds each Stop at Close and eviction (default 30 s).
	StopTimeout time.Duration
	// KeyString names a key in Stats and logs (default fmt's %v).
	KeyString func(K) string
	Logger    *slog.Logger
}

// Pool keeps items of several keys ready. Its methods are safe for
// concurrent use; Start and Stop are never called with its lock held.
type Pool[K comparable, T any] struct {
	opts   Options[K, T]
	log    *slog.Logger
	ctx    context.Context // ends at Close: cancels starts in flight
	cancel context.CancelFunc
	wg     sync.WaitGroup // refill goroutines and evictions

	mu     sync.Mutex
	keys   map[K]*keyPool[T]
	closed bool
	tick   int64 // use counter, for least-recently-used eviction
}

// keyPool is one key's items and counters; guarded by Pool.mu.
type keyPool[T any] struct {
	ready     []T
	starting  bool // a refill goroutine runs
	lastUse   int64
	evicted   bool
	takes     int64
	misses    int64
	failures  int64
	started   int64
	lastError string
	lastStart time.Duration
}

// Stats is one key's state.
type Stats struct {
	Key string `json:"key"`
	// Size is the target, Ready how many items wait, Starting whether one
	// is being started.
	Size     int  `json:"size"`
	Ready    int  `json:"ready"`
	Starting bool `json:"starting"`
	// Takes counts items handed out, Misses Takes that found none,
	// Started items made, Failures starts that failed.
	Takes    int64 `json:"takes"`
	Misses   int64 `json:"misses"`
	Started  int64 `json:"started"`
	Failures int64 `json:"failures"`
	// LastError is the last failed start's error ("" after a success).
	LastError string `json:"lastError,omitempty"`
	// LastStartMS is how long the last successful start took.
	LastStartMS int64 `json:"lastStartMs"`
}

// New returns a pool; nothing starts until Warm or Take names a key.
func New[K comparable, T any](opts Options[K, T]) (*Pool[K, T], error) {
	if opts.Start == nil || opts.Stop == nil {
		return nil, errors.New("warmpool: Start and Stop are required")
	}
	if opts.Size < 0 {
		return nil, fmt.Errorf("warmpool: size %d", opts.Size)
	}
	if opts.MaxKeys <= 0 {
		opts.MaxKeys = DefaultMaxKeys
	}
	if opts.MinBackoff <= 0 {
		opts.MinBackoff = DefaultMinBackoff
	}
	if opts.MaxBackoff < opts.MinBackoff {
		opts.MaxBackoff = max(DefaultMaxBackoff, opts.MinBackoff)
	}
	if opts.StopTimeout <= 0 {
		opts.StopTimeout = DefaultStopTimeout
	}
	if opts.KeyString == nil {
		opts.KeyString = func(k K) string { return fmt.Sprint(k) }
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	ctx, cancel := context.WithCancel(context.Background())
	return &Pool[K, T]{
		opts: opts, log: opts.Logger.With("component", "warmpool"),
		ctx: ctx, cancel: cancel, keys: map[K]*keyPool[T]{},
	}, nil
}

// Size is the number of ready items kept per key.
func (p *Pool[K, T]) Size() int { return p.opts.Size }

// Warm makes sure key's items are being kept ready (a key named before
// any session needs it: the server's default). It does not wait.
func (p *Pool[K, T]) Warm(key K) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return ErrClosed
	}
	p.useLocked(key)
	return nil
}

// Take hands out a ready item of key, or reports false when none is
// ready; either way key's pool refills in the background. The item is
// the caller's from then on.
func (p *Pool[K, T]) Take(key K) (T, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	var zero T
	if p.closed {
		return zero, false
	}
	kp := p.useLocked(key)
	if len(kp.ready) == 0 {
		kp.misses++
		return zero, false
	}
	item := kp.ready[0]
	kp.ready[0] = zero
	kp.ready = kp.ready[1:]
	kp.takes++
	p.refillLocked(key, kp)
	return item, true
}

// useLocked returns key's pool, creating it (and evicting the least
// recently used key beyond MaxKeys), marks it used and has it refilled.
func (p *Pool[K, T]) useLocked(key K) *keyPool[T] {
	p.tick++
	kp := p.keys[key]
	if kp == nil {
		kp = &keyPool[T]{}
		p.keys[key] = kp
		p.evictLocked(key)
	}
	kp.lastUse = p.tick
	p.refillLocked(key, kp)
	return kp
}

// evictLocked drops the least recently used keys beyond MaxKeys (never
// keep) and discards their items in the background.
func (p *Pool[K, T]) evictLocked(keep K) {
	for len(p.keys) > p.opts.MaxKeys {
		var oldest K
		var kp *keyPool[T]
		for k, c := range p.keys {
			if k != keep && (kp == nil || c.lastUse < kp.lastUse) {
				oldest, kp = k, c
			}
		}
		if kp == nil {
			return
		}
		delete(p.keys, oldest)
		kp.evicted = true
		items := kp.ready
		kp.ready = nil
		p.log.Info("warm pool key evicted", "key", p.opts.KeyString(oldest), "discarded", len(items))
		p.wg.Add(1)
		go func() {
			defer p.wg.Done()
			p.stopAll(oldest, items)
		}()
	}
}

// refillLocked starts key's refill goroutine unless one runs or the pool
// is full.
func (p *Pool[K, T]) refillLocked(key K, kp *keyPool[T]) {
	if p.closed || kp.starting || kp.evicted || len(kp.ready) >= p.opts.Size {
		return
	}
	kp.starting = true
	p.wg.Add(1)
	go p.refill(key, kp)
}

// refill starts items of key one at a time until its pool is full, the
// key is evicted or the pool closes.
func (p *Pool[K, T]) refill(key K, kp *keyPool[T]) {
	defer p.wg.Done()
	backoff := p.opts.MinBackoff
	for {
		t0 := time.Now()
		item, err := p.opts.Start(p.ctx, key)
		took := time.Since(t0)
		p.mu.Lock()
		if err == nil && (p.closed || kp.evicted) {
			// Made for nobody: discard it (outside the lock).
			kp.starting = false
			p.mu.Unlock()
			p.stopAll(key, []T{item})
			return
		}
		if err != nil {
			kp.failures++
			kp.lastError = err.Error()
		} else {
			kp.ready = append(kp.ready, item)
			kp.started++
			kp.lastError = ""
			kp.lastStart = took
			backoff = p.opts.MinBackoff
		}
		if p.closed || kp.evicted || len(kp.ready) >= p.opts.Size {
			kp.starting = false
			p.mu.Unlock()
			return
		}
		p.mu.Unlock()
		if err != nil {
			if p.ctx.Err() == nil {
				p.log.Warn("warm pool start failed", "key", p.opts.KeyString(key), "err", err, "retryIn", backoff)
			}
			select {
			case <-p.ctx.Done():
			case <-time.After(backoff):
			}
			backoff = min(backoff*2, p.opts.MaxBackoff)
		}
	}
}

// stopAll discards items, each with its own timeout.
func (p *Pool[K, T]) stopAll(key K, items []T) {
	for _, it := range items {
		ctx, cancel := context.WithTimeout(context.Background(), p.opts.StopTimeout)
		p.opts.Stop(ctx, key, it)
		cancel()
	}
}

// Stats returns every key's state, sorted by key name.
func (p *Pool[K, T]) Stats() []Stats {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make([]Stats, 0, len(p.keys))
	for k, kp := range p.keys {
		out = append(out, Stats{
			Key: p.opts.KeyString(k), Size: p.opts.Size, Ready: len(kp.ready), Starting: kp.starting,
			Takes: kp.takes, Misses: kp.misses, Started: kp.started, Failures: kp.failures,
			LastError: kp.lastError, LastStartMS: kp.lastStart.Milliseconds(),
		})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Key < out[j].Key })
	return out
}

// Close stops refilling (starts in flight are cancelled through their
// context), waits for the refill goroutines, and discards every item
// left. Later Takes miss. ctx bounds the wait; items are discarded with
// StopTimeout each, whatever ctx.
func (p *Pool[K, T]) Close(ctx context.Context) error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	p.closed = true
	p.mu.Unlock()
	p.cancel()
	done := make(chan struct{})
	go func() { p.wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
		return fmt.Errorf("warmpool: close: %w", ctx.Err())
	}
	p.mu.Lock()
	keys := p.keys
	p.keys = map[K]*keyPool[T]{}
	p.mu.Unlock()
	n := 0
	for k, kp := range keys {
		n += len(kp.ready)
		p.stopAll(k, kp.ready)
	}
	if n > 0 {
		p.log.Info("warm pool drained", "discarded", n)
	}
	return nil
}
