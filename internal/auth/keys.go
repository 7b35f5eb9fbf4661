package auth

import (
	"context"
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/agentd/agentd/store"
)

// Keyring seals provider keys with the server key (AES-256-GCM), so the
// store holds only ciphertext. The key's scope, owner and provider are the
// additional data: a sealed key copied to another user's row does not open.
type Keyring struct{ aead cipher.AEAD }

// sealVersion prefixes sealed keys, for a future change of cipher.
const sealVersion = 1

// NewKeyring makes a keyring from a 32-byte server key.
func NewKeyring(key []byte) (*Keyring, error) {
	if len(key) != 32 {
		return nil, fmt.Errorf("server key: %d bytes, want 32", len(key))
	}
	block, err := aes.NewCipher(key)
	if err != nil {
		return nil, err
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		return nil, err
	}
	return &Keyring{aead: aead}, nil
}

// ParseServerKey reads a server key: 32 raw bytes, or 64 hex digits, or
// base64 of 32 bytes (surrounding white space ignored).
func ParseServerKey(b []byte) ([]byte, error) {
	if len(b) == 32 {
		return b, nil
	}
	s := strings.TrimSpace(string(b))
	if k, err := hex.DecodeString(s); err == nil && len(k) == 32 {
		return k, nil
	}
	for _, enc := range []*base64.Encoding{base64.StdEncoding, base64.RawStdEncoding, base64.URLEncoding, base64.RawURLEncoding} {
		if k, err := enc.DecodeString(s); err == nil && len(k) == 32 {
			return k, nil
		}
	}
	return nil, errors.New("server key: want 32 bytes, as raw bytes, 64 hex digits or base64 (make one with: head -c 32 /dev/urandom | base64)")
}

// LoadServerKey reads the server key from a file (which must not be
// readable by others).
func LoadServerKey(path string) ([]byte, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("server key: %w", err)
	}
	if fi.Mode().Perm()&0o077 != 0 {
		return nil, fmt.Errorf("server key %s: mode %v lets others read it; chmod 600 it", path, fi.Mode().Perm())
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("server key: %w", err)
	}
	return ParseServerKey(b)
}

func aad(scope store.KeyScope, owner, provider string) []byte {
	return []byte("agentd provider key\x00" + string(scope) + "\x00" + owner + "\x00" + provider)
}

// Seal encrypts a provider key for (scope, owner, provider).
func (k *Keyring) Seal(scope store.KeyScope, owner, provider string, key []byte) []byte {
	nonce := make([]byte, k.aead.NonceSize())
	_, _ = rand.Read(nonce)
	out := append([]byte{sealVersion}, nonce...)
	return k.aead.Seal(out, nonce, key, aad(scope, owner, provider))
}

// Open decrypts what Seal made for the same (scope, owner, provider).
func (k *Keyring) Open(scope store.KeyScope, owner, provider string, sealed []byte) ([]byte, error) {
	n := k.aead.NonceSize()
	if len(sealed) < 1+n || sealed[0] != sealVersion {
		return nil, errors.New("sealed provider key: unknown format")
	}
	key, err := k.aead.Open(nil, sealed[1:1+n], sealed[1+n:], aad(scope, owner, provider))
	if err != nil {
		return nil, errors.New("sealed provider key: cannot open it (another server key, or moved to another owner)")
	}
	return key, nil
}

// Providers are the model providers keys can be stored for.
var Providers = []string{"anthropic", "openai", "gemini"}

// keyOwner checks who may manage the keys of (scope, owner): a user its
// own, an admin anyone's and any tenant's.
func (s *Service) keyOwner(by Principal, scope store.KeyScope, owner, provider string) error {
	if err := s.needIdentity(); err != nil {
		return err
	}
	if s.cfg.Keyring == nil {
		return fmt.Errorf("%w: provider keys need a server key (--server-key-file or AGENTD_SERVER_KEY)", ErrUnsupported)
	}
	if !scope.Valid() {
		return fmt.Errorf("%w: scope %q (user or tenant)", ErrInvalid, scope)
	}
	if provider != "" && !slices.Contains(Providers, provider) {
		return fmt.Errorf("%w: provider %q (anthropic, openai, gemini)", ErrInvalid, provider)
	}
	if by.Admin() {
		return nil
	}
	if scope == store.ScopeUser && owner == by.UserID && by.Has(ScopeKeys) {
		return nil
	}
	return fmt.Errorf("%w: only admins manage other users' and tenants' keys (and a user's own need the keys scope)", ErrForbidden)
}

