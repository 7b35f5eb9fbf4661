package memstore

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/agentd/agentd/store"
)

var _ store.IdentityStore = (*Store)(nil)

// identity is the Store's users, tokens, shares, provider keys, budgets,
// usage and access records, guarded by Store.mu. Its maps are made on
// first use, so New needs no change.
type identity struct {
	users    map[string]store.User
	tokens   map[string]store.APIToken    // by id
	shares   map[string]store.Share       // by session + "\x00" + user
	keys     map[string]store.ProviderKey // by scope, owner, provider
	budgets  map[string]store.Budget      // by scope, owner
	usage    map[usageKey]store.Usage
	access   []store.AccessRecord
	accessID int64
}

type usageKey struct {
	user, tenant string
	day          int64 // Unix days
}

func key(parts ...string) string { return strings.Join(parts, "\x00") }

func (s *Store) initIdentityLocked() {
	i := &s.ident
	if i.users == nil {
		i.users = map[string]store.User{}
		i.tokens = map[string]store.APIToken{}
		i.shares = map[string]store.Share{}
		i.keys = map[string]store.ProviderKey{}
		i.budgets = map[string]store.Budget{}
		i.usage = map[usageKey]store.Usage{}
	}
}

func (s *Store) deleteSharesLocked(sessionID string) {
	for k, sh := range s.ident.shares {
		if sh.SessionID == sessionID {
			delete(s.ident.shares, k)
		}
	}
}

// lock takes the write lock for a call whose context is live.
func (s *Store) lock(ctx context.Context) (func(), error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s.mu.Lock()
	s.initIdentityLocked()
	return s.mu.Unlock, nil
}

func (s *Store) CreateUser(ctx context.Context, u store.User) error {
	unlock, err := s.lock(ctx)
	if err != nil {
		return err
	}
	defer unlock()
	if u.ID == "" {
		return fmt.Errorf("create user: no id")
	}
	if _, ok := s.ident.users[u.ID]; ok {
		return fmt.Errorf("create user %q: %w", u.ID, store.ErrExists)
	}
	if u.Subject != "" {
		for _, o := range s.ident.users {
			if o.Issuer == u.Issuer && o.Subject == u.Subject {
				return fmt.Errorf("create user %q: subject: %w", u.ID, store.ErrExists)
			}
		}
	}
	s.ident.users[u.ID] = u
	return nil
}

func (s *Store) LoadUser(ctx context.Context, id string) (store.User, error) {
	unlock, err := s.lock(ctx)
	if err != nil {
		return store.User{}, err
	}
	defer unlock()
	u, ok := s.ident.users[id]
	if !ok {
		return store.User{}, fmt.Errorf("user %q: %w", id, store.ErrNotFound)
	}
	return u, nil
}

func (s *Store) LoadUserBySubject(ctx context.Context, issuer, subject string) (store.User, error) {
	unlock, err := s.lock(ctx)
	if err != nil {
		return store.User{}, err
	}
	defer unlock()
	if subject != "" {
		for _, u := range s.ident.users {
			if u.Issuer == issuer && u.Subject == subject {
				return u, nil
			}
		}
	}
	return store.User{}, fmt.Errorf("user of subject %q: %w", subject, store.ErrNotFound)
}

func (s *Store) ListUsers(ctx context.Context) ([]store.User, error) {
	unlock, err := s.lock(ctx)
	if err != nil {
		return nil, err
	}
	defer unlock()
	out := make([]store.User, 0, len(s.ident.users))
	for _, u := range s.ident.users {
		out = append(out, u)
	}
	slices.SortFunc(out, func(a, b store.User) int { return strings.Compare(a.ID, b.ID) })
	return out, nil
}

func (s *Store) UpdateUser(ctx context.Context, u store.User) error {
	unlock, err := s.lock(ctx)
	if err != nil {
		return err
	}
	defer unlock()
	old, ok := s.ident.users[u.ID]
	if !ok {
		return fmt.Errorf("update user %q: %w", u.ID, store.ErrNotFound)
	}
	old.Name, old.Tenant, old.Role, old.Disabled = u.Name, u.Tenant, u.Role, u.Disabled
	s.ident.users[u.ID] = old
	return nil
}

func cloneToken(t store.APIToken) store.APIToken {
	t.Scopes = slices.Clone(t.Scopes)
	return t
}

func (s *Store) CreateToken(ctx context.Context, t store.APIToken) error {
	unlock, err := s.lock(ctx)
	if err != nil {
		return err
	}
	defer unlock()
	if _, ok := s.ident.users[t.UserID]; !ok {
		return fmt.Errorf("create token: user %q: %w", t.UserID, store.ErrNotFound)
	}
	for _, o := range s.ident.tokens {
		if o.ID == t.ID || o.Hash == t.Hash {
			return fmt.Errorf("create token %q: %w", t.ID, store.ErrExists)
		}
	}
	s.ident.tokens[t.ID] = cloneToken(t)
	return nil
}

