package storetest

import (
	"bytes"
	"errors"
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/agentd/agentd/store"
)

// identityStore opens a store and returns it as a store.IdentityStore,
// skipping the test when the store does not implement the optional
// interfaces (store/identity.go).
func (h harness) identityStore(t *testing.T) (store.Store, store.IdentityStore) {
	t.Helper()
	s := h.store(t)
	i, ok := s.(store.IdentityStore)
	if !ok {
		t.Skip("the store does not implement store.IdentityStore (optional)")
	}
	return s, i
}

func (h harness) identity(t *testing.T) {
	t.Run("SessionOwnerRoundTrip", func(t *testing.T) {
		s, _ := h.identityStore(t)
		want := fullSession("owned", baseTime)
		want.Owner, want.Tenant = "alice", "team-ä"
		if err := s.CreateSession(ctx(t), want); err != nil {
			t.Fatal(err)
		}
		createSession(t, s, "unowned")
		got, err := s.LoadSession(ctx(t), "owned")
		if err != nil {
			t.Fatal(err)
		}
		if got.Owner != "alice" || got.Tenant != "team-ä" {
			t.Fatalf("owner, tenant after round trip = %q, %q; want alice, team-ä", got.Owner, got.Tenant)
		}
		list, err := s.ListSessions(ctx(t))
		if err != nil {
			t.Fatal(err)
		}
		owners := map[string]string{}
		for _, l := range list {
			owners[l.ID] = l.Owner + "/" + l.Tenant
		}
		if owners["owned"] != "alice/team-ä" || owners["unowned"] != "/" {
			t.Fatalf("listed owners %v", owners)
		}
		got.Status = "idle"
		if err := s.UpdateSession(ctx(t), got); err != nil {
			t.Fatal(err)
		}
		if again, _ := s.LoadSession(ctx(t), "owned"); again.Owner != "alice" || again.Tenant != "team-ä" {
			t.Fatalf("owner, tenant after an update = %q, %q", again.Owner, again.Tenant)
		}
	})

	t.Run("Users", func(t *testing.T) {
		_, s := h.identityStore(t)
		alice := store.User{ID: "alice", Name: "Alice Ünïcode", Tenant: "t1", Role: store.RoleMember,
			Issuer: "https://idp.example", Subject: "sub-1", CreatedAt: baseTime}
		bob := store.User{ID: "bob", Tenant: "t2", Role: store.RoleAdmin, CreatedAt: baseTime.Add(time.Second)}
		carol := store.User{ID: "carol", Tenant: "t1", Role: store.RoleMember}
		for _, u := range []store.User{bob, alice, carol} {
			if err := s.CreateUser(ctx(t), u); err != nil {
				t.Fatalf("CreateUser(%s): %v", u.ID, err)
			}
		}
		if err := s.CreateUser(ctx(t), store.User{ID: "alice", Role: store.RoleMember}); !errors.Is(err, store.ErrExists) {
			t.Errorf("CreateUser of a taken id: %v, want ErrExists", err)
		}
		if err := s.CreateUser(ctx(t), store.User{ID: "mallory", Role: store.RoleMember, Issuer: alice.Issuer, Subject: alice.Subject}); !errors.Is(err, store.ErrExists) {
			t.Errorf("CreateUser of a taken (issuer, subject): %v, want ErrExists", err)
		}
		if err := s.CreateUser(ctx(t), store.User{ID: "dave", Role: store.RoleMember, Issuer: "https://other.example", Subject: alice.Subject}); err != nil {
			t.Errorf("CreateUser of the same subject at another issuer: %v", err)
		}
		got, err := s.LoadUser(ctx(t), "alice")
		if err != nil {
			t.Fatal(err)
		}
		sameUser(t, got, alice)
		got, err = s.LoadUserBySubject(ctx(t), alice.Issuer, alice.Subject)
		if err != nil || got.ID != "alice" {
			t.Fatalf("LoadUserBySubject = %q, %v; want alice", got.ID, err)
		}
		if _, err := s.LoadUserBySubject(ctx(t), "", ""); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("LoadUserBySubject of no subject: %v, want ErrNotFound (users without one are not found by it)", err)
		}
		if _, err := s.LoadUser(ctx(t), "nobody"); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("LoadUser of an unknown id: %v, want ErrNotFound", err)
		}
		list, err := s.ListUsers(ctx(t))
		if err != nil {
			t.Fatal(err)
		}
		var ids []string
		for _, u := range list {
			ids = append(ids, u.ID)
		}
		if !reflect.DeepEqual(ids, []string{"alice", "bob", "carol", "dave"}) {
			t.Errorf("ListUsers ids %v, want sorted alice bob carol dave", ids)
		}
		upd := alice
		upd.Name, upd.Tenant, upd.Role, upd.Disabled = "A.", "t9", store.RoleAdmin, true
		upd.Issuer, upd.Subject, upd.CreatedAt = "changed", "changed", baseTime.Add(time.Hour)
		if err := s.UpdateUser(ctx(t), upd); err != nil {
			t.Fatal(err)
		}
		got, _ = s.LoadUser(ctx(t), "alice")
		want := alice
		want.Name, want.Tenant, want.Role, want.Disabled = "A.", "t9", store.RoleAdmin, true
		sameUser(t, got, want)
		if err := s.UpdateUser(ctx(t), store.User{ID: "nobody", Role: store.RoleMember}); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("UpdateUser of an unknown id: %v, want ErrNotFound", err)
		}
	})

	t.Run("Tokens", func(t *testing.T) {
		_, s := h.identityStore(t)
		for _, id := range []string{"alice", "bob"} {
			if err := s.CreateUser(ctx(t), store.User{ID: id, Role: store.RoleMember}); err != nil {
				t.Fatal(err)
			}
		}
		t1 := store.APIToken{ID: "tok1", Hash: "h1", UserID: "alice", Name: "laptop", Scopes: []string{"sessions:read", "sessions:write"},
			CreatedAt: baseTime, ExpiresAt: baseTime.Add(24 * time.Hour)}
		t2 := store.APIToken{ID: "tok2", Hash: "h2", UserID: "bob", Scopes: []string{}, CreatedAt: baseTime.Add(time.Minute)}
		t3 := store.APIToken{ID: "tok0", Hash: "h3", UserID: "alice", Scopes: []string{"admin"}, CreatedAt: baseTime.Add(2 * time.Minute)}
		for _, tk := range []store.APIToken{t1, t2, t3} {
			if err := s.CreateToken(ctx(t), tk); err != nil {
				t.Fatalf("CreateToken(%s): %v", tk.ID, err)
			}
		}
		if err := s.CreateToken(ctx(t), store.APIToken{ID: "tok9", Hash: "h9", UserID: "nobody", CreatedAt: baseTime}); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("CreateToken of an unknown user: %v, want ErrNotFound", err)
		}
		if err := s.CreateToken(ctx(t), store.APIToken{ID: "tok1", Hash: "h8", UserID: "bob", CreatedAt: baseTime}); !errors.Is(err, store.ErrExists) {
			t.Errorf("CreateToken of a taken id: %v, want ErrExists", err)
		}
		if err := s.CreateToken(ctx(t), store.APIToken{ID: "tok8", Hash: "h1", UserID: "bob", CreatedAt: baseTime}); !errors.Is(err, store.ErrExists) {
			t.Errorf("CreateToken of a taken hash: %v, want ErrExists", err)
		}
		got, err := s.LookupToken(ctx(t), "h1")
		if err != nil {
			t.Fatal(err)
		}
		sameToken(t, got, t1)
		if got, err := s.LoadToken(ctx(t), "tok2"); err != nil {
			t.Fatal(err)
		} else {
			sameToken(t, got, t2)
		}
		if _, err := s.LookupToken(ctx(t), "nope"); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("LookupToken of an unknown hash: %v, want ErrNotFound", err)
		}
		if _, err := s.LoadToken(ctx(t), "nope"); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("LoadToken of an unknown id: %v, want ErrNotFound", err)
		}
		ids := func(user string) []string {
			list, err := s.ListTokens(ctx(t), user)
			if err != nil {
				t.Fatal(err)
			}
			var out []string
			for _, tk := range list {
				out = append(out, tk.ID)
			}
			return out
		}
		if got := ids("alice"); !reflect.DeepEqual(got, []string{"tok1", "tok0"}) {
			t.Errorf("ListTokens(alice) = %v, want tok1 tok0 (oldest first)", got)
		}
		if got := ids(""); !reflect.DeepEqual(got, []string{"tok1", "tok2", "tok0"}) {
			t.Errorf("ListTokens(all) = %v, want tok1 tok2 tok0", got)
		}
		revoked := baseTime.Add(time.Hour)
		if err := s.RevokeToken(ctx(t), "tok1", revoked); err != nil {
			t.Fatal(err)
		}
		if err := s.RevokeToken(ctx(t), "tok1", revoked.Add(time.Hour)); err != nil {
			t.Fatalf("revoking twice: %v", err)
		}
		got, _ = s.LookupToken(ctx(t), "h1")
		if !sameInstant(got.RevokedAt, revoked) {
			t.Errorf("RevokedAt after two revocations = %v, want the first, %v", got.RevokedAt, revoked)
		}
		if err := s.RevokeToken(ctx(t), "nope", revoked); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("RevokeToken of an unknown id: %v, want ErrNotFound", err)
		}
		used := baseTime.Add(2 * time.Hour)
		if err := s.TouchToken(ctx(t), "tok2", used); err != nil {
			t.Fatal(err)
		}
		if err := s.TouchToken(ctx(t), "tok2", used.Add(-time.Minute)); err != nil {
			t.Fatal(err)
		}
		got, _ = s.LoadToken(ctx(t), "tok2")
		if !sameInstant(got.LastUsedAt, used) {
			t.Errorf("LastUsedAt = %v, want %v (an earlier touch is ignored)", got.LastUsedAt, used)
		}
		if err := s.TouchToken(ctx(t), "nope", used); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("TouchToken of an unknown id: %v, want ErrNotFound", err)
		}
	})

	t.Run("Shares", func(t *testing.T) {
		st, s := h.identityStore(t)
		createSession(t, st, "s1")
		createSession(t, st, "s2")
		if err := s.PutShare(ctx(t), store.Share{SessionID: "nope", UserID: "bob", Access: store.ShareRead, CreatedAt: baseTime}); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("PutShare of an unknown session: %v, want ErrNotFound", err)
		}
		put := func(sess, user string, a store.ShareAccess) {
			t.Helper()
			if err := s.PutShare(ctx(t), store.Share{SessionID: sess, UserID: user, Access: a, CreatedAt: baseTime}); err != nil {
				t.Fatal(err)
			}
		}
		put("s1", "carol", store.ShareRead)
		put("s1", "bob", store.ShareRead)
		put("s2", "bob", store.ShareControl)
		put("s1", "bob", store.ShareControl) // replaces
		got, err := s.LoadShare(ctx(t), "s1", "bob")
		if err != nil || got.Access != store.ShareControl || !sameInstant(got.CreatedAt, baseTime) {
			t.Fatalf("LoadShare = %+v, %v; want control", got, err)
		}
		if _, err := s.LoadShare(ctx(t), "s2", "carol"); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("LoadShare of no share: %v, want ErrNotFound", err)
		}
		pairs := func(list []store.Share, err error) []string {
			t.Helper()
			if err != nil {
				t.Fatal(err)
			}
			var out []string
			for _, sh := range list {
				out = append(out, sh.SessionID+":"+sh.UserID+":"+string(sh.Access))
			}
			return out
		}
		if got := pairs(s.ListShares(ctx(t), "s1")); !reflect.DeepEqual(got, []string{"s1:bob:control", "s1:carol:read"}) {
			t.Errorf("ListShares(s1) = %v", got)
		}
		if got := pairs(s.ListSharedWith(ctx(t), "bob")); !reflect.DeepEqual(got, []string{"s1:bob:control", "s2:bob:control"}) {
			t.Errorf("ListSharedWith(bob) = %v", got)
		}
		if err := s.DeleteShare(ctx(t), "s1", "carol"); err != nil {
			t.Fatal(err)
		}
		if err := s.DeleteShare(ctx(t), "s1", "carol"); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("DeleteShare twice: %v, want ErrNotFound", err)
		}
		if err := st.DeleteSession(ctx(t), "s1"); err != nil {
			t.Fatal(err)
		}
		if got := pairs(s.ListSharedWith(ctx(t), "bob")); !reflect.DeepEqual(got, []string{"s2:bob:control"}) {
			t.Errorf("ListSharedWith(bob) after deleting s1 = %v: DeleteSession must remove its shares", got)
		}
	})

	t.Run("ProviderKeys", func(t *testing.T) {
		_, s := h.identityStore(t)
		sealed := []byte{0, 1, 2, 0xff, 0, 'x'}
		k1 := store.ProviderKey{Scope: store.ScopeUser, Owner: "alice", Provider: "openai", Sealed: sealed, Hint: "…abcd", CreatedAt: baseTime}
		k2 := store.ProviderKey{Scope: store.ScopeUser, Owner: "alice", Provider: "anthropic", Sealed: []byte("a"), CreatedAt: baseTime}
		k3 := store.ProviderKey{Scope: store.ScopeTenant, Owner: "alice", Provider: "gemini", Sealed: []byte("t"), CreatedAt: baseTime}
		for _, k := range []store.ProviderKey{k1, k2, k3} {
			if err := s.PutProviderKey(ctx(t), k); err != nil {
				t.Fatal(err)
			}
		}
		sealed[0] = 9 // the store keeps its own copy
		got, err := s.LoadProviderKey(ctx(t), store.ScopeUser, "alice", "openai")
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got.Sealed, []byte{0, 1, 2, 0xff, 0, 'x'}) || got.Hint != "…abcd" || !sameInstant(got.CreatedAt, baseTime) || got.Scope != store.ScopeUser {
			t.Errorf("LoadProviderKey = %+v", got)
		}
		k1b := k1
		k1b.Sealed, k1b.Hint = []byte("new"), "…wxyz"
		if err := s.PutProviderKey(ctx(t), k1b); err != nil {
			t.Fatal(err)
		}
		got, _ = s.LoadProviderKey(ctx(t), store.ScopeUser, "alice", "openai")
		if string(got.Sealed) != "new" || got.Hint != "…wxyz" {
			t.Errorf("PutProviderKey did not replace: %+v", got)
		}
		list, err := s.ListProviderKeys(ctx(t), store.ScopeUser, "alice")
		if err != nil {
			t.Fatal(err)
		}
		if len(list) != 2 || list[0].Provider != "anthropic" || list[1].Provider != "openai" {
			t.Errorf("ListProviderKeys(user alice) = %+v, want anthropic, openai", list)
		}
		if _, err := s.LoadProviderKey(ctx(t), store.ScopeUser, "alice", "gemini"); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("LoadProviderKey of the tenant's key as the user's: %v, want ErrNotFound", err)
		}
		if err := s.DeleteProviderKey(ctx(t), store.ScopeUser, "alice", "openai"); err != nil {
			t.Fatal(err)
		}
		if err := s.DeleteProviderKey(ctx(t), store.ScopeUser, "alice", "openai"); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("DeleteProviderKey twice: %v, want ErrNotFound", err)
		}
	})

	t.Run("Budgets", func(t *testing.T) {
		_, s := h.identityStore(t)
		b1 := store.Budget{Scope: store.ScopeUser, Owner: "bob", TokensPerDay: 1000, TokensPerMonth: -1, CostPerDayMicros: 5_000_000, CostPerMonthMicros: 7}
		b2 := store.Budget{Scope: store.ScopeTenant, Owner: "acme", TokensPerMonth: 1 << 40}
		b3 := store.Budget{Scope: store.ScopeUser, Owner: "alice", TokensPerDay: 1}
		for _, b := range []store.Budget{b1, b2, b3} {
			if err := s.PutBudget(ctx(t), b); err != nil {
				t.Fatal(err)
			}
		}
		got, err := s.LoadBudget(ctx(t), store.ScopeUser, "bob")
		if err != nil || got != b1 {
			t.Fatalf("LoadBudget = %+v, %v; want %+v", got, err, b1)
		}
		b1.TokensPerDay = 2000
		if err := s.PutBudget(ctx(t), b1); err != nil {
			t.Fatal(err)
		}
		if got, _ := s.LoadBudget(ctx(t), store.ScopeUser, "bob"); got != b1 {
			t.Errorf("PutBudget did not replace: %+v", got)
		}
		list, err := s.ListBudgets(ctx(t))
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(list, []store.Budget{b2, b3, b1}) {
			t.Errorf("ListBudgets = %+v, want tenant acme, user alice, user bob", list)
		}
		if err := s.DeleteBudget(ctx(t), store.ScopeTenant, "acme"); err != nil {
			t.Fatal(err)
		}
		if _, err := s.LoadBudget(ctx(t), store.ScopeTenant, "acme"); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("LoadBudget after delete: %v, want ErrNotFound", err)
		}
		if err := s.DeleteBudget(ctx(t), store.ScopeTenant, "acme"); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("DeleteBudget twice: %v, want ErrNotFound", err)
		}
	})

	t.Run("Usage", func(t *testing.T) {
		_, s := h.identityStore(t)
		day := time.Date(2026, time.March, 31, 23, 30, 0, 0, time.UTC)
		next := day.Add(time.Hour) // April 1st
		entries := []store.UsageEntry{
			{UserID: "alice", Tenant: "acme", Day: day, Tokens: 100, CostMicros: 10},
			{UserID: "alice", Tenant: "acme", Day: day.Add(-20 * time.Hour), Tokens: 5, CostMicros: 1}, // same UTC day
			{UserID: "bob", Tenant: "acme", Day: day, Tokens: 1000},
			{UserID: "alice", Tenant: "acme", Day: next, Tokens: 7, CostMicros: 3},
			{UserID: "carol", Tenant: "other", Day: day.In(time.FixedZone("X", 3*3600)), Tokens: 9}, // 02:30 April 1st there, still March 31 UTC
		}
		if err := s.AddUsage(ctx(t), entries); err != nil {
			t.Fatal(err)
		}
		if err := s.AddUsage(ctx(t), entries[:1]); err != nil { // counts add up
			t.Fatal(err)
		}
		sum := func(scope store.KeyScope, owner string, from, to time.Time) store.Usage {
			t.Helper()
			u, err := s.SumUsage(ctx(t), scope, owner, from, to)
			if err != nil {
				t.Fatal(err)
			}
			return u
		}
		if got := sum(store.ScopeUser, "alice", day, day); got != (store.Usage{Tokens: 205, CostMicros: 21}) {
			t.Errorf("alice on March 31 = %+v, want 205 tokens, 21 µ$", got)
		}
		if got := sum(store.ScopeUser, "alice", day.AddDate(0, 0, -30), next); got != (store.Usage{Tokens: 212, CostMicros: 24}) {
			t.Errorf("alice over March 1 – April 1 = %+v, want 212 tokens, 24 µ$", got)
		}
		if got := sum(store.ScopeUser, "alice", next, next); got != (store.Usage{Tokens: 7, CostMicros: 3}) {
			t.Errorf("alice on April 1 = %+v, want 7, 3", got)
		}
		if got := sum(store.ScopeTenant, "acme", day, day); got.Tokens != 1205 {
			t.Errorf("tenant acme on March 31 = %+v, want 1205 tokens", got)
		}
		if got := sum(store.ScopeTenant, "other", day, day); got.Tokens != 9 {
			t.Errorf("tenant other on March 31 (UTC) = %+v, want 9 tokens", got)
		}
		if got := sum(store.ScopeUser, "nobody", day, next); got != (store.Usage{}) {
			t.Errorf("no usage = %+v, want zero", got)
		}
	})

	t.Run("AccessLog", func(t *testing.T) {
		_, s := h.identityStore(t)
		var batch []store.AccessRecord
		for i := range 5 {
			batch = append(batch, store.AccessRecord{Time: baseTime.Add(time.Duration(i) * time.Second), Kind: store.AccessRateLimited,
				Actor: fmt.Sprintf("user-%d", i), TokenID: "tok", Subject: "s", Detail: "ünïcode detail"})
		}
		batch[2].Kind, batch[2].TokenID = store.AccessTokenRevoked, ""
		if err := s.AppendAccess(ctx(t), batch); err != nil {
			t.Fatal(err)
		}
		got, err := s.ReadAccess(ctx(t), 0, 0)
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != 5 {
			t.Fatalf("ReadAccess = %d records, want 5", len(got))
		}
		for i, r := range got {
			if r.ID <= 0 || (i > 0 && r.ID <= got[i-1].ID) {
				t.Fatalf("ids %d then %d: want positive and rising", got[max(i-1, 0)].ID, r.ID)
			}
			w := batch[i]
			if !sameInstant(r.Time, w.Time) || r.Kind != w.Kind || r.Actor != w.Actor || r.TokenID != w.TokenID || r.Subject != w.Subject || r.Detail != w.Detail {
				t.Errorf("record %d = %+v, want %+v", i, r, w)
			}
		}
		page, err := s.ReadAccess(ctx(t), got[1].ID, 2)
		if err != nil {
			t.Fatal(err)
		}
		if len(page) != 2 || page[0].ID != got[2].ID || page[1].ID != got[3].ID {
			t.Errorf("ReadAccess(after %d, limit 2) = %+v", got[1].ID, page)
		}
	})
}