// PutProviderKey seals and stores a provider key. The key is never
// returned by anything.
func (s *Service) PutProviderKey(ctx context.Context, by Principal, scope store.KeyScope, owner, provider, key string) (store.ProviderKey, error) {
	if err := s.keyOwner(by, scope, owner, provider); err != nil {
		return store.ProviderKey{}, err
	}
	key = strings.TrimSpace(key)
	if len(key) < 8 || strings.ContainsAny(key, " \t\r\n") {
		return store.ProviderKey{}, fmt.Errorf("%w: the key must be at least 8 characters without white space", ErrInvalid)
	}
	k := store.ProviderKey{Scope: scope, Owner: owner, Provider: provider,
		Sealed: s.cfg.Keyring.Seal(scope, owner, provider, []byte(key)),
		Hint:   "…" + key[len(key)-4:], CreatedAt: s.cfg.Now().UTC().Truncate(time.Millisecond)}
	if err := s.id.PutProviderKey(ctx, k); err != nil {
		return store.ProviderKey{}, err
	}
	s.access.record(store.AccessRecord{Kind: store.AccessProviderKey, Actor: by.UserID, TokenID: by.TokenID, Subject: string(scope) + ":" + owner, Detail: "stored " + provider})
	k.Sealed = nil
	return k, nil
}

// ProviderKeys lists the keys of (scope, owner) without their secrets.
func (s *Service) ProviderKeys(ctx context.Context, by Principal, scope store.KeyScope, owner string) ([]store.ProviderKey, error) {
	if err := s.keyOwner(by, scope, owner, ""); err != nil {
		return nil, err
	}
	ks, err := s.id.ListProviderKeys(ctx, scope, owner)
	for i := range ks {
		ks[i].Sealed = nil
	}
	return ks, err
}

// DeleteProviderKey removes a key.
func (s *Service) DeleteProviderKey(ctx context.Context, by Principal, scope store.KeyScope, owner, provider string) error {
	if err := s.keyOwner(by, scope, owner, provider); err != nil {
		return err
	}
	if err := s.id.DeleteProviderKey(ctx, scope, owner, provider); err != nil {
		return storeErr(err, provider+" key")
	}
	s.access.record(store.AccessRecord{Kind: store.AccessProviderKey, Actor: by.UserID, TokenID: by.TokenID, Subject: string(scope) + ":" + owner, Detail: "removed " + provider})
	return nil
}

// ResolveKey returns the provider key the model proxy puts into a request
// of a session of (owner, tenant): the owner's own, else the tenant's, else
// "" (the server's applies). Only the model proxy calls it.
func (s *Service) ResolveKey(ctx context.Context, owner, tenant, provider string) (string, error) {
	if s.id == nil || s.cfg.Keyring == nil || owner == "" {
		return "", nil
	}
	for _, c := range []struct {
		scope store.KeyScope
		owner string
	}{{store.ScopeUser, owner}, {store.ScopeTenant, tenant}} {
		if c.owner == "" {
			continue
		}
		k, err := s.id.LoadProviderKey(ctx, c.scope, c.owner, provider)
		if errors.Is(err, store.ErrNotFound) {
			continue
		}
		if err != nil {
			return "", fmt.Errorf("load %s key of %s %s: %w", provider, c.scope, c.owner, err)
		}
		key, err := s.cfg.Keyring.Open(c.scope, c.owner, provider, k.Sealed)
		if err != nil {
			return "", fmt.Errorf("%s key of %s %s: %w", provider, c.scope, c.owner, err)
		}
		return string(key), nil
	}
	return "", nil
}
