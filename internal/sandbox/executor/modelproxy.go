package executor

import (
	"context"
	"maps"
	"strings"
)

// ModelProxy serves the model APIs to an environment's agents so that the
// real API keys never enter the sandbox: each environment gets a Unix
// socket of its own, served by the proxy, and a token that stands in for
// the API key. The executor relays a loopback TCP port to that socket (the
// only way out of a bubblewrap sandbox), and every process of the
// environment gets ModelEnv: the *_BASE_URL variables pointing at the
// relay and the token as every provider's API key. Requests arrive with
// the providers' own paths (Anthropic /v1/messages, OpenAI /v1/…, Gemini
// /v1beta/…), so one socket serves all three.
//
// Implementations must be safe for concurrent use.
type ModelProxy interface {
	// ServeSession makes the proxy answer sessionID's requests on a new
	// Unix socket at socketPath (replacing a stale file there). The
	// backend then gives the socket to the environment's user (mode
	// 0600). After a server restart it is called again with the same
	// path for a recovered environment, and must then return the same
	// token: agents started before the restart still use it.
	ServeSession(ctx context.Context, sessionID, socketPath string) (token string, err error)
	// StopSession closes the session's socket (Terminate).
	StopSession(sessionID string)
}

// modelKeyVars are the provider credentials an environment never gets from
// the server once a ModelProxy is in use: the proxy holds the real ones.
var modelKeyVars = []string{
	"ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN", "ANTHROPIC_BASE_URL",
	"OPENAI_API_KEY", "OPENAI_BASE_URL", "OPENAI_ORG_ID", "OPENAI_PROJECT_ID",
	"GEMINI_API_KEY", "GOOGLE_API_KEY", "GOOGLE_GEMINI_BASE_URL", "GOOGLE_APPLICATION_CREDENTIALS",
	"CODEX_API_KEY", "AWS_BEARER_TOKEN_BEDROCK",
}

// ModelEnv is what an environment's processes get with a model proxy
// relayed at baseURL (http://127.0.0.1:PORT): the providers' base URLs
// and token as their API keys.
func ModelEnv(baseURL, token string) map[string]string {
	baseURL = strings.TrimRight(baseURL, "/")
	return map[string]string{
		"ANTHROPIC_BASE_URL":     baseURL,
		"ANTHROPIC_API_KEY":      token,
		"OPENAI_BASE_URL":        baseURL + "/v1",
		"OPENAI_API_KEY":         token,
		"GOOGLE_GEMINI_BASE_URL": baseURL,
		"GEMINI_API_KEY":         token,
	}
}

// withModelEnv replaces every provider credential of env by the proxy's.
func withModelEnv(env map[string]string, baseURL, token string) map[string]string {
	for _, k := range modelKeyVars {
		delete(env, k)
	}
	maps.Copy(env, ModelEnv(baseURL, token))
	return env
}
