package memstore

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"

	"github.com/agentd/agentd/conversation"
	"github.com/agentd/agentd/store"
)

var _ store.ArtifactStore = (*Store)(nil)

// artifacts is the store's artifact content, held once per SHA-256 and
// counted by the sessions that reference it. Guarded by Store.mu.
type artifacts struct {
	quota    store.ArtifactQuota
	contents map[string]*content                            // by SHA-256
	bySess   map[string]map[string]conversation.ArtifactRef // session → SHA-256 → ref
	total    int64                                          // bytes of contents
}

type content struct {
	data []byte
	refs int
}

// SetArtifactQuota sets the artifact quota (default: none).
func (s *Store) SetArtifactQuota(q store.ArtifactQuota) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.arts.quota = q
}

// PutArtifact implements store.ArtifactStore. The content is read into
// memory: this store holds everything there.
func (s *Store) PutArtifact(ctx context.Context, sessionID string, meta conversation.ArtifactRef, r io.Reader) (conversation.ArtifactRef, error) {
	if err := ctx.Err(); err != nil {
		return conversation.ArtifactRef{}, err
	}
	s.mu.RLock()
	limit := s.arts.quota.Largest()
	s.mu.RUnlock()
	var buf bytes.Buffer
	src := r
	if limit >= 0 {
		src = io.LimitReader(r, limit+1)
	}
	if _, err := io.Copy(&buf, src); err != nil {
		return conversation.ArtifactRef{}, fmt.Errorf("put artifact of %q: read: %w", sessionID, err)
	}
	if limit >= 0 && int64(buf.Len()) > limit {
		return conversation.ArtifactRef{}, fmt.Errorf("put artifact of %q: %w: larger than %d bytes", sessionID, store.ErrArtifactQuota, limit)
	}
	if err := ctx.Err(); err != nil {
		return conversation.ArtifactRef{}, err
	}
	sum := sha256.Sum256(buf.Bytes())
	ref := conversation.ArtifactRef{SHA256: hex.EncodeToString(sum[:]), Size: int64(buf.Len()), ContentType: meta.ContentType, Name: meta.Name}

	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.sessions[sessionID]; !ok {
		return conversation.ArtifactRef{}, fmt.Errorf("put artifact of %q: session: %w", sessionID, store.ErrNotFound)
	}
	a := &s.arts
	if _, held := a.bySess[sessionID][ref.SHA256]; held {
		return ref, nil
	}
	c, stored := a.contents[ref.SHA256]
	addTotal := ref.Size
	if stored {
		addTotal = 0
	}
	if err := a.quota.Check(a.sessionUsageLocked(sessionID), ref.Size, a.total, addTotal); err != nil {
		return conversation.ArtifactRef{}, fmt.Errorf("put artifact of %q: %w", sessionID, err)
	}
	if !stored {
		if a.contents == nil {
			a.contents = make(map[string]*content)
			a.bySess = make(map[string]map[string]conversation.ArtifactRef)
		}
		c = &content{data: bytes.Clone(buf.Bytes())}
		a.contents[ref.SHA256] = c
		a.total += ref.Size
	}
	c.refs++
	if a.bySess[sessionID] == nil {
		a.bySess[sessionID] = make(map[string]conversation.ArtifactRef)
	}
	a.bySess[sessionID][ref.SHA256] = ref
	return ref, nil
}

func (a *artifacts) sessionUsageLocked(sessionID string) int64 {
	var n int64
	for _, r := range a.bySess[sessionID] {
		n += r.Size
	}
	return n
}

// deleteArtifactsLocked drops the session's references, and content no
// session references any more.
func (s *Store) deleteArtifactsLocked(sessionID string) {
	a := &s.arts
	for sha := range a.bySess[sessionID] {
		c := a.contents[sha]
		if c.refs--; c.refs == 0 {
			delete(a.contents, sha)
			a.total -= int64(len(c.data))
		}
	}
	delete(a.bySess, sessionID)
}

// StatArtifact implements store.ArtifactStore.
func (s *Store) StatArtifact(ctx context.Context, sessionID, sha256 string) (conversation.ArtifactRef, error) {
	if err := ctx.Err(); err != nil {
		return conversation.ArtifactRef{}, err
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	ref, ok := s.arts.bySess[sessionID][sha256]
	if !ok {
		return conversation.ArtifactRef{}, fmt.Errorf("stat artifact %s of %q: %w", sha256, sessionID, store.ErrNotFound)
	}
	return ref, nil
}

// OpenArtifact implements store.ArtifactStore.
func (s *Store) OpenArtifact(ctx context.Context, sessionID, sha256 string, off, n int64) (io.ReadCloser, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	if _, ok := s.arts.bySess[sessionID][sha256]; !ok {
		return nil, fmt.Errorf("open artifact %s of %q: %w", sha256, sessionID, store.ErrNotFound)
	}
	// Content is never changed once stored: the reader may share it.
	data := s.arts.contents[sha256].data
	n, err := store.CheckArtifactRange(int64(len(data)), off, n)
	if err != nil {
		return nil, fmt.Errorf("open artifact %s of %q: %w", sha256, sessionID, err)
	}
	return io.NopCloser(bytes.NewReader(data[off : off+n])), nil
}

// ArtifactUsage implements store.ArtifactStore.
func (s *Store) ArtifactUsage(ctx context.Context, sessionID string) (int64, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	if sessionID == "" {
		return s.arts.total, nil
	}
	return s.arts.sessionUsageLocked(sessionID), nil
}
