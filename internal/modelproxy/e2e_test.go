package modelproxy_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"io"
	"io/fs"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentd/agentd"
	"github.com/agentd/agentd/agent"
	"github.com/agentd/agentd/client"
	"github.com/agentd/agentd/conversation"
	"github.com/agentd/agentd/internal/agentdtest"
	"github.com/agentd/agentd/internal/api"
	"github.com/agentd/agentd/internal/mockllm"
	"github.com/agentd/agentd/internal/sandbox/local"
	"github.com/agentd/agentd/profile"
	"github.com/agentd/agentd/restapi"
	"github.com/agentd/agentd/sandbox"
	"github.com/agentd/agentd/store"
)

// End-to-end: agentd with the pinned Claude Code CLI (tools/agents) and
// mock-llm as the real upstream behind the proxy. They skip without the
// CLI and under -short.

const e2eScript = `
rules:
  - name: slow-hello
    match: {userContains: "say hello slowly"}
    reply:
      chunkSize: 4
      delayMs: 120
      text: "Hello from behind the proxy, streamed slowly in small pieces."
  - name: dump-env
    match: {userContains: "dump the env", noToolResult: true}
    reply:
      content:
        - type: tool_use
          name: Bash
          input: {command: "env > env.txt && echo dumped", description: "Dump the environment"}
  - name: after-bash
    match: {toolResult: {name: Bash}}
    reply: {text: "Bash said: {{toolResult}}"}
  - name: hello
    match: {userContains: "hello"}
    reply: {text: "Hello."}
default:
  text: "no rule for {{lastUserText}}"
`

var e2eProfile = profile.Profile{ID: "auto", Name: "Auto", AllowedTools: []string{"Bash"},
	EnvironmentVariables: map[string]string{"CLAUDE_CODE_MAX_RETRIES": "1"}}

// recordingUpstream is mock-llm behind a recorder of every request's
// headers and body, and of when mock-llm finished answering it.
type recordingUpstream struct {
	mock *mockllm.Server
	url  string
	mu   sync.Mutex
	reqs []upstreamRequest
}

type upstreamRequest struct {
	method, path, query string
	header              http.Header
	body                []byte
	ended               time.Time
}

func newRecordingUpstream(t *testing.T, script string) *recordingUpstream {
	t.Helper()
	sc, err := mockllm.Parse([]byte(script))
	if err != nil {
		t.Fatal(err)
	}
	u := &recordingUpstream{mock: mockllm.New(sc, mockllm.WithLogger(slog.New(slog.DiscardHandler)))}
	h := u.mock.Handler()
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		r.Body = io.NopCloser(bytes.NewReader(body))
		h.ServeHTTP(w, r)
		u.mu.Lock()
		u.reqs = append(u.reqs, upstreamRequest{r.Method, r.URL.Path, r.URL.RawQuery, r.Header.Clone(), body, time.Now()})
		u.mu.Unlock()
	}))
	t.Cleanup(ts.Close)
	u.url = ts.URL
	return u
}

func (u *recordingUpstream) requests() []upstreamRequest {
	u.mu.Lock()
	defer u.mu.Unlock()
	return append([]upstreamRequest(nil), u.reqs...)
}

// checkKeys: every request reached the upstream with the real key and
// without the sandbox's token anywhere in its headers or query.
func (u *recordingUpstream) checkKeys(t *testing.T, realKey string, tokens ...string) {
	t.Helper()
	reqs := u.requests()
	if len(reqs) == 0 {
		t.Fatal("the upstream saw no request")
	}
	for i, r := range reqs {
		if got := r.header.Get("X-Api-Key"); got != realKey {
			t.Errorf("upstream request %d (%s %s) had x-api-key %.14q…, want the real key", i, r.method, r.path, got)
		}
		for _, tok := range tokens {
			for name, vs := range r.header {
				if strings.Contains(strings.Join(vs, " "), tok) {
					t.Errorf("upstream request %d carried the session token in %s", i, name)
				}
			}
			if strings.Contains(r.query, tok) {
				t.Errorf("upstream request %d carried the session token in its query", i)
			}
		}
	}
}

func newRealKey() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return "sk-ant-REAL-" + hex.EncodeToString(b[:])
}

