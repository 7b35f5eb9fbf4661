package claudecode

import (
	"context"
	"encoding/json"
	"errors"
	"path"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/agentd/agentd/agent"
	"github.com/agentd/agentd/agent/agenttest"
	"github.com/agentd/agentd/conversation"
)

// Runner tests against the fake CLI (fakecli_test.go): the control
// protocol, permissions, interrupt escalation, resume, bad output and
// subagents, each in well under a second.

var fastOpts = Options{InterruptTimeout: 300 * time.Millisecond, KillTimeout: 300 * time.Millisecond,
	FlushTimeout: time.Second, SubagentPoll: 20 * time.Millisecond, CloseTimeout: 2 * time.Second}

func startRunner(t *testing.T, h *testHost, opts Options) agent.Runner {
	t.Helper()
	r, err := New(opts).Start(context.Background(), h)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := r.Close(ctx); err != nil {
			t.Errorf("close: %v", err)
		}
	})
	return r
}

func turn(t *testing.T, r agent.Runner, q, content string) (agent.TurnResult, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	return r.Turn(ctx, agent.Turn{QueryID: q, Content: content})
}

func mustTurn(t *testing.T, r agent.Runner, q, content string) agent.TurnResult {
	t.Helper()
	res, err := turn(t, r, q, content)
	if err != nil {
		t.Fatalf("turn %s %q: %v", q, content, err)
	}
	return res
}

func TestTurnStreamsTextAndRecordsTheSession(t *testing.T) {
	h := newTestHost(t, fakeCLIDir(t))
	h.opts.Model = "claude-test-model"
	h.opts.Extra = json.RawMessage(`{"model":"claude-test-model","permissionMode":"acceptEdits"}`)
	r := startRunner(t, h, fastOpts)
	if res := mustTurn(t, r, "q1", "hello"); res.Result != "turn 1" {
		t.Fatalf("result %q", res.Result)
	}
	if len(h.ofType(conversation.TypeBlockDelta)) < 2 {
		t.Error("the text did not stream as deltas")
	}
	for _, typ := range []conversation.EventType{conversation.TypeQueryStarted, conversation.TypeQueryCompleted, conversation.TypeQueryFailed} {
		if n := len(h.ofType(typ)); n != 0 {
			t.Errorf("%d %s events: the session emits those", n, typ)
		}
	}
	st := h.reduce(t)
	if len(st.Blocks) != 1 || st.Blocks[0].Content != "turn 1" || st.Blocks[0].Status != conversation.StatusComplete {
		t.Fatalf("blocks %+v", st.Blocks)
	}
	if st.CostUSD <= 0 || st.Usage.OutputTokens == 0 {
		t.Errorf("no usage/cost: %+v %v", st.Usage, st.CostUSD)
	}
	var saved agentState
	if err := json.Unmarshal(h.AgentState(), &saved); err != nil || saved.ClaudeSessionID == "" || saved.Version != "9.9.9" {
		t.Fatalf("state %s: %v", h.AgentState(), err)
	}
	if h.version != "9.9.9" || h.agentSess != saved.ClaudeSessionID {
		t.Errorf("agent info %q %q", h.version, h.agentSess)
	}
	// Second turn: same process.
	if res := mustTurn(t, r, "q2", "hello"); res.Result != "turn 2" {
		t.Fatalf("result %q", res.Result)
	}
	starts := fakeStarts(t, h)
	if len(starts) != 1 {
		t.Fatalf("%d starts, want one process for both turns", len(starts))
	}
	argv := strings.Join(starts[0].Argv, " ")
	for _, want := range []string{"--input-format stream-json", "--output-format stream-json", "--verbose",
		"--include-partial-messages", "--permission-prompt-tool stdio", "--model=claude-test-model", "--permission-mode=acceptEdits"} {
		if !strings.Contains(argv, want) {
			t.Errorf("argv %q lacks %q", argv, want)
		}
	}
	if strings.Contains(argv, "--resume") || strings.Contains(argv, "test-key") {
		t.Errorf("argv %q", argv)
	}
	env := starts[0].Env
	if env["CLAUDE_CONFIG_DIR"] != path.Join(h.env.WorkDir(), configRel) || env["DISABLE_AUTOUPDATER"] != "1" ||
		env["CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC"] != "1" || env["ANTHROPIC_API_KEY"] != "test-key" {
		t.Errorf("env %v", env)
	}
	// The transcript is saved after the turn, including the line the CLI
	// wrote late.
	agenttest.WaitFor(t, 3*time.Second, "transcript", func() bool {
		h.mu.Lock()
		defer h.mu.Unlock()
		return strings.Count(string(h.transcripts[transcriptName(saved.ClaudeSessionID)]), `"type":"assistant"`) == 2
	})
}

