// Package session runs agentd sessions. A Manager holds every session; a
// Session has a typed lifecycle (created → starting → ready → running → idle
// → terminated, plus error), emitted as status events, and while its
// environment is up one owner goroutine makes every change to its runtime
// state, so that state needs no locks. API calls reach the owner as
// commands; the agent's turn and the environment start run in goroutines the
// owner starts and hear back from.
package session

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/agentd/agentd/agent"
	"github.com/agentd/agentd/conversation"
	"github.com/agentd/agentd/internal/eventlog"
	"github.com/agentd/agentd/restapi"
	"github.com/agentd/agentd/sandbox"
	"github.com/agentd/agentd/store"
)

// Config wires a Manager.
type Config struct {
	Store         store.Store
	Log           *eventlog.Log
	Sandbox       sandbox.Provider
	Architectures *agent.Registry
	Profiles      *Profiles
	// Files reads the workspace of a session whose environment is down
	// (defaults to Sandbox).
	Files sandbox.Provider
	// DataDir holds workspaces under DataDir/workspaces/<session id>.
	DataDir string
	// WorkspacesDir, when set, holds the workspaces instead
	// (WorkspacesDir/<session id>): a folder the servers of a fleet share.
	WorkspacesDir string
	// IdleTimeout terminates an environment idle that long (default 15m).
	IdleTimeout time.Duration
	// PermissionTimeout denies an unanswered permission request (default 5m).
	PermissionTimeout time.Duration
	// InterruptGrace is how long an interrupted turn may take to stop by
	// itself before its context is cancelled (default 10s).
	InterruptGrace time.Duration
	// Env is passed to every sandbox (provider keys and endpoints).
	Env map[string]string
	// WatchIgnore is the workspace watcher's ignore list.
	WatchIgnore []string
	// PersistFilesMax is the largest workspace file copied into the store
	// (so a workspace can be restored elsewhere); 0 disables copying.
	PersistFilesMax int64
	// Holder names this server in session leases (default: a random id).
	Holder string
	// LeaseTTL is the lease duration, renewed at a third of it (default 30s).
	LeaseTTL time.Duration
	Logger   *slog.Logger
	// Metrics observes session state counts when set.
	Metrics Metrics
	// Credentials, when set, issues each environment's model credentials
	// in place of the provider keys in Env (credentials.go).
	Credentials Credentials
	// RefuseMissingAgents refuses to create a session whose agent CLI is
	// not installed (ErrAgentNotFound). Architectures probe the server's
	// PATH, which is where the built-in sandboxes find agents; a sandbox
	// that looks elsewhere leaves it off.
	RefuseMissingAgents bool
	// Cluster, when set, makes this server one of a fleet sharing Store
	// (cluster.go): commands go to the server holding a session's lease,
	// and session changes are announced.
	Cluster Cluster
	// OutputLimit is the most bytes of one block's text (a command's
	// output, a tool's result, a file's content) the log and the reduced
	// conversation keep (default DefaultOutputLimit; negative: no limit).
	// A longer text keeps its first and last OutputLimit/2 bytes, and the
	// whole of it is stored as an artifact when the store keeps them
	// (bound.go).
	OutputLimit int
	// Registerer receives the fleet metrics (leases lost, take-overs,
	// forwarded commands) when set.
	Registerer prometheus.Registerer
	// Artifacts stores the sessions' artifacts (large outputs, images,
	// files): Store itself when it is a store.ArtifactStore (the wiring
	// passes it metered). nil: the server keeps no artifacts.
	Artifacts store.ArtifactStore

	// noSweep leaves out the take-over sweep (tests of the other ways
	// in: export_test.go).
	noSweep bool
}

// Metrics receives session lifecycle observations.
type Metrics interface {
	StatusChanged(from, to conversation.SessionStatus)
}

// Manager holds every session. Its methods are safe for concurrent use.
type Manager struct {
	cfg Config
	log *slog.Logger

	mu       sync.Mutex // guards sessions, closed, and wg.Add against Close (addOwner)
	sessions map[string]*Session
	closed   bool

	watchers watchers
	states   *stateCache
	snaps    snapshots      // changes.go
	wg       sync.WaitGroup // owner goroutines

	cluster     Cluster // nil: a server on its own
	metrics     *fleetMetrics
	bg          sync.WaitGroup // background goroutines (sweep, notices); Add under mu, with closed
	bgCtx       context.Context
	bgCancel    context.CancelFunc
	stopNotices func()
}

