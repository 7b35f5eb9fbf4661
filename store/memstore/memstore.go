// Package memstore is an in-memory store.Store: nothing survives the
// process. It is meant for tests and as a small, complete example of the
// interface for applications writing their own store.
package memstore

import (
	"context"
	"encoding/json"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/agentd/agentd/conversation"
	"github.com/agentd/agentd/profile"
	"github.com/agentd/agentd/store"
)

// Store is safe for concurrent use.
type Store struct {
	mu          sync.RWMutex
	sessions    map[string]store.Session
	events      map[string][]conversation.Event // by session, seq order, contiguous from 1 by convention only
	transcripts map[string]map[string][]byte
	files       map[string]map[string]store.WorkspaceFile
	profiles    map[string]profile.Profile
	leases      map[string]lease
	now         func() time.Time
	audit       auditLog  // audit.go
	ident       identity  // identity.go
	arts        artifacts // artifacts.go
}

type lease struct {
	holder     string
	until      time.Time // zero once released
	generation int64
}

// New returns an empty store.
func New() *Store {
	return &Store{
		sessions:    make(map[string]store.Session),
		events:      make(map[string][]conversation.Event),
		transcripts: make(map[string]map[string][]byte),
		files:       make(map[string]map[string]store.WorkspaceFile),
		profiles:    make(map[string]profile.Profile),
		leases:      make(map[string]lease),
		now:         time.Now,
	}
}

var _ store.Store = (*Store)(nil)

func (s *Store) ListSessions(ctx context.Context) ([]store.Session, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	out := make([]store.Session, 0, len(s.sessions))
	for _, v := range s.sessions {
		out = append(out, clone(v))
	}
	sort.Slice(out, func(i, j int) bool {
		if !out[i].CreatedAt.Equal(out[j].CreatedAt) {
			return out[i].CreatedAt.After(out[j].CreatedAt)
		}
		return out[i].ID > out[j].ID
	})
	return out, nil
}

func (s *Store) LoadSession(ctx context.Context, id string) (store.Session, error) {
	if err := ctx.Err(); err != nil {
		return store.Session{}, err
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	v, ok := s.sessions[id]
	if !ok {
		return store.Session{}, store.ErrNotFound
	}
	return clone(v), nil
}

func (s *Store) CreateSession(ctx context.Context, v store.Session) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.sessions[v.ID]; ok {
		return store.ErrExists
	}
	s.sessions[v.ID] = clone(v)
	return nil
}

func (s *Store) UpdateSession(ctx context.Context, v store.Session, fences ...store.Fence) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := store.ValidateSessionFences(v.ID, fences); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.checkFencesLocked(fences); err != nil {
		return err
	}
	if _, ok := s.sessions[v.ID]; !ok {
		return store.ErrNotFound
	}
	s.sessions[v.ID] = clone(v)
	return nil
}

func (s *Store) DeleteSession(ctx context.Context, id string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.sessions[id]; !ok {
		return store.ErrNotFound
	}
	delete(s.sessions, id)
	delete(s.events, id)
	delete(s.transcripts, id)
	delete(s.files, id)
	delete(s.leases, id)
	s.deleteAuditLocked(id)
	s.deleteSharesLocked(id)
	s.deleteArtifactsLocked(id)
	return nil
}

func (s *Store) AppendEvents(ctx context.Context, events []conversation.Event, fences ...store.Fence) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := store.ValidateFences(fences); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.checkFencesLocked(fences); err != nil {
		return err
	}
	// Check the whole batch first: all or nothing.
	batch := make(map[string]map[int64]bool)
	for _, e := range events {
		id := e.Context.SessionID
		if id == "" || e.Seq <= 0 {
			return store.ErrSeqConflict
		}
		if batch[id] == nil {
			batch[id] = make(map[int64]bool)
		}
		if batch[id][e.Seq] || s.hasSeqLocked(id, e.Seq) {
			return store.ErrSeqConflict
		}
		batch[id][e.Seq] = true
	}
	for _, e := range events {
		id := e.Context.SessionID
		e = cloneEvent(e)
		list := s.events[id]
		i := sort.Search(len(list), func(i int) bool { return list[i].Seq > e.Seq })
		s.events[id] = slices.Insert(list, i, e)
	}
	return nil
}

// checkFencesLocked fails with a *store.FencedError naming every session
// of fences whose lease generation is not the fence's.
func (s *Store) checkFencesLocked(fences []store.Fence) error {
	var stale []string
	for _, f := range fences {
		if s.leases[f.SessionID].generation != f.Generation && !slices.Contains(stale, f.SessionID) {
			stale = append(stale, f.SessionID)
		}
	}
	if len(stale) > 0 {
		return &store.FencedError{Sessions: stale}
	}
	return nil
}

func (s *Store) hasSeqLocked(id string, seq int64) bool {
	list := s.events[id]
	i := sort.Search(len(list), func(i int) bool { return list[i].Seq >= seq })
	return i < len(list) && list[i].Seq == seq
}

