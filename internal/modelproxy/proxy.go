// Package modelproxy keeps the server's model-API keys out of sandboxes.
// Each session's environment gets the proxy's address as its
// ANTHROPIC_BASE_URL / OPENAI_BASE_URL / GOOGLE_GEMINI_BASE_URL and a
// per-session token as its ANTHROPIC_API_KEY / OPENAI_API_KEY /
// GEMINI_API_KEY. The proxy checks the token, puts in the real key and
// forwards the request to the real upstream, streaming the answer back as
// it arrives. On the way it counts the tokens each answer reports: that
// count is the authority for the session's token budget, and every request
// is an audit record.
//
// Paths: /anthropic/…, /openai/…, /gemini/… (the rest is appended to the
// provider's upstream base URL). The proxy listens on loopback TCP (local
// and executor sandboxes) and, for sandboxes without a network (bwrap), on
// a Unix socket they forward to (see Forwarder).
package modelproxy

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/agentd/agentd/conversation"
	"github.com/agentd/agentd/store"
)

// BudgetVar is the profile environment variable that sets a session's
// token budget (the smaller of it and the server's wins). The server reads
// it; it is not passed into the sandbox.
const BudgetVar = "AGENTD_SESSION_TOKEN_BUDGET"

// Recorder receives audit records (audit.Recorder).
type Recorder interface {
	Record(store.AuditRecord)
}

// UsageSource sums the usage recorded for a session before this process
// started (store.AuditStore), so a budget survives a restart.
type UsageSource interface {
	AuditUsage(ctx context.Context, sessionID string) (conversation.Usage, error)
}

// Config configures a Proxy.
type Config struct {
	// Upstreams are the proxied providers (UpstreamsFromEnv); a provider
	// without one is left alone: its variables reach sandboxes unchanged.
	Upstreams map[Provider]Upstream
	// Tokens keeps token hashes across restarts; nil keeps them in memory.
	Tokens store.ModelTokenStore
	// Usage supplies the usage counted before a restart; nil starts at 0.
	Usage UsageSource
	// Audit receives one record per proxied request; nil records nothing.
	Audit Recorder
	// Budget is the per-session token budget (input + output + cache
	// tokens, over the session's life); 0 means none.
	Budget int64
	// OnBudgetExceeded is called (and waited for, up to ctx) when a request
	// of a session over its budget is refused, before the refusal is sent.
	OnBudgetExceeded func(ctx context.Context, sessionID string, used, budget int64)
	// Actor names the principal of a session's running turn, for audit
	// records.
	Actor func(sessionID string) string
	// Secret derives the tokens of session sockets (ServeSession); keep it
	// across restarts (default: random, so recovered environments get new
	// tokens their running agents do not have).
	Secret []byte
	// Transport reaches the upstreams (default: a clone of
	// http.DefaultTransport).
	Transport http.RoundTripper
	// Owners, when set, gives each request its session owner's own key
	// (else the tenant's, else the server's) and checks and counts the
	// owner's and tenant's budgets (owners.go).
	Owners Owners
	// OnOwnerBudget is called (and waited for, up to ctx) when a request is
	// refused by its owner's or tenant's budget, before the refusal is sent.
	OnOwnerBudget func(ctx context.Context, sessionID string, err error)
	// Metrics receives the proxy's counters when set.
	Metrics *Metrics
	Logger  *slog.Logger
}

// Proxy is the model-API proxy. Its methods are safe for concurrent use.
type Proxy struct {
	cfg     Config
	log     *slog.Logger
	proxies map[Provider]*httputil.ReverseProxy
	secret  []byte

	mu       sync.Mutex // guards accounts, tokens, baseURL, port, servers, closed
	accounts map[string]*account
	tokens   map[string]tokenEntry // by hash: issued or looked up
	baseURL  string
	port     int
	servers  []*http.Server
	sockets  map[string]*http.Server // by session: ServeSession
	closed   bool
	serveWG  sync.WaitGroup
	inflight atomic.Int64 // ServeHTTP calls running

	lookupMu sync.Mutex // serialises store lookups with Revoke, so a revoked token is not cached again
}

type tokenEntry struct {
	sessionID string
	budget    int64
}

// account is a session's usage as the proxy counted it.
type account struct {
	mu     sync.Mutex
	loaded bool
	usage  conversation.Usage
	budget int64
	known  bool // budget came from a token (else the server's default applies)
}

