package store

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

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

// ArtifactChunkSize is how many bytes of an artifact one stored chunk
// holds (the last chunk holds the rest). Stores put and read artifacts a
// chunk at a time, so a put or a read holds about one chunk in memory,
// whatever the artifact's size.
const ArtifactChunkSize = 256 << 10

// ArtifactQuota limits what an ArtifactStore holds. Zero (or negative)
// means no limit. A put that would exceed either limit fails with
// ErrArtifactQuota and stores nothing.
type ArtifactQuota struct {
	// Session bounds the bytes of the distinct artifacts one session
	// references (content shared with other sessions counts for each).
	Session int64
	// Total bounds the bytes of distinct content in the whole store
	// (content shared by sessions counts once).
	Total int64
}

// Check returns ErrArtifactQuota (wrapped, with the figures) when adding
// addSession bytes to a session using sessionUsed, and addTotal bytes to a
// store holding totalUsed, would pass a limit of q.
func (q ArtifactQuota) Check(sessionUsed, addSession, totalUsed, addTotal int64) error {
	if q.Session > 0 && addSession > 0 && sessionUsed+addSession > q.Session {
		return fmt.Errorf("%w: the session would hold %d bytes of artifacts, over its quota of %d",
			ErrArtifactQuota, sessionUsed+addSession, q.Session)
	}
	if q.Total > 0 && addTotal > 0 && totalUsed+addTotal > q.Total {
		return fmt.Errorf("%w: the store would hold %d bytes of artifacts, over its quota of %d",
			ErrArtifactQuota, totalUsed+addTotal, q.Total)
	}
	return nil
}

// Largest is the size beyond which no put can succeed under q (-1: no
// limit): a put may stop reading there.
func (q ArtifactQuota) Largest() int64 {
	l := int64(-1)
	for _, v := range []int64{q.Session, q.Total} {
		if v > 0 && (l < 0 || v < l) {
			l = v
		}
	}
	return l
}

// ValidSHA256 reports whether s is a lowercase hex SHA-256 (64 digits), the
// only form artifact names take.
func ValidSHA256(s string) bool {
	if len(s) != 64 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// CheckArtifactRange validates an OpenArtifact range against the
// artifact's size and returns the number of bytes to read.
func CheckArtifactRange(size, off, n int64) (int64, error) {
	if off < 0 || off > size {
		return 0, fmt.Errorf("offset %d outside the artifact's %d bytes", off, size)
	}
	if n < 0 || n > size-off {
		n = size - off
	}
	return n, nil
}

// ArtifactQuotaSetter is implemented by artifact stores whose quota can be
// set (or changed) after they are opened; the server sets its configured
// quota through it. Safe for concurrent use with puts: a put checks the
// quota in force when it checks.
type ArtifactQuotaSetter interface {
	SetArtifactQuota(ArtifactQuota)
}

// ArtifactBlobs holds artifact content outside the database, one object
// per SHA-256 (an S3 bucket: store/s3blobs). A SQL store given one
// (sqlite.WithArtifactBlobs, postgres.WithArtifactBlobs) keeps there the
// bytes it would otherwise keep in chunks, and keeps in the database all
// the rest (which session references which content, sizes, names, reference
// counts, quotas), so its transactions and purges stay what they are. The
// store calls DeleteBlob only for content no row references any more, in
// a way that excludes a concurrent put of the same content.
//
// All methods are safe for concurrent use.
type ArtifactBlobs interface {
	// HasBlob reports whether the content of sha is stored.
	HasBlob(ctx context.Context, sha string) (bool, error)
	// PutBlob stores size bytes read from r as the content of sha (the
	// caller computed sha from them). Storing content that is already
	// there stores it again, with the same bytes.
	PutBlob(ctx context.Context, sha string, r io.Reader, size int64) error
	// OpenBlob returns n bytes (n > 0) of the content from offset off,
	// streamed, or an error matching ErrNotFound when it is not stored.
	OpenBlob(ctx context.Context, sha string, off, n int64) (io.ReadCloser, error)
	// DeleteBlob deletes the content of sha; deleting absent content is
	// not an error.
	DeleteBlob(ctx context.Context, sha string) error
	// ListBlobs calls f with the SHA-256 of each stored content last
	// written before the given time, until f returns an error.
	ListBlobs(ctx context.Context, before time.Time, f func(sha string) error) error
	// String describes where the content is, without credentials.
	String() string
}
