package modelproxy_test

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/agentd/agentd/conversation"
	"github.com/agentd/agentd/internal/audit"
	"github.com/agentd/agentd/internal/mockllm"
	"github.com/agentd/agentd/internal/modelproxy"
	"github.com/agentd/agentd/store"
	"github.com/agentd/agentd/store/memstore"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		// Idle keep-alive connections of test clients wind down after the
		// test servers close.
		goleak.IgnoreTopFunction("net/http.(*persistConn).readLoop"),
		goleak.IgnoreTopFunction("net/http.(*persistConn).writeLoop"),
	)
}

const script = `
rules:
  - name: slow
    match: {userContains: "slow"}
    reply: {chunkSize: 3, delayMs: 60, text: "one two three four five six seven eight", usage: {inputTokens: 100, outputTokens: 20}}
  - name: hello
    match: {userContains: "hello"}
    reply: {text: "Hello there", usage: {inputTokens: 100, outputTokens: 20}}
default: {text: "no rule", usage: {inputTokens: 1, outputTokens: 1}}
`

// Real keys the server has; nothing but the upstream may ever see them.
const (
	anthropicKey = "sk-ant-REAL-anthropic-key-0123456789"
	openaiKey    = "sk-REAL-openai-key-0123456789"
	geminiKey    = "AIza-REAL-gemini-key-0123456789"
)

// upstream is mock-llm behind a recorder of what reached it.
type upstream struct {
	mock *mockllm.Server
	url  string

	mu   sync.Mutex
	seen []seenRequest
}

type seenRequest struct {
	path, query string
	header      http.Header
	ended       time.Time // when mock-llm finished the answer
}

func newUpstream(t *testing.T) *upstream {
	t.Helper()
	sc, err := mockllm.Parse([]byte(script))
	if err != nil {
		t.Fatal(err)
	}
	u := &upstream{mock: mockllm.New(sc, mockllm.WithLogger(slog.New(slog.DiscardHandler)))}
	h := u.mock.Handler()
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.ServeHTTP(w, r)
		u.mu.Lock()
		u.seen = append(u.seen, seenRequest{path: r.URL.Path, query: r.URL.RawQuery, header: r.Header.Clone(), ended: time.Now()})
		u.mu.Unlock()
	}))
	t.Cleanup(ts.Close)
	u.url = ts.URL
	return u
}

func (u *upstream) requests() []seenRequest {
	u.mu.Lock()
	defer u.mu.Unlock()
	return append([]seenRequest(nil), u.seen...)
}

type fixture struct {
	t     *testing.T
	up    *upstream
	p     *modelproxy.Proxy
	st    *memstore.Store
	rec   *audit.Recorder
	env   map[string]string // what the sandbox gets
	token string

	mu       sync.Mutex
	exceeded []string
}

func serverEnv(upURL string) map[string]string {
	return map[string]string{
		"ANTHROPIC_API_KEY": anthropicKey, "ANTHROPIC_BASE_URL": upURL,
		"OPENAI_API_KEY": openaiKey, "OPENAI_BASE_URL": upURL + "/v1",
		"GEMINI_API_KEY": geminiKey, "GOOGLE_GEMINI_BASE_URL": upURL,
		"OTHER": "kept",
	}
}

// newFixture starts mock-llm, a proxy in front of it (tokens and audit in
// a memstore) and issues a token for session s1.
func newFixture(t *testing.T, budget int64, mod func(*modelproxy.Config)) *fixture {
	t.Helper()
	f := &fixture{t: t, up: newUpstream(t), st: memstore.New()}
	for _, id := range []string{"s1", "s2"} {
		if err := f.st.CreateSession(context.Background(), store.Session{ID: id}); err != nil {
			t.Fatal(err)
		}
	}
	f.rec = audit.New(audit.Options{Store: f.st, Interval: time.Millisecond, Logger: slog.New(slog.DiscardHandler)})
	ups, err := modelproxy.UpstreamsFromEnv(serverEnv(f.up.url))
	if err != nil {
		t.Fatal(err)
	}
	cfg := modelproxy.Config{
		Upstreams: ups, Tokens: f.st, Usage: f.st, Audit: f.rec, Budget: budget,
		OnBudgetExceeded: func(ctx context.Context, id string, used, budget int64) {
			f.mu.Lock()
			f.exceeded = append(f.exceeded, id)
			f.mu.Unlock()
		},
		Actor:  func(string) string { return "alice" },
		Logger: slog.New(slog.DiscardHandler),
	}
	if mod != nil {
		mod(&cfg)
	}
	f.p, err = modelproxy.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.p.ListenTCP("127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := f.p.Close(ctx); err != nil {
			t.Errorf("close proxy: %v", err)
		}
		f.rec.Close(ctx)
	})
	f.env, err = f.p.Issue(context.Background(), "s1", serverEnv(f.up.url))
	if err != nil {
		t.Fatal(err)
	}
	f.token = f.env["ANTHROPIC_API_KEY"]
	return f
}