func TestPermissionsAllowUpdateAndDeny(t *testing.T) {
	h := newTestHost(t, fakeCLIDir(t))
	h.answer = func(ctx context.Context, req agent.PermissionRequest) (agent.PermissionDecision, error) {
		switch req.ToolName {
		case "Write":
			return agent.PermissionDecision{Behavior: conversation.Allow, UpdatedInput: json.RawMessage(`{"command":"echo changed"}`)}, nil
		case "Edit":
			return agent.PermissionDecision{Behavior: conversation.Allow, UpdatedInput: json.RawMessage(`"not an object"`)}, nil
		case "Bash":
			return agent.PermissionDecision{Behavior: conversation.Allow}, nil
		}
		return agent.PermissionDecision{Behavior: conversation.Deny, Message: "not today"}, nil
	}
	r := startRunner(t, h, fastOpts)
	for i, tool := range []string{"Bash", "Write", "Edit", "Read"} {
		mustTurn(t, r, "q"+string(rune('1'+i)), "tool "+tool)
	}
	st := h.reduce(t)
	var outputs []string
	for _, b := range st.Blocks {
		if b.Type == conversation.BlockToolResult {
			outputs = append(outputs, b.Output)
		}
	}
	want := []string{`ran with {"command":"echo hi"}`, `ran with {"command":"echo changed"}`, `ran with {"command":"echo hi"}`, "denied: not today"}
	if !slices.Equal(outputs, want) {
		t.Fatalf("tool results %q\nwant %q", outputs, want)
	}
	if len(h.requests) != 4 || h.requests[0].ToolUseID == "" || string(h.requests[0].Input) != `{"command":"echo hi"}` {
		t.Fatalf("requests %+v", h.requests)
	}
}

func TestPermissionWithdrawnByTheCLIGetsNoAnswer(t *testing.T) {
	h := newTestHost(t, fakeCLIDir(t))
	h.answer = func(ctx context.Context, req agent.PermissionRequest) (agent.PermissionDecision, error) {
		<-ctx.Done() // a client never answers
		return agent.PermissionDecision{}, ctx.Err()
	}
	r := startRunner(t, h, fastOpts)
	if res := mustTurn(t, r, "q1", "cancelperm"); res.Result != "responses=0" {
		t.Fatalf("result %q: a withdrawn request was answered", res.Result)
	}
}

func TestPermissionErrorAnswersTheCLI(t *testing.T) {
	h := newTestHost(t, fakeCLIDir(t))
	h.answer = func(ctx context.Context, req agent.PermissionRequest) (agent.PermissionDecision, error) {
		return agent.PermissionDecision{}, errors.New("log is closed")
	}
	r := startRunner(t, h, fastOpts)
	mustTurn(t, r, "q1", "tool Bash")
	st := h.reduce(t)
	if b := st.Blocks[1]; b.Type != conversation.BlockToolResult || !b.IsError || !strings.Contains(b.Output, "log is closed") {
		t.Fatalf("result block %+v", b)
	}
}

