// Package local is the sandbox backend that runs a session's processes on
// this host, in the session's workspace folder, each command in its own
// process group. It isolates nothing beyond that: it is for trusted use and
// development, and the building block the executor process wraps.
//
// Processes are children of the calling process; they do not survive it, so
// local environments cannot be recovered after a restart (create a new one
// on the same workspace: its contents are kept).
package local

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/agentd/agentd/internal/sandbox/watch"
	"github.com/agentd/agentd/sandbox"
)

// Name is the backend name given to --sandbox.
const Name = "local"

// Defaults for Options fields left zero.
const (
	DefaultKillGrace    = 2 * time.Second
	DefaultDrainTimeout = 2 * time.Second
	// DefaultMaxReadBytes bounds ReadFile: a file is read into memory whole.
	DefaultMaxReadBytes = 64 << 20
	defaultPath         = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
)

// Options configure a Provider. The zero value is usable.
type Options struct {
	// Path is the PATH every process gets (Spec.Env or Cmd.Env may
	// override it). Default: this process's PATH at New.
	Path string
	// Ignore is the base ignore list of every environment; Spec.Ignore is
	// added to it. nil means watch.DefaultIgnore; use an empty non-nil
	// slice to ignore nothing.
	Ignore []string
	// Watch tunes the watcher (debounce, polling, hash limit). Its Ignore
	// field is replaced by the environment's ignore list.
	Watch watch.Options
	// KillGrace is how long Terminate waits after SIGTERM before SIGKILL.
	KillGrace time.Duration
	// DrainTimeout bounds how long output is awaited after a command's
	// process group is gone, when a process that left the group (setsid)
	// still holds its stdout or stderr open without writing.
	DrainTimeout time.Duration
	// Nice is added to the niceness of every process an environment
	// starts (up to MaxNice; 0 leaves them at this process's priority), so
	// agents' builds and tests yield the CPU to the server streaming their
	// output instead of starving it. It is set on the command's process
	// group right after the start: what the command moves out of its group
	// within those microseconds keeps this process's priority.
	Nice int
	// MaxReadBytes bounds what ReadFile reads into memory (0:
	// DefaultMaxReadBytes); larger files fail with sandbox.ErrTooLarge.
	// OpenFile streams files of any size.
	MaxReadBytes int64
	Logger       *slog.Logger
}

// Provider creates local environments. It is safe for concurrent use.
type Provider struct {
	opts Options
	nice niceness // Options.Nice resolved against this process's own
}

var _ sandbox.Provider = (*Provider)(nil)

var _ sandbox.FileOpener = (*Environment)(nil)

// New returns a local Provider.
func New(opts Options) *Provider {
	if opts.Path == "" {
		opts.Path = os.Getenv("PATH")
	}
	if opts.Path == "" {
		opts.Path = defaultPath
	}
	if opts.Ignore == nil {
		opts.Ignore = watch.DefaultIgnore
	}
	if opts.KillGrace <= 0 {
		opts.KillGrace = DefaultKillGrace
	}
	if opts.DrainTimeout <= 0 {
		opts.DrainTimeout = DefaultDrainTimeout
	}
	if opts.MaxReadBytes <= 0 {
		opts.MaxReadBytes = DefaultMaxReadBytes
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	return &Provider{opts: opts, nice: niceFor(opts.Nice, opts.Logger)}
}

// Name returns "local".
func (p *Provider) Name() string { return Name }

// Create makes (or reuses, keeping its contents) the folder Spec.Workspace
// and returns an Environment on it, ready for use. Spec.Limits are not
// enforced by this backend.
func (p *Provider) Create(ctx context.Context, spec sandbox.Spec) (sandbox.Environment, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("create local environment: %w", err)
	}
	if spec.Workspace == "" {
		return nil, errors.New("create local environment: no workspace folder given")
	}
	abs, err := filepath.Abs(spec.Workspace)
	if err != nil {
		return nil, fmt.Errorf("create local environment: %w", err)
	}
	// The workspace is the session's alone: no other user may reach what
	// its agents leave there (set-uid programs included).
	if err := os.MkdirAll(abs, 0o700); err != nil {
		return nil, fmt.Errorf("create local environment: %w", err)
	}
	real, err := filepath.EvalSymlinks(abs)
	if err != nil {
		return nil, fmt.Errorf("create local environment: %w", err)
	}
	root, err := os.OpenRoot(real)
	if err != nil {
		return nil, fmt.Errorf("create local environment: %w", err)
	}
	if info, err := root.Stat("."); err != nil || !info.IsDir() {
		root.Close()
		return nil, fmt.Errorf("create local environment: %s is not a folder", real)
	}
	// The temporary files of atomic writes are never reported or listed.
	ignore := append(append(append([]string(nil), p.opts.Ignore...), spec.Ignore...), tmpPattern)
	e := &Environment{
		opts:       p.opts,
		nice:       p.nice,
		spec:       spec,
		dir:        real,
		root:       root,
		ignoreList: ignore,
		ignore:     watch.NewIgnore(ignore),
		log:        p.opts.Logger.With("sandbox", Name, "session", spec.SessionID),
		procs:      make(map[string]*process),
		terminated: make(chan struct{}),
	}
	return e, nil
}

