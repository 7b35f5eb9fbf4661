package gemini

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/agentd/agentd/agent"
	"github.com/agentd/agentd/agent/agenttest"
	"github.com/agentd/agentd/conversation"
	"github.com/agentd/agentd/profile"
)

const fakeEnv = "AGENTD_FAKE_GEMINI"

// FakeGeminiMain plays a scripted `gemini --output-format stream-json`
// when the test binary was started as one; TestMain calls it first and
// exits when it ran.
func FakeGeminiMain() bool {
	scenario := os.Getenv(fakeEnv)
	if scenario == "" {
		return false
	}
	stdin, _ := io.ReadAll(os.Stdin)
	args := os.Args[1:]
	session := ""
	for i, a := range args {
		if (a == "--session-id" || a == "--resume") && i+1 < len(args) {
			session = args[i+1]
		}
	}
	ts := func() string { return time.Now().UTC().Format(time.RFC3339Nano) }
	line := func(v map[string]any) {
		v["timestamp"] = ts()
		b, _ := json.Marshal(v)
		fmt.Println(string(b))
	}
	switch scenario {
	case "ok", "garbage", "error-result", "no-result", "hang":
		if scenario == "garbage" {
			fmt.Println("Loaded cached credentials.")
		}
		line(map[string]any{"type": "init", "session_id": session, "model": "auto"})
		line(map[string]any{"type": "message", "role": "user", "content": string(stdin)})
		line(map[string]any{"type": "message", "role": "assistant", "content": "args: " + strings.Join(args, " "), "delta": true})
		line(map[string]any{"type": "message", "role": "assistant", "content": " | stdin: " + string(stdin), "delta": true})
		switch scenario {
		case "error-result":
			line(map[string]any{"type": "result", "status": "error", "error": map[string]any{"type": "ApiError", "message": "quota exhausted"}})
		case "no-result":
		case "hang":
			time.Sleep(time.Hour)
		default:
			line(map[string]any{"type": "result", "status": "success", "stats": map[string]any{"input_tokens": 10, "output_tokens": 3}})
		}
	}
	return true
}

func fakeRunner(t *testing.T, scenario string, h *agenttest.FakeHost) *runner {
	t.Helper()
	bin := agenttest.FakeEnv(t, h, fakeEnv, scenario)
	r := agenttest.Start[*runner](t, Architecture{Command: bin, StopGrace: 200 * time.Millisecond}, h)
	t.Cleanup(func() { _ = r.Close(context.Background()) })
	return r
}

// newHost is a host that keeps the transcripts the runner saves.
func newHost() *agenttest.FakeHost { return &agenttest.FakeHost{KeepTranscripts: true} }

func lastText(t *testing.T, h *agenttest.FakeHost) string {
	t.Helper()
	bs := h.Blocks(t)
	for i := len(bs) - 1; i >= 0; i-- {
		if bs[i].Type == conversation.BlockAssistantText {
			return bs[i].Content
		}
	}
	return ""
}

// logs joins h's log events, with their data.
func logs(h *agenttest.FakeHost) string { return strings.Join(h.LogsWithData(), "\n") }

func TestRunnerSessionThenResume(t *testing.T) {
	h := newHost()
	h.Prof = profile.Profile{AllowedTools: []string{"run_shell_command(git)"}, SystemPrompt: "be brief"}
	h.Opts = agent.Options{Model: "gemini-9"}
	r := fakeRunner(t, "ok", h)
	if _, err := r.Turn(agenttest.TurnCtx(t), agent.Turn{QueryID: "q1", Content: "first\nmessage"}); err != nil {
		t.Fatal(err)
	}
	var st State
	_ = json.Unmarshal(h.AgentState(), &st)
	first := lastText(t, h)
	if st.SessionID == "" || !strings.Contains(first, "--session-id "+st.SessionID) ||
		!strings.Contains(first, "--approval-mode default --allowed-tools run_shell_command(git) --model gemini-9 --prompt ") ||
		!strings.HasSuffix(first, "| stdin: first\nmessage") || h.Info()[1] != st.SessionID {
		t.Fatalf("first turn: %q state %+v info %v", first, st, h.Info())
	}
	if _, err := r.Turn(agenttest.TurnCtx(t), agent.Turn{QueryID: "q2", Content: "second"}); err != nil {
		t.Fatal(err)
	}
	if second := lastText(t, h); !strings.Contains(second, "--resume "+st.SessionID) {
		t.Fatalf("second turn did not resume: %q", second)
	}
	// Block ids carry the query id: the second process's blocks are new.
	ids := map[string]bool{}
	for _, b := range h.Blocks(t) {
		if ids[b.ID] {
			t.Fatalf("block id %s reused", b.ID)
		}
		ids[b.ID] = true
	}
	mem, err := h.Env().ReadFile(context.Background(), HomeDir+"/.gemini/GEMINI.md")
	if err != nil || string(mem) != "be brief\n" {
		t.Fatalf("GEMINI.md %q %v", mem, err)
	}
}

