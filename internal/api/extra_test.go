package api_test

import (
	"archive/tar"
	"archive/zip"
	"bytes"
	"compress/gzip"
	"encoding/json"
	"io"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/agentd/agentd/conversation"
)

// A message sent while a turn runs waits in the queue (202 queued, with
// its id), is listed and in the state, can be dropped once, and the rest
// run in order.
func TestMessageQueueOverREST(t *testing.T) {
	e := newEnv(t, "")
	id := e.create()
	code, out := e.do("POST", "/api/sessions/"+id+"/messages", `{"content":"sleep 0.5; echo first"}`)
	if code != 202 || out["queryId"] != "q1" || out["queued"] != nil {
		t.Fatalf("first: %d %v", code, out)
	}
	code, second := e.do("POST", "/api/sessions/"+id+"/messages", `{"content":"echo second"}`)
	if code != 202 || second["queued"] != true || second["messageId"] == nil || second["queryId"] != nil {
		t.Fatalf("second: %d %v", code, second)
	}
	_, third := e.do("POST", "/api/sessions/"+id+"/messages", `{"content":"echo third","queue":true}`)
	code, list := e.do("GET", "/api/sessions/"+id+"/queue", "")
	msgs, _ := list["messages"].([]any)
	if code != 200 || len(msgs) != 2 || msgs[0].(map[string]any)["id"] != second["messageId"] || msgs[1].(map[string]any)["content"] != "echo third" {
		t.Fatalf("queue: %d %v", code, list)
	}
	_, state := e.do("GET", "/api/sessions/"+id, "")
	if q, _ := state["queuedMessages"].([]any); len(q) != 2 {
		t.Fatalf("state queue %v", state["queuedMessages"])
	}
	mid := third["messageId"].(string)
	if code, out := e.do("DELETE", "/api/sessions/"+id+"/queue/"+mid, ""); code != 200 || out["success"] != true {
		t.Fatalf("cancel: %d %v", code, out)
	}
	expectCode(t, e.request("DELETE", "/api/sessions/"+id+"/queue/"+mid, ""), 404, "MESSAGE_NOT_FOUND")
	expectCode(t, e.request("DELETE", "/api/sessions/nope/queue/"+mid, ""), 404, "SESSION_NOT_FOUND")
	evs := e.waitTurn(id, "q2")
	var types []string
	for _, ev := range evs {
		switch ev.Type {
		case conversation.TypeMessageQueued, conversation.TypeMessageDequeued, conversation.TypeMessageCancelled:
			types = append(types, string(ev.Type))
		}
	}
	if strings.Join(types, " ") != "message:queued message:queued message:cancelled message:dequeued" {
		t.Fatalf("queue events %v", types)
	}
	_, state = e.do("GET", "/api/sessions/"+id, "")
	if q, _ := state["queuedMessages"].([]any); len(q) != 0 || len(state["turns"].([]any)) != 2 {
		t.Fatalf("after: queue %v turns %v", state["queuedMessages"], state["turns"])
	}
	// The session took its name from the first message.
	if state["name"] != "sleep 0.5; echo first" {
		t.Fatalf("name %v", state["name"])
	}
}

func TestRenameOverREST(t *testing.T) {
	e := newEnv(t, "")
	id := e.create()
	code, out := e.do("PATCH", "/api/sessions/"+id, `{"name":"  build the thing "}`)
	if code != 200 || out["name"] != "build the thing" || out["sessionId"] != id {
		t.Fatalf("rename: %d %v", code, out)
	}
	_, list := e.do("GET", "/api/sessions", "")
	if list["sessions"].([]any)[0].(map[string]any)["name"] != "build the thing" {
		t.Fatalf("list %v", list)
	}
	expectCode(t, e.request("PATCH", "/api/sessions/"+id, `{}`), 400, "BAD_REQUEST")
	expectCode(t, e.request("PATCH", "/api/sessions/"+id, `{"name":"`+strings.Repeat("x", 300)+`"}`), 400, "BAD_REQUEST")
	expectCode(t, e.request("PATCH", "/api/sessions/nope", `{"name":"x"}`), 404, "SESSION_NOT_FOUND")
}

