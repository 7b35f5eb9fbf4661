package mockllm

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// End-to-end tests: the real agent CLIs against mock-llm, offline. Each
// runs when its CLI is on PATH, or installed in the repository's pinned
// tools/agents folder (npm ci there), and skips with a message otherwise.
// They start a Node or native CLI each, which takes seconds; -short skips
// them.

const e2eTimeout = 3 * time.Minute

var pinnedCLIDir = filepath.Join("..", "..", "tools", "agents", "node_modules", ".bin")

func findCLI(t *testing.T, name string) string {
	t.Helper()
	if testing.Short() {
		t.Skipf("-short: skipping the %s end-to-end test", name)
	}
	if p, err := exec.LookPath(name); err == nil {
		return p
	}
	if p, err := filepath.Abs(filepath.Join(pinnedCLIDir, name)); err == nil {
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	t.Skipf("%s is not on PATH nor in tools/agents/node_modules/.bin: skipping its end-to-end test", name)
	return ""
}

// e2eServer serves script on a real TCP port.
func e2eServer(t *testing.T, script string) (*Server, string) {
	t.Helper()
	sc := mustParse(t, script)
	s := New(sc)
	ts := httptest.NewServer(s.Handler())
	t.Cleanup(ts.Close)
	return s, ts.URL
}

// runCLI runs bin in dir with a clean environment (PATH plus env), stdin
// closed, and returns stdout. It fails the test on a non-zero exit.
func runCLI(t *testing.T, dir, bin string, env []string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), e2eTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Dir = dir
	path := os.Getenv("PATH")
	if abs, err := filepath.Abs(pinnedCLIDir); err == nil {
		path = abs + string(os.PathListSeparator) + path
	}
	cmd.Env = append([]string{"PATH=" + path, "HOME=" + dir, "TERM=dumb", "NO_COLOR=1"}, env...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	cmd.WaitDelay = 5 * time.Second
	start := time.Now()
	err := cmd.Run()
	t.Logf("%s %s: %v in %v", filepath.Base(bin), strings.Join(args, " "), err, time.Since(start).Round(time.Millisecond))
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) || ctx.Err() != nil {
			t.Fatalf("%s failed: %v\nstdout:\n%s\nstderr:\n%s", bin, err, stdout.String(), tail(stderr.String(), 4000))
		}
		t.Fatalf("%s: %v", bin, err)
	}
	return stdout.String()
}

func tail(s string, n int) string {
	if len(s) > n {
		return "…" + s[len(s)-n:]
	}
	return s
}

// jsonLines decodes each JSON line of out (other lines are skipped: the
// CLIs print warnings on stdout too).
func jsonLines(out string) []map[string]any {
	var lines []map[string]any
	for _, l := range strings.Split(out, "\n") {
		var m map[string]any
		if json.Unmarshal([]byte(l), &m) == nil {
			lines = append(lines, m)
		}
	}
	return lines
}

func claudeEnv(dir, url string) []string {
	return []string{
		"ANTHROPIC_BASE_URL=" + url, "ANTHROPIC_API_KEY=mock-key",
		"CLAUDE_CONFIG_DIR=" + filepath.Join(dir, ".claude"),
		"DISABLE_AUTOUPDATER=1", "DISABLE_TELEMETRY=1", "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1",
	}
}

func claudeResult(t *testing.T, out string) map[string]any {
	t.Helper()
	for _, l := range jsonLines(out) {
		if l["type"] == "result" {
			return l
		}
	}
	t.Fatalf("no result line in claude output:\n%s", out)
	return nil
}

func TestE2EClaudeText(t *testing.T) {
	bin := findCLI(t, "claude")
	t.Parallel()
	s, url := e2eServer(t, `
rules:
  - name: hello
    match: {provider: anthropic, userContains: "say hello"}
    reply:
      chunkSize: 5
      content:
        - thinking: "A greeting is in order."
        - text: "Hello from mock-llm, streamed in pieces."
`)
	dir := t.TempDir()
	out := runCLI(t, dir, bin, claudeEnv(dir, url), "-p", "please say hello", "--output-format", "stream-json", "--verbose", "--include-partial-messages")
	res := claudeResult(t, out)
	if res["subtype"] != "success" || res["result"] != "Hello from mock-llm, streamed in pieces." {
		t.Fatalf("result %v", res)
	}
	deltas := 0
	for _, l := range jsonLines(out) {
		if ev, ok := l["event"].(map[string]any); ok && ev["type"] == "content_block_delta" {
			deltas++
		}
	}
	if deltas < 5 {
		t.Errorf("claude saw %d stream deltas; the answer should arrive in pieces", deltas)
	}
	main := s.ModelRequests(KindMain)
	if len(main) != 1 || main[0].Rule != "hello" || !main[0].Stream {
		t.Fatalf("main requests %+v", main)
	}
	if !contains(main[0].Tools, "Bash") || !contains(main[0].Tools, "Write") {
		t.Errorf("claude offered tools %v", main[0].Tools)
	}
}

