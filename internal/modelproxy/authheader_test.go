package modelproxy_test

import (
	"net/http"
	"strings"
	"testing"
)

// Whatever provider a request is for, the session token may come as
// Authorization: Bearer (Claude Code sends ANTHROPIC_AUTH_TOKEN that way),
// and other credentials may ride along: the upstream gets the real key in
// its provider's header and nothing else, neither the token nor a stray
// credential, in any header or the query.
func TestBearerTokenAndStrayCredentialsNeverReachUpstream(t *testing.T) {
	f := newFixture(t, 0, nil)
	const stray = "stray-credential-0123456789"
	for i, c := range calls {
		t.Run(c.name, func(t *testing.T) {
			c.auth = func(r *http.Request, tok string) {
				r.Header.Set("Authorization", "Bearer "+tok)
				r.Header.Set("anthropic-version", "2023-06-01")
				// Looked at only after Authorization (tokenFrom), so these
				// are strays here, not the credential.
				r.Header.Set("x-goog-api-key", stray)
				q := r.URL.Query()
				q.Set("key", stray)
				r.URL.RawQuery = q.Encode()
			}
			resp, body := f.do(c, f.token)
			if resp.StatusCode != 200 || !strings.Contains(string(body), c.wantText) {
				t.Fatalf("status %d, body %.300s", resp.StatusCode, body)
			}
			seen := f.up.requests()
			if len(seen) != i+1 {
				t.Fatalf("upstream saw %d requests, want %d", len(seen), i+1)
			}
			got := seen[i]
			if v := got.header.Get(c.keyHeader); v != c.keyValue {
				t.Errorf("upstream %s = %q, want the real key", c.keyHeader, v)
			}
			for name, vs := range got.header {
				for _, v := range vs {
					if strings.Contains(v, f.token) || strings.Contains(v, stray) {
						t.Errorf("upstream header %s = %q: the session token or a stray credential", name, v)
					}
				}
			}
			if strings.Contains(got.query, f.token) || strings.Contains(got.query, stray) || strings.Contains(got.query, "key=") {
				t.Errorf("upstream query %q carries a credential", got.query)
			}
			for _, other := range []string{"X-Api-Key", "Authorization", "X-Goog-Api-Key"} {
				if other != c.keyHeader && len(got.header.Values(other)) > 0 {
					t.Errorf("upstream got a stray %s: %q", other, got.header.Values(other))
				}
			}
		})
	}
}
