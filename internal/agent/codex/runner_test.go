package codex

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/agentd/agentd/agent"
	"github.com/agentd/agentd/agent/agenttest"
	"github.com/agentd/agentd/conversation"
	"github.com/agentd/agentd/profile"
)

// fakeEnv names the scenario the test binary plays when it runs as a fake
// `codex app-server` (FakeAppServerMain).
const fakeEnv = "AGENTD_FAKE_CODEX"

// FakeAppServerMain plays a scripted `codex app-server` when the test
// binary was started as one; TestMain calls it first. It reports whether it
// ran (the process then exits).
func FakeAppServerMain() bool {
	scenario := os.Getenv(fakeEnv)
	if scenario == "" {
		return false
	}
	out := json.NewEncoder(os.Stdout)
	send := func(v any) { _ = out.Encode(v) }
	in := bufio.NewScanner(os.Stdin)
	in.Buffer(make([]byte, 1<<20), 1<<20)
	turnDone := func(status string, text string) {
		send(map[string]any{"method": "turn/started", "params": map[string]any{"threadId": "t1", "turn": map[string]any{"id": "u1"}}})
		if text != "" {
			item := map[string]any{"type": "agentMessage", "id": "m1", "text": text}
			send(map[string]any{"method": "item/completed", "params": map[string]any{"threadId": "t1", "turnId": "u1", "item": item}})
		}
		send(map[string]any{"method": "turn/completed", "params": map[string]any{"threadId": "t1",
			"turn": map[string]any{"id": "u1", "status": status, "error": map[string]any{"message": "the model broke", "codexErrorInfo": "internalServerError"}}}})
	}
	for in.Scan() {
		var m struct {
			ID     json.RawMessage `json:"id"`
			Method string          `json:"method"`
			Result json.RawMessage `json:"result"`
			Error  json.RawMessage `json:"error"`
		}
		if json.Unmarshal(in.Bytes(), &m) != nil {
			fmt.Fprintln(os.Stderr, "fake: bad input", in.Text())
			os.Exit(2)
		}
		switch m.Method {
		case "initialize":
			send(map[string]any{"id": m.ID, "result": map[string]any{"userAgent": "fake"}})
		case "initialized":
		case "thread/resume":
			if scenario == "resume-missing" {
				send(map[string]any{"id": m.ID, "error": map[string]any{"code": -32600, "message": "no rollout found for thread id t0"}})
				continue
			}
			send(map[string]any{"id": m.ID, "result": map[string]any{"thread": map[string]any{"id": "t1", "cliVersion": "9.9.9"}}})
		case "thread/start":
			send(map[string]any{"id": m.ID, "result": map[string]any{"thread": map[string]any{"id": "t1", "cliVersion": "9.9.9"}}})
		case "turn/start":
			send(map[string]any{"id": m.ID, "result": map[string]any{"turn": map[string]any{"id": "u1"}}})
			switch scenario {
			case "ok", "resume-missing":
				turnDone("completed", "hi")
			case "failed":
				turnDone("failed", "")
			case "crash":
				fmt.Fprintln(os.Stderr, "fatal: the fake fell over")
				os.Exit(5)
			case "garbage":
				fmt.Println("this is not JSON")
				fmt.Println(`{"neither":"request nor notification"}`)
				turnDone("completed", "still fine")
			case "request":
				send(map[string]any{"id": "s1", "method": "item/tool/requestUserInput", "params": map[string]any{"threadId": "t1"}})
				send(map[string]any{"id": "s2", "method": "attestation/generate", "params": map[string]any{}})
			case "approval":
				send(map[string]any{"method": "item/started", "params": map[string]any{"threadId": "t1", "turnId": "u1",
					"item": map[string]any{"type": "commandExecution", "id": "call_1", "command": "rm -rf /", "cwd": "/", "status": "inProgress"}}})
				send(map[string]any{"id": 7, "method": "item/commandExecution/requestApproval", "params": map[string]any{
					"threadId": "t1", "turnId": "u1", "itemId": "call_1", "command": "rm -rf /", "cwd": "/"}})
			case "stuck":
				// Never ends the turn, ignores turn/interrupt.
			case "many":
				// A streamed answer of 200 deltas, as for a long reply.
				send(map[string]any{"method": "turn/started", "params": map[string]any{"threadId": "t1", "turn": map[string]any{"id": "u1"}}})
				for i := 0; i < 200; i++ {
					send(map[string]any{"method": "item/agentMessage/delta", "params": map[string]any{"threadId": "t1", "turnId": "u1", "itemId": "m1", "delta": "word "}})
				}
				turnDone("completed", strings.Repeat("word ", 200))
			}
		case "turn/interrupt":
			send(map[string]any{"id": m.ID, "result": map[string]any{}})
			if scenario != "stuck" {
				turnDone("interrupted", "")
			}
		case "":
			// A response to one of our requests.
			switch scenario {
			case "request":
				if string(m.ID) == `"s2"` {
					turnDone("completed", "answers: "+string(m.Error))
				}
			case "approval":
				turnDone("completed", "decision "+string(m.Result))
			}
		default:
			send(map[string]any{"id": m.ID, "error": map[string]any{"code": -32601, "message": "unknown " + m.Method}})
		}
	}
	return true
}