// New returns a manager; call Start to load the stored sessions.
func New(cfg Config) (*Manager, error) {
	if cfg.Store == nil || cfg.Log == nil || cfg.Sandbox == nil || cfg.Architectures == nil {
		return nil, errors.New("session: Store, Log, Sandbox and Architectures are required")
	}
	if cfg.Profiles == nil {
		cfg.Profiles = NewProfiles(cfg.Store, nil)
	}
	if cfg.Files == nil {
		cfg.Files = cfg.Sandbox
	}
	if cfg.IdleTimeout <= 0 {
		cfg.IdleTimeout = 15 * time.Minute
	}
	if cfg.PermissionTimeout <= 0 {
		cfg.PermissionTimeout = 5 * time.Minute
	}
	if cfg.InterruptGrace <= 0 {
		cfg.InterruptGrace = 10 * time.Second
	}
	if cfg.Holder == "" {
		cfg.Holder = "agentd-" + uuid.NewString()
	}
	if cfg.LeaseTTL <= 0 {
		cfg.LeaseTTL = 30 * time.Second
	}
	if cfg.OutputLimit == 0 {
		cfg.OutputLimit = DefaultOutputLimit
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	bgCtx, bgCancel := context.WithCancel(context.Background())
	return &Manager{
		cfg:      cfg,
		log:      cfg.Logger,
		sessions: make(map[string]*Session),
		states:   newStateCache(cfg.Log, 128),
		cluster:  cfg.Cluster,
		metrics:  newFleetMetrics(cfg.Registerer),
		bgCtx:    bgCtx,
		bgCancel: bgCancel,
	}, nil
}

// Start loads every stored session and settles the ones that were active
// when the server stopped: their running turn is failed with a reason, open
// permission requests are resolved, and the session is marked terminated.
// (A sandbox backend whose environments outlive the server re-attaches
// instead; see recover.go.)
func (m *Manager) Start(ctx context.Context) error {
	recs, err := m.cfg.Store.ListSessions(ctx)
	if err != nil {
		return fmt.Errorf("load sessions: %w", err)
	}
	var queued []*Session
	for _, rec := range recs {
		s := newSession(m, rec)
		m.mu.Lock()
		m.sessions[rec.ID] = s
		m.mu.Unlock()
		if rec.Status.Active() {
			if err := m.recoverOrSettle(ctx, s); err != nil {
				m.log.Error("settle session after restart", "session", rec.ID, "err", err)
			}
		}
		if rec.Runtime.Queued > 0 {
			queued = append(queued, s)
		}
		if m.cfg.Metrics != nil {
			m.cfg.Metrics.StatusChanged("", s.record().Status)
		}
	}
	m.resumeQueues(ctx, queued) // queue.go
	m.log.Info("sessions loaded", "count", len(recs))
	if m.cluster != nil {
		stop, err := m.cluster.Notices(m.onNotice)
		if err != nil {
			return fmt.Errorf("follow the fleet's notices: %w", err)
		}
		m.stopNotices = stop
	}
	// Sessions whose server dies (or stops, handing them over) are taken
	// over here once their lease is free.
	if !m.cfg.noSweep {
		m.background(m.sweepLoop)
	}
	return nil
}

// Create makes a new session (status created; the environment starts with
// the first message).
func (m *Manager) Create(ctx context.Context, req CreateRequest, actor string) (store.Session, error) {
	prof, err := m.cfg.Profiles.Get(ctx, req.AgentProfileRef)
	if err != nil {
		return store.Session{}, err
	}
	archName := req.Architecture
	if archName == "" {
		archName = prof.Architecture
	}
	if archName == "" {
		return store.Session{}, fmt.Errorf("%w: architecture is required", ErrInvalidRequest)
	}
	arch, ok := m.cfg.Architectures.Lookup(archName)
	if !ok {
		return store.Session{}, fmt.Errorf("%w: %q (known: %v)", ErrUnknownArchitecture, archName, m.cfg.Architectures.Names())
	}
	opts := req.SessionOptions
	if len(opts) == 0 || string(opts) == "null" {
		opts = json.RawMessage("{}")
	}
	var probe map[string]any
	if err := json.Unmarshal(opts, &probe); err != nil {
		return store.Session{}, fmt.Errorf("%w: sessionOptions must be an object", ErrInvalidRequest)
	}
	if _, err := workspaceSource(opts); err != nil {
		return store.Session{}, err
	}
	if err := m.checkAgent(ctx, arch.Name()); err != nil {
		return store.Session{}, err
	}
	id, err := uuid.NewV7()
	if err != nil {
		return store.Session{}, err
	}
	now := time.Now().UTC().Truncate(time.Millisecond)
	rec := store.Session{
		ID:              id.String(),
		Architecture:    arch.Name(),
		AgentProfileRef: prof.ID,
		Name:            req.Name,
		Status:          conversation.SessionCreated,
		SessionOptions:  opts,
		CreatedAt:       now,
		LastActivity:    now,
		Owner:           req.Owner,
		Tenant:          req.Tenant,
		Runtime: conversation.Runtime{
			Status:       conversation.SessionCreated,
			Architecture: arch.Name(),
			Sandbox:      m.cfg.Sandbox.Name(),
		},
	}
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return store.Session{}, ErrClosed
	}
	m.mu.Unlock()
	if err := m.cfg.Store.CreateSession(ctx, rec); err != nil {
		return store.Session{}, fmt.Errorf("create session: %w", err)
	}
	m.add(newSession(m, rec))
	if _, err := m.cfg.Log.Append(ctx, rec.ID, statusEvent(rec.Runtime, "", actor)); err != nil {
		return store.Session{}, fmt.Errorf("record status: %w", err)
	}
	m.changed(m.summary(ctx, rec))
	return rec, nil
}

