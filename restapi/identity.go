package restapi

import (
	"time"

	"github.com/agentd/agentd/store"
)

// The identity routes' wire types (docs/api.md, Auth). Users, tokens,
// shares, provider keys, budgets and access records are the store's types.

// Me answers GET /api/me.
type Me struct {
	User    store.User `json:"user"`
	Method  string     `json:"method"`
	TokenID string     `json:"tokenId,omitempty"`
	Scopes  []string   `json:"scopes"`
	Admin   bool       `json:"admin"`
	// ExpiresAt is when the credential stops working (absent: never).
	ExpiresAt string        `json:"expiresAt,omitempty"`
	Budget    *BudgetReport `json:"budget,omitempty"`
	Tenant    *BudgetReport `json:"tenantBudget,omitempty"`
}

// NewUser is POST /api/users (admins).
type NewUser struct {
	ID     string     `json:"id"`
	Name   string     `json:"name,omitempty"`
	Tenant string     `json:"tenant,omitempty"`
	Role   store.Role `json:"role,omitempty"`
}

// UserUpdate is PATCH /api/users/{userId} (admins): the fields set change.
type UserUpdate struct {
	Name     *string     `json:"name,omitempty"`
	Tenant   *string     `json:"tenant,omitempty"`
	Role     *store.Role `json:"role,omitempty"`
	Disabled *bool       `json:"disabled,omitempty"`
}

// NewToken is POST /api/tokens.
type NewToken struct {
	// UserID is whose token it is (default: the caller; others: admins only).
	UserID string   `json:"userId,omitempty"`
	Name   string   `json:"name,omitempty"`
	Scopes []string `json:"scopes,omitempty"`
	// ExpiresIn is the token's lifetime in seconds (0: never expires).
	ExpiresIn int64 `json:"expiresIn,omitempty"`
}

// CreatedToken is a new token: the secret is shown once.
type CreatedToken struct {
	store.APIToken
	Token string `json:"token"`
}

// BudgetReport is a user's or tenant's budget and its use today and this
// month (UTC).
type BudgetReport struct {
	Budget store.Budget `json:"budget"`
	Day    store.Usage  `json:"day"`
	Month  store.Usage  `json:"month"`
}

// SignIn answers POST /api/auth/oidc/token and /refresh: a bearer token
// (the provider's ID token) for the UI.
type SignIn struct {
	Token        string     `json:"token"`
	ExpiresAt    time.Time  `json:"expiresAt"`
	RefreshToken string     `json:"refreshToken,omitempty"`
	User         store.User `json:"user"`
}

// Lists and requests of the identity routes.
type (
	UserList struct {
		Users []store.User `json:"users"`
	}
	TokenList struct {
		Tokens []store.APIToken `json:"tokens"`
	}
	ShareList struct {
		Shares []store.Share `json:"shares"`
	}
	KeyList struct {
		Keys []store.ProviderKey `json:"keys"`
	}
	BudgetList struct {
		Budgets []store.Budget `json:"budgets"`
	}
	AccessPage struct {
		Records []store.AccessRecord `json:"records"`
		Last    int64                `json:"last"`
	}
	ShareRequest struct {
		Access store.ShareAccess `json:"access"`
	}
	// KeyRequest stores a key; it is write-only.
	KeyRequest struct {
		Key string `json:"key"`
	}
	CodeExchange struct {
		Code         string `json:"code"`
		CodeVerifier string `json:"codeVerifier"`
		RedirectURI  string `json:"redirectUri"`
	}
	RefreshRequest struct {
		RefreshToken string `json:"refreshToken"`
	}
)