// fakeRunner starts a runner whose `codex` is this test binary playing
// scenario.
func fakeRunner(t *testing.T, scenario string, h *agenttest.FakeHost) *runner {
	t.Helper()
	bin := agenttest.FakeEnv(t, h, fakeEnv, scenario)
	r := agenttest.Start[*runner](t, Architecture{Command: bin, StopGrace: 200 * time.Millisecond, StartTimeout: 20 * time.Second}, h)
	agenttest.CloseAtEnd(t, r)
	return r
}

func TestRunnerTurnAndResumeState(t *testing.T) {
	h := &agenttest.FakeHost{}
	r := fakeRunner(t, "ok", h)
	if _, err := r.Turn(agenttest.TurnCtx(t), agent.Turn{QueryID: "q1", Content: "hello"}); err != nil {
		t.Fatal(err)
	}
	if got := h.Texts(); len(got) != 1 || got[0] != "hi" {
		t.Fatalf("texts %q", got)
	}
	var st State
	_ = json.Unmarshal(h.AgentState(), &st)
	if st.ThreadID != "t1" || h.Info() != [2]string{"9.9.9", "t1"} {
		t.Fatalf("state %+v info %v", st, h.Info())
	}
	// The config went where CODEX_HOME points, without the key.
	cfg, err := h.Env().ReadFile(context.Background(), HomeDir+"/config.toml")
	if err != nil || !strings.Contains(string(cfg), `env_key = "OPENAI_API_KEY"`) || !strings.Contains(string(cfg), DefaultBaseURL) {
		t.Fatalf("config.toml %q %v", cfg, err)
	}
}

func TestRunnerResumeMissingThreadStartsNew(t *testing.T) {
	h := &agenttest.FakeHost{}
	_ = h.SaveAgentState(context.Background(), json.RawMessage(`{"threadId":"t0"}`))
	r := fakeRunner(t, "resume-missing", h)
	if _, err := r.Turn(agenttest.TurnCtx(t), agent.Turn{QueryID: "q1", Content: "hello"}); err != nil {
		t.Fatal(err)
	}
	var st State
	_ = json.Unmarshal(h.AgentState(), &st)
	if st.ThreadID != "t1" {
		t.Fatalf("state %+v", st)
	}
	if !strings.Contains(strings.Join(h.Logs(), "\n"), "could not resume thread t0") {
		t.Fatalf("no warning about the lost thread: %q", h.Logs())
	}
}

func TestRunnerTurnFailed(t *testing.T) {
	r := fakeRunner(t, "failed", &agenttest.FakeHost{})
	_, err := r.Turn(agenttest.TurnCtx(t), agent.Turn{QueryID: "q1", Content: "hello"})
	if agent.CodeOf(err) != agent.CodeModelError || !strings.Contains(err.Error(), "the model broke") || !strings.Contains(err.Error(), "internalServerError") {
		t.Fatalf("err %v (%s)", err, agent.CodeOf(err))
	}
}

