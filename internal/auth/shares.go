package auth

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/agentd/agentd/store"
)

// ShareOf returns the access p has by share to a session ("" for none).
func (s *Service) ShareOf(ctx context.Context, p Principal, sessionID string) (store.ShareAccess, error) {
	if s.id == nil || p.Method == MethodNone {
		return "", nil
	}
	sh, err := s.id.LoadShare(ctx, sessionID, p.UserID)
	if errors.Is(err, store.ErrNotFound) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("load share: %w", err)
	}
	return sh.Access, nil
}

// SharedWith returns the sessions shared with p and how.
func (s *Service) SharedWith(ctx context.Context, p Principal) (map[string]store.ShareAccess, error) {
	out := map[string]store.ShareAccess{}
	if s.id == nil || p.Method == MethodNone || p.Admin() {
		return out, nil
	}
	list, err := s.id.ListSharedWith(ctx, p.UserID)
	if err != nil {
		return nil, fmt.Errorf("list shares: %w", err)
	}
	for _, sh := range list {
		out[sh.SessionID] = sh.Access
	}
	return out, nil
}

// Share gives userID access to a session; the caller must own it (the
// transport checked LevelOwner).
func (s *Service) Share(ctx context.Context, by Principal, sessionID, userID string, access store.ShareAccess) (store.Share, error) {
	if err := s.needIdentity(); err != nil {
		return store.Share{}, err
	}
	if !access.Valid() {
		return store.Share{}, fmt.Errorf("%w: access %q (read or control)", ErrInvalid, access)
	}
	if _, err := s.id.LoadUser(ctx, userID); err != nil {
		return store.Share{}, storeErr(err, "user "+userID)
	}
	sh := store.Share{SessionID: sessionID, UserID: userID, Access: access, CreatedAt: s.cfg.Now().UTC().Truncate(time.Millisecond)}
	if err := s.id.PutShare(ctx, sh); err != nil {
		return store.Share{}, err
	}
	s.access.record(store.AccessRecord{Kind: store.AccessShare, Actor: by.UserID, TokenID: by.TokenID, Subject: sessionID, Detail: fmt.Sprintf("%s: %s", userID, access)})
	return sh, nil
}

// Unshare takes a share back.
func (s *Service) Unshare(ctx context.Context, by Principal, sessionID, userID string) error {
	if err := s.needIdentity(); err != nil {
		return err
	}
	if err := s.id.DeleteShare(ctx, sessionID, userID); err != nil {
		return storeErr(err, "share of "+userID)
	}
	s.access.record(store.AccessRecord{Kind: store.AccessShare, Actor: by.UserID, TokenID: by.TokenID, Subject: sessionID, Detail: userID + ": removed"})
	return nil
}

// Shares lists a session's shares.
func (s *Service) Shares(ctx context.Context, sessionID string) ([]store.Share, error) {
	if err := s.needIdentity(); err != nil {
		return nil, err
	}
	return s.id.ListShares(ctx, sessionID)
}
