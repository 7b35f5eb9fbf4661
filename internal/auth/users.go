package auth

import (
	"context"
	"fmt"
	"time"

	"github.com/agentd/agentd/restapi"
	"github.com/agentd/agentd/store"
)

// NewUser is what an admin gives to create a user.
type NewUser = restapi.NewUser

// CreateUser makes a user (admins only).
func (s *Service) CreateUser(ctx context.Context, by Principal, n NewUser) (store.User, error) {
	if err := s.needIdentity(); err != nil {
		return store.User{}, err
	}
	if !by.Admin() {
		return store.User{}, fmt.Errorf("%w: only admins create users", ErrForbidden)
	}
	if n.Tenant == "" {
		n.Tenant = s.cfg.DefaultTenant
	}
	if n.Role == "" {
		n.Role = store.RoleMember
	}
	if err := ValidID("user id", n.ID); err != nil {
		return store.User{}, err
	}
	if err := ValidID("tenant", n.Tenant); err != nil {
		return store.User{}, err
	}
	if !n.Role.Valid() {
		return store.User{}, fmt.Errorf("%w: role %q (admin or member)", ErrInvalid, n.Role)
	}
	u := store.User{ID: n.ID, Name: n.Name, Tenant: n.Tenant, Role: n.Role, CreatedAt: s.cfg.Now().UTC().Truncate(time.Millisecond)}
	if err := s.id.CreateUser(ctx, u); err != nil {
		return store.User{}, storeErr(err, "user "+n.ID)
	}
	s.access.record(store.AccessRecord{Kind: store.AccessUserCreated, Actor: by.UserID, TokenID: by.TokenID, Subject: u.ID,
		Detail: fmt.Sprintf("role %s, tenant %s", u.Role, u.Tenant)})
	return u, nil
}

// User returns a user: the caller's own, or any for admins.
func (s *Service) User(ctx context.Context, by Principal, id string) (store.User, error) {
	if err := s.needIdentity(); err != nil {
		return store.User{}, err
	}
	if id != by.UserID && !by.Admin() {
		return store.User{}, fmt.Errorf("%w: user %s", ErrNotFound, id)
	}
	u, err := s.id.LoadUser(ctx, id)
	return u, storeErr(err, "user "+id)
}

// Users lists every user (admins only).
func (s *Service) Users(ctx context.Context, by Principal) ([]store.User, error) {
	if err := s.needIdentity(); err != nil {
		return nil, err
	}
	if !by.Admin() {
		return nil, fmt.Errorf("%w: only admins list users", ErrForbidden)
	}
	return s.id.ListUsers(ctx)
}

// UserUpdate changes some of a user's fields (nil: unchanged).
type UserUpdate = restapi.UserUpdate

// UpdateUser changes a user (admins only). Disabling a user cuts off every
// credential of theirs at once, open connections included.
func (s *Service) UpdateUser(ctx context.Context, by Principal, id string, up UserUpdate) (store.User, error) {
	if err := s.needIdentity(); err != nil {
		return store.User{}, err
	}
	if !by.Admin() {
		return store.User{}, fmt.Errorf("%w: only admins change users", ErrForbidden)
	}
	u, err := s.id.LoadUser(ctx, id)
	if err != nil {
		return store.User{}, storeErr(err, "user "+id)
	}
	if up.Name != nil {
		u.Name = *up.Name
	}
	if up.Tenant != nil {
		if err := ValidID("tenant", *up.Tenant); err != nil {
			return store.User{}, err
		}
		u.Tenant = *up.Tenant
	}
	if up.Role != nil {
		if !up.Role.Valid() {
			return store.User{}, fmt.Errorf("%w: role %q (admin or member)", ErrInvalid, *up.Role)
		}
		u.Role = *up.Role
	}
	if up.Disabled != nil {
		if *up.Disabled && id == by.UserID {
			return store.User{}, fmt.Errorf("%w: an admin cannot disable itself", ErrInvalid)
		}
		u.Disabled = *up.Disabled
	}
	if err := s.id.UpdateUser(ctx, u); err != nil {
		return store.User{}, storeErr(err, "user "+id)
	}
	s.access.record(store.AccessRecord{Kind: store.AccessUserUpdated, Actor: by.UserID, TokenID: by.TokenID, Subject: id,
		Detail: fmt.Sprintf("role %s, tenant %s, disabled %v", u.Role, u.Tenant, u.Disabled)})
	s.revoked()
	return u, nil
}

// NewToken is what a caller gives to create an API token.
type NewToken = restapi.NewToken

// CreatedToken is a new token: the secret is shown once.
type CreatedToken = restapi.CreatedToken