func TestRunnerCrashMidTurn(t *testing.T) {
	h := &agenttest.FakeHost{}
	r := fakeRunner(t, "crash", h)
	_, err := r.Turn(agenttest.TurnCtx(t), agent.Turn{QueryID: "q1", Content: "hello"})
	if agent.CodeOf(err) != agent.CodeAgentExited || !strings.Contains(err.Error(), "the fake fell over") || !strings.Contains(err.Error(), "code 5") {
		t.Fatalf("err %v (%s)", err, agent.CodeOf(err))
	}
	// The next turn starts a new process (which crashes again, the same way).
	_, err = r.Turn(agenttest.TurnCtx(t), agent.Turn{QueryID: "q2", Content: "again"})
	if agent.CodeOf(err) != agent.CodeAgentExited {
		t.Fatalf("second turn: %v", err)
	}
}

func TestRunnerMalformedLinesAreLogged(t *testing.T) {
	h := &agenttest.FakeHost{}
	r := fakeRunner(t, "garbage", h)
	if _, err := r.Turn(agenttest.TurnCtx(t), agent.Turn{QueryID: "q1", Content: "hello"}); err != nil {
		t.Fatal(err)
	}
	logs := strings.Join(h.Logs(), "\n")
	if !strings.Contains(logs, "not a JSON-RPC message") || !strings.Contains(logs, "neither request, notification nor response") {
		t.Fatalf("logs %q", logs)
	}
	if got := h.Texts(); len(got) != 1 || got[0] != "still fine" {
		t.Fatalf("texts %q", got)
	}
}

func TestRunnerAnswersRequestsItCannotServe(t *testing.T) {
	h := &agenttest.FakeHost{}
	r := fakeRunner(t, "request", h)
	if _, err := r.Turn(agenttest.TurnCtx(t), agent.Turn{QueryID: "q1", Content: "hello"}); err != nil {
		t.Fatal(err)
	}
	got := h.Texts()
	if len(got) != 1 || !strings.Contains(got[0], "-32601") || !strings.Contains(got[0], "attestation/generate") {
		t.Fatalf("texts %q", got)
	}
}

func TestRunnerApprovalThroughHost(t *testing.T) {
	for _, tc := range []struct {
		behavior conversation.PermissionBehavior
		want     string
	}{{conversation.Allow, `"accept"`}, {conversation.Deny, `"decline"`}} {
		t.Run(string(tc.behavior), func(t *testing.T) {
			h := &agenttest.FakeHost{Decide: func(agent.PermissionRequest) agent.PermissionDecision {
				return agent.PermissionDecision{Behavior: tc.behavior}
			}}
			r := fakeRunner(t, "approval", h)
			if _, err := r.Turn(agenttest.TurnCtx(t), agent.Turn{QueryID: "q1", Content: "hello"}); err != nil {
				t.Fatal(err)
			}
			if len(h.Perms()) != 1 || h.Perms()[0].ToolName != "shell" || h.Perms()[0].ToolUseID != "call_1" || !strings.Contains(string(h.Perms()[0].Input), "rm -rf /") {
				t.Fatalf("permission requests %+v", h.Perms())
			}
			if got := h.Texts(); len(got) != 1 || !strings.Contains(got[0], tc.want) {
				t.Fatalf("texts %q", got)
			}
		})
	}
}

func TestRunnerInterruptStuckProcess(t *testing.T) {
	h := &agenttest.FakeHost{}
	r := fakeRunner(t, "stuck", h)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	errc := make(chan error, 1)
	go func() {
		_, err := r.Turn(ctx, agent.Turn{QueryID: "q1", Content: "hello"})
		errc <- err
	}()
	// Wait for the turn to be running, then interrupt: the fake ignores
	// turn/interrupt, so the session's backstop (ctx) ends it.
	agenttest.WaitFor(t, 20*time.Second, "the turn to start", func() bool {
		r.mu.Lock()
		defer r.mu.Unlock()
		return r.cur != nil && r.cur.turnID != ""
	})
	if err := r.Interrupt(context.Background()); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-errc:
		t.Fatalf("turn ended before the backstop: %v", err)
	case <-time.After(200 * time.Millisecond):
	}
	cancel()
	if err := <-errc; !errors.Is(err, agent.ErrInterrupted) {
		t.Fatalf("err %v", err)
	}
	r.mu.Lock()
	srv := r.srv
	r.mu.Unlock()
	if srv != nil {
		t.Fatal("the stuck process was kept")
	}
}