// call is one request as an SDK would make it: to the URL the sandbox was
// given, with the key where that provider's SDK puts it.
type call struct {
	name      string
	provider  string
	urlVar    string
	path      string
	body      string
	auth      func(r *http.Request, token string)
	keyHeader string // where the real key must arrive upstream
	keyValue  string
	wantText  string // a piece of the streamed answer
	deltaMark string // marks a streamed delta
}

var calls = []call{
	{
		name: "anthropic messages stream", provider: "anthropic", urlVar: "ANTHROPIC_BASE_URL", path: "/v1/messages?beta=true",
		body: `{"model":"claude-x","max_tokens":100,"stream":true,"messages":[{"role":"user","content":"say hello"}]}`,
		auth: func(r *http.Request, tok string) {
			r.Header.Set("x-api-key", tok)
			r.Header.Set("anthropic-version", "2023-06-01")
		},
		keyHeader: "X-Api-Key", keyValue: anthropicKey, wantText: "Hello", deltaMark: "content_block_delta",
	},
	{
		name: "openai responses stream", provider: "openai", urlVar: "OPENAI_BASE_URL", path: "/responses",
		body:      `{"model":"gpt-5.5","stream":true,"input":[{"role":"user","content":"say hello"}]}`,
		auth:      func(r *http.Request, tok string) { r.Header.Set("Authorization", "Bearer "+tok) },
		keyHeader: "Authorization", keyValue: "Bearer " + openaiKey, wantText: "Hello", deltaMark: "output_text.delta",
	},
	{
		name: "openai chat stream", provider: "openai", urlVar: "OPENAI_BASE_URL", path: "/chat/completions",
		body:      `{"model":"gpt-5.5","stream":true,"stream_options":{"include_usage":true},"messages":[{"role":"user","content":"say hello"}]}`,
		auth:      func(r *http.Request, tok string) { r.Header.Set("Authorization", "Bearer "+tok) },
		keyHeader: "Authorization", keyValue: "Bearer " + openaiKey, wantText: "Hello",
	},
	{
		name: "openai chat", provider: "openai", urlVar: "OPENAI_BASE_URL", path: "/chat/completions",
		body:      `{"model":"gpt-5.5","messages":[{"role":"user","content":"say hello"}]}`,
		auth:      func(r *http.Request, tok string) { r.Header.Set("Authorization", "Bearer "+tok) },
		keyHeader: "Authorization", keyValue: "Bearer " + openaiKey, wantText: "Hello",
	},
	{
		name: "gemini sse, key header", provider: "gemini", urlVar: "GOOGLE_GEMINI_BASE_URL", path: "/v1beta/models/gemini-2.5-flash:streamGenerateContent?alt=sse",
		body:      `{"contents":[{"role":"user","parts":[{"text":"say hello"}]}]}`,
		auth:      func(r *http.Request, tok string) { r.Header.Set("x-goog-api-key", tok) },
		keyHeader: "X-Goog-Api-Key", keyValue: geminiKey, wantText: "Hello", deltaMark: `"text"`,
	},
	{
		name: "gemini json array, key in query", provider: "gemini", urlVar: "GOOGLE_GEMINI_BASE_URL", path: "/v1beta/models/gemini-2.5-flash:streamGenerateContent?key=TOKEN",
		body: `{"contents":[{"role":"user","parts":[{"text":"say hello"}]}]}`,
		auth: func(r *http.Request, tok string) {
			r.URL.RawQuery = strings.ReplaceAll(r.URL.RawQuery, "TOKEN", tok)
		},
		keyHeader: "X-Goog-Api-Key", keyValue: geminiKey, wantText: "Hello",
	},
}

