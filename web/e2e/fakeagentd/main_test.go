package main

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/agentd/agentd/conversation"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func newTestServer(t *testing.T) *httptest.Server {
	t.Helper()
	s := &server{dir: t.TempDir(), sessions: map[string]*session{}}
	if err := s.load(); err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(s.routes(http.NotFoundHandler()))
	t.Cleanup(func() {
		ts.Close()
		for _, ss := range s.sessions {
			ss.log.Close()
		}
	})
	return ts
}

func post(t *testing.T, url string, body any) *http.Response {
	t.Helper()
	b, _ := json.Marshal(body)
	r, err := http.Post(url, "application/json", bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Body.Close() })
	return r
}

func TestShellTurnStreamsAndReduces(t *testing.T) {
	ts := newTestServer(t)
	r := post(t, ts.URL+"/api/sessions", map[string]string{"architecture": "shell"})
	if r.StatusCode != 201 {
		t.Fatalf("create: %d", r.StatusCode)
	}
	var created struct{ SessionID string }
	_ = json.NewDecoder(r.Body).Decode(&created)
	if r := post(t, ts.URL+"/api/sessions/"+created.SessionID+"/messages", map[string]string{"content": "echo hi; echo err >&2"}); r.StatusCode != 202 {
		t.Fatalf("message: %d", r.StatusCode)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		resp, err := http.Get(ts.URL + "/api/sessions/" + created.SessionID + "/events?after=0")
		if err != nil {
			t.Fatal(err)
		}
		var page struct{ Events []conversation.Event }
		_ = json.NewDecoder(resp.Body).Decode(&page)
		resp.Body.Close()
		st, err := conversation.Reduce(page.Events)
		if err != nil {
			t.Fatal(err)
		}
		done := false
		for _, e := range page.Events {
			done = done || e.Type == conversation.TypeSessionIdle
		}
		if done {
			var out string
			for _, b := range st.Blocks {
				if b.Type == conversation.BlockToolResult {
					out = b.Output
				}
			}
			if out != "hi\nerr\n" && out != "err\nhi\n" {
				t.Fatalf("output %q", out)
			}
			for i, e := range page.Events {
				if e.Seq != int64(i+1) {
					t.Fatalf("event %d has seq %d", i, e.Seq)
				}
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("turn did not end; events: %d", len(page.Events))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestBadRequests(t *testing.T) {
	ts := newTestServer(t)
	if r := post(t, ts.URL+"/api/sessions", map[string]string{"architecture": "codex"}); r.StatusCode != 400 {
		t.Errorf("unknown architecture: %d", r.StatusCode)
	}
	if r := post(t, ts.URL+"/api/sessions/nope/messages", map[string]string{"content": "x"}); r.StatusCode != 404 {
		t.Errorf("unknown session: %d", r.StatusCode)
	}
	r := post(t, ts.URL+"/api/sessions", map[string]string{"architecture": "shell"})
	var created struct{ SessionID string }
	_ = json.NewDecoder(r.Body).Decode(&created)
	if r := post(t, ts.URL+"/api/sessions/"+created.SessionID+"/messages", map[string]string{"content": ""}); r.StatusCode != 400 {
		t.Errorf("empty content: %d", r.StatusCode)
	}
	if r := post(t, ts.URL+"/api/sessions/"+created.SessionID+"/messages", map[string]string{"content": "sleep 0.3"}); r.StatusCode != 202 {
		t.Fatalf("message: %d", r.StatusCode)
	}
	if r := post(t, ts.URL+"/api/sessions/"+created.SessionID+"/messages", map[string]string{"content": "echo"}); r.StatusCode != 409 {
		t.Errorf("busy: %d", r.StatusCode)
	}
	if r := post(t, ts.URL+"/api/sessions/"+created.SessionID+"/interrupt", nil); r.StatusCode != 202 {
		t.Errorf("interrupt: %d", r.StatusCode)
	}
	resp, _ := http.Get(ts.URL + "/api/sessions/" + created.SessionID + "/files/../../etc/passwd")
	if resp != nil {
		resp.Body.Close()
		if resp.StatusCode == 200 {
			t.Errorf("path escape answered 200")
		}
	}
	// Let the interrupted turn finish so no goroutine outlives the test.
	time.Sleep(500 * time.Millisecond)
}