func TestRunnerMissingCLI(t *testing.T) {
	h := &agenttest.FakeHost{}
	agenttest.LocalEnv(t, h)
	run, err := Architecture{Command: "codex-that-does-not-exist"}.Start(context.Background(), h)
	if err != nil {
		t.Fatal(err)
	}
	defer run.Close(context.Background())
	_, err = run.Turn(agenttest.TurnCtx(t), agent.Turn{QueryID: "q1", Content: "hello"})
	if agent.CodeOf(err) != agent.CodeAgentNotFound {
		t.Fatalf("err %v", err)
	}
}

func TestStartRejectsUnknownApprovalMode(t *testing.T) {
	h := &agenttest.FakeHost{Prof: profile.Profile{ApprovalMode: "sometimes"}}
	if _, err := (Architecture{}).Start(context.Background(), h); err == nil || !strings.Contains(err.Error(), "sometimes") {
		t.Fatalf("err %v", err)
	}
}

func TestApprovalFor(t *testing.T) {
	for mode, want := range map[string]approval{
		"":          {policy: "untrusted", sandbox: "danger-full-access"},
		"default":   {policy: "untrusted", sandbox: "danger-full-access"},
		"auto_edit": {policy: "untrusted", sandbox: "danger-full-access", autoPatch: true},
		"yolo":      {policy: "never", sandbox: "danger-full-access"},
		"plan":      {policy: "never", sandbox: "read-only"},
	} {
		got, err := approvalFor(mode)
		if err != nil || got != want {
			t.Errorf("%q: %+v %v", mode, got, err)
		}
	}
}

func TestApprovalResponse(t *testing.T) {
	perms := json.RawMessage(`{"permissions":{"network":{"enabled":true}}}`)
	for _, tc := range []struct {
		method string
		params json.RawMessage
		allow  bool
		want   string
	}{
		{"item/commandExecution/requestApproval", nil, true, `{"decision":"accept"}`},
		{"item/fileChange/requestApproval", nil, false, `{"decision":"decline"}`},
		{"item/permissions/requestApproval", perms, true, `{"permissions":{"network":{"enabled":true}},"scope":"turn"}`},
		{"item/permissions/requestApproval", perms, false, `{"permissions":{},"scope":"turn"}`},
		{"execCommandApproval", nil, true, `{"decision":"approved"}`},
		{"applyPatchApproval", nil, false, `{"decision":{"denied":{"rejection":"no"}}}`},
	} {
		got, _ := json.Marshal(approvalResponse(tc.method, tc.params, tc.allow, "no"))
		if string(got) != tc.want {
			t.Errorf("%s allow=%v: %s, want %s", tc.method, tc.allow, got, tc.want)
		}
	}
}

func TestParseMessage(t *testing.T) {
	for line, want := range map[string]msgKind{
		`{"id":1,"method":"item/tool/call","params":{}}`: kindRequest,
		`{"id":"a","method":"x"}`:                        kindRequest,
		`{"method":"turn/started","params":{}}`:          kindNotification,
		`{"id":null,"method":"turn/started"}`:            kindNotification,
		`{"id":3,"result":{}}`:                           kindResponse,
		`{"id":3,"error":{"code":-1,"message":"x"}}`:     kindResponse,
		`{"id":3}`:     kindInvalid,
		`{}`:           kindInvalid,
		`[1,2]`:        kindInvalid,
		`not json`:     kindInvalid,
		`{"method":3}`: kindInvalid,
	} {
		_, got, err := parseMessage([]byte(line))
		if got != want || (want == kindInvalid) != (err != nil) {
			t.Errorf("%s: kind %d err %v, want %d", line, got, err, want)
		}
	}
}

