// Package auth decides who a request comes from and what it may do: API
// tokens (agd_…, stored as hashes), the bootstrap --api-key, OpenID Connect
// bearer JWTs, session ownership and shares, per-user provider keys (sealed
// with the server key), budgets, quotas and per-token rate limits. It holds
// no transport code: internal/api maps its errors to HTTP answers.
package auth

import (
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/agentd/agentd/store"
)

// Scope is one thing a token may be used for. A token does only what both
// its scopes and its user's role allow.
type Scope string

const (
	ScopeSessionsRead  Scope = "sessions:read"  // list, read and join visible sessions
	ScopeSessionsWrite Scope = "sessions:write" // create sessions; message, interrupt, answer, terminal, delete, share
	ScopeKeys          Scope = "keys"           // manage the user's own provider keys
	ScopeTokens        Scope = "tokens"         // manage the user's own API tokens
	ScopeAdmin         Scope = "admin"          // everything, for admins: users, every token, every session, budgets
)

// AllScopes lists every scope, in a stable order.
var AllScopes = []Scope{ScopeSessionsRead, ScopeSessionsWrite, ScopeKeys, ScopeTokens, ScopeAdmin}

// ParseScopes checks names against AllScopes.
func ParseScopes(names []string) ([]Scope, error) {
	out := make([]Scope, 0, len(names))
	for _, n := range names {
		if !slices.Contains(AllScopes, Scope(n)) {
			return nil, fmt.Errorf("%w: unknown scope %q (known: sessions:read, sessions:write, keys, tokens, admin)", ErrInvalid, n)
		}
		if !slices.Contains(out, Scope(n)) {
			out = append(out, Scope(n))
		}
	}
	return out, nil
}

// Method says how a principal authenticated.
type Method string

const (
	MethodNone   Method = "none"    // auth is off: the one local user
	MethodAPIKey Method = "api-key" // the bootstrap --api-key
	MethodToken  Method = "token"   // an API token (agd_…)
	MethodOIDC   Method = "oidc"    // a bearer JWT of the OpenID Connect provider
)

// Principal is an authenticated caller.
type Principal struct {
	UserID string
	Name   string
	Tenant string
	Role   store.Role
	// Scopes bound what the credential may do; nil means all of them.
	Scopes []Scope
	Method Method
	// TokenID is the API token used (MethodToken only).
	TokenID string
	// Expires is when the credential stops being valid (zero: never).
	Expires time.Time
}

// LocalUser is the principal of a server without auth.
const LocalUser = "local"

// Has reports whether the credential carries scope (its user's role aside).
func (p Principal) Has(s Scope) bool { return p.Scopes == nil || slices.Contains(p.Scopes, s) }

// Admin reports whether p may act as an admin: an admin user whose
// credential has the admin scope.
func (p Principal) Admin() bool { return p.Role == store.RoleAdmin && p.Has(ScopeAdmin) }

// RateKey names the bucket p's requests are rate-limited in: its token,
// else its user.
func (p Principal) RateKey() string {
	if p.TokenID != "" {
		return "token:" + p.TokenID
	}
	return "user:" + p.UserID
}

// Level is what a principal may do with one session.
type Level int

const (
	LevelNone    Level = iota // may not know it exists
	LevelRead                 // list, state, events, files, audit, join
	LevelControl              // also messages, interrupts, permission answers, the terminal
	LevelOwner                // also delete and share
)

// String names the level for messages.
func (l Level) String() string {
	return [...]string{"none", "read", "control", "owner"}[l]
}

// Access returns what p may do with a session owned by owner, given p's
// share of it ("" for none). Sessions without an owner (made before users
// existed) are the admins'.
func Access(p Principal, owner string, share store.ShareAccess) Level {
	switch {
	case p.Admin(), owner != "" && owner == p.UserID:
		return LevelOwner
	case share == store.ShareControl:
		return LevelControl
	case share == store.ShareRead:
		return LevelRead
	}
	return LevelNone
}

// Errors (internal/api maps them to HTTP answers).
var (
	// ErrUnauthenticated: no credential, or one that is unknown, expired,
	// revoked or wrongly signed (401).
	ErrUnauthenticated = errors.New("auth: not authenticated")
	// ErrForbidden: the caller is known but may not do this (403).
	ErrForbidden = errors.New("auth: forbidden")
	// ErrRateLimited: the caller's token is over its rate (429); see
	// RateLimitError.
	ErrRateLimited = errors.New("auth: rate limited")
	// ErrQuota: a quota refuses a new or starting session (429).
	ErrQuota = errors.New("auth: quota exceeded")
	// ErrInvalid: a malformed request (400).
	ErrInvalid = errors.New("auth: invalid request")
	// ErrNotFound: no such user, token, share, key or budget (404).
	ErrNotFound = errors.New("auth: not found")
	// ErrConflict: the id is taken (409).
	ErrConflict = errors.New("auth: already exists")
	// ErrUnsupported: the store keeps no users (single-user server) or the
	// server has no key to seal provider keys with (501).
	ErrUnsupported = errors.New("auth: not supported by this server")
)