// The changes view and the downloads: per-turn diffs with contents by
// hash, and the workspace as zip and tar.gz.
func TestChangesAndArchiveOverREST(t *testing.T) {
	e := newEnv(t, "")
	id := e.create()
	for i, cmd := range []string{"mkdir -p d && echo one > d/a.txt", "echo two > d/a.txt && echo b > b.txt"} {
		e.do("POST", "/api/sessions/"+id+"/messages", `{"content":"`+cmd+`"}`)
		e.waitTurn(id, "q"+string(rune('1'+i)))
	}
	var ch struct {
		Turns []struct {
			QueryID string
			Files   []struct {
				Path, Change  string
				Before, After *struct {
					SHA256 string
					Size   int64
				}
			}
		}
		Overall []struct{ Path, Change string }
	}
	resp := e.request("GET", "/api/sessions/"+id+"/changes", "")
	if err := json.NewDecoder(resp.Body).Decode(&ch); err != nil || resp.StatusCode != 200 {
		t.Fatalf("changes: %d %v", resp.StatusCode, err)
	}
	resp.Body.Close()
	if len(ch.Turns) != 2 || len(ch.Turns[1].Files) != 2 || ch.Turns[1].Files[1].Path != "d/a.txt" || ch.Turns[1].Files[1].Change != "modified" {
		t.Fatalf("changes %+v", ch)
	}
	mod := ch.Turns[1].Files[1]
	resp = e.request("GET", "/api/sessions/"+id+"/changes/content/"+mod.Before.SHA256, "")
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || string(body) != "one\n" {
		t.Fatalf("content: %d %q", resp.StatusCode, body)
	}
	expectCode(t, e.request("GET", "/api/sessions/"+id+"/changes/content/xyz", ""), 400, "BAD_REQUEST")
	expectCode(t, e.request("GET", "/api/sessions/"+id+"/changes/content/"+strings.Repeat("a", 64), ""), 404, "FILE_NOT_FOUND")

	want := map[string]string{"d/a.txt": "two\n", "b.txt": "b\n"}
	resp = e.request("GET", "/api/sessions/"+id+"/archive?format=zip", "")
	data, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "application/zip" || !strings.Contains(resp.Header.Get("Content-Disposition"), ".zip") {
		t.Fatalf("zip: %d %v", resp.StatusCode, resp.Header)
	}
	zr, err := zip.NewReader(bytes.NewReader(data), int64(len(data)))
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, f := range zr.File {
		rc, _ := f.Open()
		b, _ := io.ReadAll(rc)
		rc.Close()
		got[f.Name[strings.Index(f.Name, "/")+1:]] = string(b)
	}
	assertFiles(t, "zip", want, got)

	resp = e.request("GET", "/api/sessions/"+id+"/archive?format=tar.gz", "")
	gz, err := gzip.NewReader(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(gz)
	got = map[string]string{}
	for {
		h, err := tr.Next()
		if err != nil {
			break
		}
		b, _ := io.ReadAll(tr)
		got[h.Name[strings.Index(h.Name, "/")+1:]] = string(b)
	}
	resp.Body.Close()
	assertFiles(t, "tar.gz", want, got)
	expectCode(t, e.request("GET", "/api/sessions/"+id+"/archive?format=rar", ""), 400, "BAD_REQUEST")
	expectCode(t, e.request("GET", "/api/sessions/nope/archive", ""), 404, "SESSION_NOT_FOUND")
}

func assertFiles(t *testing.T, what string, want, got map[string]string) {
	t.Helper()
	keys := func(m map[string]string) []string {
		var k []string
		for x := range m {
			k = append(k, x)
		}
		sort.Strings(k)
		return k
	}
	if strings.Join(keys(want), ",") != strings.Join(keys(got), ",") {
		t.Fatalf("%s: files %v, want %v", what, keys(got), keys(want))
	}
	for k, v := range want {
		if got[k] != v {
			t.Fatalf("%s: %s = %q, want %q", what, k, got[k], v)
		}
	}
}

// "Allow for this session" over REST: scope checks.
func TestPermissionScopeValidation(t *testing.T) {
	e := newEnv(t, "")
	id := e.create()
	expectCode(t, e.request("POST", "/api/sessions/"+id+"/permissions/perm-x", `{"behavior":"deny","scope":"session"}`), 400, "BAD_REQUEST")
	expectCode(t, e.request("POST", "/api/sessions/"+id+"/permissions/perm-x", `{"behavior":"allow","scope":"forever"}`), 400, "BAD_REQUEST")
	expectCode(t, e.request("POST", "/api/sessions/"+id+"/permissions/perm-x", `{"behavior":"allow","scope":"session"}`), 404, "PERMISSION_NOT_FOUND")
	_ = time.Second
}
