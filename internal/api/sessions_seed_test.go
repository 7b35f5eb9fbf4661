package api_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/agentd/agentd/client"
)

// The seed's REST calls, with the seed client's headers: it sends
// Content-Type: application/json and a Bearer key on every request, body
// or not.
func TestSeedRoutes(t *testing.T) {
	e := newEnv(t, "k")
	seed := func(method, path, body string) (int, map[string]any) {
		t.Helper()
		resp := e.request(method, path, body, "Content-Type", "application/json")
		defer resp.Body.Close()
		var out map[string]any
		_ = json.NewDecoder(resp.Body).Decode(&out)
		return resp.StatusCode, out
	}

	// POST /sessions and /sessions/create create (the seed README's).
	for _, p := range []string{"/sessions", "/sessions/create"} {
		code, out := seed("POST", p, `{"architecture":"shell"}`)
		if code != http.StatusCreated || out["sessionId"] == "" || out["status"] != "created" {
			t.Fatalf("POST %s: %d %v", p, code, out)
		}
	}
	id := e.create()

	// Options: set, read back, refused when unknown or malformed.
	code, out := seed("PATCH", "/api/sessions/"+id+"/options", `{"sessionOptions":{"model":"m2"}}`)
	if code != 200 || out["success"] != true || out["sessionId"] != id || out["sessionOptions"].(map[string]any)["model"] != "m2" {
		t.Fatalf("PATCH options: %d %v", code, out)
	}
	if _, st := seed("GET", "/api/sessions/"+id, ""); st["sessionOptions"].(map[string]any)["model"] != "m2" {
		t.Fatalf("GET after PATCH: %v", st["sessionOptions"])
	}
	expectCode(t, e.request("PATCH", "/api/sessions/"+id+"/options", `{"sessionOptions":{"permissionMode":"plan"}}`), 400, "UNKNOWN_OPTION")
	expectCode(t, e.request("PATCH", "/api/sessions/"+id+"/options", `{"model":"m3"}`), 400, "BAD_REQUEST")
	expectCode(t, e.request("PATCH", "/api/sessions/"+id+"/options", `{"sessionOptions":{"model":7}}`), 400, "BAD_REQUEST")
	expectCode(t, e.request("PATCH", "/api/sessions/"+id+"/options", `{"sessionOptions":`), 400, "BAD_REQUEST")
	expectCode(t, e.request("PATCH", "/api/sessions/nope/options", `{"sessionOptions":{}}`), 404, "SESSION_NOT_FOUND")
	expectCode(t, e.request("PATCH", "/api/sessions/"+id+"/options", `{"sessionOptions":{}}`, "Content-Type", "text/plain"), 415, "UNSUPPORTED_MEDIA_TYPE")

	// A turn, then sync and environment terminate (body-less, typed JSON).
	code, sent := e.do("POST", "/api/sessions/"+id+"/messages", `{"content":"echo hi > f.txt"}`)
	if code != 202 {
		t.Fatalf("message: %d %v", code, sent)
	}
	e.waitTurn(id, sent["queryId"].(string))
	code, out = seed("POST", "/api/sessions/"+id+"/sync", "")
	if code != 200 || out["success"] != true || out["sessionId"] != id || out["files"] == nil || out["transcripts"] == nil {
		t.Fatalf("sync: %d %v", code, out)
	}
	code, out = seed("POST", "/api/sessions/"+id+"/environment/terminate", "")
	rt, _ := out["runtime"].(map[string]any)
	if code != 200 || out["success"] != true || out["sessionId"] != id || rt["status"] != "terminated" {
		t.Fatalf("environment terminate: %d %v", code, out)
	}
	// The session stays; the next message starts a new environment.
	code, sent = e.do("POST", "/api/sessions/"+id+"/messages", `{"content":"cat f.txt"}`)
	if code != 202 {
		t.Fatalf("message after terminate: %d %v", code, sent)
	}
	e.waitTurn(id, sent["queryId"].(string))
	expectCode(t, e.request("POST", "/api/sessions/nope/sync", ""), 404, "SESSION_NOT_FOUND")
	expectCode(t, e.request("POST", "/api/sessions/nope/environment/terminate", ""), 404, "SESSION_NOT_FOUND")

	// The Go client's calls.
	c, _ := client.New(e.srv.URL, client.WithAPIKey("k"))
	ctx := context.Background()
	if opts, err := c.UpdateOptions(ctx, id, json.RawMessage(`{"model":null}`)); err != nil || string(opts) != "{}" {
		t.Fatalf("client UpdateOptions: %s %v", opts, err)
	}
	if _, err := c.UpdateOptions(ctx, id, json.RawMessage(`{"x":1}`)); !client.IsCode(err, "UNKNOWN_OPTION") {
		t.Fatalf("client UpdateOptions unknown key: %v", err)
	}
	if res, err := c.Sync(ctx, id); err != nil || !res.Success || res.SessionID != id {
		t.Fatalf("client Sync: %+v %v", res, err)
	}
	if rt, err := c.TerminateEnvironment(ctx, id); err != nil || rt.Status != "terminated" {
		t.Fatalf("client TerminateEnvironment: %+v %v", rt, err)
	}

	// DELETE answers {success, sessionId}.
	code, out = seed("DELETE", "/api/sessions/"+id, "")
	if code != 200 || out["success"] != true || out["sessionId"] != id {
		t.Fatalf("DELETE: %d %v", code, out)
	}
}

// GET /api/sessions/{id}?include=content carries text files' contents,
// bounded; others say why not.
func TestSessionFileContents(t *testing.T) {
	e := newEnv(t, "")
	id := e.create()
	code, sent := e.do("POST", "/api/sessions/"+id+"/messages",
		`{"content":"printf 'hello\\n' > a.txt && printf '\\000\\001' > bin && head -c 300000 /dev/zero | tr '\\000' x > big.txt"}`)
	if code != 202 {
		t.Fatalf("message: %d %v", code, sent)
	}
	e.waitTurn(id, sent["queryId"].(string))
	files := func(query string) map[string]map[string]any {
		t.Helper()
		code, st := e.do("GET", "/api/sessions/"+id+query, "")
		if code != 200 {
			t.Fatalf("GET %s: %d %v", query, code, st)
		}
		out := map[string]map[string]any{}
		for _, f := range st["workspaceFiles"].([]any) {
			m := f.(map[string]any)
			out[m["path"].(string)] = m
		}
		return out
	}
	plain := files("")
	if len(plain) != 3 || plain["a.txt"]["content"] != nil {
		t.Fatalf("without include: %v", plain)
	}
	got := files("?include=content")
	if got["a.txt"]["content"] != "hello\n" || got["bin"]["contentOmitted"] != "binary" || got["big.txt"]["contentOmitted"] != "too_large" {
		t.Fatalf("with include=content: %v", got)
	}
	expectCode(t, e.request("GET", "/api/sessions/"+id+"?include=everything", ""), 400, "BAD_REQUEST")
	if !strings.Contains(string(e.api.OpenAPI()), `"/api/sessions/{id}/environment/terminate"`) {
		t.Fatal("the OpenAPI document lacks the new routes")
	}
}