func (f *fixture) do(c call, token string) (*http.Response, []byte) {
	f.t.Helper()
	req, err := http.NewRequest("POST", f.env[c.urlVar]+c.path, strings.NewReader(c.body))
	if err != nil {
		f.t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	c.auth(req, token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		f.t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		f.t.Fatal(err)
	}
	return resp, body
}

// audit waits for n records of s1 and returns them.
func (f *fixture) audit(n int) []store.AuditRecord {
	f.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		recs, err := f.st.ReadAudit(context.Background(), "s1", 0, 0)
		if err != nil {
			f.t.Fatal(err)
		}
		if len(recs) >= n || time.Now().After(deadline) {
			if len(recs) < n {
				f.t.Fatalf("%d audit records, want %d", len(recs), n)
			}
			return recs
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestIssueReplacesKeysAndURLs(t *testing.T) {
	f := newFixture(t, 0, nil)
	base := f.p.BaseURL()
	if !strings.HasPrefix(f.token, "agentd-mp-") || len(f.token) < 40 {
		t.Fatalf("token %q", f.token)
	}
	want := map[string]string{
		"ANTHROPIC_API_KEY": f.token, "OPENAI_API_KEY": f.token, "GEMINI_API_KEY": f.token,
		"ANTHROPIC_BASE_URL": base + "/anthropic", "OPENAI_BASE_URL": base + "/openai", "GOOGLE_GEMINI_BASE_URL": base + "/gemini",
		"OTHER": "kept",
	}
	for k, v := range want {
		if f.env[k] != v {
			t.Errorf("%s = %q, want %q", k, f.env[k], v)
		}
	}
	for k, v := range f.env {
		for _, key := range []string{anthropicKey, openaiKey, geminiKey} {
			if strings.Contains(v, key) {
				t.Errorf("%s carries a real key", k)
			}
		}
	}
	// Only the token's hash is stored.
	sum := sha256.Sum256([]byte(f.token))
	if tok, err := f.st.LookupModelToken(context.Background(), hex.EncodeToString(sum[:])); err != nil || tok.SessionID != "s1" {
		t.Fatalf("stored token by hash: %+v, %v", tok, err)
	}
	if _, err := f.st.LookupModelToken(context.Background(), f.token); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("the token itself is a key in the store: %v", err)
	}
	// Another issue mints another token; both work.
	env2, err := f.p.Issue(context.Background(), "s1", serverEnv(f.up.url))
	if err != nil || env2["ANTHROPIC_API_KEY"] == f.token {
		t.Fatalf("second Issue = %v, %v: want a new token", env2["ANTHROPIC_API_KEY"], err)
	}
	for _, tok := range []string{f.token, env2["ANTHROPIC_API_KEY"]} {
		if resp, body := f.do(calls[0], tok); resp.StatusCode != 200 {
			t.Fatalf("token %d…: %d %s", len(tok), resp.StatusCode, body)
		}
	}
}

func TestProfileKeysAndBudgetVariable(t *testing.T) {
	f := newFixture(t, 1000, nil)
	env := serverEnv(f.up.url)
	env["ANTHROPIC_API_KEY"] = "sk-profile-own-key"       // the profile's own key: left alone
	env["OPENAI_BASE_URL"] = "https://gateway.example/v1" // the profile's own endpoint: left alone
	env[modelproxy.BudgetVar] = "300"
	out, err := f.p.Issue(context.Background(), "s2", env)
	if err != nil {
		t.Fatal(err)
	}
	if out["ANTHROPIC_API_KEY"] != "sk-profile-own-key" || out["ANTHROPIC_BASE_URL"] != f.up.url {
		t.Errorf("a profile's own Anthropic key was replaced: %q %q", out["ANTHROPIC_API_KEY"], out["ANTHROPIC_BASE_URL"])
	}
	if out["OPENAI_API_KEY"] != openaiKey || out["OPENAI_BASE_URL"] != "https://gateway.example/v1" {
		t.Errorf("a profile's own OpenAI endpoint was proxied: %q", out["OPENAI_BASE_URL"])
	}
	if !strings.HasPrefix(out["GEMINI_API_KEY"], "agentd-mp-") {
		t.Errorf("gemini not proxied: %q", out["GEMINI_API_KEY"])
	}
	if _, ok := out[modelproxy.BudgetVar]; ok {
		t.Error("the budget variable reached the sandbox")
	}
	if env[modelproxy.BudgetVar] != "300" || env["GEMINI_API_KEY"] != geminiKey {
		t.Error("Issue modified its argument")
	}
	if _, b := f.p.SessionUsage(context.Background(), "s2"); b != 300 {
		t.Errorf("budget %d, want the profile's 300 (below the server's 1000)", b)
	}
	env[modelproxy.BudgetVar] = "5000"
	if _, err := f.p.Issue(context.Background(), "s2", env); err != nil {
		t.Fatal(err)
	}
	if _, b := f.p.SessionUsage(context.Background(), "s2"); b != 1000 {
		t.Errorf("budget %d, want the server's 1000 (a profile cannot raise it)", b)
	}
	for _, bad := range []string{"lots", "-5", "1e9"} {
		env[modelproxy.BudgetVar] = bad
		if _, err := f.p.Issue(context.Background(), "s2", env); err == nil || !strings.Contains(err.Error(), modelproxy.BudgetVar) {
			t.Errorf("budget %q: err %v, want one naming the variable", bad, err)
		}
	}
	// No key the server has: nothing to proxy, no token.
	plain, err := f.p.Issue(context.Background(), "s2", map[string]string{"PATH": "/bin"})
	if err != nil || len(plain) != 1 || plain["PATH"] != "/bin" {
		t.Fatalf("Issue without provider keys = %v, %v", plain, err)
	}
}

func TestIssueBeforeListening(t *testing.T) {
	p, err := modelproxy.New(modelproxy.Config{Upstreams: map[modelproxy.Provider]modelproxy.Upstream{modelproxy.Anthropic: {BaseURL: "http://127.0.0.1:1", Key: "k"}}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.Issue(context.Background(), "s1", map[string]string{"ANTHROPIC_API_KEY": "k"}); !errors.Is(err, modelproxy.ErrNotListening) {
		t.Fatalf("Issue before Listen = %v, want ErrNotListening", err)
	}
}

func TestNewRejectsBadConfig(t *testing.T) {
	for name, cfg := range map[string]modelproxy.Config{
		"unknown provider": {Upstreams: map[modelproxy.Provider]modelproxy.Upstream{"acme": {BaseURL: "http://x", Key: "k"}}},
		"no key":           {Upstreams: map[modelproxy.Provider]modelproxy.Upstream{modelproxy.OpenAI: {BaseURL: "http://x"}}},
		"bad url":          {Upstreams: map[modelproxy.Provider]modelproxy.Upstream{modelproxy.OpenAI: {BaseURL: "::", Key: "k"}}},
		"negative budget":  {Budget: -1},
	} {
		if _, err := modelproxy.New(cfg); err == nil {
			t.Errorf("%s: New accepted it", name)
		}
	}
	if _, err := modelproxy.UpstreamsFromEnv(map[string]string{"OPENAI_API_KEY": "k", "OPENAI_BASE_URL": "ftp://x"}); err == nil {
		t.Error("UpstreamsFromEnv accepted an ftp URL")
	}
	ups, err := modelproxy.UpstreamsFromEnv(map[string]string{"GEMINI_API_KEY": "g", "ANTHROPIC_BASE_URL": "http://no-key"})
	if err != nil || len(ups) != 1 || ups[modelproxy.Gemini].BaseURL != "https://generativelanguage.googleapis.com" {
		t.Fatalf("UpstreamsFromEnv = %v, %v: want gemini only, at its public endpoint", ups, err)
	}
}

func TestForwardsWithTheRealKey(t *testing.T) {
	f := newFixture(t, 0, nil)
	for i, c := range calls {
		t.Run(c.name, func(t *testing.T) {
			resp, body := f.do(c, f.token)
			if resp.StatusCode != 200 || !strings.Contains(string(body), c.wantText) {
				t.Fatalf("status %d, body %.300s", resp.StatusCode, body)
			}
			seen := f.up.requests()
			if len(seen) != i+1 {
				t.Fatalf("upstream saw %d requests, want %d", len(seen), i+1)
			}
			got := seen[i]
			if got.header.Get(c.keyHeader) != c.keyValue {
				t.Errorf("upstream %s = %q, want the real key", c.keyHeader, got.header.Get(c.keyHeader))
			}
			for name, vs := range got.header {
				for _, v := range vs {
					if strings.Contains(v, f.token) {
						t.Errorf("the session token reached the upstream in %s", name)
					}
				}
			}
			if strings.Contains(got.query, f.token) || strings.Contains(got.query, "key=") {
				t.Errorf("upstream query %q carries a key", got.query)
			}
			for _, other := range []string{"X-Api-Key", "Authorization", "X-Goog-Api-Key"} {
				if other != c.keyHeader && got.header.Get(other) != "" {
					t.Errorf("upstream got a stray %s", other)
				}
			}
		})
	}
	// A request is counted once its answer's body ended, which the client
	// may see first; its audit record comes after its usage: wait for those.
	recs := f.audit(len(calls))
	// Each answer reported 100 in, 20 out.
	u, _ := f.p.SessionUsage(context.Background(), "s1")
	n := int64(len(calls))
	if u != (conversation.Usage{InputTokens: 100 * n, OutputTokens: 20 * n}) {
		t.Fatalf("counted usage %+v, want %d in / %d out", u, 100*n, 20*n)
	}
	for i, r := range recs {
		c := calls[i]
		path, _, _ := strings.Cut(c.path, "?")
		if r.Kind != store.AuditModel || r.Method != "POST" || r.Path != path || r.Provider != c.provider || r.Status != 200 ||
			r.Outcome != store.AuditOK || r.Actor != "alice" || r.BytesIn != int64(len(c.body)) || r.BytesOut == 0 ||
			r.Usage == nil || r.Usage.InputTokens != 100 || r.Usage.OutputTokens != 20 || r.Model == "" {
			t.Errorf("audit record %d (%s) = %+v", i, c.name, r)
		}
	}
}

func TestWrongTokenIsRefused(t *testing.T) {
	f := newFixture(t, 0, nil)
	wantShape := map[string]func(map[string]any) bool{
		"anthropic": func(b map[string]any) bool {
			e, _ := b["error"].(map[string]any)
			return b["type"] == "error" && e["type"] == "authentication_error"
		},
		"openai": func(b map[string]any) bool {
			e, _ := b["error"].(map[string]any)
			return e["code"] == "invalid_api_key"
		},
		"gemini": func(b map[string]any) bool {
			e, _ := b["error"].(map[string]any)
			return e["status"] == "UNAUTHENTICATED" && e["code"] == float64(401)
		},
	}
	for _, tok := range []string{"agentd-mp-not-a-token", "", anthropicKey, f.token + "x"} {
		for _, c := range calls {
			resp, body := f.do(c, tok)
			var b map[string]any
			_ = json.Unmarshal(body, &b)
			if resp.StatusCode != 401 || !wantShape[c.provider](b) {
				t.Errorf("%s with token %.12q: %d %s", c.name, tok, resp.StatusCode, body)
			}
		}
	}
	if n := len(f.up.requests()); n != 0 {
		t.Fatalf("the upstream saw %d requests with wrong tokens", n)
	}
	// A revoked token is refused too.
	if err := f.p.Revoke(context.Background(), "s1"); err != nil {
		t.Fatal(err)
	}
	if resp, _ := f.do(calls[0], f.token); resp.StatusCode != 401 {
		t.Fatalf("revoked token: %d, want 401", resp.StatusCode)
	}
	if _, err := f.st.LookupModelToken(context.Background(), "x"); !errors.Is(err, store.ErrNotFound) {
		t.Fatal(err)
	}
}

func TestProbeAndUnknownPaths(t *testing.T) {
	f := newFixture(t, 0, nil)
	resp, err := http.Head(f.env["ANTHROPIC_BASE_URL"])
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("HEAD of the base URL (Claude Code's probe) = %v, %v", resp, err)
	}
	resp, err = http.Get(f.p.BaseURL() + "/acme/v1/things")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 404 {
		t.Fatalf("unknown provider: %d", resp.StatusCode)
	}
	// A WebSocket upgrade is refused, so clients use HTTP (which is counted).
	req, _ := http.NewRequest("GET", f.env["OPENAI_BASE_URL"]+"/responses", nil)
	req.Header.Set("Authorization", "Bearer "+f.token)
	req.Header.Set("Connection", "Upgrade")
	req.Header.Set("Upgrade", "websocket")
	resp, err = http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUpgradeRequired {
		t.Fatalf("websocket upgrade: %d, want 426", resp.StatusCode)
	}
}

// TestStreamIsNotBuffered: a slow scripted stream reaches the client as
// deltas while mock-llm is still sending it.
func TestStreamIsNotBuffered(t *testing.T) {
	f := newFixture(t, 0, nil)
	for _, c := range []call{calls[0], calls[1], calls[4]} {
		t.Run(c.name, func(t *testing.T) {
			c.body = strings.Replace(c.body, "say hello", "go slow", 1)
			req, _ := http.NewRequest("POST", f.env[c.urlVar]+c.path, strings.NewReader(c.body))
			c.auth(req, f.token)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			if resp.StatusCode != 200 {
				t.Fatalf("status %d", resp.StatusCode)
			}
			sc := bufio.NewScanner(resp.Body)
			var arrivals []time.Time
			for sc.Scan() {
				if strings.Contains(sc.Text(), c.deltaMark) {
					arrivals = append(arrivals, time.Now())
				}
			}
			seen := f.up.requests()
			ended := seen[len(seen)-1].ended
			if len(arrivals) < 2 {
				t.Fatalf("%d early deltas seen", len(arrivals))
			}
			// Causal, not a speed threshold: the first deltas were read
			// before mock-llm had even finished writing the answer.
			if !arrivals[0].Before(ended) {
				t.Fatalf("first delta arrived %v after the upstream finished: the proxy buffered the stream", arrivals[0].Sub(ended))
			}
		})
	}
}

func TestBudget(t *testing.T) {
	f := newFixture(t, 150, nil)
	c := calls[0]
	for i := range 2 { // 120 tokens each: under 150 before each
		if resp, body := f.do(c, f.token); resp.StatusCode != 200 {
			t.Fatalf("request %d: %d %s", i, resp.StatusCode, body)
		}
	}
	for _, c := range []call{calls[0], calls[1], calls[4]} {
		resp, body := f.do(c, f.token)
		var b map[string]any
		_ = json.Unmarshal(body, &b)
		e, _ := b["error"].(map[string]any)
		msg, _ := e["message"].(string)
		switch c.provider {
		case "anthropic":
			if resp.StatusCode != 400 || e["type"] != "invalid_request_error" {
				t.Errorf("anthropic refusal %d %s", resp.StatusCode, body)
			}
		case "openai":
			if resp.StatusCode != 429 || e["code"] != "insufficient_quota" {
				t.Errorf("openai refusal %d %s", resp.StatusCode, body)
			}
		case "gemini":
			if resp.StatusCode != 400 || e["status"] != "FAILED_PRECONDITION" {
				t.Errorf("gemini refusal %d %s", resp.StatusCode, body)
			}
		}
		if !strings.Contains(msg, "budget") || !strings.Contains(msg, "240 of 150") {
			t.Errorf("refusal message %q", msg)
		}
	}
	if n := len(f.up.requests()); n != 2 {
		t.Fatalf("upstream saw %d requests, want only the 2 under budget", n)
	}
	f.mu.Lock()
	exceeded := append([]string(nil), f.exceeded...)
	f.mu.Unlock()
	if len(exceeded) != 3 || exceeded[0] != "s1" {
		t.Fatalf("OnBudgetExceeded calls %v, want s1 once per refusal", exceeded)
	}
	recs := f.audit(5)
	if r := recs[4]; r.Outcome != store.AuditRefused || r.Status != 400 || !strings.Contains(r.Error, "budget") {
		t.Fatalf("refused request's record %+v", r)
	}
	// Another session has its own budget.
	env2, err := f.p.Issue(context.Background(), "s2", serverEnv(f.up.url))
	if err != nil {
		t.Fatal(err)
	}
	if resp, _ := f.do(c, env2["ANTHROPIC_API_KEY"]); resp.StatusCode != 200 {
		t.Fatalf("s2 refused: %d", resp.StatusCode)
	}
}

// TestRestartKeepsTokensAndCounts: a new proxy on the same store accepts
// the tokens issued before and goes on from the usage counted before.
func TestRestartKeepsTokensAndCounts(t *testing.T) {
	f := newFixture(t, 200, nil)
	if resp, _ := f.do(calls[0], f.token); resp.StatusCode != 200 {
		t.Fatal(resp.StatusCode)
	}
	f.audit(1) // stored
	ups, _ := modelproxy.UpstreamsFromEnv(serverEnv(f.up.url))
	p2, err := modelproxy.New(modelproxy.Config{Upstreams: ups, Tokens: f.st, Usage: f.st, Budget: 1_000_000, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p2.ListenTCP("127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	defer p2.Close(context.Background())
	f2 := &fixture{t: t, up: f.up, p: p2, st: f.st, env: map[string]string{}}
	for k, v := range f.env {
		f2.env[k] = strings.Replace(v, f.p.BaseURL(), p2.BaseURL(), 1)
	}
	if resp, body := f2.do(calls[0], f.token); resp.StatusCode != 200 {
		t.Fatalf("a token issued before the restart: %d %s", resp.StatusCode, body)
	}
	u, budget := p2.SessionUsage(context.Background(), "s1")
	if total := u.InputTokens + u.OutputTokens; total != 240 || budget != 200 {
		t.Fatalf("after the restart: %d tokens counted with budget %d; want 240 (120 before, 120 after) and the token's 200", total, budget)
	}
	if resp, _ := f2.do(calls[0], f.token); resp.StatusCode != 400 {
		t.Fatalf("over the carried-over budget: %d, want a refusal", resp.StatusCode)
	}
}

func TestUpstreamDown(t *testing.T) {
	f := newFixture(t, 0, func(c *modelproxy.Config) {
		c.Upstreams[modelproxy.Anthropic] = modelproxy.Upstream{BaseURL: "http://127.0.0.1:1", Key: anthropicKey}
	})
	env := serverEnv(f.up.url)
	env["ANTHROPIC_BASE_URL"] = "http://127.0.0.1:1"
	var err error
	if f.env, err = f.p.Issue(context.Background(), "s1", env); err != nil {
		t.Fatal(err)
	}
	resp, body := f.do(calls[0], f.env["ANTHROPIC_API_KEY"])
	var b map[string]any
	_ = json.Unmarshal(body, &b)
	if resp.StatusCode != 502 || b["type"] != "error" {
		t.Fatalf("unreachable upstream: %d %s", resp.StatusCode, body)
	}
	if bytes.Contains(body, []byte(anthropicKey)) {
		t.Fatal("the error message carries the key")
	}
	if r := f.audit(1)[0]; r.Outcome != store.AuditError || r.Status != 502 {
		t.Fatalf("record %+v", r)
	}
}

func TestClientGoesAwayMidStream(t *testing.T) {
	f := newFixture(t, 0, nil)
	c := calls[0]
	c.body = strings.Replace(c.body, "say hello", "go slow", 1)
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, "POST", f.env[c.urlVar]+c.path, strings.NewReader(c.body))
	c.auth(req, f.token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 64)
	if _, err := resp.Body.Read(buf); err != nil {
		t.Fatal(err)
	}
	cancel()
	resp.Body.Close()
	r := f.audit(1)[0]
	if r.Outcome != store.AuditAborted || r.Usage == nil || r.Usage.InputTokens != 100 {
		t.Fatalf("record of an abandoned stream %+v (usage %+v): want aborted, with the input counted from message_start", r, r.Usage)
	}
}

func unixClient(sock string) *http.Client {
	return &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", sock)
	}}}
}

// TestSessionSocket: a session's own socket takes the providers' native
// paths, only that session's tokens, and gives the same token to a
// restarted proxy with the same secret.
func TestSessionSocket(t *testing.T) {
	secret := []byte("0123456789abcdef0123456789abcdef")
	f := newFixture(t, 0, func(c *modelproxy.Config) { c.Secret = secret })
	dir, err := os.MkdirTemp("", "mps")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	sock := filepath.Join(dir, "model.sock")
	token, err := f.p.ServeSession(context.Background(), "s1", sock)
	if err != nil || !strings.HasPrefix(token, "agentd-mp-") {
		t.Fatalf("ServeSession = %q, %v", token, err)
	}
	client := unixClient(sock)
	defer client.CloseIdleConnections()
	do := func(method, path, body string, hdr map[string]string) (int, string) {
		req, _ := http.NewRequest(method, "http://relay"+path, strings.NewReader(body))
		for k, v := range hdr {
			req.Header.Set(k, v)
		}
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		return resp.StatusCode, string(b)
	}
	native := []struct {
		name, method, path, body, keyHeader, keyValue, upPath string
		hdr                                                   func(tok string) map[string]string
	}{
		{"anthropic", "POST", "/v1/messages?beta=true", calls[0].body, "X-Api-Key", anthropicKey, "/v1/messages",
			func(tok string) map[string]string { return map[string]string{"x-api-key": tok} }},
		{"openai", "POST", "/v1/responses", calls[1].body, "Authorization", "Bearer " + openaiKey, "/v1/responses",
			func(tok string) map[string]string { return map[string]string{"Authorization": "Bearer " + tok} }},
		{"gemini", "POST", "/v1beta/models/gemini-2.5-flash:streamGenerateContent?alt=sse", calls[4].body, "X-Goog-Api-Key", geminiKey,
			"/v1beta/models/gemini-2.5-flash:streamGenerateContent", func(tok string) map[string]string { return map[string]string{"x-goog-api-key": tok} }},
		{"anthropic models", "GET", "/v1/models", "", "X-Api-Key", anthropicKey, "/v1/models",
			func(tok string) map[string]string {
				return map[string]string{"x-api-key": tok, "anthropic-version": "2023-06-01"}
			}},
		{"openai models", "GET", "/v1/models", "", "Authorization", "Bearer " + openaiKey, "/v1/models",
			func(tok string) map[string]string { return map[string]string{"Authorization": "Bearer " + tok} }},
	}
	for _, c := range native {
		code, body := do(c.method, c.path, c.body, c.hdr(token))
		seen := f.up.requests()
		if code != 200 || len(seen) == 0 {
			t.Fatalf("%s: %d %.200s", c.name, code, body)
		}
		last := seen[len(seen)-1]
		if last.path != c.upPath || last.header.Get(c.keyHeader) != c.keyValue {
			t.Errorf("%s reached the upstream at %s with %s %.12q…", c.name, last.path, c.keyHeader, last.header.Get(c.keyHeader))
		}
	}
	if code, _ := do("HEAD", "/", "", nil); code != 200 {
		t.Errorf("probe of the relay's root: %d", code)
	}
	// The session's other token works here; another session's does not.
	if code, _ := do("POST", "/v1/messages", calls[0].body, map[string]string{"x-api-key": f.token}); code != 200 {
		t.Errorf("s1's issued token on s1's socket: %d", code)
	}
	env2, err := f.p.Issue(context.Background(), "s2", serverEnv(f.up.url))
	if err != nil {
		t.Fatal(err)
	}
	if code, body := do("POST", "/v1/messages", calls[0].body, map[string]string{"x-api-key": env2["ANTHROPIC_API_KEY"]}); code != 401 || !strings.Contains(body, "authentication_error") {
		t.Errorf("s2's token on s1's socket: %d %s", code, body)
	}
	if code, _ := do("POST", "/v1/messages", calls[0].body, nil); code != 401 {
		t.Errorf("no token: %d", code)
	}
	if code, _ := do("POST", "/elsewhere", "", map[string]string{"x-api-key": token}); code != 404 {
		t.Errorf("unknown path: %d", code)
	}

	// A restarted proxy with the same secret hands out the same token for
	// the same socket (and accepts it); another secret would not.
	ups, _ := modelproxy.UpstreamsFromEnv(serverEnv(f.up.url))
	p2, err := modelproxy.New(modelproxy.Config{Upstreams: ups, Tokens: f.st, Secret: secret, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer p2.Close(context.Background())
	f.p.StopSession("s1")
	if _, err := client.Get("http://relay/v1/models"); err == nil {
		t.Fatal("the socket still answers after StopSession")
	}
	client.CloseIdleConnections()
	again, err := p2.ServeSession(context.Background(), "s1", sock)
	if err != nil || again != token {
		t.Fatalf("after a restart: %q, %v; want the same token", again, err)
	}
	if code, _ := do("POST", "/v1/messages", calls[0].body, map[string]string{"x-api-key": token}); code != 200 {
		t.Fatalf("the token after a restart: %d", code)
	}
	p3, _ := modelproxy.New(modelproxy.Config{Upstreams: ups, Secret: []byte("another secret, another token..")})
	if other, err := p3.ServeSession(context.Background(), "s1", filepath.Join(dir, "other.sock")); err != nil || other == token {
		t.Fatalf("another secret or path gave %q, %v", other, err)
	}
	p3.Close(context.Background())
	// Revoke ends the token, on the socket too.
	if err := p2.Revoke(context.Background(), "s1"); err != nil {
		t.Fatal(err)
	}
	if code, _ := do("POST", "/v1/messages", calls[0].body, map[string]string{"x-api-key": token}); code != 401 {
		t.Fatalf("a revoked socket token: %d", code)
	}
	if _, err := p2.ServeSession(context.Background(), "s1", "/"+strings.Repeat("x", 120)); err == nil {
		t.Fatal("a socket path over 107 bytes was accepted")
	}
}

func TestListenLoopbackKeepsPort(t *testing.T) {
	state := filepath.Join(t.TempDir(), "port")
	p1, _ := modelproxy.New(modelproxy.Config{Logger: slog.New(slog.DiscardHandler)})
	a1, err := p1.ListenLoopback(state)
	if err != nil {
		t.Fatal(err)
	}
	if err := p1.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	p2, _ := modelproxy.New(modelproxy.Config{Logger: slog.New(slog.DiscardHandler)})
	a2, err := p2.ListenLoopback(state)
	if err != nil {
		t.Fatal(err)
	}
	if a2.Port != a1.Port || !a2.IP.IsLoopback() {
		t.Fatalf("port %d after a restart, want %d", a2.Port, a1.Port)
	}
	// Taken now (p2 holds it): a third proxy gets another port rather than failing.
	p3, _ := modelproxy.New(modelproxy.Config{Logger: slog.New(slog.DiscardHandler)})
	a3, err := p3.ListenLoopback(state)
	if err != nil || a3.Port == a2.Port {
		t.Fatalf("with the port taken: %v, %v", a3, err)
	}
	p2.Close(context.Background())
	p3.Close(context.Background())
}

// TestCloseLetsStreamsFinish: Close stops taking connections at once but
// lets an answer in flight end; with a context that ends first, it cuts it.
func TestCloseLetsStreamsFinish(t *testing.T) {
	for _, cut := range []bool{false, true} {
		f := newFixture(t, 0, nil)
		c := calls[0]
		c.body = strings.Replace(c.body, "say hello", "go slow", 1)
		req, _ := http.NewRequest("POST", f.env[c.urlVar]+c.path, strings.NewReader(c.body))
		c.auth(req, f.token)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		closed := make(chan error, 1)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		if cut {
			cancel()
		}
		go func() { closed <- f.p.Close(ctx) }()
		body, readErr := io.ReadAll(resp.Body)
		resp.Body.Close()
		err = <-closed
		cancel()
		if cut {
			if err == nil || readErr == nil && strings.Contains(string(body), "message_stop") {
				t.Fatalf("Close with an ended context: %v; the stream ended cleanly anyway", err)
			}
			continue
		}
		if err != nil || readErr != nil || !strings.Contains(string(body), "message_stop") {
			t.Fatalf("Close: %v; stream read: %v, complete: %v", err, readErr, strings.Contains(string(body), "message_stop"))
		}
		if _, err := http.Post(f.env[c.urlVar]+c.path, "application/json", strings.NewReader(c.body)); err == nil {
			t.Fatal("the proxy still takes requests after Close")
		}
	}
}

// A client that knows the answer's length has it all before the proxy
// reads EOF and closes the upstream body; the usage it reads next must
// already count that answer (CI saw the last of six answers missing).
func TestUsageCountedWhenTheAnswerArrives(t *testing.T) {
	f := newFixture(t, 0, nil)
	var c call
	for _, cc := range calls {
		if cc.name == "openai chat" {
			c = cc
		}
	}
	for i := 1; i <= 200; i++ {
		resp, body := f.do(c, f.token)
		if resp.StatusCode != 200 || resp.ContentLength < 0 {
			t.Fatalf("status %d, length %d, body %.200s", resp.StatusCode, resp.ContentLength, body)
		}
		if u, _ := f.p.SessionUsage(context.Background(), "s1"); u.InputTokens != 100*int64(i) {
			t.Fatalf("after answer %d the proxy counted %d input tokens, want %d", i, u.InputTokens, 100*i)
		}
	}
}