// add keeps s in memory (unless a session of its id is there already) and
// returns the one kept.
func (m *Manager) add(s *Session) *Session {
	m.mu.Lock()
	if old, ok := m.sessions[s.id]; ok {
		m.mu.Unlock()
		return old
	}
	m.sessions[s.id] = s
	m.mu.Unlock()
	if m.cfg.Metrics != nil {
		m.cfg.Metrics.StatusChanged("", s.record().Status)
	}
	return s
}

// CreateRequest is what creating a session takes: the fields of the API's
// body (restapi.CreateSessionRequest) and the authenticated creator, which
// the body never carries.
type CreateRequest struct {
	AgentProfileRef string          `json:"agentProfileRef,omitempty"`
	Architecture    string          `json:"architecture,omitempty"`
	SessionOptions  json.RawMessage `json:"sessionOptions,omitempty"`
	Name            string          `json:"name,omitempty"`
	// Owner and Tenant are the authenticated creator's (never the
	// client's say).
	Owner  string `json:"-"`
	Tenant string `json:"-"`
}

// Summary is a session as listed: the API's body itself (GET
// /api/sessions, the WebSocket's sessions frames), also carried between
// the servers of a fleet.
type Summary = restapi.SessionSummary

func (m *Manager) summary(ctx context.Context, rec store.Session) Summary {
	last, _ := m.cfg.Log.LastSeq(ctx, rec.ID)
	return Summary{
		SessionID: rec.ID, Type: rec.Architecture, AgentProfileReference: rec.AgentProfileRef,
		Name: rec.Name, Status: rec.Status, LastActivity: rec.LastActivity, CreatedAt: rec.CreatedAt,
		LastSeq: last, Owner: rec.Owner, Tenant: rec.Tenant,
	}
}

// List returns every session, newest first. In a fleet the list is the
// store's: sessions created and changed on other servers too.
func (m *Manager) List(ctx context.Context) []Summary {
	var recs []store.Session
	if m.cluster != nil {
		var err error
		if recs, err = m.cfg.Store.ListSessions(ctx); err != nil {
			m.log.Warn("list sessions from the store; listing those known here", "err", err)
			recs = nil
		}
	}
	if recs == nil {
		m.mu.Lock()
		for _, s := range m.sessions {
			recs = append(recs, s.record())
		}
		m.mu.Unlock()
	}
	out := make([]Summary, 0, len(recs))
	for _, rec := range recs {
		if s := m.known(rec.ID); s != nil && s.holding() {
			rec = s.record() // this server runs it: the freshest
		}
		out = append(out, m.summary(ctx, rec))
	}
	sort.Slice(out, func(i, j int) bool {
		if !out[i].CreatedAt.Equal(out[j].CreatedAt) {
			return out[i].CreatedAt.After(out[j].CreatedAt)
		}
		return out[i].SessionID > out[j].SessionID
	})
	return out
}

// Artifacts returns the artifact store (Config.Artifacts), nil when the
// server keeps no artifacts. Artifacts are the store's: every server of a
// fleet reaches the same ones, and a session's go with its purge.
func (m *Manager) Artifacts() store.ArtifactStore { return m.cfg.Artifacts }