func TestRenderConfig(t *testing.T) {
	cfg := renderConfig(configParams{BaseURL: "http://127.0.0.1:1/v1", Model: `gpt"5`, MCP: map[string]profile.MCPServer{
		"files": {Type: "stdio", Command: "mcp-files", Args: []string{"--root", "."}, Env: map[string]string{"A": "b"}},
		"web":   {Type: "http", URL: "https://mcp.example/x", Headers: map[string]string{"Authorization": "Bearer t"}},
	}})
	for _, want := range []string{
		`model = "gpt\"5"`, `model_provider = "agentd"`, `base_url = "http://127.0.0.1:1/v1"`, `env_key = "OPENAI_API_KEY"`,
		`wire_api = "responses"`, "[features]\nmulti_agent_v2 = true", `[mcp_servers."files"]`, `command = "mcp-files"`, `args = ["--root", "."]`, `env = { "A" = "b" }`,
		`[mcp_servers."web"]`, `url = "https://mcp.example/x"`, `http_headers = { "Authorization" = "Bearer t" }`,
	} {
		if !strings.Contains(cfg, want) {
			t.Errorf("config lacks %s:\n%s", want, cfg)
		}
	}
}

func TestParseVersion(t *testing.T) {
	for in, want := range map[string]string{"codex-cli 0.169.0\n": "0.169.0", "codex-cli 1.2.3-alpha.4": "1.2.3-alpha.4", "nothing": ""} {
		if got := ParseVersion(in); got != want {
			t.Errorf("%q: %q, want %q", in, got, want)
		}
	}
}

// TOML basic strings escape like JSON strings, so a quoted value must
// decode back to the original with encoding/json.
func FuzzTOMLString(f *testing.F) {
	for _, s := range []string{"", "plain", `quote " and \ backslash`, "line\nbreak\ttab\r", "\x00\x1f\x7f", "ünïcødé ✓"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if !utf8.ValidString(s) {
			return
		}
		q := tomlString(s)
		if strings.ContainsAny(q, "\n\r") {
			t.Fatalf("raw line break in %q", q)
		}
		var back string
		if err := json.Unmarshal([]byte(q), &back); err != nil || back != s {
			t.Fatalf("%q -> %s -> %q (%v)", s, q, back, err)
		}
	})
}

func FuzzParseMessage(f *testing.F) {
	for _, s := range []string{`{"id":1,"method":"x","params":{}}`, `{"method":"turn/started"}`, `{"id":3,"result":{}}`, `{"id":3}`, `null`, `{"id":[1],"method":""}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, line []byte) {
		m, kind, err := parseMessage(line)
		switch kind {
		case kindInvalid:
			if err == nil {
				t.Fatal("invalid without error")
			}
		case kindRequest:
			if m.Method == "" || !m.hasID() {
				t.Fatalf("request %+v", m)
			}
		case kindNotification:
			if m.Method == "" || m.hasID() {
				t.Fatalf("notification %+v", m)
			}
		case kindResponse:
			if m.Method != "" || !m.hasID() {
				t.Fatalf("response %+v", m)
			}
		}
	})
}

// BenchmarkRunnerTurn measures agentd's own cost of a turn over a
// long-lived app-server: JSON-RPC, conversion of 200 deltas and the
// emits (the fake host only appends; a real one stores).
func BenchmarkRunnerTurn(b *testing.B) {
	h := &agenttest.FakeHost{}
	bin := agenttest.FakeEnv(b, h, fakeEnv, "many")
	run := agenttest.Start[agent.Runner](b, Architecture{Command: bin, StopGrace: 200 * time.Millisecond}, h)
	defer run.Close(context.Background())
	agenttest.BenchTurns(b, run, h, true)
}

// TestLateDeltaNeverStaysPending races a notification's delta, which opens
// a pending text block, against the end of the turn.
func TestLateDeltaNeverStaysPending(t *testing.T) {
	agenttest.LateUpdateRace(t, 300, func(i int, h *agenttest.FakeHost) (func(), func()) {
		r := newRunner(Architecture{}, h, approval{})
		r.cur = &turnState{end: make(chan conversation.Payload, 1), asked: map[string]bool{}}
		r.turnOpen = true
		line, _ := json.Marshal(map[string]any{"method": "item/agentMessage/delta", "params": map[string]any{
			"threadId": "t1", "turnId": "u1", "itemId": fmt.Sprint("m", i), "delta": "one "}})
		var m wireMessage
		if err := json.Unmarshal(line, &m); err != nil {
			t.Fatal(err)
		}
		return func() { r.convert(line, &m) }, r.endTurn
	})
}