// e2eTurn sends content and follows the session until that turn ends; it
// returns the turn's events with the time each arrived.
func e2eTurn(t *testing.T, c *client.Client, id, content string) ([]conversation.Event, []time.Time) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	st, err := c.Session(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	stream := c.Stream(ctx, id, st.LastSeq)
	defer stream.Close()
	sent, err := c.Send(ctx, id, content)
	if err != nil {
		t.Fatalf("send %q: %v", content, err)
	}
	var evs []conversation.Event
	var at []time.Time
	for {
		ev, err := stream.Next(ctx)
		if err != nil {
			t.Fatalf("turn %q: %v (after %d events)", content, err, len(evs))
		}
		evs, at = append(evs, ev), append(at, time.Now())
		if ev.Type != conversation.TypeQueryCompleted && ev.Type != conversation.TypeQueryFailed {
			continue
		}
		var q struct{ QueryID string }
		_ = json.Unmarshal(ev.Payload, &q)
		if q.QueryID == sent.QueryID {
			return evs, at
		}
	}
}

func mustComplete(t *testing.T, evs []conversation.Event) {
	t.Helper()
	end := evs[len(evs)-1]
	if end.Type != conversation.TypeQueryCompleted {
		t.Fatalf("turn ended %s %s", end.Type, end.Payload)
	}
}

