package session

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"sync"
	"time"

	"github.com/agentd/agentd/agent"
	"github.com/agentd/agentd/conversation"
	"github.com/agentd/agentd/profile"
	"github.com/agentd/agentd/sandbox"
	"github.com/agentd/agentd/store"
)

// startEnvironment brings a session's environment up: sandbox, workspace
// contents (restored from the store, or the profile's default files for a
// new workspace), then attachEnvironment. ctx stays alive as long as the
// environment.
func (m *Manager) startEnvironment(ctx context.Context, s *Session, rec store.Session, actor string) (sandbox.Environment, agent.Runner, *host, error) {
	prof, err := m.cfg.Profiles.Get(ctx, rec.AgentProfileRef)
	if err != nil {
		return nil, nil, nil, err
	}
	spec, err := m.spec(ctx, rec, prof)
	if err != nil {
		return nil, nil, nil, err
	}
	// A backend whose environments outlive the server records a handle
	// before starting anything: a server killed while it starts one then
	// finds and removes it (Recover) instead of leaving it running.
	spec.Record = func(ctx context.Context, h json.RawMessage) error { return m.recordHandle(ctx, s, s.gen(), h) }
	_, statErr := os.Stat(spec.Workspace)
	fresh := errors.Is(statErr, os.ErrNotExist)
	start := time.Now()
	e, err := m.cfg.Sandbox.Create(ctx, spec)
	if err != nil {
		m.revokeCredentials(rec.ID)
		return nil, nil, nil, agent.Fail(agent.CodeSandboxError, "start %s sandbox: %v", m.cfg.Sandbox.Name(), err)
	}
	if fw, ok := e.(sandbox.FreshWorkspacer); ok {
		// The workspace is not the host's folder (a pod's volume).
		fresh = fw.FreshWorkspace()
	}
	if fresh {
		if err := m.populateFrom(ctx, e, rec); err != nil { // workspace.go: a git clone
			terminateQuietly(e)
			m.revokeCredentials(rec.ID)
			return nil, nil, nil, err
		}
		if err := m.populate(ctx, e, rec.ID, prof.DefaultWorkspaceFiles); err != nil {
			terminateQuietly(e)
			m.revokeCredentials(rec.ID)
			return nil, nil, nil, agent.Fail(agent.CodeSandboxError, "prepare workspace: %v", err)
		}
	}
	runner, h, err := m.attachEnvironment(ctx, s, e, rec, actor)
	if err != nil {
		terminateQuietly(e)
		m.revokeCredentials(rec.ID)
		return nil, nil, nil, err
	}
	m.log.Info("environment up", "session", rec.ID, "sandbox", m.cfg.Sandbox.Name(), "ms", time.Since(start).Milliseconds())
	return e, runner, h, nil
}

// spec is the sandbox specification of a session; with Credentials, its
// model credentials are issued here (Revoke them if the environment does
// not come up).
func (m *Manager) spec(ctx context.Context, rec store.Session, prof profile.Profile) (sandbox.Spec, error) {
	env := make(map[string]string, len(m.cfg.Env)+len(prof.EnvironmentVariables)+1)
	env["GIT_CEILING_DIRECTORIES"] = m.gitCeiling(rec.ID) // workspace.go
	maps.Copy(env, m.cfg.Env)
	maps.Copy(env, prof.EnvironmentVariables)
	if m.cfg.Credentials != nil {
		issued, err := m.cfg.Credentials.Issue(ctx, rec.ID, env)
		if err != nil {
			return sandbox.Spec{}, agent.Fail(agent.CodeSandboxError, "issue model credentials: %v", err)
		}
		env = issued
	}
	spec := sandbox.Spec{SessionID: rec.ID, Workspace: m.workspace(rec.ID), Env: env, Ignore: m.cfg.WatchIgnore, Profile: prof.ID}
	if sb := prof.Sandbox; sb != nil {
		spec.Image = sb.Image
		spec.Limits = sandbox.Limits{MemoryBytes: sb.MemoryBytes, Pids: sb.Pids, CPUPercent: sb.CPUPercent}
	}
	return spec, nil
}

// recordHandle stores an environment's handle in the session's record.
// It is fenced by gen, the lease the environment starts under.
func (m *Manager) recordHandle(ctx context.Context, s *Session, gen int64, h json.RawMessage) error {
	s.mu.Lock()
	s.rec.SandboxState = h
	rec := s.rec
	s.mu.Unlock()
	return s.saveRecord(ctx, gen, rec)
}

