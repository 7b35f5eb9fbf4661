package store

import (
	"context"
	"time"
)

// The interfaces of this file hold who may use a server (users, API
// tokens), who may see which session (shares), their own model-provider
// keys and their budgets. They are optional, together: a Store that
// implements IdentityStore serves several users (tokens, OIDC sign-in,
// ownership, per-user keys, budgets, quotas); one that does not serves a
// single user (the --api-key, or no auth at all). Keeping them in the store
// is what lets every server of a fleet enforce them alike.
//
// Session ownership itself is part of the session record (Session.Owner
// and Session.Tenant).

// Role is what a user may do: an admin sees and controls every session
// and manages users and tokens; a member only its own sessions and those
// shared with it.
type Role string

const (
	RoleAdmin  Role = "admin"
	RoleMember Role = "member"
)

// Valid reports whether r is a known role.
func (r Role) Valid() bool { return r == RoleAdmin || r == RoleMember }

// User is a principal: the id every event and audit record of its actions
// carries.
type User struct {
	ID     string `json:"id"`
	Name   string `json:"name,omitempty"`
	Tenant string `json:"tenant"`
	Role   Role   `json:"role"`
	// Issuer and Subject identify the OpenID Connect identity the user
	// signs in as (both empty for a user made by an admin).
	Issuer  string `json:"issuer,omitempty"`
	Subject string `json:"subject,omitempty"`
	// Disabled users are refused everywhere, whatever their credential.
	Disabled  bool      `json:"disabled,omitempty"`
	CreatedAt time.Time `json:"createdAt"`
}

// UserStore holds users.
type UserStore interface {
	// CreateUser stores a new user: ErrExists when its id, or its
	// (Issuer, Subject) when Subject is set, is taken.
	CreateUser(ctx context.Context, u User) error
	// LoadUser returns the user or ErrNotFound.
	LoadUser(ctx context.Context, id string) (User, error)
	// LoadUserBySubject returns the user signing in as (issuer, subject),
	// or ErrNotFound.
	LoadUserBySubject(ctx context.Context, issuer, subject string) (User, error)
	// ListUsers returns every user, sorted by id.
	ListUsers(ctx context.Context) ([]User, error)
	// UpdateUser replaces a user's name, tenant, role and disabled flag (id,
	// issuer, subject and creation time stay), or returns ErrNotFound.
	UpdateUser(ctx context.Context, u User) error
}

// APIToken is a user's API credential (agd_…). Only a hash of the secret
// is stored.
type APIToken struct {
	// ID names the token in lists and revocations; it is not secret.
	ID string `json:"id"`
	// Hash is the hex SHA-256 of the token; never returned by the API.
	Hash   string   `json:"-"`
	UserID string   `json:"userId"`
	Name   string   `json:"name,omitempty"`
	Scopes []string `json:"scopes"`
	// ExpiresAt zero: never.
	ExpiresAt  time.Time `json:"expiresAt,omitzero"`
	CreatedAt  time.Time `json:"createdAt"`
	LastUsedAt time.Time `json:"lastUsedAt,omitzero"`
	// RevokedAt zero: not revoked.
	RevokedAt time.Time `json:"revokedAt,omitzero"`
}

// TokenStore holds API tokens.
type TokenStore interface {
	// CreateToken stores a token: ErrExists when its id or hash is taken,
	// ErrNotFound when its user does not exist.
	CreateToken(ctx context.Context, t APIToken) error
	// LookupToken returns the token with that hash (revoked and expired
	// ones too: the caller decides) or ErrNotFound.
	LookupToken(ctx context.Context, hash string) (APIToken, error)
	// LoadToken returns the token with that id or ErrNotFound.
	LoadToken(ctx context.Context, id string) (APIToken, error)
	// ListTokens returns the user's tokens (every token for userID ""),
	// oldest first (ties by id).
	ListTokens(ctx context.Context, userID string) ([]APIToken, error)
	// RevokeToken marks the token revoked at at; revoking a revoked token
	// keeps its first time. ErrNotFound when there is no such token.
	RevokeToken(ctx context.Context, id string, at time.Time) error
	// TouchToken records a use at at; a time before the recorded one is
	// ignored. ErrNotFound when there is no such token.
	TouchToken(ctx context.Context, id string, at time.Time) error
}