// shellOutput runs a shell-session command and returns its output.
func shellOutput(t *testing.T, c *client.Client, id, cmd string) string {
	t.Helper()
	evs, _ := e2eTurn(t, c, id, cmd)
	mustComplete(t, evs)
	st, err := c.Session(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	return st.Blocks[len(st.Blocks)-1].Output
}

func createSession(t *testing.T, c *client.Client, arch, prof string) string {
	t.Helper()
	s, err := c.CreateSession(context.Background(), restapi.CreateSessionRequest{Architecture: arch, AgentProfileRef: prof})
	if err != nil {
		t.Fatal(err)
	}
	return s.SessionID
}

// auditPage reads GET /api/sessions/{id}/audit until want holds (the
// recorder writes in batches) or 10 s pass.
func auditPage(t *testing.T, base, id string, want func(api.AuditPage) bool) api.AuditPage {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		resp, err := http.Get(base + "/api/sessions/" + id + "/audit")
		if err != nil {
			t.Fatal(err)
		}
		var page api.AuditPage
		err = json.NewDecoder(resp.Body).Decode(&page)
		resp.Body.Close()
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("audit: %d %v", resp.StatusCode, err)
		}
		if want(page) || time.Now().After(deadline) {
			return page
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func hasRecord(page api.AuditPage, kind store.AuditKind, method string) bool {
	for _, r := range page.Records {
		if r.Kind == kind && r.Method == method {
			return true
		}
	}
	return false
}

var tokenRE = regexp.MustCompile(`agentd-mp-[A-Za-z0-9_-]{43}`)

// environsWith returns the pids whose environment contains s.
func environsWith(s string) []string {
	var pids []string
	dirs, _ := filepath.Glob("/proc/[0-9]*/environ")
	for _, f := range dirs {
		b, err := os.ReadFile(f)
		if err == nil && bytes.Contains(b, []byte(s)) {
			pids = append(pids, filepath.Base(filepath.Dir(f)))
		}
	}
	return pids
}

// filesWith returns the files under dir that contain s.
func filesWith(t *testing.T, dir, s string) []string {
	t.Helper()
	var hits []string
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return nil
		}
		b, err := os.ReadFile(p)
		if err == nil && bytes.Contains(b, []byte(s)) {
			hits = append(hits, p)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return hits
}

func TestE2EClaudeThroughTheProxy(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: end-to-end test")
	}
	bin := agentdtest.AgentBin(t, "claude")
	t.Parallel()
	up := newRecordingUpstream(t, e2eScript)
	realKey := newRealKey()
	srv := agentdtest.Start(t, agentd.Config{
		Env:       map[string]string{"ANTHROPIC_BASE_URL": up.url, "ANTHROPIC_API_KEY": realKey},
		Sandboxes: map[string]sandbox.Provider{"local": local.New(local.Options{Path: bin + ":/usr/local/bin:/usr/bin:/bin"})},
		Profiles:  []profile.Profile{e2eProfile},
		DisableUI: true,
	})
	c := srv.Client

	// A slow stream arrives as deltas over time, not in one piece at the end.
	claude := createSession(t, c, "claude-code", "auto")
	evs, at := e2eTurn(t, c, claude, "say hello slowly")
	mustComplete(t, evs)
	var deltas []time.Time
	for i, ev := range evs {
		if ev.Type == conversation.TypeBlockDelta && strings.Contains(string(ev.Payload), "\"delta\"") {
			deltas = append(deltas, at[i])
		}
	}
	var slowEnded time.Time
	for _, r := range up.requests() {
		if bytes.Contains(r.body, []byte("say hello slowly")) {
			slowEnded = r.ended
		}
	}
	if len(deltas) < 5 || slowEnded.IsZero() {
		t.Fatalf("%d deltas; slow request seen: %v", len(deltas), !slowEnded.IsZero())
	}
	if !deltas[0].Before(slowEnded) {
		t.Fatalf("the first delta reached the client %v after mock-llm finished the answer: buffered", deltas[0].Sub(slowEnded))
	}

	// The agent's Bash sees the token, not the key; so does the model.
	evs, _ = e2eTurn(t, c, claude, "please dump the env")
	mustComplete(t, evs)
	ws := filepath.Join(srv.Config.DataDir, "workspaces", claude)
	envTxt, err := os.ReadFile(filepath.Join(ws, "env.txt"))
	if err != nil {
		t.Fatal(err)
	}
	claudeToken := tokenRE.FindString(string(envTxt))
	if claudeToken == "" || !strings.Contains(string(envTxt), "ANTHROPIC_API_KEY="+claudeToken) ||
		!regexp.MustCompile(`ANTHROPIC_BASE_URL=http://127\.0\.0\.1:\d+/anthropic`).Match(envTxt) {
		t.Fatalf("the agent's environment:\n%s", envTxt)
	}

	// A shell session shows the same picture with its own token.
	sh := createSession(t, c, "shell", "")
	out := shellOutput(t, c, sh, "env")
	shToken := tokenRE.FindString(out)
	if shToken == "" || shToken == claudeToken || strings.Contains(out, realKey) {
		t.Fatalf("shell env (token %q, claude's %q):\n%s", shToken, claudeToken, out)
	}
	proxyURL := regexp.MustCompile(`ANTHROPIC_BASE_URL=(\S+)`).FindStringSubmatch(out)[1]

	// No process holds the key in its environment (the server was given
	// it in code), while the session's processes hold their token: the
	// long-lived Claude Code CLI, and a command that is running now.
	if pids := environsWith(claudeToken); len(pids) == 0 {
		t.Error("no process has the claude session's token: the CLI is not where expected")
	}
	ctx := context.Background()
	if _, err := c.Send(ctx, sh, "sleep 3; echo slept"); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for len(environsWith(shToken)) == 0 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if len(environsWith(shToken)) == 0 {
		t.Error("the running shell command does not have the session's token")
	}
	if pids := environsWith(realKey); len(pids) > 0 {
		t.Errorf("processes %v have the real key in their environment", pids)
	}
	// Nor is it in any file of the data folder: workspaces (the agent's
	// config and transcripts included), the database, run files.
	if hits := filesWith(t, srv.Config.DataDir, realKey); len(hits) > 0 {
		t.Errorf("the real key is in %v", hits)
	}
	// mock-llm only ever saw the real key, and the model saw only tokens.
	up.checkKeys(t, realKey, claudeToken, shToken)
	for _, r := range up.requests() {
		if bytes.Contains(r.body, []byte(realKey)) {
			t.Fatal("the real key reached the model in a prompt")
		}
	}

	// A wrong token is refused in Anthropic's shape.
	req, _ := http.NewRequest("POST", proxyURL+"/v1/messages", strings.NewReader(`{"model":"m","messages":[]}`))
	req.Header.Set("x-api-key", "agentd-mp-"+strings.Repeat("A", 43))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 401 || !strings.Contains(string(body), "authentication_error") {
		t.Fatalf("wrong token: %d %s", resp.StatusCode, body)
	}

	// The model requests are in the session's audit log, with usage.
	page := auditPage(t, srv.URL, claude, func(p api.AuditPage) bool { return len(p.Records) >= 3 })
	n := 0
	for _, r := range page.Records {
		if r.Kind == store.AuditModel && r.Path == "/v1/messages" && r.Status == 200 && r.Usage != nil && r.BytesIn > 0 && r.BytesOut > 0 {
			n++
		}
	}
	if n < 3 || page.ModelUsage == nil || page.ModelUsage.InputTokens == 0 {
		t.Fatalf("audit page: %d model records of %d, usage %+v", n, len(page.Records), page.ModelUsage)
	}
	waitShell(t, c, sh)

	// The proxy's counters are in /metrics (without session labels).
	resp, err = http.Get(srv.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	metrics, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, want := range []string{`agentd_model_proxy_tokens_total{provider="anthropic",type="input"}`,
		`agentd_model_proxy_requests_total{provider="anthropic",status="200"}`, `agentd_model_proxy_refusals_total{provider="anthropic",reason="unauthorized"} 1`,
		`agentd_audit_records_total{kind="model"}`} {
		if !strings.Contains(string(metrics), want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}

	// Deleting the session revokes its token.
	if err := c.DeleteSession(ctx, claude, false); err != nil {
		t.Fatal(err)
	}
	req, _ = http.NewRequest("POST", proxyURL+"/v1/messages", strings.NewReader(`{"model":"m","messages":[]}`))
	req.Header.Set("x-api-key", claudeToken)
	resp, err = http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 401 {
		t.Fatalf("the token of a deleted session: %d, want 401", resp.StatusCode)
	}
}

// waitShell waits for the shell session's running turn to end.
func waitShell(t *testing.T, c *client.Client, id string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		st, err := c.Session(context.Background(), id)
		if err == nil && st.ActiveQueryID == "" {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatal("the shell turn did not end")
}

const budgetScript = `
rules:
  - name: tool
    match: {userContains: "spend", noToolResult: true}
    reply:
      usage: {inputTokens: 900, outputTokens: 200}
      content:
        - type: tool_use
          name: Bash
          input: {command: "echo spent", description: "Spend"}
  - name: after
    match: {toolResult: {name: Bash}}
    reply: {text: "never reached"}
default:
  text: "hello"
  usage: {inputTokens: 10, outputTokens: 1}
`

func TestE2EBudgetExceeded(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: end-to-end test")
	}
	bin := agentdtest.AgentBin(t, "claude")
	t.Parallel()
	up := newRecordingUpstream(t, budgetScript)
	srv := agentdtest.Start(t, agentd.Config{
		Env:                map[string]string{"ANTHROPIC_BASE_URL": up.url, "ANTHROPIC_API_KEY": newRealKey()},
		Sandboxes:          map[string]sandbox.Provider{"local": local.New(local.Options{Path: bin + ":/usr/local/bin:/usr/bin:/bin"})},
		Profiles:           []profile.Profile{e2eProfile},
		SessionTokenBudget: 1000,
		DisableUI:          true,
	})
	c := srv.Client
	id := createSession(t, c, "claude-code", "auto")
	// The first model call (1100 tokens) is let through; the one after the
	// tool result is refused, and the turn fails with BUDGET_EXCEEDED.
	evs, _ := e2eTurn(t, c, id, "spend some tokens")
	end := evs[len(evs)-1]
	var q conversation.QueryFailed
	_ = json.Unmarshal(end.Payload, &q)
	if end.Type != conversation.TypeQueryFailed || q.Code != agent.CodeBudgetExceeded {
		t.Fatalf("turn ended %s %s, want query:failed BUDGET_EXCEEDED", end.Type, end.Payload)
	}
	var errEvents int
	for _, ev := range evs {
		if ev.Type == conversation.TypeError && strings.Contains(string(ev.Payload), agent.CodeBudgetExceeded) {
			errEvents++
			if !strings.Contains(string(ev.Payload), "1100 of 1000") {
				t.Errorf("error event %s", ev.Payload)
			}
		}
	}
	if errEvents != 1 {
		t.Fatalf("%d BUDGET_EXCEEDED error events, want 1", errEvents)
	}
	var main int
	for _, r := range up.mock.ModelRequests(mockllm.KindMain) {
		if len(r.ToolResults) > 0 {
			t.Fatal("the request over budget reached the model")
		}
		main++
	}
	if main != 1 {
		t.Fatalf("%d main requests reached the model, want 1", main)
	}
	// The next turn is refused at its first request.
	evs, _ = e2eTurn(t, c, id, "hello again")
	if end := evs[len(evs)-1]; end.Type != conversation.TypeQueryFailed || !strings.Contains(string(end.Payload), agent.CodeBudgetExceeded) {
		t.Fatalf("the next turn ended %s %s", end.Type, end.Payload)
	}
	page := auditPage(t, srv.URL, id, func(p api.AuditPage) bool {
		for _, r := range p.Records {
			if r.Outcome == store.AuditRefused {
				return true
			}
		}
		return false
	})
	if page.TokenBudget != 1000 || page.ModelUsage == nil || page.ModelUsage.InputTokens+page.ModelUsage.OutputTokens != 1100 {
		t.Fatalf("audit page budget %d usage %+v", page.TokenBudget, page.ModelUsage)
	}
}

// TestE2EExecutorAuditAndRestart: with the executor sandbox (agentd as a
// child process, killed with SIGKILL), executor calls appear in the audit
// log, and a token issued before the restart still works after it (the
// proxy comes back on the same port).
func TestE2EExecutorAuditAndRestart(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: end-to-end test")
	}
	bin := agentdtest.AgentBin(t, "claude")
	t.Parallel()
	up := newRecordingUpstream(t, e2eScript)
	realKey := newRealKey()
	profiles := t.TempDir()
	data, _ := json.Marshal(e2eProfile)
	if err := os.WriteFile(filepath.Join(profiles, "auto.json"), data, 0o644); err != nil {
		t.Fatal(err)
	}
	run, err := os.MkdirTemp("", "mp")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(run) })
	p := agentdtest.StartProcess(t, []string{"XDG_RUNTIME_DIR=" + run, "ANTHROPIC_BASE_URL=" + up.url, "ANTHROPIC_API_KEY=" + realKey,
		"PATH=" + bin + ":/usr/local/bin:/usr/bin:/bin"},
		"--data-dir", t.TempDir(), "--no-ui", "--sandbox", "executor", "--profiles", profiles)
	c := p.Client
	sh := createSession(t, c, "shell", "")
	claude := createSession(t, c, "claude-code", "auto")
	t.Cleanup(func() {
		// Executors outlive a killed server: stop them.
		dctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		_ = p.Client.DeleteSession(dctx, sh, true)
		_ = p.Client.DeleteSession(dctx, claude, true)
	})
	out := shellOutput(t, c, sh, `printf '%s %s' "$ANTHROPIC_API_KEY" "$ANTHROPIC_BASE_URL"`)
	token, url, _ := strings.Cut(out, " ")
	if !tokenRE.MatchString(token) || !regexp.MustCompile(`^http://127\.0\.0\.1:\d+`).MatchString(url) {
		t.Fatalf("the executor's processes see %q", out)
	}
	page := auditPage(t, p.URL, sh, func(p api.AuditPage) bool { return hasRecord(p, store.AuditExecutor, "exec.start") })
	if !hasRecord(page, store.AuditExecutor, "exec.start") {
		t.Fatalf("no exec.start record in %+v", page.Records)
	}
	for _, r := range page.Records {
		if r.Kind == store.AuditExecutor && r.Method == "exec.start" && (r.Outcome != store.AuditOK || r.BytesIn == 0 || r.Actor == "") {
			t.Errorf("exec.start record %+v", r)
		}
	}
	evs, _ := e2eTurn(t, c, claude, "hello there")
	mustComplete(t, evs)

	p.Restart() // SIGKILL, then a new server on the same data and port
	// The shell environment survived; its token still opens the proxy
	// (retried while the restarted server re-attaches: an agent's CLI
	// retries the same way).
	var resp *http.Response
	deadline := time.Now().Add(15 * time.Second)
	for {
		req, _ := http.NewRequest("POST", url+"/v1/messages", strings.NewReader(`{"model":"m","max_tokens":10,"messages":[{"role":"user","content":"hello"}]}`))
		req.Header.Set("x-api-key", token)
		req.Header.Set("anthropic-version", "2023-06-01")
		var err error
		resp, err = http.DefaultClient.Do(req)
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the proxy after the restart: %v\n%s", err, p.Logs())
		}
		time.Sleep(100 * time.Millisecond)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("a token issued before the restart: %d %s\n%s", resp.StatusCode, body, p.Logs())
	}
	if again := shellOutput(t, c, sh, `printf %s "$ANTHROPIC_API_KEY"`); !tokenRE.MatchString(again) {
		t.Fatalf("after the restart the shell sees %q", again)
	}
	evs, _ = e2eTurn(t, c, claude, "hello after the restart")
	mustComplete(t, evs)
	up.checkKeys(t, realKey, token)
	if strings.Contains(p.Logs(), realKey) {
		t.Error("the real key is in the server's log")
	}
}