// Get returns a session: one known here, or else one the store has (a
// session another server of a fleet created, or one created after this
// server started by another sharing its store).
func (m *Manager) Get(id string) (*Session, error) {
	if s := m.known(id); s != nil {
		return s, nil
	}
	if id == "" || m.isClosed() {
		return nil, fmt.Errorf("%w: %q", ErrNotFound, id)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	rec, err := m.cfg.Store.LoadSession(ctx, id)
	if errors.Is(err, store.ErrNotFound) {
		return nil, fmt.Errorf("%w: %q", ErrNotFound, id)
	}
	if err != nil {
		return nil, fmt.Errorf("load session: %w", err)
	}
	return m.add(newSession(m, rec)), nil
}

// known returns the session if this server has it in memory.
func (m *Manager) known(id string) *Session {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.sessions[id]
}

// State returns a session's record and its conversation reduced from the
// log. In a fleet, the record of a session another server runs is read
// from the store.
func (m *Manager) State(ctx context.Context, id string) (store.Session, conversation.State, error) {
	s, err := m.Get(id)
	if err != nil {
		return store.Session{}, conversation.State{}, err
	}
	rec := s.record()
	if m.cluster != nil && !s.holding() {
		fresh, err := m.cfg.Store.LoadSession(ctx, id)
		if errors.Is(err, store.ErrNotFound) {
			return store.Session{}, conversation.State{}, fmt.Errorf("%w: %q", ErrNotFound, id)
		}
		if err != nil {
			return store.Session{}, conversation.State{}, fmt.Errorf("load session: %w", err)
		}
		rec = fresh
	}
	st, err := m.states.get(ctx, id)
	if err != nil {
		return store.Session{}, conversation.State{}, err
	}
	return rec, st, nil
}

// Delete terminates the session's environment; with purge it also deletes
// the session's history, files and workspace.
func (m *Manager) Delete(ctx context.Context, id string, purge bool, actor string) error {
	s, err := m.Get(id)
	if err != nil {
		return err
	}
	if err := s.Terminate(ctx, "deleted", actor); err != nil {
		return err
	}
	if !purge {
		return nil
	}
	rec := s.record()
	m.forget(id)
	if err := m.cfg.Store.DeleteSession(ctx, id); err != nil && !errors.Is(err, store.ErrNotFound) {
		return fmt.Errorf("delete session: %w", err)
	}
	// A backend's own workspace storage (a volume) is shared by the
	// fleet: removed once, here, not by every server's forget.
	if wc, ok := m.cfg.Sandbox.(sandbox.WorkspaceCollector); ok {
		if err := wc.RemoveWorkspace(ctx, id); err != nil {
			m.log.Warn("remove workspace", "session", id, "sandbox", m.cfg.Sandbox.Name(), "err", err)
		}
	}
	sum := Summary{SessionID: id, Type: rec.Architecture, Status: rec.Status, Deleted: true, CreatedAt: rec.CreatedAt, Owner: rec.Owner, Tenant: rec.Tenant}
	m.watchers.notify(sum)
	m.announce(notice{Kind: noticeDeleted, SessionID: id, Summary: &sum})
	return nil
}

// forget drops a purged session from this server: its record, cached
// state, event tail (its subscribers end with ErrSessionDeleted) and
// workspace folder.
func (m *Manager) forget(id string) {
	m.mu.Lock()
	s, ok := m.sessions[id]
	delete(m.sessions, id)
	m.mu.Unlock()
	m.states.forget(id)
	m.cfg.Log.Forget(id)
	if err := os.RemoveAll(m.workspace(id)); err != nil {
		m.log.Warn("remove workspace", "session", id, "err", err)
	}
	m.forgetChanges(id)
	_ = os.RemoveAll(m.spoolDir(id))
	if ok && m.cfg.Metrics != nil {
		m.cfg.Metrics.StatusChanged(s.record().Status, "")
	}
}

// WatchSessions delivers a Summary whenever a session is created, changes
// status, has activity or is deleted, until ctx ends. The channel is closed
// when ctx ends or the watcher falls behind (it should then re-list).
func (m *Manager) WatchSessions(ctx context.Context) <-chan Summary {
	return m.watchers.add(ctx)
}

// Close shuts every session down. Environments that outlive the server
// (a Recoverer sandbox) are left running for the next start to re-attach;
// others are terminated, failing their running turn with a reason.
func (m *Manager) Close(ctx context.Context) error {
	m.mu.Lock()
	m.closed = true
	all := make([]*Session, 0, len(m.sessions))
	for _, s := range m.sessions {
		all = append(all, s)
	}
	m.mu.Unlock()
	_, detach := m.cfg.Sandbox.(sandbox.Recoverer)
	var wg sync.WaitGroup
	for _, s := range all {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s.shutdown(ctx, detach)
		}()
	}
	wg.Wait()
	m.bgCancel()
	if m.stopNotices != nil {
		m.stopNotices()
	}
	done := make(chan struct{})
	go func() { m.wg.Wait(); m.bg.Wait(); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
		return ctx.Err()
	}
	m.watchers.closeAll()
	return nil
}