func (s *Store) LookupToken(ctx context.Context, hash string) (store.APIToken, error) {
	unlock, err := s.lock(ctx)
	if err != nil {
		return store.APIToken{}, err
	}
	defer unlock()
	for _, t := range s.ident.tokens {
		if t.Hash == hash {
			return cloneToken(t), nil
		}
	}
	return store.APIToken{}, fmt.Errorf("token: %w", store.ErrNotFound)
}

func (s *Store) LoadToken(ctx context.Context, id string) (store.APIToken, error) {
	unlock, err := s.lock(ctx)
	if err != nil {
		return store.APIToken{}, err
	}
	defer unlock()
	t, ok := s.ident.tokens[id]
	if !ok {
		return store.APIToken{}, fmt.Errorf("token %q: %w", id, store.ErrNotFound)
	}
	return cloneToken(t), nil
}

func (s *Store) ListTokens(ctx context.Context, userID string) ([]store.APIToken, error) {
	unlock, err := s.lock(ctx)
	if err != nil {
		return nil, err
	}
	defer unlock()
	out := []store.APIToken{}
	for _, t := range s.ident.tokens {
		if userID == "" || t.UserID == userID {
			out = append(out, cloneToken(t))
		}
	}
	slices.SortFunc(out, func(a, b store.APIToken) int {
		if c := a.CreatedAt.Compare(b.CreatedAt); c != 0 {
			return c
		}
		return strings.Compare(a.ID, b.ID)
	})
	return out, nil
}

func (s *Store) RevokeToken(ctx context.Context, id string, at time.Time) error {
	unlock, err := s.lock(ctx)
	if err != nil {
		return err
	}
	defer unlock()
	t, ok := s.ident.tokens[id]
	if !ok {
		return fmt.Errorf("revoke token %q: %w", id, store.ErrNotFound)
	}
	if t.RevokedAt.IsZero() {
		t.RevokedAt = at
		s.ident.tokens[id] = t
	}
	return nil
}

func (s *Store) TouchToken(ctx context.Context, id string, at time.Time) error {
	unlock, err := s.lock(ctx)
	if err != nil {
		return err
	}
	defer unlock()
	t, ok := s.ident.tokens[id]
	if !ok {
		return fmt.Errorf("touch token %q: %w", id, store.ErrNotFound)
	}
	if at.After(t.LastUsedAt) {
		t.LastUsedAt = at
		s.ident.tokens[id] = t
	}
	return nil
}

func (s *Store) PutShare(ctx context.Context, sh store.Share) error {
	unlock, err := s.lock(ctx)
	if err != nil {
		return err
	}
	defer unlock()
	if _, ok := s.sessions[sh.SessionID]; !ok {
		return fmt.Errorf("share session %q: %w", sh.SessionID, store.ErrNotFound)
	}
	s.ident.shares[key(sh.SessionID, sh.UserID)] = sh
	return nil
}

func (s *Store) LoadShare(ctx context.Context, sessionID, userID string) (store.Share, error) {
	unlock, err := s.lock(ctx)
	if err != nil {
		return store.Share{}, err
	}
	defer unlock()
	sh, ok := s.ident.shares[key(sessionID, userID)]
	if !ok {
		return store.Share{}, fmt.Errorf("share: %w", store.ErrNotFound)
	}
	return sh, nil
}

func (s *Store) DeleteShare(ctx context.Context, sessionID, userID string) error {
	unlock, err := s.lock(ctx)
	if err != nil {
		return err
	}
	defer unlock()
	k := key(sessionID, userID)
	if _, ok := s.ident.shares[k]; !ok {
		return fmt.Errorf("delete share: %w", store.ErrNotFound)
	}
	delete(s.ident.shares, k)
	return nil
}

func (s *Store) shares(ctx context.Context, keep func(store.Share) bool, by func(store.Share) string) ([]store.Share, error) {
	unlock, err := s.lock(ctx)
	if err != nil {
		return nil, err
	}
	defer unlock()
	out := []store.Share{}
	for _, sh := range s.ident.shares {
		if keep(sh) {
			out = append(out, sh)
		}
	}
	slices.SortFunc(out, func(a, b store.Share) int { return strings.Compare(by(a), by(b)) })
	return out, nil
}

func (s *Store) ListShares(ctx context.Context, sessionID string) ([]store.Share, error) {
	return s.shares(ctx, func(sh store.Share) bool { return sh.SessionID == sessionID }, func(sh store.Share) string { return sh.UserID })
}

func (s *Store) ListSharedWith(ctx context.Context, userID string) ([]store.Share, error) {
	return s.shares(ctx, func(sh store.Share) bool { return sh.UserID == userID }, func(sh store.Share) string { return sh.SessionID })
}

func cloneKey(k store.ProviderKey) store.ProviderKey {
	k.Sealed = slices.Clone(k.Sealed)
	return k
}

func (s *Store) PutProviderKey(ctx context.Context, k store.ProviderKey) error {
	unlock, err := s.lock(ctx)
	if err != nil {
		return err
	}
	defer unlock()
	s.ident.keys[key(string(k.Scope), k.Owner, k.Provider)] = cloneKey(k)
	return nil
}