// TestChatFilesSavedAndRestored: every chat file of the session (one per
// minute it was resumed in) is saved and comes back into a workspace that
// lost them; other sessions' files are left out.
func TestChatFilesSavedAndRestored(t *testing.T) {
	ctx := context.Background()
	h := newHost()
	_ = h.SaveAgentState(ctx, json.RawMessage(`{"sessionId":"abcdef12-3456-7890-abcd-ef1234567890"}`))
	r := fakeRunner(t, "ok", h)
	files := map[string]string{
		chatDir + "/ws/chats/session-2026-11-22T01-00-abcdef12.jsonl": "first minute\n",
		chatDir + "/ws/chats/session-2026-11-22T01-01-abcdef12.jsonl": "second minute\n",
		chatDir + "/ws/chats/session-2026-11-22T01-00-99999999.jsonl": "another session\n",
	}
	for p, c := range files {
		if err := h.Env().WriteFile(ctx, p, []byte(c), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	r.saveChat(ctx)
	if err := h.Env().Remove(ctx, HomeDir); err != nil {
		t.Fatal(err)
	}
	r.restoreChat(ctx, r.state())
	for p, c := range files {
		got, err := h.Env().ReadFile(ctx, p)
		if strings.Contains(p, "99999999") {
			if err == nil {
				t.Errorf("another session's chat was saved: %s", p)
			}
			continue
		}
		if err != nil || string(got) != c {
			t.Errorf("%s: %q %v", p, got, err)
		}
	}
	// Files present: nothing is overwritten.
	_ = h.Env().WriteFile(ctx, chatDir+"/ws/chats/session-2026-11-22T01-01-abcdef12.jsonl", []byte("newer\n"), 0o600)
	r.restoreChat(ctx, r.state())
	if got, _ := h.Env().ReadFile(ctx, chatDir+"/ws/chats/session-2026-11-22T01-01-abcdef12.jsonl"); string(got) != "newer\n" {
		t.Errorf("a present chat was overwritten: %q", got)
	}
	// A transcript of another session is not restored.
	_ = h.SaveAgentState(ctx, json.RawMessage(`{"sessionId":"ffffffff-0000-0000-0000-000000000000"}`))
	_ = h.Env().Remove(ctx, HomeDir)
	r.restoreChat(ctx, r.state())
	if got := r.chatFiles(ctx, "abcdef12-3456-7890-abcd-ef1234567890"); len(got) != 0 {
		t.Errorf("restored into the wrong session: %v", got)
	}
}

func TestRunnerErrorResult(t *testing.T) {
	r := fakeRunner(t, "error-result", newHost())
	_, err := r.Turn(agenttest.TurnCtx(t), agent.Turn{QueryID: "q1", Content: "hi"})
	if agent.CodeOf(err) != agent.CodeModelError || !strings.Contains(err.Error(), "quota exhausted") {
		t.Fatalf("err %v", err)
	}
}

func TestRunnerNoResultLine(t *testing.T) {
	h := newHost()
	r := fakeRunner(t, "no-result", h)
	_, err := r.Turn(agenttest.TurnCtx(t), agent.Turn{QueryID: "q1", Content: "hi"})
	if agent.CodeOf(err) != agent.CodeAgentProtocol || !strings.Contains(err.Error(), "without a result line") {
		t.Fatalf("err %v", err)
	}
	agenttest.NoPending(t, h.Blocks(t))
}

func TestRunnerNonJSONOutputIsLogged(t *testing.T) {
	h := newHost()
	r := fakeRunner(t, "garbage", h)
	if _, err := r.Turn(agenttest.TurnCtx(t), agent.Turn{QueryID: "q1", Content: "hi"}); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(logs(h), "Loaded cached credentials.") {
		t.Fatalf("logs %q", logs(h))
	}
}

func TestRunnerInterrupt(t *testing.T) {
	h := newHost()
	r := fakeRunner(t, "hang", h)
	errc := make(chan error, 1)
	go func() {
		_, err := r.Turn(agenttest.TurnCtx(t), agent.Turn{QueryID: "q1", Content: "hi"})
		errc <- err
	}()
	agenttest.WaitFor(t, 20*time.Second, "output", func() bool { return lastText(t, h) != "" })
	if err := r.Interrupt(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := <-errc; !errors.Is(err, agent.ErrInterrupted) {
		t.Fatalf("err %v", err)
	}
	agenttest.NoPending(t, h.Blocks(t))
}

func TestRunnerMissingCLI(t *testing.T) {
	h := newHost()
	agenttest.LocalEnv(t, h)
	run, err := Architecture{Command: "gemini-that-does-not-exist"}.Start(context.Background(), h)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := run.Turn(agenttest.TurnCtx(t), agent.Turn{QueryID: "q1", Content: "hi"}); agent.CodeOf(err) != agent.CodeAgentNotFound {
		t.Fatalf("err %v", err)
	}
}

func TestApprovalArgs(t *testing.T) {
	for _, tc := range []struct {
		prof profile.Profile
		want string
	}{
		{profile.Profile{}, "--approval-mode default"},
		{profile.Profile{AllowedTools: []string{"read_file", " ", "run_shell_command(ls)"}}, "--approval-mode default --allowed-tools read_file --allowed-tools run_shell_command(ls)"},
		{profile.Profile{ApprovalMode: "auto_edit", AllowedTools: []string{"glob"}}, "--approval-mode auto_edit --allowed-tools glob"},
		{profile.Profile{ApprovalMode: "yolo", AllowedTools: []string{"glob"}}, "--approval-mode yolo"},
		{profile.Profile{ApprovalMode: "plan"}, "--approval-mode plan"},
	} {
		got, err := approvalArgs(tc.prof)
		if err != nil || strings.Join(got, " ") != tc.want {
			t.Errorf("%+v: %q %v, want %q", tc.prof, got, err, tc.want)
		}
	}
	if _, err := approvalArgs(profile.Profile{ApprovalMode: "always"}); err == nil {
		t.Error("unknown approvalMode accepted")
	}
}

func TestSettings(t *testing.T) {
	b, err := settings(profile.Profile{DisallowedTools: []string{"web_fetch"}, MCPServers: map[string]profile.MCPServer{
		"fs":  {Command: "mcp-fs", Args: []string{"-r"}, Env: map[string]string{"A": "1"}},
		"web": {URL: "https://x/mcp", Headers: map[string]string{"H": "v"}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	var s map[string]any
	if err := json.Unmarshal(b, &s); err != nil {
		t.Fatal(err)
	}
	compact, _ := json.Marshal(s)
	for _, want := range []string{`"selectedType":"gemini-api-key"`, `"exclude":["web_fetch"]`, `"usageStatisticsEnabled":false`,
		`"fs":{"args":["-r"],"command":"mcp-fs","env":{"A":"1"}}`, `"web":{"headers":{"H":"v"},"httpUrl":"https://x/mcp"}`} {
		if !strings.Contains(string(compact), want) {
			t.Errorf("settings lack %s: %s", want, compact)
		}
	}
}

func TestParseVersion(t *testing.T) {
	for in, want := range map[string]string{"0.61.0\n": "0.61.0", "gemini 1.0.0-preview.2": "1.0.0-preview.2", "": ""} {
		if got := ParseVersion(in); got != want {
			t.Errorf("%q: %q, want %q", in, got, want)
		}
	}
}

// BenchmarkRunnerTurn measures a turn with a CLI that starts at once: the
// process start (one per turn), stdin, the stream-json conversion and the
// emits. The real CLI's own start (seconds, node) comes on top.
func BenchmarkRunnerTurn(b *testing.B) {
	h := &agenttest.FakeHost{}
	bin := agenttest.FakeEnv(b, h, fakeEnv, "ok")
	run := agenttest.Start[agent.Runner](b, Architecture{Command: bin}, h)
	defer run.Close(context.Background())
	agenttest.BenchTurns(b, run, h, false)
}
