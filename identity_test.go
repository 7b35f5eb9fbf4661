package agentd_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentd/agentd"
	"github.com/agentd/agentd/client"
	"github.com/agentd/agentd/conversation"
	"github.com/agentd/agentd/internal/agentdtest"
	"github.com/agentd/agentd/restapi"
	"github.com/agentd/agentd/store"
)

// fakeAnthropic answers every message with 600 input tokens and records
// the key each request carried.
type fakeAnthropic struct {
	mu   sync.Mutex
	keys []string
	url  string
}

func newFakeAnthropic(t *testing.T) *fakeAnthropic {
	f := &fakeAnthropic{}
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		f.mu.Lock()
		f.keys = append(f.keys, r.Header.Get("X-Api-Key"))
		f.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"id":"msg_1","type":"message","role":"assistant","model":"claude-test","content":[{"type":"text","text":"ok"}],"stop_reason":"end_turn","usage":{"input_tokens":600,"output_tokens":0}}`)
	}))
	t.Cleanup(ts.Close)
	f.url = ts.URL
	return f
}

func (f *fakeAnthropic) seen() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.keys...)
}

// asUser calls the REST API with a credential.
func asUser(t *testing.T, base, cred, method, path string, body any) (int, []byte) {
	t.Helper()
	var rd io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	}
	req, _ := http.NewRequest(method, base+path, rd)
	req.Header.Set("Authorization", "Bearer "+cred)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, data
}

// curlModel is a shell command sending one Anthropic request through the
// model proxy with the session's credentials.
const curlModel = `curl -s -w ' HTTP%{http_code}' -X POST "$ANTHROPIC_BASE_URL/v1/messages" -H "x-api-key: $ANTHROPIC_API_KEY" ` +
	`-H 'content-type: application/json' -d '{"model":"claude-test","max_tokens":5,"messages":[{"role":"user","content":"hi"}]}'`

// TestUserBudgetsAndProviderKeys: each user's model requests go out with
// the key that user stored (sealed; the server has none); a user over its
// daily budget gets BUDGET_EXCEEDED from the model proxy while another
// user's session keeps working; the keys are readable through no API, do
// not appear in the store's files, and never enter a sandbox.
func TestUserBudgetsAndProviderKeys(t *testing.T) {
	up := newFakeAnthropic(t)
	serverKey := make([]byte, 32)
	rand.Read(serverKey)
	srv := agentdtest.Start(t, agentd.Config{
		APIKey: "root-key", ServerKey: serverKey,
		Env:    map[string]string{"ANTHROPIC_BASE_URL": up.url},
		Limits: agentd.Limits{UserBudget: store.Budget{TokensPerDay: 1000}},
	})
	base := srv.URL
	tokens := map[string]string{}
	for _, u := range []string{"alice", "bob"} {
		if st, b := asUser(t, base, "root-key", "POST", "/api/users", map[string]string{"id": u, "tenant": "team"}); st != 201 {
			t.Fatalf("create %s: %d %s", u, st, b)
		}
		st, b := asUser(t, base, "root-key", "POST", "/api/tokens", map[string]string{"userId": u})
		if st != 201 {
			t.Fatalf("token of %s: %d %s", u, st, b)
		}
		var tok struct{ Token string }
		json.Unmarshal(b, &tok)
		tokens[u] = tok.Token
	}
	// The keys are assembled here so that no literal in a command or event
	// holds them whole.
	keys := map[string]string{"alice": "sk-ant-" + "ALICE-0123456789-secret", "bob": "sk-ant-" + "BOB-9876543210-secret"}
	for u, k := range keys {
		if st, b := asUser(t, base, tokens[u], "PUT", "/api/keys/user/"+u+"/anthropic", map[string]string{"key": k}); st != 200 {
			t.Fatalf("store %s's key: %d %s", u, st, b)
		}
	}
	// A member cannot store or read another user's keys.
	if st, _ := asUser(t, base, tokens["bob"], "PUT", "/api/keys/user/alice/anthropic", map[string]string{"key": "sk-ant-evil-000000"}); st != 403 {
		t.Fatalf("bob stores alice's key: %d", st)
	}
	if st, _ := asUser(t, base, tokens["bob"], "GET", "/api/keys/user/alice", nil); st != 403 {
		t.Fatalf("bob lists alice's keys: %d", st)
	}

	clients := map[string]*client.Client{}
	sessions := map[string]string{}
	for _, u := range []string{"alice", "bob"} {
		c, err := client.New(base, client.WithAPIKey(tokens[u]))
		if err != nil {
			t.Fatal(err)
		}
		clients[u] = c
		s, err := c.CreateSession(context.Background(), restapi.CreateSessionRequest{Architecture: "shell"})
		if err != nil {
			t.Fatal(err)
		}
		sessions[u] = s.SessionID
	}
	run := func(u, q, cmd string) (conversation.Event, string) {
		t.Helper()
		if _, err := clients[u].Send(context.Background(), sessions[u], cmd); err != nil {
			t.Fatal(err)
		}
		end := waitTurn(t, clients[u], sessions[u], q)
		return end, blocksText(t, clients[u], sessions[u])
	}

	// Alice: 600 tokens, then 1200 (over 1000), then refused.
	for i, q := range []string{"q1", "q2"} {
		if end, out := run("alice", q, curlModel); end.Type != conversation.TypeQueryCompleted || !strings.Contains(out, "HTTP200") {
			t.Fatalf("alice's request %d: %s %s", i+1, end.Type, out)
		}
	}
	end, out := run("alice", "q3", curlModel)
	if end.Type != conversation.TypeQueryFailed || !strings.Contains(string(end.Payload), "BUDGET_EXCEEDED") {
		t.Fatalf("alice over budget: turn ended %s %s (output %q)", end.Type, end.Payload, out)
	}
	// Bob's session keeps working.
	if end, out := run("bob", "q1", curlModel); end.Type != conversation.TypeQueryCompleted || !strings.Contains(out, "HTTP200") {
		t.Fatalf("bob's request: %s %s", end.Type, out)
	}
	seen := up.seen()
	if len(seen) != 3 || seen[0] != keys["alice"] || seen[1] != keys["alice"] || seen[2] != keys["bob"] {
		t.Fatalf("the upstream saw keys %q: want alice's twice, then bob's", seen)
	}
	// Alice's usage is counted to her; the audit names her.
	var me struct {
		Budget struct{ Day store.Usage } `json:"budget"`
	}
	_, b := asUser(t, base, tokens["alice"], "GET", "/api/me", nil)
	json.Unmarshal(b, &me)
	if me.Budget.Day.Tokens != 1200 {
		t.Fatalf("alice's usage today %+v, want 1200 tokens (%s)", me.Budget.Day, b)
	}
	// Audit records are written in batches, up to 200 ms late.
	var models []store.AuditRecord
	for deadline := time.Now().Add(10 * time.Second); len(models) < 3 && time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		_, b = asUser(t, base, tokens["alice"], "GET", "/api/sessions/"+sessions["alice"]+"/audit", nil)
		var audit struct{ Records []store.AuditRecord }
		json.Unmarshal(b, &audit)
		models = models[:0]
		for _, r := range audit.Records {
			if r.Kind == store.AuditModel {
				models = append(models, r)
			}
		}
	}
	if len(models) != 3 {
		t.Fatalf("%d model audit records, want 3 (two sent, one refused)", len(models))
	}
	for _, r := range models {
		if r.Actor != "alice" {
			t.Fatalf("model audit record with actor %q, want alice", r.Actor)
		}
	}
	if models[2].Outcome != store.AuditRefused {
		t.Fatalf("the third request's record: %+v", models[2])
	}

	// The keys are in no API answer…
	var answers [][]byte
	for _, p := range []string{"/api/keys/user/alice", "/api/keys/user/bob", "/api/me", "/api/users", "/api/tokens?user=*",
		"/api/sessions", "/api/sessions/" + sessions["alice"], "/api/sessions/" + sessions["alice"] + "/events",
		"/api/sessions/" + sessions["alice"] + "/audit", "/api/access-log", "/api/budgets/user/alice", "/metrics"} {
		for _, cred := range []string{"root-key", tokens["alice"]} {
			_, b := asUser(t, base, cred, "GET", p, nil)
			answers = append(answers, b)
		}
	}
	// …nor in the store's files (the database and its WAL)…
	files, _ := filepath.Glob(filepath.Join(srv.Config.DataDir, "agentd.db*"))
	if len(files) == 0 {
		t.Fatal("no database files")
	}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		answers = append(answers, b)
	}
	// …nor in the sandbox: its environment and every file it can reach in
	// the data folder and the workspaces.
	_, sandboxView := run("bob", "q2", `env; cat /proc/self/environ | tr '\0' '\n'; grep -r -a -h -o 'sk-ant-[A-Za-z0-9-]*' `+srv.Config.DataDir+` 2>/dev/null; echo END`)
	if !strings.Contains(sandboxView, "END") || !strings.Contains(sandboxView, "ANTHROPIC_API_KEY=agentd-mp-") {
		t.Fatalf("the sandbox view is incomplete: %q", sandboxView)
	}
	answers = append(answers, []byte(sandboxView))
	for i, a := range answers {
		for u, k := range keys {
			if bytes.Contains(a, []byte(k)) || bytes.Contains(a, []byte(k[7:])) {
				t.Fatalf("%s's key found in answer/file %d: %.300s", u, i, a)
			}
		}
	}
	// Keys are listed by their hint only.
	_, b = asUser(t, base, tokens["alice"], "GET", "/api/keys/user/alice", nil)
	if !strings.Contains(string(b), `"hint":"…cret"`) {
		t.Fatalf("alice's keys: %s", b)
	}
}

// blocksText returns the session's blocks as JSON text.
func blocksText(t *testing.T, c *client.Client, id string) string {
	t.Helper()
	st, err := c.Session(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(st.Blocks)
	return string(b)
}