func (s *Store) LoadProviderKey(ctx context.Context, scope store.KeyScope, owner, provider string) (store.ProviderKey, error) {
	unlock, err := s.lock(ctx)
	if err != nil {
		return store.ProviderKey{}, err
	}
	defer unlock()
	k, ok := s.ident.keys[key(string(scope), owner, provider)]
	if !ok {
		return store.ProviderKey{}, fmt.Errorf("provider key: %w", store.ErrNotFound)
	}
	return cloneKey(k), nil
}

func (s *Store) ListProviderKeys(ctx context.Context, scope store.KeyScope, owner string) ([]store.ProviderKey, error) {
	unlock, err := s.lock(ctx)
	if err != nil {
		return nil, err
	}
	defer unlock()
	out := []store.ProviderKey{}
	for _, k := range s.ident.keys {
		if k.Scope == scope && k.Owner == owner {
			out = append(out, cloneKey(k))
		}
	}
	slices.SortFunc(out, func(a, b store.ProviderKey) int { return strings.Compare(a.Provider, b.Provider) })
	return out, nil
}

func (s *Store) DeleteProviderKey(ctx context.Context, scope store.KeyScope, owner, provider string) error {
	unlock, err := s.lock(ctx)
	if err != nil {
		return err
	}
	defer unlock()
	k := key(string(scope), owner, provider)
	if _, ok := s.ident.keys[k]; !ok {
		return fmt.Errorf("delete provider key: %w", store.ErrNotFound)
	}
	delete(s.ident.keys, k)
	return nil
}

func (s *Store) PutBudget(ctx context.Context, b store.Budget) error {
	unlock, err := s.lock(ctx)
	if err != nil {
		return err
	}
	defer unlock()
	s.ident.budgets[key(string(b.Scope), b.Owner)] = b
	return nil
}

func (s *Store) LoadBudget(ctx context.Context, scope store.KeyScope, owner string) (store.Budget, error) {
	unlock, err := s.lock(ctx)
	if err != nil {
		return store.Budget{}, err
	}
	defer unlock()
	b, ok := s.ident.budgets[key(string(scope), owner)]
	if !ok {
		return store.Budget{}, fmt.Errorf("budget: %w", store.ErrNotFound)
	}
	return b, nil
}

func (s *Store) ListBudgets(ctx context.Context) ([]store.Budget, error) {
	unlock, err := s.lock(ctx)
	if err != nil {
		return nil, err
	}
	defer unlock()
	out := []store.Budget{}
	for _, b := range s.ident.budgets {
		out = append(out, b)
	}
	slices.SortFunc(out, func(a, b store.Budget) int {
		if c := strings.Compare(string(a.Scope), string(b.Scope)); c != 0 {
			return c
		}
		return strings.Compare(a.Owner, b.Owner)
	})
	return out, nil
}

func (s *Store) DeleteBudget(ctx context.Context, scope store.KeyScope, owner string) error {
	unlock, err := s.lock(ctx)
	if err != nil {
		return err
	}
	defer unlock()
	k := key(string(scope), owner)
	if _, ok := s.ident.budgets[k]; !ok {
		return fmt.Errorf("delete budget: %w", store.ErrNotFound)
	}
	delete(s.ident.budgets, k)
	return nil
}

func unixDay(t time.Time) int64 { return store.UTCDay(t).Unix() / 86400 }

func (s *Store) AddUsage(ctx context.Context, entries []store.UsageEntry) error {
	unlock, err := s.lock(ctx)
	if err != nil {
		return err
	}
	defer unlock()
	for _, e := range entries {
		k := usageKey{e.UserID, e.Tenant, unixDay(e.Day)}
		u := s.ident.usage[k]
		u.Tokens += e.Tokens
		u.CostMicros += e.CostMicros
		s.ident.usage[k] = u
	}
	return nil
}

func (s *Store) SumUsage(ctx context.Context, scope store.KeyScope, owner string, from, to time.Time) (store.Usage, error) {
	unlock, err := s.lock(ctx)
	if err != nil {
		return store.Usage{}, err
	}
	defer unlock()
	lo, hi := unixDay(from), unixDay(to)
	var sum store.Usage
	for k, u := range s.ident.usage {
		if k.day < lo || k.day > hi {
			continue
		}
		if (scope == store.ScopeUser && k.user == owner) || (scope == store.ScopeTenant && k.tenant == owner) {
			sum.Tokens += u.Tokens
			sum.CostMicros += u.CostMicros
		}
	}
	return sum, nil
}

func (s *Store) AppendAccess(ctx context.Context, records []store.AccessRecord) error {
	unlock, err := s.lock(ctx)
	if err != nil {
		return err
	}
	defer unlock()
	for _, r := range records {
		s.ident.accessID++
		r.ID = s.ident.accessID
		s.ident.access = append(s.ident.access, r)
	}
	return nil
}

func (s *Store) ReadAccess(ctx context.Context, after int64, limit int) ([]store.AccessRecord, error) {
	unlock, err := s.lock(ctx)
	if err != nil {
		return nil, err
	}
	defer unlock()
	out := []store.AccessRecord{}
	for _, r := range s.ident.access {
		if r.ID > after {
			out = append(out, r)
			if limit > 0 && len(out) == limit {
				break
			}
		}
	}
	return out, nil
}
