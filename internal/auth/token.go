package auth

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"strings"
)

// TokenPrefix starts every API token, so one is recognisable in a leak
// report and secret scanners can match it.
const TokenPrefix = "agd_"

// newSecret returns a new API token and its id.
func newSecret() (token, id string) {
	var b [32]byte
	_, _ = rand.Read(b[:]) // crypto/rand never fails (Go 1.24+)
	var i [8]byte
	_, _ = rand.Read(i[:])
	return TokenPrefix + base64.RawURLEncoding.EncodeToString(b[:]), "tok_" + hex.EncodeToString(i[:])
}

// HashToken is what the store keeps of a token.
func HashToken(token string) string {
	h := sha256.Sum256([]byte(token))
	return hex.EncodeToString(h[:])
}

// IsAPIToken reports whether s looks like an API token.
func IsAPIToken(s string) bool {
	return strings.HasPrefix(s, TokenPrefix) && len(s) > len(TokenPrefix)+20
}

// looksLikeJWT reports whether s has a JWS compact serialization's shape.
func looksLikeJWT(s string) bool { return strings.Count(s, ".") == 2 && !strings.ContainsAny(s, " \t") }
