package storetest_test

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/agentd/agentd/conversation"
	"github.com/agentd/agentd/profile"
	"github.com/agentd/agentd/store"
	"github.com/agentd/agentd/store/memstore"
)

// memStore is a small, correct in-memory store.Store that the suite's own
// tests run against. Setting bug makes it misbehave in one named way, so the
// tests can check that the suite notices.
type memStore struct {
	bug string
	// IdentityStore is served by a public memstore that mirrors the
	// sessions (for shares), with the bugs of identity_test.go.
	store.IdentityStore
	ident *memstore.Store

	mu          sync.Mutex
	sessions    map[string]store.Session
	order       map[string]int // insertion counter, to break CreatedAt ties
	nextOrder   int
	events      map[string]map[int64]conversation.Event
	transcripts map[string]map[string][]byte
	files       map[string]map[string]store.WorkspaceFile
	profiles    map[string]profile.Profile
	leases      map[string]lease
}

type lease struct {
	holder     string
	expires    time.Time // zero once released
	generation int64
}

func newMemStore(bug string) *memStore {
	ident := memstore.New()
	return &memStore{
		bug:           bug,
		IdentityStore: ident,
		ident:         ident,
		sessions:      map[string]store.Session{},
		order:         map[string]int{},
		events:        map[string]map[int64]conversation.Event{},
		transcripts:   map[string]map[string][]byte{},
		files:         map[string]map[string]store.WorkspaceFile{},
		profiles:      map[string]profile.Profile{},
		leases:        map[string]lease{},
	}
}

// check returns ctx's error unless the store is told to ignore contexts.
func (m *memStore) check(ctx context.Context) error {
	if m.bug == "ignores-context" {
		return nil
	}
	return ctx.Err()
}

func clone(b []byte) []byte {
	if b == nil {
		return nil
	}
	return bytes.Clone(b)
}

func cloneSession(s store.Session) store.Session {
	s.SessionOptions = clone(s.SessionOptions)
	s.SandboxState = clone(s.SandboxState)
	s.AgentState = clone(s.AgentState)
	return s
}

func (m *memStore) cloneEvent(e conversation.Event) conversation.Event {
	if m.bug != "aliases-payload" {
		e.Payload = clone(e.Payload)
	}
	if e.Context.Actor != nil {
		a := *e.Context.Actor
		e.Context.Actor = &a
	}
	if m.bug == "drops-actor" {
		e.Context.Actor = nil
	}
	if m.bug == "second-timestamps" {
		e.Context.Timestamp = e.Context.Timestamp.Truncate(time.Second)
	}
	return e
}

func (m *memStore) ListSessions(ctx context.Context) ([]store.Session, error) {
	if err := m.check(ctx); err != nil {
		return nil, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]store.Session, 0, len(m.sessions))
	for _, s := range m.sessions {
		out = append(out, cloneSession(s))
	}
	slices.SortFunc(out, func(a, b store.Session) int {
		if c := b.CreatedAt.Compare(a.CreatedAt); c != 0 && m.bug != "lists-by-insertion" {
			return c
		}
		return cmp.Compare(m.order[b.ID], m.order[a.ID])
	})
	return out, nil
}