func TestE2EClaudeBash(t *testing.T) {
	bin := findCLI(t, "claude")
	t.Parallel()
	script := string(readFile(t, "../../testdata/mockllm/claude-bash.yaml"))
	s, url := e2eServer(t, script)
	dir := t.TempDir()
	out := runCLI(t, dir, bin, claudeEnv(dir, url), "-p", "please run the probe", "--allowedTools", "Bash",
		"--output-format", "stream-json", "--verbose")
	res := claudeResult(t, out)
	if res["result"] != "The probe printed: mock-llm-ran" {
		t.Fatalf("result %v\n%s", res["result"], out)
	}
	if b, err := os.ReadFile(filepath.Join(dir, "proof.txt")); err != nil || string(b) != "mock-llm-ran\n" {
		t.Errorf("proof.txt: %q %v", b, err)
	}
	main := s.ModelRequests(KindMain)
	if len(main) != 2 {
		t.Fatalf("main requests %+v", main)
	}
	second := main[1]
	if second.Rule != "after-bash" || second.Turn != 2 || len(second.ToolResults) != 1 {
		t.Fatalf("second request %+v", second)
	}
	tr := second.ToolResults[0]
	if tr.Name != "Bash" || tr.IsError || !strings.Contains(tr.Content, "mock-llm-ran") || !strings.HasPrefix(tr.ID, "toolu_01") {
		t.Errorf("tool result %+v", tr)
	}
	// The request body carries the tool_result block with the tool_use id.
	var body struct {
		Messages []struct {
			Role    string
			Content json.RawMessage
		}
	}
	if err := json.Unmarshal(s.Requests()[len(s.Requests())-1].Body, &body); err != nil {
		t.Fatal(err)
	}
	last := body.Messages[len(body.Messages)-1]
	if last.Role != "user" || !bytes.Contains(last.Content, []byte(`"tool_result"`)) || !bytes.Contains(last.Content, []byte(tr.ID)) {
		t.Errorf("last message %s %s", last.Role, last.Content)
	}
}

func TestE2ECodexText(t *testing.T) {
	bin := findCLI(t, "codex")
	t.Parallel()
	s, url := e2eServer(t, `rules: [{name: hi, match: {api: responses, userContains: "hello codex"}, reply: {text: "Codex, offline, via mock-llm."}}]`)
	dir := t.TempDir()
	codexHome := filepath.Join(dir, ".codex")
	if err := os.MkdirAll(codexHome, 0o700); err != nil {
		t.Fatal(err)
	}
	config := `model = "gpt-5.5"
model_provider = "mockllm"

[model_providers.mockllm]
name = "mock-llm"
base_url = "` + url + `/v1"
env_key = "MOCKLLM_API_KEY"
wire_api = "responses"
`
	if err := os.WriteFile(filepath.Join(codexHome, "config.toml"), []byte(config), 0o600); err != nil {
		t.Fatal(err)
	}
	out := runCLI(t, dir, bin, []string{"CODEX_HOME=" + codexHome, "MOCKLLM_API_KEY=mock-key"},
		"exec", "--json", "--skip-git-repo-check", "hello codex")
	found := false
	for _, l := range jsonLines(out) {
		if item, ok := l["item"].(map[string]any); ok && item["type"] == "agent_message" && item["text"] == "Codex, offline, via mock-llm." {
			found = true
		}
	}
	if !found {
		t.Fatalf("no agent_message with the scripted text:\n%s", out)
	}
	main := s.ModelRequests(KindMain)
	if len(main) != 1 || main[0].API != APIResponses || main[0].Rule != "hi" {
		t.Fatalf("requests %+v", main)
	}
	if !contains(main[0].Tools, "exec_command") || !contains(main[0].Tools, "apply_patch") {
		t.Errorf("codex offered tools %v", main[0].Tools)
	}
}