func (s *Store) ReadEvents(ctx context.Context, sessionID string, after int64, limit int) ([]conversation.Event, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	list := s.events[sessionID]
	i := sort.Search(len(list), func(i int) bool { return list[i].Seq > after })
	list = list[i:]
	if limit > 0 && len(list) > limit {
		list = list[:limit]
	}
	out := make([]conversation.Event, len(list))
	for i, e := range list {
		out[i] = cloneEvent(e)
	}
	return out, nil
}

func (s *Store) LastSeq(ctx context.Context, sessionID string) (int64, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	list := s.events[sessionID]
	if len(list) == 0 {
		return 0, nil
	}
	return list[len(list)-1].Seq, nil
}

func (s *Store) SaveTranscript(ctx context.Context, sessionID, name string, data []byte) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.transcripts[sessionID] == nil {
		s.transcripts[sessionID] = make(map[string][]byte)
	}
	s.transcripts[sessionID][name] = slices.Clone(data)
	return nil
}

func (s *Store) LoadTranscript(ctx context.Context, sessionID, name string) ([]byte, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	d, ok := s.transcripts[sessionID][name]
	if !ok {
		return nil, store.ErrNotFound
	}
	return slices.Clone(d), nil
}

func (s *Store) ListTranscripts(ctx context.Context, sessionID string) ([]string, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	var names []string
	for n := range s.transcripts[sessionID] {
		names = append(names, n)
	}
	sort.Strings(names)
	return names, nil
}

func (s *Store) SaveWorkspaceFile(ctx context.Context, sessionID string, f store.WorkspaceFile) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.files[sessionID] == nil {
		s.files[sessionID] = make(map[string]store.WorkspaceFile)
	}
	f.Content = slices.Clone(f.Content)
	if f.Content == nil {
		f.Content = []byte{}
	}
	s.files[sessionID][f.Path] = f
	return nil
}

func (s *Store) DeleteSessionFile(ctx context.Context, sessionID, path string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.files[sessionID], path)
	return nil
}

func (s *Store) ListWorkspaceFiles(ctx context.Context, sessionID string) ([]store.WorkspaceFile, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	out := make([]store.WorkspaceFile, 0, len(s.files[sessionID]))
	for _, f := range s.files[sessionID] {
		f.Content = slices.Clone(f.Content)
		if f.Content == nil {
			f.Content = []byte{}
		}
		out = append(out, f)
	}
	sort.Slice(out, func(i, j int) bool { return strings.Compare(out[i].Path, out[j].Path) < 0 })
	return out, nil
}

func (s *Store) ListAgentProfiles(ctx context.Context) ([]profile.Profile, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	out := make([]profile.Profile, 0, len(s.profiles))
	for _, p := range s.profiles {
		out = append(out, cloneProfile(p))
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out, nil
}

func (s *Store) LoadAgentProfile(ctx context.Context, id string) (profile.Profile, error) {
	if err := ctx.Err(); err != nil {
		return profile.Profile{}, err
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	p, ok := s.profiles[id]
	if !ok {
		return profile.Profile{}, store.ErrNotFound
	}
	return cloneProfile(p), nil
}

func (s *Store) SaveAgentProfile(ctx context.Context, p profile.Profile) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.profiles[p.ID] = cloneProfile(p)
	return nil
}

// AcquireLease takes or renews the lease; its generation grows when the
// holder changes.
func (s *Store) AcquireLease(ctx context.Context, sessionID, holder string, ttl time.Duration) (int64, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	l, ok := s.leases[sessionID]
	if ok && l.holder != holder && now.Before(l.until) {
		return 0, store.ErrLeaseHeld
	}
	if !ok || l.holder != holder {
		l.generation++
	}
	l.holder, l.until = holder, now.Add(ttl)
	s.leases[sessionID] = l
	return l.generation, nil
}

func (s *Store) ReleaseLease(ctx context.Context, sessionID, holder string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if l, ok := s.leases[sessionID]; ok && l.holder == holder {
		l.until = time.Time{} // kept: the generation must not repeat
		s.leases[sessionID] = l
	}
	return nil
}

// OrphanedSessions implements store.OrphanLister.
func (s *Store) OrphanedSessions(ctx context.Context) ([]string, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	now := s.now()
	var ids []string
	for id, v := range s.sessions {
		if !v.Status.Active() {
			continue
		}
		if l, ok := s.leases[id]; ok && now.Before(l.until) {
			continue
		}
		ids = append(ids, id)
	}
	sort.Strings(ids)
	return ids, nil
}

// Close implements store.Store; the data stays readable.
func (s *Store) Close() error { return nil }

func cloneEvent(e conversation.Event) conversation.Event {
	e.Payload = slices.Clone(e.Payload)
	if e.Context.Actor != nil {
		a := *e.Context.Actor
		e.Context.Actor = &a
	}
	return e
}

func clone(v store.Session) store.Session {
	v.SessionOptions = slices.Clone(v.SessionOptions)
	v.SandboxState = slices.Clone(v.SandboxState)
	v.AgentState = slices.Clone(v.AgentState)
	return v
}

// cloneProfile deep-copies through JSON: profiles are small and this keeps
// the copy exact as the type grows.
func cloneProfile(p profile.Profile) profile.Profile {
	b, err := json.Marshal(p)
	if err != nil {
		panic(err)
	}
	var out profile.Profile
	if err := json.Unmarshal(b, &out); err != nil {
		panic(err)
	}
	return out
}
