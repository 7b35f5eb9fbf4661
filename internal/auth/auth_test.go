package auth

import (
	"bytes"
	"encoding/base64"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/agentd/agentd/conversation"
	"github.com/agentd/agentd/store"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestKeyringSealsPerOwner(t *testing.T) {
	key := bytes.Repeat([]byte{7}, 32)
	k, err := NewKeyring(key)
	if err != nil {
		t.Fatal(err)
	}
	sealed := k.Seal(store.ScopeUser, "alice", "openai", []byte("sk-secret-value"))
	if bytes.Contains(sealed, []byte("sk-secret-value")) {
		t.Fatal("sealed key holds the plaintext")
	}
	got, err := k.Open(store.ScopeUser, "alice", "openai", sealed)
	if err != nil || string(got) != "sk-secret-value" {
		t.Fatalf("Open = %q, %v", got, err)
	}
	for _, c := range []struct {
		scope           store.KeyScope
		owner, provider string
	}{{store.ScopeUser, "bob", "openai"}, {store.ScopeTenant, "alice", "openai"}, {store.ScopeUser, "alice", "anthropic"}} {
		if _, err := k.Open(c.scope, c.owner, c.provider, sealed); err == nil {
			t.Errorf("a key sealed for alice's openai opened as %v", c)
		}
	}
	other, _ := NewKeyring(bytes.Repeat([]byte{8}, 32))
	if _, err := other.Open(store.ScopeUser, "alice", "openai", sealed); err == nil {
		t.Error("another server key opened it")
	}
	if a, b := k.Seal(store.ScopeUser, "a", "openai", []byte("x")), k.Seal(store.ScopeUser, "a", "openai", []byte("x")); bytes.Equal(a, b) {
		t.Error("two seals of one key are equal: the nonce is not random")
	}
}

func TestParseServerKey(t *testing.T) {
	raw := bytes.Repeat([]byte{0xab}, 32)
	for _, in := range [][]byte{raw, []byte("abababababababababababababababababababababababababababababababab\n"),
		[]byte(base64.StdEncoding.EncodeToString(raw) + "\n")} {
		if k, err := ParseServerKey(in); err != nil || !bytes.Equal(k, raw) {
			t.Errorf("ParseServerKey(%q) = %x, %v", in, k, err)
		}
	}
	if _, err := ParseServerKey([]byte("short")); err == nil {
		t.Error("a short key was accepted")
	}
}

func TestPricesLongestPrefix(t *testing.T) {
	p := Prices{"claude": {Input: 1, Output: 2}, "claude-opus": {Input: 15, Output: 75, CacheRead: 1.5, CacheWrite: 18.75}}
	u := conversation.Usage{InputTokens: 1000, OutputTokens: 100, CacheReadInputTokens: 10, CacheCreationInputTokens: 4}
	if got := p.CostMicros("claude-opus-4", u); got != 15000+7500+15+75 {
		t.Errorf("opus cost %d µ$", got)
	}
	if got := p.CostMicros("claude-haiku", u); got != 1000+200 {
		t.Errorf("haiku cost %d µ$", got)
	}
	if got := p.CostMicros("gpt-5", u); got != 0 {
		t.Errorf("unpriced model cost %d", got)
	}
}

func TestLimiterRetryAfter(t *testing.T) {
	now := time.Unix(1000, 0)
	l := newLimiter(2, 2, func() time.Time { return now })
	for i := range 2 {
		if ok, _ := l.allow("k"); !ok {
			t.Fatalf("request %d of the burst refused", i)
		}
	}
	ok, wait := l.allow("k")
	if ok || wait <= 0 || wait > time.Second {
		t.Fatalf("third request: ok %v, wait %v; want refused for ≤ 0.5 s", ok, wait)
	}
	if ok, _ := l.allow("other"); !ok {
		t.Fatal("another key shares the bucket")
	}
	now = now.Add(wait)
	if ok, _ := l.allow("k"); !ok {
		t.Fatal("refused after waiting Retry-After")
	}
	if e := (&RateLimitError{RetryAfter: 300 * time.Millisecond}); e.RetryAfterSeconds() != 1 {
		t.Fatalf("Retry-After of 0.3 s = %d, want 1", e.RetryAfterSeconds())
	}
}

func TestAccessLevels(t *testing.T) {
	alice := Principal{UserID: "alice", Role: store.RoleMember, Method: MethodToken}
	admin := Principal{UserID: "root", Role: store.RoleAdmin, Method: MethodToken}
	adminNoScope := admin
	adminNoScope.Scopes = []Scope{ScopeSessionsRead}
	for _, c := range []struct {
		p     Principal
		owner string
		share store.ShareAccess
		want  Level
	}{
		{alice, "alice", "", LevelOwner}, {alice, "bob", "", LevelNone}, {alice, "", "", LevelNone},
		{alice, "bob", store.ShareRead, LevelRead}, {alice, "bob", store.ShareControl, LevelControl},
		{admin, "bob", "", LevelOwner}, {admin, "", "", LevelOwner}, {adminNoScope, "bob", "", LevelNone},
	} {
		if got := Access(c.p, c.owner, c.share); got != c.want {
			t.Errorf("Access(%s, owner %q, share %q) = %v, want %v", c.p.UserID, c.owner, c.share, got, c.want)
		}
	}
}
