package store

import (
	"context"
	"time"
)

// ModelToken is a credential the model proxy issued to a session's
// environment in place of the server's API keys. Only a hash of the token
// is kept.
type ModelToken struct {
	// Hash identifies the token (hex SHA-256 of it); the token itself is
	// not stored.
	Hash      string `json:"hash"`
	SessionID string `json:"sessionId"`
	// Budget is the session's token budget when the token was issued (0:
	// none).
	Budget    int64     `json:"budget,omitempty"`
	CreatedAt time.Time `json:"createdAt"`
}

// ModelTokenStore keeps model-proxy tokens so that environments which
// outlive a server restart keep working. It is optional: with a Store that
// does not implement it, tokens live as long as the server process.
// DeleteSession removes the session's tokens too. Methods are safe for
// concurrent use.
type ModelTokenStore interface {
	// SaveModelToken stores a token: ErrExists when its hash is taken,
	// ErrNotFound when the session does not exist.
	SaveModelToken(ctx context.Context, t ModelToken) error
	// LookupModelToken returns the token with that hash or ErrNotFound.
	LookupModelToken(ctx context.Context, hash string) (ModelToken, error)
	// DeleteModelTokens removes every token of the session (none is not an
	// error).
	DeleteModelTokens(ctx context.Context, sessionID string) error
}