func sameUser(t *testing.T, got, want store.User) {
	t.Helper()
	if !sameInstant(got.CreatedAt, want.CreatedAt) {
		t.Errorf("user %s CreatedAt %v, want %v", want.ID, got.CreatedAt, want.CreatedAt)
	}
	got.CreatedAt, want.CreatedAt = time.Time{}, time.Time{}
	if got != want {
		t.Errorf("user round trip:\n got %+v\nwant %+v", got, want)
	}
}

func sameToken(t *testing.T, got, want store.APIToken) {
	t.Helper()
	for _, p := range [][2]time.Time{{got.CreatedAt, want.CreatedAt}, {got.ExpiresAt, want.ExpiresAt}, {got.LastUsedAt, want.LastUsedAt}, {got.RevokedAt, want.RevokedAt}} {
		if !sameInstant(p[0], p[1]) {
			t.Errorf("token %s times: got %+v, want %+v", want.ID, got, want)
			return
		}
	}
	if got.ID != want.ID || got.Hash != want.Hash || got.UserID != want.UserID || got.Name != want.Name ||
		len(got.Scopes) != len(want.Scopes) || (len(want.Scopes) > 0 && !reflect.DeepEqual(got.Scopes, want.Scopes)) {
		t.Errorf("token round trip:\n got %+v\nwant %+v", got, want)
	}
}