// New returns a Proxy; it serves nothing until Listen… or Handler is used.
func New(cfg Config) (*Proxy, error) {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Transport == nil {
		t := http.DefaultTransport.(*http.Transport).Clone()
		// A model may think a long time before its first byte; the agent
		// CLI decides how long to wait.
		t.ResponseHeaderTimeout = 0
		t.MaxIdleConnsPerHost = 16
		cfg.Transport = t
	}
	if cfg.Budget < 0 {
		return nil, fmt.Errorf("model proxy: negative budget %d", cfg.Budget)
	}
	p := &Proxy{
		cfg: cfg, log: cfg.Logger.With("component", "model-proxy"),
		proxies:  map[Provider]*httputil.ReverseProxy{},
		accounts: map[string]*account{},
		tokens:   map[string]tokenEntry{},
		sockets:  map[string]*http.Server{},
		secret:   cfg.Secret,
	}
	if len(p.secret) == 0 {
		p.secret = make([]byte, 32)
		if _, err := rand.Read(p.secret); err != nil {
			return nil, fmt.Errorf("model proxy: secret: %w", err)
		}
	}
	for prov, up := range cfg.Upstreams {
		if _, ok := specOf(prov); !ok {
			return nil, fmt.Errorf("model proxy: unknown provider %q", prov)
		}
		target, err := url.Parse(up.BaseURL)
		if err != nil || target.Host == "" {
			return nil, fmt.Errorf("model proxy: %s upstream %q: not a URL", prov, up.BaseURL)
		}
		if up.Key == "" && cfg.Owners == nil {
			return nil, fmt.Errorf("model proxy: %s upstream has no key", prov)
		}
		p.proxies[prov] = p.reverseProxy(prov, target, up.Key)
	}
	return p, nil
}

// Enabled reports whether any provider is proxied.
func (p *Proxy) Enabled() bool { return len(p.proxies) > 0 }

// reverseProxy forwards one provider's requests: the credential swapped,
// compression off (so the usage can be read), every write flushed at once
// (so a stream is never held back).
func (p *Proxy) reverseProxy(prov Provider, target *url.URL, key string) *httputil.ReverseProxy {
	return &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			st := stateOf(pr.In.Context())
			out := pr.Out
			out.URL.Scheme, out.URL.Host = target.Scheme, target.Host
			out.URL.Path = strings.TrimSuffix(target.Path, "/") + st.rest
			out.URL.RawPath = ""
			q := out.URL.Query()
			k := key
			if st.key != "" {
				k = st.key // the session owner's own
			}
			setAuth(out.Header, q, prov, k)
			out.URL.RawQuery = q.Encode()
			out.Host = ""
			out.Header.Set("Accept-Encoding", "identity")
		},
		FlushInterval:  -1,
		Transport:      p.cfg.Transport,
		ModifyResponse: func(resp *http.Response) error { return p.meterResponse(resp) },
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			st := stateOf(r.Context())
			if errors.Is(err, context.Canceled) && r.Context().Err() != nil {
				st.finish(p, 0, store.AuditAborted, "the client went away", nil, "")
				return
			}
			p.log.Warn("upstream request failed", "provider", prov, "session", st.session, "err", err)
			status := writeFailure(w, prov, failUpstream, "agentd model proxy: the "+string(prov)+" API could not be reached: "+err.Error())
			st.finish(p, status, store.AuditError, err.Error(), nil, "")
		},
		ErrorLog: slog.NewLogLogger(p.log.Handler(), slog.LevelDebug),
	}
}

// ServeHTTP implements http.Handler: the loopback listener, where the
// first path segment names the provider (/anthropic/v1/messages).
func (p *Proxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	prov, rest := splitPath(r.URL.Path)
	p.serve(w, r, prov, rest, "")
}