// addOwner counts a new owner goroutine, unless the manager is closed.
// Lock order: Session.mu, then Manager.mu.
func (m *Manager) addOwner() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return false
	}
	m.wg.Add(1)
	return true
}

func (m *Manager) isClosed() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.closed
}

func (m *Manager) workspace(id string) string {
	if m.cfg.WorkspacesDir != "" {
		return filepath.Join(m.cfg.WorkspacesDir, id)
	}
	return filepath.Join(m.cfg.DataDir, "workspaces", id)
}

// statusEvent builds a status event.
func statusEvent(rt conversation.Runtime, reason, actor string) conversation.Event {
	e := conversation.NewEvent(conversation.StatusChange{Status: rt.Status, Runtime: rt, Reason: reason})
	return withActor(e, actor)
}

func withActor(e conversation.Event, actor string) conversation.Event {
	if actor != "" {
		a := actor
		e.Context.Actor = &a
	}
	return e
}

// fleetMetrics count what a fleet does to sessions.
type fleetMetrics struct {
	leasesLost, takeovers, forwarded prometheus.Counter
}

func newFleetMetrics(reg prometheus.Registerer) *fleetMetrics {
	c := func(name, help string) prometheus.Counter {
		return prometheus.NewCounter(prometheus.CounterOpts{Name: name, Help: help})
	}
	m := &fleetMetrics{
		leasesLost: c("agentd_session_leases_lost_total", "Session leases this server lost to another (its runner stopped)."),
		takeovers:  c("agentd_session_takeovers_total", "Sessions this server took over from a server that stopped (or at start-up)."),
		forwarded:  c("agentd_session_commands_forwarded_total", "Commands sent to the server holding a session's lease."),
	}
	if reg != nil {
		reg.MustRegister(m.leasesLost, m.takeovers, m.forwarded)
	}
	return m
}

// newBounder returns the bounder of session id's block texts: its spool
// files under DataDir/spool/<id>, its artifacts in the store when it
// keeps them.
func (m *Manager) newBounder(id string, log *slog.Logger) *bounder {
	arts := m.cfg.Artifacts
	if arts == nil {
		// A manager wired without its own (tests, embedding): the store's.
		arts, _ = m.cfg.Store.(store.ArtifactStore)
	}
	bd := newBounder(m.cfg.OutputLimit, m.spoolDir(id), id, arts, log)
	bd.lookup = func(ctx context.Context, conv, bid string) (conversation.Block, bool) {
		var b conversation.Block
		var ok bool
		err := m.states.visit(ctx, id, func(r *conversation.Reducer) { b, ok = r.Block(conv, bid) })
		return b, ok && err == nil
	}
	bd.scan = func(ctx context.Context, f func(string, conversation.Block)) error {
		return m.states.visit(ctx, id, func(r *conversation.Reducer) {
			for conv, b := range r.Blocks() {
				f(conv, b)
			}
		})
	}
	return bd
}

// finishOpenTexts returns the upserts completing the truncated texts the
// log of session id holds open (a turn that ended with an earlier server),
// with their artifacts stored from the spool, and removes the spool.
func (m *Manager) finishOpenTexts(ctx context.Context, id string) []conversation.Event {
	if m.cfg.OutputLimit <= 0 {
		return nil
	}
	bd := m.newBounder(id, m.log.With("session", id))
	bd.mu.Lock()
	defer bd.mu.Unlock()
	bd.scanned = true
	bd.scanLocked(ctx)
	evs := bd.finishAllLocked(ctx)
	for i := range evs {
		evs[i].Context.Source = conversation.SourceServer
	}
	return evs
}

func (m *Manager) spoolDir(id string) string { return filepath.Join(m.cfg.DataDir, "spool", id) }
