package api_test

import (
	"testing"
)

// Without a lister (an embedding that gives none) the list is empty, not
// an error; the route needs the API key like every /api route.
func TestSandboxesWithoutLister(t *testing.T) {
	e := newEnv(t, "k")
	expectCode(t, e.request("GET", "/api/sandboxes", "", "Authorization", "Bearer wrong"), 401, "UNAUTHORIZED")
	code, body := e.do("GET", "/api/sandboxes", "")
	if code != 200 {
		t.Fatalf("status %d %v", code, body)
	}
	if list, ok := body["sandboxes"].([]any); !ok || len(list) != 0 {
		t.Fatalf("body %v", body)
	}
}