func TestE2EGeminiText(t *testing.T) {
	bin := findCLI(t, "gemini")
	t.Parallel()
	s, url := e2eServer(t, `rules: [{name: hi, match: {provider: gemini, userContains: "hello gemini"}, reply: {text: "Gemini, offline, via mock-llm.", chunkSize: 8}}]`)
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, ".gemini"), 0o700); err != nil {
		t.Fatal(err)
	}
	settings := `{"security":{"auth":{"selectedType":"gemini-api-key"}},"privacy":{"usageStatisticsEnabled":false},"telemetry":{"enabled":false}}`
	if err := os.WriteFile(filepath.Join(dir, ".gemini", "settings.json"), []byte(settings), 0o600); err != nil {
		t.Fatal(err)
	}
	out := runCLI(t, dir, bin, []string{"GEMINI_CLI_HOME=" + dir, "GEMINI_CLI_TRUST_WORKSPACE=true",
		"GOOGLE_GEMINI_BASE_URL=" + url, "GEMINI_API_KEY=mock-key"},
		"-p", "hello gemini", "--output-format", "stream-json")
	var text strings.Builder
	status := ""
	for _, l := range jsonLines(out) {
		if l["type"] == "message" && l["role"] == "assistant" {
			text.WriteString(l["content"].(string))
		}
		if l["type"] == "result" {
			status, _ = l["status"].(string)
		}
	}
	if text.String() != "Gemini, offline, via mock-llm." || status != "success" {
		t.Fatalf("assistant text %q status %q\n%s", text.String(), status, out)
	}
	main := s.ModelRequests(KindMain)
	if len(main) != 1 || main[0].API != APIGemini || main[0].Rule != "hi" {
		t.Fatalf("main requests %+v", main)
	}
	// The model router's classifier call is a side request, answered by
	// the built-in schema answer, not by the rule.
	for _, r := range s.ModelRequests(KindStructured) {
		if r.Rule != "" {
			t.Errorf("side request answered by rule %q", r.Rule)
		}
	}
}

func TestE2EOpenCodeText(t *testing.T) {
	bin := findCLI(t, "opencode")
	t.Parallel()
	s, url := e2eServer(t, `rules: [{name: hi, match: {api: chat, userContains: "hello opencode"}, reply: {text: "OpenCode, offline, via mock-llm."}}]`)
	dir := t.TempDir()
	config := `{
  "$schema": "https://opencode.ai/config.json",
  "provider": {
    "mockllm": {
      "npm": "@ai-sdk/openai-compatible",
      "name": "mock-llm",
      "options": {"baseURL": "` + url + `/v1", "apiKey": "mock-key"},
      "models": {"mock-model": {"name": "Mock model", "tool_call": true}}
    }
  },
  "model": "mockllm/mock-model"
}`
	if err := os.WriteFile(filepath.Join(dir, "opencode.json"), []byte(config), 0o600); err != nil {
		t.Fatal(err)
	}
	env := []string{
		"XDG_CONFIG_HOME=" + filepath.Join(dir, ".config"), "XDG_DATA_HOME=" + filepath.Join(dir, ".local", "share"),
		"XDG_CACHE_HOME=" + filepath.Join(dir, ".cache"), "XDG_STATE_HOME=" + filepath.Join(dir, ".local", "state"),
		"OPENCODE_DISABLE_MODELS_FETCH=1", "OPENCODE_DISABLE_AUTOUPDATE=1",
	}
	out := runCLI(t, dir, bin, env, "run", "--format", "json", "hello opencode")
	var text strings.Builder
	for _, l := range jsonLines(out) {
		if l["type"] == "text" {
			if part, ok := l["part"].(map[string]any); ok {
				text.WriteString(part["text"].(string))
			}
		}
	}
	if strings.TrimSpace(text.String()) != "OpenCode, offline, via mock-llm." {
		t.Fatalf("text %q\n%s", text.String(), out)
	}
	main := s.ModelRequests(KindMain)
	if len(main) != 1 || main[0].API != APIChat || main[0].Rule != "hi" {
		t.Fatalf("main requests %+v", main)
	}
	if !contains(main[0].Tools, "bash") || !contains(main[0].Tools, "write") {
		t.Errorf("opencode offered tools %v", main[0].Tools)
	}
	// OpenCode asks for a session title too; the conversation rule must
	// not have answered it.
	for _, r := range s.ModelRequests(KindTitle) {
		if r.Rule != "" {
			t.Errorf("title request answered by rule %q", r.Rule)
		}
	}
}

func contains(list []string, s string) bool {
	for _, e := range list {
		if e == s {
			return true
		}
	}
	return false
}
