package storetest_test

import (
	"context"
	"time"

	"github.com/agentd/agentd/store"
)

// Identity methods with the bugs TestSuiteCatchesBugs names; without a bug
// they are the public memstore's.

func (m *memStore) CreateUser(ctx context.Context, u store.User) error {
	if m.bug == "subject-not-unique" {
		if _, err := m.ident.LoadUserBySubject(ctx, u.Issuer, u.Subject); err == nil {
			u.Issuer, u.Subject = "", ""
		}
	}
	return m.ident.CreateUser(ctx, u)
}

func (m *memStore) RevokeToken(ctx context.Context, id string, at time.Time) error {
	if m.bug == "revoke-ignored" {
		_, err := m.ident.LoadToken(ctx, id)
		return err
	}
	return m.ident.RevokeToken(ctx, id, at)
}

func (m *memStore) AddUsage(ctx context.Context, entries []store.UsageEntry) error {
	if m.bug == "usage-not-utc" {
		shifted := make([]store.UsageEntry, len(entries))
		for i, e := range entries {
			e.Day = e.Day.Add(3 * time.Hour) // days of UTC+3
			shifted[i] = e
		}
		entries = shifted
	}
	return m.ident.AddUsage(ctx, entries)
}

func (m *memStore) ListProviderKeys(ctx context.Context, scope store.KeyScope, owner string) ([]store.ProviderKey, error) {
	if m.bug == "keys-ignore-scope" {
		a, err := m.ident.ListProviderKeys(ctx, store.ScopeUser, owner)
		if err != nil {
			return nil, err
		}
		b, err := m.ident.ListProviderKeys(ctx, store.ScopeTenant, owner)
		return append(a, b...), err
	}
	return m.ident.ListProviderKeys(ctx, scope, owner)
}

func (m *memStore) ReadAccess(ctx context.Context, after int64, limit int) ([]store.AccessRecord, error) {
	if m.bug == "access-ignores-after" {
		after = 0
	}
	return m.ident.ReadAccess(ctx, after, limit)
}