// attachEnvironment makes an environment that is up (new, or recovered
// after a restart) the session's: it records the sandbox's handle, starts
// the workspace watcher and the lease renewal (both until ctx ends), and
// starts the runner.
func (m *Manager) attachEnvironment(ctx context.Context, s *Session, e sandbox.Environment, rec store.Session, actor string) (agent.Runner, *host, error) {
	arch, ok := m.cfg.Architectures.Lookup(rec.Architecture)
	if !ok {
		return nil, nil, agent.Fail(agent.CodeInternal, "architecture %q is not available on this server", rec.Architecture)
	}
	prof, err := m.cfg.Profiles.Get(ctx, rec.AgentProfileRef)
	if err != nil {
		return nil, nil, err
	}
	s.mu.Lock()
	s.rec.Runtime.WorkDir = e.WorkDir() // saved with the next record update (the status that follows)
	s.mu.Unlock()
	// Everything written for this environment carries the lease it runs
	// under: once another server has the lease, the store refuses it.
	gen := s.gen()
	if hd, ok := e.(sandbox.HandleReporter); ok {
		// Recorded before anything runs: a server killed from here on finds
		// the environment again.
		if err := m.recordHandle(ctx, s, gen, hd.Handle()); err != nil {
			return nil, nil, fmt.Errorf("record sandbox handle: %w", err)
		}
	}
	// Watch before the agent starts so nothing it writes is missed.
	changes, err := e.Watch(ctx)
	if err != nil {
		return nil, nil, agent.Fail(agent.CodeSandboxError, "watch workspace: %v", err)
	}
	marks := newWatchMarks(rec.ID)
	go m.forwardChanges(ctx, s, gen, e, changes, marks)
	m.renewLease(ctx, rec.ID, gen, func(why string) {
		_ = s.do(func(o *owner) { o.leaseLost(gen, why) })
	})

	h := &host{s: s, gen: gen, env: e, marks: marks, prof: prof, log: m.log.With("session", rec.ID, "architecture", rec.Architecture)}
	h.bound = m.newBounder(rec.ID, h.log)
	h.setTurn(actor, rec.Runtime.ActiveQueryID)
	var ah agent.Host = h
	if m.cfg.Artifacts != nil {
		ah = &artifactHost{host: h, as: m.cfg.Artifacts} // content.go
	}
	runner, err := arch.Start(ctx, ah)
	if err != nil {
		return nil, nil, err
	}
	return runner, h, nil
}

func terminateQuietly(e sandbox.Environment) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_ = e.Terminate(ctx)
}

// populate fills a new workspace: the files saved in the store for this
// session (a workspace restored elsewhere), or else the profile's defaults.
func (m *Manager) populate(ctx context.Context, e sandbox.Environment, id string, defaults []profile.File) error {
	saved, err := m.cfg.Store.ListWorkspaceFiles(ctx, id)
	if err != nil {
		return fmt.Errorf("list saved files: %w", err)
	}
	var files []sandbox.File
	if len(saved) > 0 {
		for _, f := range saved {
			files = append(files, sandbox.File{Path: f.Path, Content: f.Content, Mode: os.FileMode(f.Mode)})
		}
	} else {
		for _, f := range defaults {
			files = append(files, sandbox.File{Path: f.Path, Content: []byte(f.Content)})
		}
	}
	if len(files) == 0 {
		return nil
	}
	return e.WriteFiles(ctx, files)
}

// forwardChanges turns workspace changes into file events and, within the
// size bound, copies the files into the store. It reports each Sync marker
// to marks once everything before it is recorded.
func (m *Manager) forwardChanges(ctx context.Context, s *Session, gen int64, e sandbox.Environment, changes <-chan sandbox.FileEvent, marks *watchMarks) {
	defer marks.end()
	for ch := range changes {
		var ev conversation.Event
		switch ch.Op {
		case sandbox.Sync:
			marks.reached(ch.Path)
			continue
		case sandbox.Deleted:
			ev = conversation.NewEvent(conversation.FileChange{Kind: conversation.TypeFileDeleted, Path: ch.Path})
		case sandbox.Created, sandbox.Modified:
			kind := conversation.TypeFileModified
			if ch.Op == sandbox.Created {
				kind = conversation.TypeFileCreated
			}
			size := ch.Size
			ev = conversation.NewEvent(conversation.FileChange{Kind: kind, Path: ch.Path, Size: &size, SHA256: ch.SHA256})
		default:
			continue
		}
		if _, err := s.appendEvents(ctx, gen, ev); err != nil {
			if ctx.Err() == nil {
				m.log.Warn("record file change", "session", s.id, "path", ch.Path, "err", err)
			}
			continue
		}
		m.persistFile(ctx, s.id, e, ch)
	}
	// The channel closes when ctx ends (the session stopped watching), or
	// when the environment's watch ended by itself: its executor died.
	if ctx.Err() == nil && !e.Running() {
		_ = s.do(func(o *owner) { o.loseEnv(e, errors.New("its workspace watch ended: the connection to it was lost")) })
	}
}