// serve proxies one request to prov's upstream path rest. bound, when set,
// is the only session whose token is accepted (a session's own socket).
func (p *Proxy) serve(w http.ResponseWriter, r *http.Request, prov Provider, rest, bound string) {
	p.inflight.Add(1)
	defer p.inflight.Add(-1)
	start := time.Now()
	rp, ok := p.proxies[prov]
	if !ok {
		status := writeFailure(w, prov, failNotFound, "agentd model proxy: no proxied provider at "+r.URL.Path)
		p.cfg.Metrics.request(prov, status)
		return
	}
	if (rest == "" || rest == "/") && (r.Method == http.MethodHead || r.Method == http.MethodGet) {
		// Reachability probe of the base URL (Claude Code sends HEAD /).
		w.WriteHeader(http.StatusOK)
		return
	}
	token := tokenFrom(r)
	sess, ok := p.lookup(r.Context(), token)
	if ok && bound != "" && sess != bound {
		ok = false
	}
	if !ok {
		p.log.Warn("request with an unknown model token refused", "provider", prov, "method", r.Method, "path", rest, "remote", r.RemoteAddr, "socketOf", bound)
		status := writeFailure(w, prov, failUnauthorized, "agentd model proxy: missing or unknown session token")
		p.cfg.Metrics.request(prov, status)
		p.cfg.Metrics.refused(prov, "unauthorized")
		return
	}
	st := &reqState{session: sess, prov: prov, rest: rest, method: r.Method, start: start}
	if r.Header.Get("Upgrade") != "" {
		status := writeFailure(w, prov, failUpgrade, "agentd model proxy: WebSocket is not proxied; use HTTP")
		st.finish(p, status, store.AuditRefused, "websocket upgrade refused", nil, "")
		return
	}
	acct := p.account(r.Context(), sess)
	if used, budget, over := acct.over(p.cfg.Budget); over && r.Method != http.MethodGet && r.Method != http.MethodHead {
		msg := fmt.Sprintf("agentd: this session's model token budget is used up (%d of %d tokens)", used, budget)
		p.cfg.Metrics.refused(prov, "budget")
		if f := p.cfg.OnBudgetExceeded; f != nil {
			ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), 10*time.Second)
			f(ctx, sess, used, budget)
			cancel()
		}
		status := writeFailure(w, prov, failBudget, msg)
		st.finish(p, status, store.AuditRefused, msg, nil, "")
		return
	}
	if err := p.ownerKey(r.Context(), st, p.cfg.Upstreams[prov].Key); err != nil {
		msg := "agentd model proxy: no " + string(prov) + " key for this session's user: store one (PUT /api/keys/user/<you>/" + string(prov) + ")"
		if !errors.Is(err, errNoKey) {
			p.log.Error("resolve the session owner's key", "session", sess, "err", err)
			msg = "agentd model proxy: the session owner's key could not be read"
		}
		status := writeFailure(w, prov, failUnauthorized, msg)
		st.finish(p, status, store.AuditRefused, msg, nil, "")
		return
	}
	if o := p.cfg.Owners; o != nil && st.owner != "" && r.Method != http.MethodGet && r.Method != http.MethodHead {
		if err := o.CheckBudget(r.Context(), st.owner, st.tenant); err != nil {
			p.cfg.Metrics.refused(prov, "budget")
			if f := p.cfg.OnOwnerBudget; f != nil {
				ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), 10*time.Second)
				f(ctx, sess, err)
				cancel()
			}
			msg := "agentd: " + err.Error()
			status := writeFailure(w, prov, failBudget, msg)
			st.finish(p, status, store.AuditRefused, msg, nil, "")
			return
		}
	}
	if r.Body != nil && r.Body != http.NoBody {
		st.in = &countingReader{rc: r.Body, size: r.ContentLength}
		r.Body = st.in
	}
	rp.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), stateKey{}, st)))
}

// splitPath splits /<provider>/rest.
func splitPath(p string) (Provider, string) {
	p = strings.TrimPrefix(p, "/")
	name, rest, _ := strings.Cut(p, "/")
	return Provider(name), "/" + rest
}

// lookup returns the session a token belongs to.
func (p *Proxy) lookup(ctx context.Context, token string) (string, bool) {
	if token == "" || !strings.HasPrefix(token, tokenPrefix) {
		return "", false
	}
	h := hashToken(token)
	p.mu.Lock()
	e, ok := p.tokens[h]
	p.mu.Unlock()
	if ok {
		return e.sessionID, true
	}
	if p.cfg.Tokens == nil {
		return "", false
	}
	p.lookupMu.Lock()
	defer p.lookupMu.Unlock()
	t, err := p.cfg.Tokens.LookupModelToken(ctx, h)
	if err != nil {
		if !errors.Is(err, store.ErrNotFound) {
			p.log.Error("look up model token", "err", err)
		}
		return "", false
	}
	p.mu.Lock()
	p.tokens[h] = tokenEntry{sessionID: t.SessionID, budget: t.Budget}
	p.mu.Unlock()
	p.account(ctx, t.SessionID).setBudget(t.Budget, false)
	return t.SessionID, true
}

// account returns a session's account, loading what the store counted
// before this process started on first use.
func (p *Proxy) account(ctx context.Context, sessionID string) *account {
	p.mu.Lock()
	a, ok := p.accounts[sessionID]
	if !ok {
		a = &account{}
		p.accounts[sessionID] = a
	}
	p.mu.Unlock()
	a.mu.Lock()
	defer a.mu.Unlock()
	if !a.loaded && p.cfg.Usage != nil {
		u, err := p.cfg.Usage.AuditUsage(ctx, sessionID)
		if err != nil {
			p.log.Error("load the session's counted usage", "session", sessionID, "err", err)
			return a // try again next time
		}
		a.usage = a.usage.Add(u)
	}
	a.loaded = true
	return a
}

// setBudget records the budget a token carries; a lookup (force false)
// does not override one set by Issue.
func (a *account) setBudget(b int64, force bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if force || !a.known {
		a.budget, a.known = b, true
	}
}

func (a *account) add(u conversation.Usage) {
	a.mu.Lock()
	a.usage = a.usage.Add(u)
	a.mu.Unlock()
}

// over reports whether the account has used its budget up.
func (a *account) over(def int64) (used, budget int64, over bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	budget = def
	if a.known {
		budget = a.budget
	}
	used = total(a.usage)
	return used, budget, budget > 0 && used >= budget
}

// SessionUsage returns the usage the proxy counted for a session (across
// restarts, when a UsageSource is set) and its budget (0: none).
func (p *Proxy) SessionUsage(ctx context.Context, sessionID string) (conversation.Usage, int64) {
	a := p.account(ctx, sessionID)
	a.mu.Lock()
	defer a.mu.Unlock()
	b := p.cfg.Budget
	if a.known {
		b = a.budget
	}
	return a.usage, b
}
