package modelproxy

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/agentd/agentd/store"
)

// ServeSession serves one session on a Unix socket of its own at
// socketPath, for sandboxes without a network (the executor sandbox relays
// a loopback port inside the environment to it; see its ModelProxy
// option). Requests there use the providers' own paths (/v1/messages,
// /v1/responses, /v1beta/models/…) and must carry the returned token,
// which is accepted on this socket only for this session.
//
// The token is derived from the server's secret, the session and the
// path, so a server restarted with the same secret returns the same token
// for a recovered environment (agents started before the restart keep
// using it) while only its hash is stored. It stays valid until Revoke.
func (p *Proxy) ServeSession(ctx context.Context, sessionID, socketPath string) (string, error) {
	if len(socketPath) > 107 {
		return "", fmt.Errorf("model proxy: socket path %s is longer than 107 bytes", socketPath)
	}
	token := p.socketToken(sessionID, socketPath)
	h := hashToken(token)
	acct := p.account(ctx, sessionID)
	_, budget, _ := acct.over(p.cfg.Budget)
	if p.cfg.Tokens != nil {
		err := p.cfg.Tokens.SaveModelToken(ctx, store.ModelToken{Hash: h, SessionID: sessionID, Budget: budget, CreatedAt: time.Now().UTC()})
		if err != nil && !errors.Is(err, store.ErrExists) {
			return "", fmt.Errorf("model proxy: save token: %w", err)
		}
	}
	_ = os.Remove(socketPath)
	ln, err := net.Listen("unix", socketPath)
	if err != nil {
		return "", fmt.Errorf("model proxy: listen: %w", err)
	}
	hs, err := p.listen(ln, sessionHandler{p: p, session: sessionID})
	if err != nil {
		return "", err
	}
	p.mu.Lock()
	p.tokens[h] = tokenEntry{sessionID: sessionID, budget: budget}
	old := p.sockets[sessionID]
	p.sockets[sessionID] = hs
	p.mu.Unlock()
	if old != nil {
		_ = old.Close()
	}
	p.log.Info("model proxy serving a session socket", "session", sessionID, "socket", socketPath)
	return token, nil
}

// StopSession closes the session's socket (its environment is gone; the
// token goes with Revoke).
func (p *Proxy) StopSession(sessionID string) {
	p.mu.Lock()
	hs := p.sockets[sessionID]
	delete(p.sockets, sessionID)
	for i, s := range p.servers {
		if s == hs {
			p.servers = append(p.servers[:i], p.servers[i+1:]...)
			break
		}
	}
	p.mu.Unlock()
	if hs != nil {
		_ = hs.Close()
	}
}

// socketToken is the token of a session's socket: an HMAC of the session
// and the path under the server's secret.
func (p *Proxy) socketToken(sessionID, socketPath string) string {
	m := hmac.New(sha256.New, p.secret)
	m.Write([]byte(sessionID))
	m.Write([]byte{0})
	m.Write([]byte(socketPath))
	return tokenPrefix + base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

// sessionHandler serves a session's socket.
type sessionHandler struct {
	p       *Proxy
	session string
}

func (h sessionHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path == "/" && (r.Method == http.MethodHead || r.Method == http.MethodGet) {
		w.WriteHeader(http.StatusOK) // the base URL's reachability probe
		return
	}
	prov, rest := routeNative(r)
	h.p.serve(w, r, prov, rest, h.session)
}

// routeNative finds the provider of a request made to the providers' own
// paths: Gemini's /v1beta (and /v1alpha), Anthropic's /v1/messages and
// /v1/complete, OpenAI's other /v1 paths (its base URL ends in /v1, which
// the upstream's base URL already has). /v1/models is Anthropic's when the
// request has Anthropic's headers, Gemini's with a Gemini key, else
// OpenAI's.
func routeNative(r *http.Request) (Provider, string) {
	path := r.URL.Path
	switch {
	case strings.HasPrefix(path, "/v1beta/"), strings.HasPrefix(path, "/v1alpha/"):
		return Gemini, path
	case path == "/v1/messages", strings.HasPrefix(path, "/v1/messages/"), path == "/v1/complete":
		return Anthropic, path
	case path == "/v1/models" || strings.HasPrefix(path, "/v1/models/"):
		switch {
		case r.Header.Get("anthropic-version") != "" || r.Header.Get("x-api-key") != "":
			return Anthropic, path
		case r.Header.Get("x-goog-api-key") != "" || r.URL.Query().Get("key") != "":
			return Gemini, path
		}
		return OpenAI, strings.TrimPrefix(path, "/v1")
	case strings.HasPrefix(path, "/v1/"):
		return OpenAI, strings.TrimPrefix(path, "/v1")
	}
	return "", path
}