func (m *Manager) persistFile(ctx context.Context, id string, e sandbox.Environment, ch sandbox.FileEvent) {
	if m.cfg.PersistFilesMax <= 0 {
		return
	}
	if ch.Op == sandbox.Deleted {
		if err := m.cfg.Store.DeleteSessionFile(ctx, id, ch.Path); err != nil && ctx.Err() == nil {
			m.log.Warn("forget file", "session", id, "path", ch.Path, "err", err)
		}
		return
	}
	if ch.Size > m.cfg.PersistFilesMax {
		return
	}
	data, err := e.ReadFile(ctx, ch.Path)
	if err != nil {
		return // gone again already; its delete event follows
	}
	f := store.WorkspaceFile{Path: ch.Path, Content: data, UpdatedAt: time.Now().UTC()}
	if err := m.cfg.Store.SaveWorkspaceFile(ctx, id, f); err != nil && ctx.Err() == nil {
		m.log.Warn("save file", "session", id, "path", ch.Path, "err", err)
	}
}

// renewLease keeps the session's lease of generation gen while its
// environment is up (until ctx ends): it is renewed every third of
// LeaseTTL, by the process's one lease renewer rather than a goroutine per
// session. lost (when set) is called, once, when the lease is lost: another
// server holds it, or took it since (the generation changed), or the
// session is gone, or no renewal succeeded for a whole ttl (the lease has
// expired, and another server may take it).
func (m *Manager) renewLease(ctx context.Context, id string, gen int64, lost func(why string)) {
	now := time.Now()
	leases.add(&leaseEntry{ctx: ctx, m: m, id: id, gen: gen, lost: lost, okAt: now, due: now.Add(m.cfg.LeaseTTL / 3)})
}

// leases renews the leases of every session whose environment is up, in
// every Manager of the process.
var leases leaseRenewer

// leaseRenewer renews leases from one goroutine, which runs only while
// there is a lease to keep: the first entry starts it, and it exits when the
// last entry's context has ended. Its methods are safe for concurrent use.
// Renewals are made one after the other; entries due within a tenth of
// their period of each other are renewed together (a little early), so the
// goroutine wakes about ten times per period however many sessions there
// are.
type leaseRenewer struct {
	mu      sync.Mutex
	entries map[*leaseEntry]struct{}
	wake    chan struct{} // capacity 1: entries changed
	running bool
}

type leaseEntry struct {
	ctx  context.Context // the environment's; its end stops the renewal
	m    *Manager
	id   string
	gen  int64
	lost func(why string)
	due  time.Time // next renewal; guarded by leaseRenewer.mu
	// Renewer goroutine only:
	okAt     time.Time // start of the last successful renewal
	reported bool      // lost was called
}

func (r *leaseRenewer) add(e *leaseEntry) {
	r.mu.Lock()
	if r.entries == nil {
		r.entries = make(map[*leaseEntry]struct{})
		r.wake = make(chan struct{}, 1)
	}
	r.entries[e] = struct{}{}
	start := !r.running
	r.running = true
	r.mu.Unlock()
	if start {
		go r.run()
	} else {
		r.poke()
	}
	context.AfterFunc(e.ctx, func() { r.remove(e) })
}

func (r *leaseRenewer) remove(e *leaseEntry) {
	r.mu.Lock()
	delete(r.entries, e)
	r.mu.Unlock()
	r.poke() // an empty set ends the goroutine at once
}

func (r *leaseRenewer) poke() {
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

func (r *leaseRenewer) run() {
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	var due []*leaseEntry
	for {
		r.mu.Lock()
		if len(r.entries) == 0 {
			r.running = false
			r.mu.Unlock()
			return
		}
		now := time.Now()
		var next time.Time
		due = due[:0]
		for e := range r.entries {
			period := e.m.cfg.LeaseTTL / 3
			if !e.due.After(now.Add(period / 10)) {
				due = append(due, e)
				e.due = now.Add(period)
			}
			if next.IsZero() || e.due.Before(next) {
				next = e.due
			}
		}
		r.mu.Unlock()
		for _, e := range due {
			e.renew()
		}
		clear(due) // no entry kept alive by the scratch slice
		timer.Reset(time.Until(next))
		select {
		case <-timer.C:
		case <-r.wake:
		}
	}
}

// renew renews the entry's lease once (renewer goroutine) and reports its
// loss.
func (e *leaseEntry) renew() {
	start := time.Now()
	gen, err := e.m.cfg.Store.AcquireLease(e.ctx, e.id, e.m.cfg.Holder, e.m.cfg.LeaseTTL)
	if e.ctx.Err() != nil {
		return
	}
	var why string
	switch {
	case err == nil && (e.gen == 0 || gen == e.gen):
		e.okAt = start
		return
	case err == nil:
		why = fmt.Sprintf("the lease's generation went from %d to %d: another server held it meanwhile", e.gen, gen)
	case errors.Is(err, store.ErrLeaseHeld):
		why = "another server holds the lease"
	case errors.Is(err, store.ErrNotFound):
		why = "the session was deleted"
	default:
		e.m.log.Error("renew lease", "session", e.id, "err", err)
		if time.Since(e.okAt) < e.m.cfg.LeaseTTL {
			return // retried at the next period
		}
		why = fmt.Sprintf("the lease could not be renewed for %s (it has expired; another server may take the session): %v", e.m.cfg.LeaseTTL, err)
	}
	if !e.reported && e.lost != nil {
		e.reported = true
		e.lost(why)
	}
}