func (m *memStore) LoadSession(ctx context.Context, id string) (store.Session, error) {
	if err := m.check(ctx); err != nil {
		return store.Session{}, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	s, ok := m.sessions[id]
	if !ok {
		return store.Session{}, store.ErrNotFound
	}
	return cloneSession(s), nil
}

func (m *memStore) CreateSession(ctx context.Context, s store.Session) error {
	if err := m.check(ctx); err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.sessions[s.ID]; ok {
		return store.ErrExists
	}
	if m.bug == "drops-owner" {
		s.Owner = ""
	}
	m.sessions[s.ID] = cloneSession(s)
	m.nextOrder++
	m.order[s.ID] = m.nextOrder
	return m.ident.CreateSession(context.Background(), s)
}

func (m *memStore) UpdateSession(ctx context.Context, s store.Session, fences ...store.Fence) error {
	if err := m.check(ctx); err != nil {
		return err
	}
	if err := store.ValidateSessionFences(s.ID, fences); err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.checkFences(fences); err != nil && m.bug != "update-ignores-fence" {
		return err
	}
	if _, ok := m.sessions[s.ID]; !ok && m.bug != "update-creates" {
		return store.ErrNotFound
	}
	m.sessions[s.ID] = cloneSession(s)
	return nil
}

func (m *memStore) DeleteSession(ctx context.Context, id string) error {
	if err := m.check(ctx); err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.sessions[id]; !ok {
		return store.ErrNotFound
	}
	delete(m.sessions, id)
	delete(m.order, id)
	if m.bug != "delete-keeps-events" {
		delete(m.events, id)
	}
	delete(m.transcripts, id)
	delete(m.files, id)
	if m.bug != "delete-keeps-lease" {
		delete(m.leases, id)
	}
	if m.bug != "shares-survive-delete" {
		return m.ident.DeleteSession(context.Background(), id)
	}
	return nil
}

func (m *memStore) AppendEvents(ctx context.Context, evs []conversation.Event, fences ...store.Fence) error {
	if err := m.check(ctx); err != nil {
		return err
	}
	if err := store.ValidateFences(fences); err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.checkFences(fences); err != nil && m.bug != "append-ignores-fence" {
		return err
	}
	type key struct {
		session string
		seq     int64
	}
	seen := map[key]bool{}
	for _, e := range evs {
		if e.Context.SessionID == "" || e.Seq <= 0 {
			return fmt.Errorf("append events: invalid event (session %q, seq %d)", e.Context.SessionID, e.Seq)
		}
		k := key{e.Context.SessionID, e.Seq}
		if _, stored := m.events[k.session][k.seq]; stored || seen[k] {
			return store.ErrSeqConflict // with partial-append, earlier events are in
		}
		seen[k] = true
		if m.bug == "partial-append" {
			m.put(e)
		}
	}
	for _, e := range evs {
		m.put(e)
	}
	return nil
}

// checkFences fails with a *store.FencedError naming every session of
// fences whose lease generation is not the fence's.
func (m *memStore) checkFences(fences []store.Fence) error {
	var stale []string
	for _, f := range fences {
		if m.leases[f.SessionID].generation != f.Generation && !slices.Contains(stale, f.SessionID) {
			stale = append(stale, f.SessionID)
			if m.bug == "fenced-names-first" {
				break
			}
		}
	}
	if len(stale) > 0 {
		return &store.FencedError{Sessions: stale}
	}
	return nil
}

func (m *memStore) put(e conversation.Event) {
	if m.events[e.Context.SessionID] == nil {
		m.events[e.Context.SessionID] = map[int64]conversation.Event{}
	}
	m.events[e.Context.SessionID][e.Seq] = m.cloneEvent(e)
}

func (m *memStore) ReadEvents(ctx context.Context, session string, after int64, limit int) ([]conversation.Event, error) {
	if err := m.check(ctx); err != nil {
		return nil, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []conversation.Event
	for seq, e := range m.events[session] {
		if seq > after {
			out = append(out, m.cloneEvent(e))
		}
	}
	slices.SortFunc(out, func(a, b conversation.Event) int { return cmp.Compare(a.Seq, b.Seq) })
	if limit > 0 && len(out) > limit && m.bug != "ignores-limit" {
		out = out[:limit]
	}
	return out, nil
}

func (m *memStore) LastSeq(ctx context.Context, session string) (int64, error) {
	if err := m.check(ctx); err != nil {
		return 0, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	var last int64
	for seq := range m.events[session] {
		last = max(last, seq)
	}
	return last, nil
}

func (m *memStore) SaveTranscript(ctx context.Context, session, name string, data []byte) error {
	if err := m.check(ctx); err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.transcripts[session] == nil {
		m.transcripts[session] = map[string][]byte{}
	}
	m.transcripts[session][name] = bytes.Clone(data)
	return nil
}

func (m *memStore) LoadTranscript(ctx context.Context, session, name string) ([]byte, error) {
	if err := m.check(ctx); err != nil {
		return nil, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	data, ok := m.transcripts[session][name]
	if !ok {
		return nil, store.ErrNotFound
	}
	return bytes.Clone(data), nil
}

func (m *memStore) ListTranscripts(ctx context.Context, session string) ([]string, error) {
	if err := m.check(ctx); err != nil {
		return nil, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	var names []string
	for n := range m.transcripts[session] {
		names = append(names, n)
	}
	slices.Sort(names)
	return names, nil
}

func (m *memStore) SaveWorkspaceFile(ctx context.Context, session string, f store.WorkspaceFile) error {
	if err := m.check(ctx); err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.files[session] == nil {
		m.files[session] = map[string]store.WorkspaceFile{}
	}
	f.Content = bytes.Clone(f.Content)
	m.files[session][f.Path] = f
	return nil
}

func (m *memStore) DeleteSessionFile(ctx context.Context, session, path string) error {
	if err := m.check(ctx); err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.files[session], path)
	return nil
}

func (m *memStore) ListWorkspaceFiles(ctx context.Context, session string) ([]store.WorkspaceFile, error) {
	if err := m.check(ctx); err != nil {
		return nil, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []store.WorkspaceFile
	for _, f := range m.files[session] {
		if len(f.Content) == 0 && m.bug == "drops-empty-files" {
			continue
		}
		f.Content = bytes.Clone(f.Content)
		out = append(out, f)
	}
	slices.SortFunc(out, func(a, b store.WorkspaceFile) int { return cmp.Compare(a.Path, b.Path) })
	return out, nil
}

func (m *memStore) ListAgentProfiles(ctx context.Context) ([]profile.Profile, error) {
	if err := m.check(ctx); err != nil {
		return nil, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []profile.Profile
	for _, p := range m.profiles {
		out = append(out, p)
	}
	slices.SortFunc(out, func(a, b profile.Profile) int { return cmp.Compare(a.ID, b.ID) })
	return out, nil
}

func (m *memStore) LoadAgentProfile(ctx context.Context, id string) (profile.Profile, error) {
	if err := m.check(ctx); err != nil {
		return profile.Profile{}, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	p, ok := m.profiles[id]
	if !ok {
		return profile.Profile{}, store.ErrNotFound
	}
	if m.bug == "drops-profile-mcp" {
		p.MCPServers = nil
	}
	return p, nil
}

// SaveAgentProfile keeps p as given: the suite never changes a profile after
// saving it, and a deep copy would only hide nothing here.
func (m *memStore) SaveAgentProfile(ctx context.Context, p profile.Profile) error {
	if err := m.check(ctx); err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.profiles[p.ID] = p
	return nil
}

func (m *memStore) AcquireLease(ctx context.Context, session, holder string, ttl time.Duration) (int64, error) {
	if err := m.check(ctx); err != nil {
		return 0, err
	}
	if ttl <= 0 {
		return 0, errors.New("acquire lease: ttl must be positive")
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	now := time.Now()
	l, ok := m.leases[session]
	if ok && l.holder != holder {
		if m.bug == "lease-never-expires" || now.Before(l.expires) {
			return 0, store.ErrLeaseHeld
		}
	}
	if !ok || l.holder != holder || m.bug == "generation-grows-on-renewal" {
		l.generation++
	}
	if m.bug == "takeover-keeps-generation" && ok && l.holder != holder {
		l.generation--
	}
	l.holder, l.expires = holder, now.Add(ttl)
	m.leases[session] = l
	return l.generation, nil
}

func (m *memStore) ReleaseLease(ctx context.Context, session, holder string) error {
	if err := m.check(ctx); err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if l, ok := m.leases[session]; ok && (l.holder == holder || m.bug == "release-by-anyone") {
		if m.bug == "release-forgets-generation" {
			delete(m.leases, session)
			return nil
		}
		l.expires = time.Time{} // kept: the generation must not repeat
		m.leases[session] = l
	}
	return nil
}

func (m *memStore) Close() error { return nil }