// CreateToken makes an API token. Members make their own (with a token
// that has the tokens scope, or signed in through OIDC), with at most the
// scopes they have; admins make anyone's.
func (s *Service) CreateToken(ctx context.Context, by Principal, n NewToken) (CreatedToken, error) {
	if err := s.needIdentity(); err != nil {
		return CreatedToken{}, err
	}
	if n.UserID == "" {
		n.UserID = by.UserID
	}
	if n.UserID != by.UserID && !by.Admin() {
		return CreatedToken{}, fmt.Errorf("%w: only admins make tokens for other users", ErrForbidden)
	}
	if !by.Has(ScopeTokens) && !by.Admin() {
		return CreatedToken{}, fmt.Errorf("%w: this credential lacks the tokens scope", ErrForbidden)
	}
	if n.ExpiresIn < 0 {
		return CreatedToken{}, fmt.Errorf("%w: expiresIn must not be negative", ErrInvalid)
	}
	u, err := s.id.LoadUser(ctx, n.UserID)
	if err != nil {
		return CreatedToken{}, storeErr(err, "user "+n.UserID)
	}
	self := n.UserID == by.UserID && !by.Admin()
	var scopes []Scope
	if n.Scopes == nil {
		// Default: every scope the user's role allows (and, for one's own
		// token, that the maker's credential has).
		for _, sc := range AllScopes {
			if (sc != ScopeAdmin || u.Role == store.RoleAdmin) && (!self || by.Has(sc)) {
				scopes = append(scopes, sc)
			}
		}
	} else {
		if scopes, err = ParseScopes(n.Scopes); err != nil {
			return CreatedToken{}, err
		}
		for _, sc := range scopes {
			if sc == ScopeAdmin && u.Role != store.RoleAdmin {
				return CreatedToken{}, fmt.Errorf("%w: the admin scope is for admins; %s is a member", ErrInvalid, u.ID)
			}
			if self && !by.Has(sc) {
				return CreatedToken{}, fmt.Errorf("%w: a token cannot have scope %s its maker lacks", ErrForbidden, sc)
			}
		}
	}
	secret, id := newSecret()
	now := s.cfg.Now().UTC().Truncate(time.Millisecond)
	t := store.APIToken{ID: id, Hash: HashToken(secret), UserID: u.ID, Name: n.Name, Scopes: scopeNames(scopes), CreatedAt: now}
	if n.ExpiresIn > 0 {
		t.ExpiresAt = now.Add(time.Duration(n.ExpiresIn) * time.Second)
	}
	if err := s.id.CreateToken(ctx, t); err != nil {
		return CreatedToken{}, storeErr(err, "token")
	}
	s.access.record(store.AccessRecord{Kind: store.AccessTokenCreated, Actor: by.UserID, TokenID: by.TokenID, Subject: t.ID,
		Detail: fmt.Sprintf("for %s, scopes %v", u.ID, t.Scopes)})
	return CreatedToken{APIToken: t, Token: secret}, nil
}

func scopeNames(sc []Scope) []string {
	out := make([]string, len(sc))
	for i, s := range sc {
		out[i] = string(s)
	}
	return out
}

// Tokens lists tokens: the caller's own, or (admins) a user's or every
// user's (userID "*").
func (s *Service) Tokens(ctx context.Context, by Principal, userID string) ([]store.APIToken, error) {
	if err := s.needIdentity(); err != nil {
		return nil, err
	}
	switch {
	case userID == "" || userID == by.UserID:
		userID = by.UserID
	case !by.Admin():
		return nil, fmt.Errorf("%w: only admins list other users' tokens", ErrForbidden)
	case userID == "*":
		userID = ""
	}
	return s.id.ListTokens(ctx, userID)
}

// RevokeToken revokes a token: the caller's own, or any for admins. Open
// connections made with it are closed (OnRevoke).
func (s *Service) RevokeToken(ctx context.Context, by Principal, id string) (store.APIToken, error) {
	if err := s.needIdentity(); err != nil {
		return store.APIToken{}, err
	}
	t, err := s.id.LoadToken(ctx, id)
	if err != nil || (t.UserID != by.UserID && !by.Admin()) {
		return store.APIToken{}, fmt.Errorf("%w: token %s", ErrNotFound, id)
	}
	now := s.cfg.Now().UTC().Truncate(time.Millisecond)
	if err := s.id.RevokeToken(ctx, id, now); err != nil {
		return store.APIToken{}, storeErr(err, "token "+id)
	}
	s.access.record(store.AccessRecord{Kind: store.AccessTokenRevoked, Actor: by.UserID, TokenID: by.TokenID, Subject: id, Detail: "of " + t.UserID})
	s.revoked()
	t, err = s.id.LoadToken(ctx, id)
	return t, storeErr(err, "token "+id)
}

// AccessLog reads the access log (admins only).
func (s *Service) AccessLog(ctx context.Context, by Principal, after int64, limit int) ([]store.AccessRecord, error) {
	if err := s.needIdentity(); err != nil {
		return nil, err
	}
	if !by.Admin() {
		return nil, fmt.Errorf("%w: only admins read the access log", ErrForbidden)
	}
	// Records are stored in the background: the reader sees every one
	// made before it asked.
	if err := s.access.flush(ctx); err != nil {
		return nil, err
	}
	return s.id.ReadAccess(ctx, after, limit)
}

// Record adds an access record (refusals seen by the transport layer).
func (s *Service) Record(r store.AccessRecord) { s.access.record(r) }