// ShareAccess is what a share allows: reading a session (list, state,
// events, files, audit) or also controlling it (messages, interrupts,
// permission answers, the terminal).
type ShareAccess string

const (
	ShareRead    ShareAccess = "read"
	ShareControl ShareAccess = "control"
)

// Valid reports whether a is a known access.
func (a ShareAccess) Valid() bool { return a == ShareRead || a == ShareControl }

// Share gives a user access to a session it does not own.
type Share struct {
	SessionID string      `json:"sessionId"`
	UserID    string      `json:"userId"`
	Access    ShareAccess `json:"access"`
	CreatedAt time.Time   `json:"createdAt"`
}

// ShareStore holds shares. DeleteSession removes the session's shares.
type ShareStore interface {
	// PutShare creates or replaces the share of (SessionID, UserID);
	// ErrNotFound when the session does not exist.
	PutShare(ctx context.Context, s Share) error
	// LoadShare returns the share or ErrNotFound.
	LoadShare(ctx context.Context, sessionID, userID string) (Share, error)
	// DeleteShare removes the share or returns ErrNotFound.
	DeleteShare(ctx context.Context, sessionID, userID string) error
	// ListShares returns the session's shares, sorted by user id.
	ListShares(ctx context.Context, sessionID string) ([]Share, error)
	// ListSharedWith returns the user's shares, sorted by session id.
	ListSharedWith(ctx context.Context, userID string) ([]Share, error)
}

// KeyScope says whose a provider key (or a budget) is: one user's, or a
// whole tenant's.
type KeyScope string

const (
	ScopeUser   KeyScope = "user"
	ScopeTenant KeyScope = "tenant"
)

// Valid reports whether s is a known scope.
func (s KeyScope) Valid() bool { return s == ScopeUser || s == ScopeTenant }

// ProviderKey is a model-provider API key of a user or tenant, sealed by
// the server (encrypted with the server key): the store never holds the
// key itself.
type ProviderKey struct {
	Scope    KeyScope `json:"scope"`
	Owner    string   `json:"owner"`    // a user id or a tenant
	Provider string   `json:"provider"` // anthropic, openai, gemini
	// Sealed is the encrypted key; never returned by the API.
	Sealed []byte `json:"-"`
	// Hint is the key's last characters, to tell keys apart.
	Hint      string    `json:"hint,omitempty"`
	CreatedAt time.Time `json:"createdAt"`
}

// ProviderKeyStore holds sealed provider keys.
type ProviderKeyStore interface {
	// PutProviderKey creates or replaces the key of (Scope, Owner, Provider).
	PutProviderKey(ctx context.Context, k ProviderKey) error
	// LoadProviderKey returns the key or ErrNotFound.
	LoadProviderKey(ctx context.Context, scope KeyScope, owner, provider string) (ProviderKey, error)
	// ListProviderKeys returns the owner's keys, sorted by provider.
	ListProviderKeys(ctx context.Context, scope KeyScope, owner string) ([]ProviderKey, error)
	// DeleteProviderKey removes the key or returns ErrNotFound.
	DeleteProviderKey(ctx context.Context, scope KeyScope, owner, provider string) error
}

// Budget bounds the model use of a user or a tenant per UTC day and month:
// tokens (input, output and cache, as the model proxy counts them) and
// cost in millionths of a US dollar. 0 means the server's default; a
// negative value means no limit.
type Budget struct {
	Scope              KeyScope `json:"scope"`
	Owner              string   `json:"owner"`
	TokensPerDay       int64    `json:"tokensPerDay,omitempty"`
	TokensPerMonth     int64    `json:"tokensPerMonth,omitempty"`
	CostPerDayMicros   int64    `json:"costPerDayMicros,omitempty"`
	CostPerMonthMicros int64    `json:"costPerMonthMicros,omitempty"`
}

