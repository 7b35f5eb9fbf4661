package store

import (
	"context"
	"errors"
	"io"

	"github.com/agentd/agentd/conversation"
)

// ErrArtifactQuota: storing an artifact would exceed the session's or the
// store's artifact quota. Nothing of the call was stored.
var ErrArtifactQuota = errors.New("store: artifact quota exceeded")

// ArtifactStore is implemented by stores that hold artifacts: content
// stored once per (session, SHA-256), chunked, deduplicated across
// sessions, and deleted with the session (DeleteSession). The SQLite and
// PostgreSQL stores implement it, so every node of a fleet reaches the same
// artifacts; storetest covers it.
//
// All methods are safe for concurrent use.
type ArtifactStore interface {
	// PutArtifact reads r to its end, storing its content for sessionID,
	// and returns its ref (SHA256 and Size computed from what was read;
	// ContentType and Name taken from meta). Putting content the session
	// already holds stores nothing new. A failed or cancelled put leaves
	// nothing behind.
	PutArtifact(ctx context.Context, sessionID string, meta conversation.ArtifactRef, r io.Reader) (conversation.ArtifactRef, error)
	// StatArtifact returns the ref of an artifact the session holds, or
	// ErrNotFound.
	StatArtifact(ctx context.Context, sessionID, sha256 string) (conversation.ArtifactRef, error)
	// OpenArtifact returns the content from offset off, n bytes of it (n < 0:
	// to the end), or ErrNotFound. The reader streams: it does not hold the
	// whole artifact in memory.
	OpenArtifact(ctx context.Context, sessionID, sha256 string, off, n int64) (io.ReadCloser, error)
	// ArtifactUsage returns the bytes of artifacts the session references
	// (sessionID "": the whole store's distinct content).
	ArtifactUsage(ctx context.Context, sessionID string) (int64, error)
}