func TestInterruptByControlKeepsTheProcess(t *testing.T) {
	h := newTestHost(t, fakeCLIDir(t))
	r := startRunner(t, h, fastOpts)
	errc := make(chan error, 1)
	go func() { _, err := turn(t, r, "q1", "hang"); errc <- err }()
	agenttest.WaitFor(t, 10*time.Second, "the tool call", func() bool { return len(h.ofType(conversation.TypeBlockUpsert)) > 0 })
	start := time.Now()
	if err := r.Interrupt(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := <-errc; !errors.Is(err, agent.ErrInterrupted) {
		t.Fatalf("turn ended with %v", err)
	}
	if d := time.Since(start); d > fastOpts.InterruptTimeout {
		t.Errorf("the control interrupt took %v; it should not need escalation", d)
	}
	if len(h.ofType(conversation.TypeError)) != 0 {
		t.Error("an interrupted turn reported an error event")
	}
	if res := mustTurn(t, r, "q2", "hello"); res.Result != "turn 2" {
		t.Fatalf("after interrupt: %q", res.Result)
	}
	if n := len(fakeStarts(t, h)); n != 1 {
		t.Errorf("%d starts: the process should survive a control interrupt", n)
	}
	if sys := h.reduce(t).Blocks; !slices.ContainsFunc(sys, func(b conversation.Block) bool { return b.Subtype == "interrupted" }) {
		t.Errorf("no interrupted block: %+v", sys)
	}
}

func TestInterruptEscalates(t *testing.T) {
	for _, tc := range []struct{ scenario, log string }{
		{"stubborn", "sending SIGINT"},
		{"immortal", "killing it"},
	} {
		t.Run(tc.scenario, func(t *testing.T) {
			h := newTestHost(t, fakeCLIDir(t))
			r := startRunner(t, h, fastOpts)
			mustTurn(t, r, "q1", "hello")
			errc := make(chan error, 1)
			go func() { _, err := turn(t, r, "q2", tc.scenario); errc <- err }()
			agenttest.WaitFor(t, 10*time.Second, "the tool call", func() bool {
				return slices.ContainsFunc(h.reduce(t).Blocks, func(b conversation.Block) bool { return b.Type == conversation.BlockToolUse })
			})
			if err := r.Interrupt(context.Background()); err != nil {
				t.Fatal(err)
			}
			if err := <-errc; !errors.Is(err, agent.ErrInterrupted) {
				t.Fatalf("turn ended with %v", err)
			}
			if len(h.logs(tc.log)) == 0 {
				t.Errorf("no %q log", tc.log)
			}
			// The next turn resumes the Claude session in a new process.
			if res := mustTurn(t, r, "q3", "hello"); res.Result != "turn 3" {
				t.Fatalf("after interrupt: %q", res.Result)
			}
			starts := fakeStarts(t, h)
			if len(starts) != 2 || !slices.ContainsFunc(starts[1].Argv, func(a string) bool { return strings.HasPrefix(a, "--resume=") }) {
				t.Fatalf("starts %+v", starts)
			}
			if logs := h.logs("restored"); len(logs) != 0 {
				t.Errorf("the transcript was in the workspace, yet: %q", logs)
			}
		})
	}
}

func TestInterruptWhenIdleIsNoop(t *testing.T) {
	h := newTestHost(t, fakeCLIDir(t))
	r := startRunner(t, h, fastOpts)
	if err := r.Interrupt(context.Background()); err != nil {
		t.Fatal(err)
	}
	if res := mustTurn(t, r, "q1", "hello"); res.Result != "turn 1" {
		t.Fatal(res.Result)
	}
}

func TestTurnContextCancelStopsTheCLI(t *testing.T) {
	h := newTestHost(t, fakeCLIDir(t))
	r := startRunner(t, h, fastOpts)
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { _, err := r.Turn(ctx, agent.Turn{QueryID: "q1", Content: "immortal"}); errc <- err }()
	agenttest.WaitFor(t, 10*time.Second, "the tool call", func() bool { return len(h.ofType(conversation.TypeBlockUpsert)) > 0 })
	cancel()
	select {
	case err := <-errc:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("turn ended with %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("turn did not end after its context")
	}
}

func TestCrashFailsTheTurnAndTheNextResumes(t *testing.T) {
	h := newTestHost(t, fakeCLIDir(t))
	r := startRunner(t, h, fastOpts)
	mustTurn(t, r, "q1", "hello")
	_, err := turn(t, r, "q2", "crash")
	if agent.CodeOf(err) != agent.CodeAgentExited || !strings.Contains(err.Error(), "fake crash: boom") || !strings.Contains(err.Error(), "code 3") {
		t.Fatalf("crash: %v", err)
	}
	if res := mustTurn(t, r, "q3", "hello"); res.Result != "turn 3" {
		t.Fatalf("after crash: %q (the resumed CLI should see the earlier prompts)", res.Result)
	}
}

func TestModelErrorFailsTheTurn(t *testing.T) {
	h := newTestHost(t, fakeCLIDir(t))
	r := startRunner(t, h, fastOpts)
	_, err := turn(t, r, "q1", "apierror")
	if agent.CodeOf(err) != agent.CodeModelError || !strings.Contains(err.Error(), "API Error: 500 boom") {
		t.Fatalf("err %v", err)
	}
	errs := h.ofType(conversation.TypeError)
	if len(errs) != 1 || !strings.Contains(string(errs[0].Payload), "MODEL_ERROR") {
		t.Fatalf("error events %v", errs)
	}
	if b := h.reduce(t).Blocks; len(b) != 1 || b[0].Type != conversation.BlockError || b[0].Code != "server_error" {
		t.Fatalf("blocks %+v", b)
	}
	// The process survives a model error.
	mustTurn(t, r, "q2", "hello")
}

func TestBadLinesAreLoggedAndSkipped(t *testing.T) {
	h := newTestHost(t, fakeCLIDir(t))
	r := startRunner(t, h, fastOpts)
	if res := mustTurn(t, r, "q1", "junk"); res.Result != "survived" {
		t.Fatalf("result %q", res.Result)
	}
	if n := len(h.logs("not stream-json")); n != 3 {
		t.Errorf("%d bad-line logs, want 3: %q", n, h.logs(""))
	}
	if len(h.logs(`unknown Claude Code line type "brand_new_kind"`)) != 1 || len(h.logs("unusable control message")) != 1 {
		t.Errorf("logs %q", h.logs(""))
	}
	mustTurn(t, r, "q2", "hello")
}

func TestUnsupportedControlRequestIsRefused(t *testing.T) {
	h := newTestHost(t, fakeCLIDir(t))
	r := startRunner(t, h, fastOpts)
	if res := mustTurn(t, r, "q1", "hook"); res.Result != "hook answer: error" {
		t.Fatalf("result %q", res.Result)
	}
}

func TestMissingCLI(t *testing.T) {
	h := newTestHost(t, t.TempDir())
	r := startRunner(t, h, fastOpts)
	_, err := turn(t, r, "q1", "hello")
	if agent.CodeOf(err) != agent.CodeAgentNotFound || !strings.Contains(err.Error(), "claude") {
		t.Fatalf("err %v", err)
	}
}

func TestCLIExitingAtStart(t *testing.T) {
	h := newTestHost(t, writeScript(t, `echo "claude: settings file is broken" >&2; exit 7`))
	r := startRunner(t, h, fastOpts)
	_, err := turn(t, r, "q1", "hello")
	if agent.CodeOf(err) != agent.CodeAgentExited || !strings.Contains(err.Error(), "settings file is broken") || !strings.Contains(err.Error(), "code 7") {
		t.Fatalf("err %v", err)
	}
}

func TestCLIPrintingGarbage(t *testing.T) {
	t.Run("then exits", func(t *testing.T) {
		h := newTestHost(t, writeScript(t, `echo "Welcome to a different program"; echo "usage: claude [x]"; exit 0`))
		r := startRunner(t, h, fastOpts)
		_, err := turn(t, r, "q1", "hello")
		if agent.CodeOf(err) != agent.CodeAgentProtocol || !strings.Contains(err.Error(), "Welcome to a different program") {
			t.Fatalf("err %v", err)
		}
		if logs := h.logs("not stream-json"); len(logs) != 2 {
			t.Errorf("%d bad-line logs, want 2: %q", len(logs), logs)
		}
	})
	t.Run("forever", func(t *testing.T) {
		h := newTestHost(t, writeScript(t, `while :; do echo "garbage garbage"; done`))
		opts := fastOpts
		opts.MaxBadLines = 50
		r := startRunner(t, h, opts)
		_, err := turn(t, r, "q1", "hello")
		if agent.CodeOf(err) != agent.CodeAgentProtocol || !strings.Contains(err.Error(), "50 lines") {
			t.Fatalf("err %v", err)
		}
		if n := len(h.logs("not stream-json")); n != 50 {
			t.Errorf("%d bad-line logs, want 50", n)
		}
	})
}

func TestResumeRestoresTheTranscriptFromTheStore(t *testing.T) {
	dir := fakeCLIDir(t)
	h := newTestHost(t, dir)
	r := startRunner(t, h, fastOpts)
	mustTurn(t, r, "q1", "hello")
	mustTurn(t, r, "q2", "hello")
	ctx := context.Background()
	if err := r.Close(ctx); err != nil {
		t.Fatal(err)
	}
	var st agentState
	json.Unmarshal(h.AgentState(), &st)
	if _, ok := h.transcripts[transcriptName(st.ClaudeSessionID)]; !ok {
		t.Fatalf("no transcript saved: %v", h.transcripts)
	}
	// A new environment without the CLI's files: the transcript comes back
	// from the store.
	h2 := newTestHost(t, dir)
	h2.state, h2.transcripts = h.state, h.transcripts
	r2 := startRunner(t, h2, fastOpts)
	if res := mustTurn(t, r2, "q3", "hello"); res.Result != "turn 3" {
		t.Fatalf("resumed turn %q: the model should see the two earlier prompts", res.Result)
	}
	starts := fakeStarts(t, h2)
	if len(starts) != 1 || !slices.Contains(starts[0].Argv, "--resume="+st.ClaudeSessionID) {
		t.Fatalf("starts %+v", starts)
	}
	if len(h2.logs("restored Claude Code session")) != 1 {
		t.Errorf("logs %q", h2.logs(""))
	}
}

func TestResumeWithoutTranscriptStartsFresh(t *testing.T) {
	h := newTestHost(t, fakeCLIDir(t))
	h.state = json.RawMessage(`{"claudeSessionId":"gone-session"}`)
	r := startRunner(t, h, fastOpts)
	if res := mustTurn(t, r, "q1", "hello"); res.Result != "turn 1" {
		t.Fatal(res.Result)
	}
	if len(h.logs("cannot resume Claude Code session gone-session")) != 1 {
		t.Errorf("logs %q", h.logs(""))
	}
	var st agentState
	json.Unmarshal(h.AgentState(), &st)
	if st.ClaudeSessionID == "gone-session" || st.ClaudeSessionID == "" {
		t.Errorf("state %+v", st)
	}
}

func TestResumeRefusedByTheCLIStartsFresh(t *testing.T) {
	h := newTestHost(t, fakeCLIDir(t))
	h.state = json.RawMessage(`{"claudeSessionId":"bad-session"}`)
	h.transcripts[transcriptName("bad-session")] = []byte("CORRUPT\n")
	r := startRunner(t, h, fastOpts)
	if res := mustTurn(t, r, "q1", "hello"); res.Result != "turn 1" {
		t.Fatal(res.Result)
	}
	if len(h.logs("could not resume")) != 1 || len(h.ofType(conversation.TypeError)) != 0 {
		t.Errorf("logs %q", h.logs(""))
	}
	starts := fakeStarts(t, h)
	if len(starts) != 2 || slices.ContainsFunc(starts[1].Argv, func(a string) bool { return strings.HasPrefix(a, "--resume") }) {
		t.Fatalf("starts %+v", starts)
	}
}

func TestSubagentBlocksFollowItsTranscript(t *testing.T) {
	for _, withFile := range []bool{true, false} {
		name := map[bool]string{true: "transcript", false: "stream only"}[withFile]
		t.Run(name, func(t *testing.T) {
			h := newTestHost(t, fakeCLIDir(t))
			r := startRunner(t, h, fastOpts)
			scenario := "subagent"
			if !withFile {
				scenario = "subagent-nofile"
			}
			if res := mustTurn(t, r, "q1", scenario); res.Result != "All done." {
				t.Fatal(res.Result)
			}
			st := h.reduce(t)
			if len(st.Subagents) != 1 {
				t.Fatalf("subagents %+v", st.Subagents)
			}
			sa := st.Subagents[0]
			if sa.Status != conversation.StatusComplete || sa.Output != "Sub done." || sa.AgentID == "" || sa.Prompt != "SUB: work" {
				t.Fatalf("subagent %+v", sa)
			}
			kinds := agenttest.BlockKinds(sa.Blocks)
			want := []string{"user_message", "assistant_text:Sub thinking aloud.", "tool_use", "tool_result", "assistant_text:Sub done."}
			if !withFile {
				want = []string{"user_message", "tool_use", "tool_result"}
			}
			if !slices.Equal(kinds, want) {
				t.Fatalf("subagent blocks %q, want %q", kinds, want)
			}
			// No block was emitted twice as a new block.
			seen := map[string]int{}
			for _, e := range h.ofType(conversation.TypeBlockUpsert) {
				var p struct{ Block conversation.Block }
				json.Unmarshal(e.Payload, &p)
				if e.Context.ConversationID == sa.ID && p.Block.Type == conversation.BlockUserMessage {
					seen[p.Block.ID]++
				}
			}
			for id, n := range seen {
				if n != 1 {
					t.Errorf("block %s upserted %d times", id, n)
				}
			}
			// Main conversation: text, subagent block, final text.
			if len(st.Blocks) != 3 || st.Blocks[1].Type != conversation.BlockSubagent || st.Blocks[1].Status != conversation.StatusComplete {
				t.Fatalf("main blocks %+v", st.Blocks)
			}
			if withFile {
				var saved agentState
				json.Unmarshal(h.AgentState(), &saved)
				h.mu.Lock()
				_, ok := h.transcripts[path.Join(saved.ClaudeSessionID, "subagents", "agent-"+sa.AgentID+".jsonl")]
				h.mu.Unlock()
				if !ok {
					t.Errorf("subagent transcript not saved: %v", h.transcripts)
				}
			}
		})
	}
}

func TestCLIDyingBetweenTurnsIsRestarted(t *testing.T) {
	h := newTestHost(t, fakeCLIDir(t))
	r := startRunner(t, h, fastOpts)
	mustTurn(t, r, "q1", "hello")
	rr := r.(*runner)
	rr.mu.Lock()
	p := rr.proc
	rr.mu.Unlock()
	_ = p.proc.Kill()
	agenttest.WaitFor(t, 5*time.Second, "the exit log", func() bool { return len(h.logs("exited between turns")) == 1 })
	if res := mustTurn(t, r, "q2", "hello"); res.Result != "turn 2" {
		t.Fatalf("after the CLI died: %q", res.Result)
	}
	if starts := fakeStarts(t, h); len(starts) != 2 || !slices.ContainsFunc(starts[1].Argv, func(a string) bool { return strings.HasPrefix(a, "--resume=") }) {
		t.Fatalf("starts %+v", starts)
	}
	// A turn on a process that exited just before the message went out is
	// retried in a new one.
	rr.mu.Lock()
	p = rr.proc
	rr.mu.Unlock()
	_ = p.proc.Kill()
	<-p.exitedCh
	end := p.runTurn(context.Background(), agent.Turn{QueryID: "x", Content: "hello"})
	if !end.notSent || end.err == nil {
		t.Fatalf("turn on an exited process: %+v", end)
	}
}

func TestPermissionModeOption(t *testing.T) {
	for in, want := range map[string]string{
		`{"permissionMode":"plan"}`:    "plan",
		`{"permissionMode":"--evil"}`:  "",
		`{"permissionMode":3}`:         "",
		`{}`:                           "",
		``:                             "",
		`{"permissionMode":"dontAsk"}`: "dontAsk",
	} {
		if got := permissionMode(json.RawMessage(in)); got != want {
			t.Errorf("%s: %q, want %q", in, got, want)
		}
	}
}