// BudgetStore holds budgets set for users and tenants.
type BudgetStore interface {
	// PutBudget creates or replaces the budget of (Scope, Owner).
	PutBudget(ctx context.Context, b Budget) error
	// LoadBudget returns the budget or ErrNotFound.
	LoadBudget(ctx context.Context, scope KeyScope, owner string) (Budget, error)
	// ListBudgets returns every budget, sorted by scope then owner.
	ListBudgets(ctx context.Context) ([]Budget, error)
	// DeleteBudget removes the budget or returns ErrNotFound.
	DeleteBudget(ctx context.Context, scope KeyScope, owner string) error
}

// UsageEntry is model use to add to a user's (and its tenant's) count of a
// UTC day.
type UsageEntry struct {
	UserID string
	Tenant string
	// Day is any instant of the UTC day counted.
	Day        time.Time
	Tokens     int64
	CostMicros int64
}

// Usage is summed model use.
type Usage struct {
	Tokens     int64 `json:"tokens"`
	CostMicros int64 `json:"costMicros"`
}

// UsageStore counts model use per user, tenant and UTC day, so that every
// server of a fleet checks budgets against the same numbers.
type UsageStore interface {
	// AddUsage adds the entries to their (user, tenant, day) counts, all or
	// none.
	AddUsage(ctx context.Context, entries []UsageEntry) error
	// SumUsage sums the counts of the user (ScopeUser) or tenant
	// (ScopeTenant) over the UTC days from from's day up to and including
	// to's day.
	SumUsage(ctx context.Context, scope KeyScope, owner string, from, to time.Time) (Usage, error)
}

// AccessKind says what an access record reports.
type AccessKind string

const (
	AccessRateLimited  AccessKind = "rate_limited"  // a request over its token's rate (429)
	AccessQuota        AccessKind = "quota"         // a session refused by a quota
	AccessBudget       AccessKind = "budget"        // a model request refused by a user or tenant budget
	AccessTokenCreated AccessKind = "token_created" // an API token made
	AccessTokenRevoked AccessKind = "token_revoked" // an API token revoked
	AccessUserCreated  AccessKind = "user_created"  // a user made (by an admin, or on first OIDC sign-in)
	AccessUserUpdated  AccessKind = "user_updated"  // role, tenant or disabled changed
	AccessShare        AccessKind = "share"         // a share given or taken back
	AccessProviderKey  AccessKind = "provider_key"  // a provider key stored or removed
	AccessBudgetSet    AccessKind = "budget_set"    // a budget set or removed
)

// AccessRecord is one audited access decision or change of identity data,
// not tied to a session's environment (those are AuditRecords).
type AccessRecord struct {
	// ID is assigned by the store and rises with every record: a cursor.
	ID      int64      `json:"id"`
	Time    time.Time  `json:"time"`
	Kind    AccessKind `json:"kind"`
	Actor   string     `json:"actor,omitempty"`   // the user acting (or refused)
	TokenID string     `json:"tokenId,omitempty"` // the API token used, when one was
	// Subject is what was acted on: a user, token, session or tenant.
	Subject string `json:"subject,omitempty"`
	Detail  string `json:"detail,omitempty"`
}

// AccessAuditStore keeps access records.
type AccessAuditStore interface {
	// AppendAccess stores records atomically, assigning IDs in slice order.
	AppendAccess(ctx context.Context, records []AccessRecord) error
	// ReadAccess returns records with ID > after, in ID order, at most limit
	// (limit <= 0: all).
	ReadAccess(ctx context.Context, after int64, limit int) ([]AccessRecord, error)
}

// IdentityStore is everything a multi-user server needs beyond Store.
type IdentityStore interface {
	UserStore
	TokenStore
	ShareStore
	ProviderKeyStore
	BudgetStore
	UsageStore
	AccessAuditStore
}

// UTCDay returns the start of t's UTC day.
func UTCDay(t time.Time) time.Time {
	y, m, d := t.UTC().Date()
	return time.Date(y, m, d, 0, 0, 0, 0, time.UTC)
}