// Environment is one session's local environment. All methods are safe for
// concurrent use. After Terminate every method but Terminate, Running and
// WorkDir returns sandbox.ErrTerminated.
type Environment struct {
	opts       Options
	nice       niceness
	spec       sandbox.Spec
	dir        string // absolute, symlinks resolved
	root       *os.Root
	ignoreList []string
	ignore     *watch.Ignore
	log        *slog.Logger

	// life is held shared by every operation for its duration and
	// exclusively by Terminate to flip dead and release the root.
	life sync.RWMutex
	dead bool

	mu      sync.Mutex // guards procs, nextTag
	procs   map[string]*process
	nextTag uint64

	watchMu sync.Mutex
	watcher *watch.Watcher

	termOnce   sync.Once
	terminated chan struct{} // closed when Terminate has finished
	termErr    error
}

var (
	_ sandbox.Environment = (*Environment)(nil)
	_ sandbox.WatchSyncer = (*Environment)(nil)
)

// enter starts an operation: it fails after Terminate; otherwise the caller
// must call the returned function when done.
func (e *Environment) enter() (func(), error) {
	e.life.RLock()
	if e.dead {
		e.life.RUnlock()
		return nil, sandbox.ErrTerminated
	}
	return e.life.RUnlock, nil
}

// WorkDir is the workspace's absolute path with symlinks resolved; it is
// also every process's HOME unless the environment sets one.
func (e *Environment) WorkDir() string { return e.dir }

// Running reports whether Terminate has not been called.
func (e *Environment) Running() bool {
	e.life.RLock()
	defer e.life.RUnlock()
	return !e.dead
}

// Watch reports workspace changes until ctx ends or the environment
// terminates, then closes the channel. The environment's watcher starts on
// the first call (what exists then is the baseline) and runs until
// Terminate; every call gets its own channel of changes from then on.
func (e *Environment) Watch(ctx context.Context) (<-chan sandbox.FileEvent, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	leave, err := e.enter()
	if err != nil {
		return nil, err
	}
	defer leave()
	e.watchMu.Lock()
	defer e.watchMu.Unlock()
	if e.watcher == nil {
		opts := e.opts.Watch
		opts.Ignore = e.ignoreList
		if opts.Logger == nil {
			opts.Logger = e.log
		}
		w, err := watch.New(e.dir, opts)
		if err != nil {
			return nil, fmt.Errorf("watch workspace: %w", err)
		}
		e.watcher = w
	}
	return e.watcher.Subscribe(ctx), nil
}

// SyncWatch implements sandbox.WatchSyncer: every change made before the
// call reaches the open Watch channels, then the marker id does. With no
// watch open there is nothing to flush.
func (e *Environment) SyncWatch(ctx context.Context, id string) error {
	leave, err := e.enter()
	if err != nil {
		return err
	}
	e.watchMu.Lock()
	w := e.watcher
	e.watchMu.Unlock()
	leave()
	if w == nil {
		return nil
	}
	if err := w.Sync(ctx, id); err != nil {
		if errors.Is(err, watch.ErrClosed) {
			return sandbox.ErrTerminated
		}
		return fmt.Errorf("sync watch: %w", err)
	}
	return nil
}

// Terminate stops every process the environment started (SIGTERM to each
// process group, SIGKILL to what is left after KillGrace), waits until they
// are reaped, discards output nobody has read, stops the watcher and marks
// the environment terminated. The workspace stays on disk. Terminate is
// idempotent: later calls wait for the first to finish and return its
// result. ctx bounds the waiting; processes are SIGKILLed at once if ctx
// ends first.
func (e *Environment) Terminate(ctx context.Context) error {
	e.termOnce.Do(func() {
		e.life.Lock()
		e.dead = true
		e.life.Unlock()
		// From here no operation is in progress and none can start.
		e.termErr = e.stopAll(ctx)
		e.watchMu.Lock()
		if e.watcher != nil {
			_ = e.watcher.Close()
			e.watcher = nil
		}
		e.watchMu.Unlock()
		if err := e.root.Close(); err != nil && e.termErr == nil {
			e.termErr = fmt.Errorf("terminate: %w", err)
		}
		close(e.terminated)
	})
	select {
	case <-e.terminated:
		return e.termErr
	case <-ctx.Done():
		return fmt.Errorf("terminate: %w", ctx.Err())
	}
}

func (e *Environment) stopAll(ctx context.Context) error {
	e.mu.Lock()
	procs := make([]*process, 0, len(e.procs))
	for _, p := range e.procs {
		if p != nil { // nil: a tag reserved by an Exec still starting
			procs = append(procs, p)
		}
	}
	e.mu.Unlock()
	if len(procs) == 0 {
		return nil
	}
	for _, p := range procs {
		p.signalAll(sigTerm)
	}
	grace := time.NewTimer(e.opts.KillGrace)
	defer grace.Stop()
	var ctxErr error
	for _, p := range procs {
		select {
		case <-p.reaped:
			continue
		case <-grace.C:
		case <-ctx.Done():
			ctxErr = ctx.Err()
		}
		break
	}
	for _, p := range procs {
		p.signalAll(sigKill)
	}
	// A SIGKILLed process is reaped promptly; waiting for it is what
	// guarantees no zombie is left behind. Only ctx cuts that short (a
	// process stuck in the kernel); its waiter reaps it later.
	for _, p := range procs {
		select {
		case <-p.reaped:
		case <-ctx.Done():
			ctxErr = ctx.Err()
		}
	}
	for _, p := range procs {
		p.abandon()
	}
	for _, p := range procs {
		select {
		case <-p.done:
		case <-ctx.Done():
			ctxErr = ctx.Err()
		}
	}
	if ctxErr != nil {
		return fmt.Errorf("terminate: %w", ctxErr)
	}
	return nil
}

func (e *Environment) forget(p *process) {
	e.mu.Lock()
	if e.procs[p.tag] == p {
		delete(e.procs, p.tag)
	}
	e.mu.Unlock()
}
