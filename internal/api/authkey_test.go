package api_test

import (
	"net/http"
	"net/url"
	"testing"
)

// The API key is accepted only whole, as a bearer header and as the
// access_token query parameter: a prefix of it, or it with more after it,
// is 401.
func TestAPIKeyOnlyWhole(t *testing.T) {
	const key = "s3cret-key"
	e := newEnv(t, key)
	get := func(header, query string) int {
		t.Helper()
		u := e.srv.URL + "/api/sessions"
		if query != "" {
			u += "?access_token=" + url.QueryEscape(query)
		}
		req, _ := http.NewRequest("GET", u, nil)
		if header != "" {
			req.Header.Set("Authorization", "Bearer "+header)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		if resp.StatusCode == 401 {
			expectCode(t, resp, 401, "UNAUTHORIZED")
		} else {
			resp.Body.Close()
		}
		return resp.StatusCode
	}
	if code := get(key, ""); code != 200 {
		t.Fatalf("the key as a bearer: %d", code)
	}
	if code := get("", key); code != 200 {
		t.Fatalf("the key as access_token: %d", code)
	}
	for _, bad := range []string{"s", "s3cret", key[:len(key)-1], key + "x", key + key, "S3cret-key"} {
		if code := get(bad, ""); code != 401 {
			t.Errorf("bearer %q: %d, want 401", bad, code)
		}
		if code := get("", bad); code != 401 {
			t.Errorf("access_token %q: %d, want 401", bad, code)
		}
	}
}
