package modelproxy

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"strconv"
	"strings"
	"time"

	"github.com/agentd/agentd/store"
)

// tokenPrefix starts every token, so one is recognisable in a leak report
// (and anything else is refused without a store lookup).
const tokenPrefix = "agentd-mp-"

// ErrNotListening: Issue was called before the proxy listens anywhere.
var ErrNotListening = errors.New("model proxy: not listening")

func newToken() (string, error) {
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", err
	}
	return tokenPrefix + base64.RawURLEncoding.EncodeToString(b[:]), nil
}

// hashToken is what is stored of a token.
func hashToken(t string) string {
	h := sha256.Sum256([]byte(t))
	return hex.EncodeToString(h[:])
}

// Issue gives a session's environment its model credentials: for each
// proxied provider whose key in env is the server's (a profile may bring
// its own key or endpoint, which then stays as it is), the key becomes a
// new token of the session and the base URL the proxy's. BudgetVar is
// read and removed. env is not modified; the returned map is env's
// replacement. Each call mints a new token (only hashes are kept, so an
// old one cannot be handed out again); all of them stay valid until
// Revoke.
func (p *Proxy) Issue(ctx context.Context, sessionID string, env map[string]string) (map[string]string, error) {
	out := maps.Clone(env)
	if out == nil {
		out = map[string]string{}
	}
	budget := p.cfg.Budget
	if v, ok := out[BudgetVar]; ok {
		delete(out, BudgetVar)
		n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
		if err != nil || n < 0 {
			return nil, fmt.Errorf("model proxy: profile variable %s=%q: want a non-negative number of tokens", BudgetVar, v)
		}
		if n > 0 && (budget == 0 || n < budget) {
			budget = n
		}
	}
	var proxied []providerSpec
	for _, s := range providerSpecs {
		up, ok := p.cfg.Upstreams[s.name]
		if !ok || out[s.keyVar] != up.Key {
			continue
		}
		if u := out[s.urlVar]; u != "" && u != up.BaseURL {
			continue
		}
		proxied = append(proxied, s)
	}
	if len(proxied) == 0 {
		return out, nil
	}
	p.mu.Lock()
	base := p.baseURL
	p.mu.Unlock()
	if base == "" {
		return nil, ErrNotListening
	}
	token, err := newToken()
	if err != nil {
		return nil, fmt.Errorf("model proxy: mint token: %w", err)
	}
	h := hashToken(token)
	if p.cfg.Tokens != nil {
		err := p.cfg.Tokens.SaveModelToken(ctx, store.ModelToken{Hash: h, SessionID: sessionID, Budget: budget, CreatedAt: time.Now().UTC()})
		if err != nil {
			return nil, fmt.Errorf("model proxy: save token: %w", err)
		}
	}
	p.mu.Lock()
	p.tokens[h] = tokenEntry{sessionID: sessionID, budget: budget}
	p.mu.Unlock()
	p.account(ctx, sessionID).setBudget(budget, true)
	for _, s := range proxied {
		out[s.keyVar] = token
		out[s.urlVar] = base + "/" + string(s.name)
	}
	p.log.Info("model token issued", "session", sessionID, "providers", len(proxied), "budget", budget)
	return out, nil
}

// Revoke invalidates every token of the session; its usage count stays
// (the budget is the session's, across environments).
func (p *Proxy) Revoke(ctx context.Context, sessionID string) error {
	p.lookupMu.Lock()
	defer p.lookupMu.Unlock()
	p.mu.Lock()
	for h, e := range p.tokens {
		if e.sessionID == sessionID {
			delete(p.tokens, h)
		}
	}
	p.mu.Unlock()
	if p.cfg.Tokens != nil {
		if err := p.cfg.Tokens.DeleteModelTokens(ctx, sessionID); err != nil {
			return fmt.Errorf("model proxy: revoke tokens: %w", err)
		}
	}
	return nil
}
