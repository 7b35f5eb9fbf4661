package modelproxy

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strings"
)

// Provider names a model API the proxy serves.
type Provider string

const (
	Anthropic Provider = "anthropic"
	OpenAI    Provider = "openai"
	Gemini    Provider = "gemini"
)

// providerSpec is what the proxy knows of a provider: the sandbox
// variables that carry its endpoint and key, and its public endpoint.
type providerSpec struct {
	name       Provider
	keyVar     string
	urlVar     string
	defaultURL string
}

var providerSpecs = []providerSpec{
	{Anthropic, "ANTHROPIC_API_KEY", "ANTHROPIC_BASE_URL", "https://api.anthropic.com"},
	{OpenAI, "OPENAI_API_KEY", "OPENAI_BASE_URL", "https://api.openai.com/v1"},
	{Gemini, "GEMINI_API_KEY", "GOOGLE_GEMINI_BASE_URL", "https://generativelanguage.googleapis.com"},
}

func specOf(p Provider) (providerSpec, bool) {
	for _, s := range providerSpecs {
		if s.name == p {
			return s, true
		}
	}
	return providerSpec{}, false
}

// Upstream is where the proxy sends a provider's requests, with the real
// key.
type Upstream struct {
	// BaseURL is the provider endpoint as its SDKs take it (the server's
	// ANTHROPIC_BASE_URL etc.); the path after the proxy's /<provider>
	// prefix is appended to it.
	BaseURL string
	Key     string
}

// UpstreamsFromEnv reads the server's provider settings (ANTHROPIC_API_KEY,
// ANTHROPIC_BASE_URL, OPENAI_…, GEMINI_API_KEY, GOOGLE_GEMINI_BASE_URL):
// every provider with a non-empty key is proxied, to its base URL or the
// public endpoint.
func UpstreamsFromEnv(env map[string]string) (map[Provider]Upstream, error) {
	out := map[Provider]Upstream{}
	for _, s := range providerSpecs {
		key := env[s.keyVar]
		if key == "" {
			continue
		}
		base := env[s.urlVar]
		if base == "" {
			base = s.defaultURL
		}
		u, err := url.Parse(base)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return nil, fmt.Errorf("%s=%q: want an http(s) URL", s.urlVar, base)
		}
		out[s.name] = Upstream{BaseURL: base, Key: key}
	}
	return out, nil
}

// tokenFrom returns the credential a request carries, in any of the forms
// the SDKs send: x-api-key (Anthropic), Authorization: Bearer (OpenAI),
// x-goog-api-key or ?key= (Gemini).
func tokenFrom(r *http.Request) string {
	if v := r.Header.Get("x-api-key"); v != "" {
		return v
	}
	if v, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer "); ok && v != "" {
		return strings.TrimSpace(v)
	}
	if v := r.Header.Get("x-goog-api-key"); v != "" {
		return v
	}
	return r.URL.Query().Get("key")
}

// setAuth removes every credential the agent sent and puts in the real
// key the way the provider expects it.
func setAuth(h http.Header, q url.Values, p Provider, key string) {
	h.Del("x-api-key")
	h.Del("Authorization")
	h.Del("x-goog-api-key")
	q.Del("key")
	switch p {
	case Anthropic:
		h.Set("x-api-key", key)
	case OpenAI:
		h.Set("Authorization", "Bearer "+key)
	case Gemini:
		h.Set("x-goog-api-key", key)
	}
}

// failure is a refusal the proxy answers itself.
type failure int

const (
	failUnauthorized failure = iota // no or unknown token: 401
	failBudget                      // the session's budget is used up
	failUpstream                    // the upstream could not be reached: 502
	failNotFound                    // not a path the proxy serves: 404
	failUpgrade                     // a WebSocket upgrade: 426, so clients fall back to HTTP
)

// writeFailure answers with the provider's own error shape, so the agent
// CLI reports the message as it would a real API error. Budget refusals
// are 400 for Anthropic and Gemini (their "no credit" and "precondition"
// errors, which clients do not retry) and OpenAI's 429 insufficient_quota
// (which Codex treats as final).
func writeFailure(w http.ResponseWriter, p Provider, f failure, msg string) int {
	status := map[failure]int{
		failUnauthorized: http.StatusUnauthorized, failBudget: http.StatusBadRequest,
		failUpstream: http.StatusBadGateway, failNotFound: http.StatusNotFound, failUpgrade: http.StatusUpgradeRequired,
	}[f]
	var body any
	switch p {
	case Anthropic:
		typ := map[failure]string{
			failUnauthorized: "authentication_error", failBudget: "invalid_request_error", failUpstream: "api_error",
			failNotFound: "not_found_error", failUpgrade: "invalid_request_error",
		}[f]
		body = map[string]any{"type": "error", "error": map[string]any{"type": typ, "message": msg}}
	case OpenAI:
		typ, code := "invalid_request_error", any(nil)
		switch f {
		case failUnauthorized:
			code = "invalid_api_key"
		case failBudget:
			status, typ, code = http.StatusTooManyRequests, "insufficient_quota", "insufficient_quota"
		case failUpstream:
			typ = "server_error"
		case failNotFound:
			code = "unknown_url"
		}
		body = map[string]any{"error": map[string]any{"message": msg, "type": typ, "param": nil, "code": code}}
	case Gemini:
		st := map[failure]string{
			failUnauthorized: "UNAUTHENTICATED", failBudget: "FAILED_PRECONDITION", failUpstream: "UNAVAILABLE",
			failNotFound: "NOT_FOUND", failUpgrade: "FAILED_PRECONDITION",
		}[f]
		body = map[string]any{"error": map[string]any{"code": status, "message": msg, "status": st}}
	default:
		body = map[string]any{"error": msg}
	}
	w.Header().Set("Content-Type", "application/json")
	if f == failUnauthorized {
		w.Header().Set("WWW-Authenticate", `Bearer realm="agentd-model-proxy"`)
	}
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(body)
	return status
}
