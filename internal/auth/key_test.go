package auth

import (
	"context"
	"errors"
	"strings"
	"testing"
)

// The bootstrap key is accepted only whole: not a prefix of it, not the key
// with anything after it, not another key of the same length.
func TestBootstrapKeyOnlyExact(t *testing.T) {
	const key = "s3cret-key"
	s, err := New(Config{BootstrapKey: key})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close(context.Background())
	ctx := context.Background()
	p, err := s.Authenticate(ctx, key)
	if err != nil || p.UserID != "admin" || p.Method != MethodAPIKey {
		t.Fatalf("the key: %+v %v", p, err)
	}
	for _, c := range []string{
		"s", "s3cret", key[:len(key)-1], // prefixes
		key + "x", key + key, key + " ", // the key and more
		"S3cret-key", "s3cret-kez", "x3cret-key", // same length
		"wrong", " " + key,
	} {
		p, err := s.Authenticate(ctx, c)
		if !errors.Is(err, ErrUnauthenticated) {
			t.Errorf("credential %q: %+v, %v; want ErrUnauthenticated", c, p, err)
		}
	}
}

// New's defaults (bootstrap user "admin", tenant "default") and their
// overrides; auth is required with a bootstrap key or Required, and
// token-only auth needs a store of users.
func TestNewDefaultsAndRequired(t *testing.T) {
	ctx := context.Background()
	open, err := New(Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer open.Close(ctx)
	if open.Required() {
		t.Fatal("auth required without a key, OIDC or Required")
	}
	if p, err := open.Authenticate(ctx, ""); err != nil || p.UserID != LocalUser {
		t.Fatalf("without auth: %+v %v, want the local principal", p, err)
	}
	s, err := New(Config{BootstrapKey: "k"})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close(ctx)
	if p, err := s.Authenticate(ctx, "k"); err != nil || p.UserID != "admin" || p.Tenant != "default" {
		t.Fatalf("defaults: %+v %v", p, err)
	}
	if !s.Required() {
		t.Fatal("a bootstrap key does not make auth required")
	}
	s2, err := New(Config{BootstrapKey: "k", BootstrapUser: "root", DefaultTenant: "acme"})
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close(ctx)
	if p, err := s2.Authenticate(ctx, "k"); err != nil || p.UserID != "root" || p.Tenant != "acme" {
		t.Fatalf("overrides: %+v %v", p, err)
	}
	if _, err := New(Config{Required: true}); err == nil {
		t.Fatal("token-only auth without a store of users accepted")
	}
}

// An API token is the prefix and more than 20 characters after it.
func TestIsAPIToken(t *testing.T) {
	long := strings.Repeat("x", 21)
	for s, want := range map[string]bool{
		TokenPrefix + long:      true,
		TokenPrefix + long[:20]: false,
		TokenPrefix:             false,
		"xyz_" + long:           false,
		long + long:             false,
	} {
		if got := IsAPIToken(s); got != want {
			t.Errorf("IsAPIToken(%q) = %v, want %v", s, got, want)
		}
	}
	tok, _ := newSecret()
	if !IsAPIToken(tok) {
		t.Errorf("a new token %q is not an API token", tok)
	}
}
