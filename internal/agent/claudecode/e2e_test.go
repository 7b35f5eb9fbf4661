package claudecode_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/agentd/agentd"
	"github.com/agentd/agentd/agent/agenttest"
	"github.com/agentd/agentd/client"
	"github.com/agentd/agentd/conversation"
	"github.com/agentd/agentd/internal/agent/claudecode"
	"github.com/agentd/agentd/internal/agent/claudecode/claudeconv"
	"github.com/agentd/agentd/internal/agentdtest"
	"github.com/agentd/agentd/internal/mockllm"
	"github.com/agentd/agentd/internal/sandbox/local"
	"github.com/agentd/agentd/profile"
	"github.com/agentd/agentd/restapi"
	"github.com/agentd/agentd/sandbox"
)

// End-to-end tests: agentd in this process, the pinned Claude Code CLI
// (tools/agents) in a local sandbox, mock-llm as the model. They skip when
// the CLI is not installed (scripts/setup.sh) and under -short. Each server
// gets its own sandbox PATH (instead of agentdtest.WithPath), so the tests run
// in parallel; a CLI start costs about a second.

// e2eScript answers every scenario below; rules are matched in order.
const e2eScript = `
rules:
  - name: hello
    match: {userContains: "say hello"}
    reply:
      chunkSize: 4
      content:
        - thinking: "A greeting is in order."
        - text: "Hello from mock-llm, streamed in pieces."
  - name: make-files
    match: {userContains: "make files at ", noToolResult: true}
    reply:
      content:
        - text: "Making two files."
        - type: tool_use
          name: Bash
          input: {command: "echo bash-ran > from-bash.txt && cat from-bash.txt", description: "Write from-bash.txt"}
        - type: tool_use
          name: Write
          input: {file_path: "{{slice lastUserText 14}}/written.txt", content: "written by the Write tool\n"}
  - name: files-done
    match: {toolResult: {name: Write}}
    reply: {text: "Files written."}
  - name: guarded
    match: {userContains: "run guarded", noToolResult: true}
    reply:
      content:
        - type: tool_use
          name: Bash
          input: {command: "echo guarded > guarded.txt", description: "Write guarded.txt"}
  - name: sleep
    match: {userContains: "sleep long", noToolResult: true}
    reply:
      content:
        - type: tool_use
          name: Bash
          input: {command: "sleep 31.5", description: "Sleep a long time"}
  - name: sub-start
    match: {userContains: "SUBTASK", noToolResult: true}
    reply:
      content:
        - text: "Subagent writing the file."
        - type: tool_use
          name: Bash
          input: {command: "echo sub-ran > sub.txt && cat sub.txt", description: "Write sub.txt"}
  - name: sub-end
    match: {toolResult: {name: Bash, contains: "sub-ran"}}
    reply: {text: "Subagent finished: sub-ran."}
  - name: delegate
    match: {userContains: "delegate the job", noToolResult: true}
    reply:
      chunkSize: 7
      content:
        - thinking: "I should delegate this to a subagent."
        - text: "Delegating to a subagent now."
        - type: tool_use
          name: Task
          input: {subagent_type: general-purpose, description: "Write sub file", prompt: "SUBTASK: write sub.txt using Bash"}
  - name: delegate-done
    match: {toolResult: {name: Task}}
    reply: {text: "All done: the subagent reported."}
  - name: delegate-done-agent
    match: {toolResult: {name: Agent}}
    reply: {text: "All done: the subagent reported."}
  - name: remember
    match: {userContains: "remember the word"}
    reply: {text: "I will remember it."}
  - name: recall
    match: {userContains: "what was the word"}
    reply: {text: "Let me look back."}
  - name: rate-limited
    times: 1
    match: {userContains: "rate me"}
    error: {status: 429, retryAfter: 0, message: "slow down (mock-llm)"}
  - name: rate-ok
    match: {userContains: "rate me"}
    reply: {text: "Recovered after a 429."}
  - name: broken
    match: {userContains: "break me"}
    error: {status: 500, message: "mock internal failure"}
  - name: image-in
    match: {userContains: "describe the images"}
    reply: {text: "I see {{images}}"}
  - name: image-read
    match: {userContains: "read the picture ", noToolResult: true}
    reply:
      content:
        - type: tool_use
          name: Read
          input: {file_path: "{{slice lastUserText 17}}"}
  - name: image-read-done
    match: {toolResult: {name: Read}}
    reply: {text: "The picture: {{images}}"}
  - name: bash-ok
    match: {toolResult: {name: Bash, isError: false}}
    reply: {text: "Bash said: {{toolResult}}"}
  - name: bash-failed
    match: {toolResult: {name: Bash, isError: true}}
    reply: {text: "Bash failed: {{toolResult}}"}
default:
  text: "no rule for {{lastUserText}}"
`

// autoProfile allows the tools the scenarios use (no prompts), limits the
// CLI's API retries, and carries a system prompt, a skill and a subagent
// definition to check they reach the model.
var autoProfile = profile.Profile{
	ID: "auto", Name: "Auto",
	SystemPrompt:         "AGENTD-E2E-SYSTEM-PROMPT: be brief.",
	AllowedTools:         []string{"Bash", "Write", "Task", "Agent"},
	EnvironmentVariables: map[string]string{"CLAUDE_CODE_MAX_RETRIES": "1"},
	Skills:               []profile.Skill{{Name: "e2e-skill", Description: "AGENTD-E2E-SKILL does nothing", Content: "Nothing to do."}},
	Subagents:            []profile.Subagent{{Name: "e2e-reviewer", Description: "AGENTD-E2E-REVIEWER reviews", Prompt: "You review."}},
}

type e2e struct {
	t    *testing.T
	srv  *agentdtest.Server
	mock *mockllm.Server
	c    *client.Client
}

// newE2E starts mock-llm and agentd with the pinned CLI on the sandbox's
// PATH (or the given folder instead).
func newE2E(t *testing.T, binDir string, mod func(*agentd.Config)) *e2e {
	t.Helper()
	if testing.Short() {
		t.Skip("-short: end-to-end test")
	}
	if binDir == "" {
		binDir = agentdtest.AgentBin(t, "claude")
	}
	t.Parallel()
	mock, url := agentdtest.MockLLM(t, e2eScript)
	cfg := agentd.Config{
		Env:       map[string]string{"ANTHROPIC_BASE_URL": url, "ANTHROPIC_API_KEY": "test-key"},
		Sandboxes: map[string]sandbox.Provider{"local": local.New(local.Options{Path: binDir + ":/usr/local/bin:/usr/bin:/bin"})},
		Profiles:  []profile.Profile{autoProfile},
		DisableUI: true,
	}
	if mod != nil {
		mod(&cfg)
	}
	srv := agentdtest.Start(t, cfg)
	return &e2e{t: t, srv: srv, mock: mock, c: srv.Client}
}

func (e *e2e) session(profileRef string) string {
	e.t.Helper()
	ctx := context.Background()
	s, err := e.srv.Client.CreateSession(ctx, restapi.CreateSessionRequest{Architecture: "claude-code", AgentProfileRef: profileRef})
	if err != nil {
		e.t.Fatal(err)
	}
	return s.SessionID
}

// turn sends content and follows the session until the turn ends,
// calling on for every event on the way. It returns the end event and the
// turn's events.
func (e *e2e) turn(id, content string, on func(conversation.Event)) (conversation.Event, []conversation.Event) {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	c := e.srv.Client
	st, err := c.Session(ctx, id)
	if err != nil {
		e.t.Fatal(err)
	}
	stream := c.Stream(ctx, id, st.LastSeq)
	defer stream.Close()
	sent, err := c.Send(ctx, id, content)
	if err != nil {
		e.t.Fatalf("send %q: %v", content, err)
	}
	var evs []conversation.Event
	for {
		ev, err := stream.Next(ctx)
		if err != nil {
			e.t.Fatalf("turn %q: %v (events so far: %s)", content, err, types(evs))
		}
		evs = append(evs, ev)
		if on != nil {
			on(ev)
		}
		if ev.Type != conversation.TypeQueryCompleted && ev.Type != conversation.TypeQueryFailed {
			continue
		}
		var q struct{ QueryID string }
		_ = json.Unmarshal(ev.Payload, &q)
		if q.QueryID == sent.QueryID {
			return ev, evs
		}
	}
}

func types(evs []conversation.Event) string {
	var s []string
	for _, e := range evs {
		s = append(s, string(e.Type))
	}
	return strings.Join(s, " ")
}

func payload[T any](t *testing.T, e conversation.Event) T {
	t.Helper()
	var v T
	if err := json.Unmarshal(e.Payload, &v); err != nil {
		t.Fatalf("%s payload: %v", e.Type, err)
	}
	return v
}

func mustComplete(t *testing.T, end conversation.Event, evs []conversation.Event) conversation.QueryCompleted {
	t.Helper()
	if end.Type != conversation.TypeQueryCompleted {
		t.Fatalf("turn ended with %s %s\nevents: %s", end.Type, end.Payload, types(evs))
	}
	return payload[conversation.QueryCompleted](t, end)
}

func (e *e2e) state(id string) restapi.SessionState {
	e.t.Helper()
	st, err := e.srv.Client.Session(context.Background(), id)
	if err != nil {
		e.t.Fatal(err)
	}
	return st
}

func (e *e2e) workspace(id string) string {
	return filepath.Join(e.srv.Config.DataDir, "workspaces", id)
}

func TestE2EStreamingText(t *testing.T) {
	e := newE2E(t, "", nil)
	id := e.session("auto")
	end, evs := e.turn(id, "please say hello", nil)
	done := mustComplete(t, end, evs)
	if done.Result != "Hello from mock-llm, streamed in pieces." {
		t.Fatalf("result %q", done.Result)
	}
	if n := len(agenttest.OfType(evs, conversation.TypeBlockDelta)); n < 5 {
		t.Errorf("%d block:delta events; the text should stream in pieces", n)
	}
	st := e.state(id)
	var kinds []conversation.BlockType
	for _, b := range st.Blocks {
		kinds = append(kinds, b.Type)
	}
	if !slices.Equal(kinds, []conversation.BlockType{conversation.BlockUserMessage, conversation.BlockThinking, conversation.BlockAssistantText}) {
		t.Fatalf("blocks %v", kinds)
	}
	if b := st.Blocks[2]; b.Content != "Hello from mock-llm, streamed in pieces." || b.Status != conversation.StatusComplete {
		t.Fatalf("text block %+v", b)
	}
	if st.Runtime.AgentVersion != "2.1.197" || st.Runtime.AgentSessionID == "" || st.CostUSD <= 0 || st.Usage.OutputTokens == 0 {
		t.Errorf("runtime %+v usage %+v cost %v", st.Runtime, st.Usage, st.CostUSD)
	}
	// The profile reached the model: system prompt, skill, subagent.
	main := e.mock.ModelRequests(mockllm.KindMain)
	if len(main) != 1 {
		t.Fatalf("%d main model requests", len(main))
	}
	for _, want := range []string{"AGENTD-E2E-SYSTEM-PROMPT", "AGENTD-E2E-SKILL", "AGENTD-E2E-REVIEWER"} {
		if !strings.Contains(string(main[0].Body), want) {
			t.Errorf("the model request lacks %s", want)
		}
	}
}

func TestE2EBashAndWriteCreateFiles(t *testing.T) {
	e := newE2E(t, "", nil)
	id := e.session("auto")
	ws := e.workspace(id)
	end, evs := e.turn(id, "make files at "+ws, nil)
	if done := mustComplete(t, end, evs); done.Result != "Files written." {
		t.Fatalf("result %q", done.Result)
	}
	for name, want := range map[string]string{"from-bash.txt": "bash-ran\n", "written.txt": "written by the Write tool\n"} {
		b, err := os.ReadFile(filepath.Join(ws, name))
		if err != nil || string(b) != want {
			t.Errorf("%s: %q %v", name, b, err)
		}
	}
	// file:created may come just after the turn: the watcher debounces.
	agenttest.WaitFor(t, 10*time.Second, "file:created events", func() bool {
		page, _ := e.c.Events(context.Background(), id, 0, 0)
		created := map[string]bool{}
		for _, ev := range page.Events {
			if ev.Type == conversation.TypeFileCreated {
				created[payload[conversation.FileChange](t, ev).Path] = true
			}
			if ev.Type == conversation.TypeFileCreated && strings.HasPrefix(payload[conversation.FileChange](t, ev).Path, ".agentd") {
				t.Fatalf("the CLI's own files are reported as workspace changes")
			}
		}
		return created["from-bash.txt"] && created["written.txt"]
	})
	st := e.state(id)
	var tools []string
	for _, b := range st.Blocks {
		if b.Type == conversation.BlockToolUse {
			tools = append(tools, b.ToolName)
		}
		if b.Type == conversation.BlockToolResult && b.IsError {
			t.Errorf("tool failed: %+v", b)
		}
	}
	if !slices.Equal(tools, []string{"Bash", "Write"}) {
		t.Errorf("tool calls %v", tools)
	}
	if len(st.PendingPermissions) != 0 {
		t.Errorf("pending permissions %+v (the profile allows these tools)", st.PendingPermissions)
	}
}

func TestE2EPermissionsAllowDenyAndLateAnswer(t *testing.T) {
	e := newE2E(t, "", nil)
	id := e.session("")
	ctx := context.Background()
	answer := func(behavior conversation.PermissionBehavior, msg string) (func(conversation.Event), *string) {
		var reqID string
		return func(ev conversation.Event) {
			if ev.Type != conversation.TypePermissionRequest {
				return
			}
			p := payload[conversation.PermissionRequested](t, ev)
			if p.ToolName != "Bash" || !strings.Contains(string(p.Input), "guarded.txt") || p.ToolUseID == "" || p.ExpiresAt.IsZero() {
				t.Errorf("permission request %+v", p)
			}
			reqID = p.RequestID
			if err := e.c.AnswerPermission(ctx, id, p.RequestID, restapi.PermissionAnswer{Behavior: behavior, Message: msg}); err != nil {
				t.Errorf("answer: %v", err)
			}
		}, &reqID
	}
	on, reqID := answer(conversation.Allow, "")
	end, evs := e.turn(id, "run guarded", on)
	if done := mustComplete(t, end, evs); done.Result != "Bash said: (Bash completed with no output)" {
		t.Fatalf("allowed: result %q", done.Result)
	}
	if b, err := os.ReadFile(filepath.Join(e.workspace(id), "guarded.txt")); err != nil || string(b) != "guarded\n" {
		t.Fatalf("guarded.txt %q %v", b, err)
	}
	res := agenttest.OfType(evs, conversation.TypePermissionResolved)
	if len(res) != 1 || payload[conversation.PermissionResolved](t, res[0]).By != conversation.ByUser {
		t.Fatalf("resolved %v", res)
	}
	// An answer after the resolution.
	err := e.c.AnswerPermission(ctx, id, *reqID, restapi.PermissionAnswer{Behavior: conversation.Deny})
	if !client.IsCode(err, "PERMISSION_ALREADY_RESOLVED") {
		t.Fatalf("late answer: %v", err)
	}
	var ce *client.Error
	if !errors.As(err, &ce) || ce.Status != http.StatusConflict {
		t.Fatalf("late answer status: %v", err)
	}

	os.Remove(filepath.Join(e.workspace(id), "guarded.txt"))
	on, _ = answer(conversation.Deny, "not on my watch")
	end, evs = e.turn(id, "run guarded", on)
	done := mustComplete(t, end, evs)
	if !strings.HasPrefix(done.Result, "Bash failed: ") || !strings.Contains(done.Result, "not on my watch") {
		t.Fatalf("denied: result %q", done.Result)
	}
	if _, err := os.Stat(filepath.Join(e.workspace(id), "guarded.txt")); err == nil {
		t.Fatal("a denied command ran")
	}
}

func TestE2EPermissionTimeout(t *testing.T) {
	e := newE2E(t, "", func(c *agentd.Config) { c.PermissionTimeout = time.Second })
	id := e.session("")
	end, evs := e.turn(id, "run guarded", nil)
	done := mustComplete(t, end, evs)
	res := agenttest.OfType(evs, conversation.TypePermissionResolved)
	if len(res) != 1 {
		t.Fatalf("resolved events: %d", len(res))
	}
	if p := payload[conversation.PermissionResolved](t, res[0]); p.By != conversation.ByTimeout || p.Behavior != conversation.Deny {
		t.Fatalf("resolution %+v", p)
	}
	if !strings.HasPrefix(done.Result, "Bash failed: ") {
		t.Fatalf("result %q", done.Result)
	}
}

func TestE2EInterruptLongBash(t *testing.T) {
	e := newE2E(t, "", nil)
	id := e.session("")
	ctx := context.Background()
	interrupted := make(chan time.Time, 1)
	started := false
	end, evs := e.turn(id, "sleep long", func(ev conversation.Event) {
		switch ev.Type {
		case conversation.TypePermissionRequest:
			p := payload[conversation.PermissionRequested](t, ev)
			_ = e.c.AnswerPermission(ctx, id, p.RequestID, restapi.PermissionAnswer{Behavior: conversation.Allow})
		case conversation.TypeBlockUpsert:
			b := payload[conversation.BlockUpsert](t, ev).Block
			if b.Type == conversation.BlockToolUse && b.Status == conversation.StatusComplete && !started {
				started = true
				go func() {
					deadline := time.Now().Add(10 * time.Second)
					for !sleepRunning() && time.Now().Before(deadline) {
						time.Sleep(20 * time.Millisecond)
					}
					interrupted <- time.Now()
					if err := e.c.Interrupt(ctx, id); err != nil {
						t.Errorf("interrupt: %v", err)
					}
				}()
			}
		}
	})
	if done := mustComplete(t, end, evs); !done.Interrupted {
		t.Fatalf("turn not marked interrupted: %+v", done)
	}
	select {
	case at := <-interrupted:
		if d := time.Since(at); d > 8*time.Second {
			t.Errorf("the interrupt took %v", d)
		}
	default:
		t.Fatal("the turn ended before the interrupt")
	}
	agenttest.WaitFor(t, 5*time.Second, "sleep to stop", func() bool { return !sleepRunning() })
	// The session stays usable.
	end, evs = e.turn(id, "say hello", nil)
	if done := mustComplete(t, end, evs); done.Result != "Hello from mock-llm, streamed in pieces." {
		t.Fatalf("after interrupt: %q", done.Result)
	}
}

// sleepRunning reports whether the interrupt test's `sleep 31.5` runs.
func sleepRunning() bool {
	procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, p := range procs {
		b, err := os.ReadFile(p)
		if err == nil && strings.Contains(string(b), "sleep\x0031.5") {
			return true
		}
	}
	return false
}

func TestE2ESubagentAndTranscriptParity(t *testing.T) {
	e := newE2E(t, "", nil)
	id := e.session("auto")
	end, evs := e.turn(id, "please delegate the job", nil)
	if done := mustComplete(t, end, evs); done.Result != "All done: the subagent reported." {
		t.Fatalf("result %q", done.Result)
	}
	if len(agenttest.OfType(evs, conversation.TypeSubagentSpawned)) != 1 || len(agenttest.OfType(evs, conversation.TypeSubagentCompleted)) != 1 {
		t.Fatalf("subagent events: %s", types(evs))
	}
	st := e.state(id)
	if len(st.Subagents) != 1 {
		t.Fatalf("subagents %+v", st.Subagents)
	}
	sa := st.Subagents[0]
	if sa.Status != conversation.StatusComplete || sa.Output != "Subagent finished: sub-ran." || sa.AgentID == "" ||
		sa.Prompt != "SUBTASK: write sub.txt using Bash" || sa.SubagentType != "general-purpose" {
		t.Fatalf("subagent %+v", sa)
	}
	kinds := agenttest.BlockKinds(sa.Blocks)
	want := []string{"user_message", "assistant_text:Subagent writing the file.", "tool_use", "tool_result", "assistant_text:Subagent finished: sub-ran."}
	if !slices.Equal(kinds, want) {
		t.Fatalf("subagent blocks %q\nwant %q", kinds, want)
	}
	if b, err := os.ReadFile(filepath.Join(e.workspace(id), "sub.txt")); err != nil || string(b) != "sub-ran\n" {
		t.Errorf("sub.txt %q %v", b, err)
	}

	// Parity: the saved transcript, converted, gives the same blocks.
	e.srv.Client.DeleteSession(context.Background(), id, false) // the CLI exits, its files are final
	saved := convertSavedTranscript(t, e.workspace(id), st.Runtime.AgentSessionID)
	live := e.state(id)
	clear := func(bs []conversation.Block) []conversation.Block {
		out := slices.Clone(bs)
		for i := range out {
			out[i].Timestamp = time.Time{}
		}
		return out
	}
	lm, sm := clear(live.Blocks), clear(saved.Blocks)
	// The user's message: the session's own block live, the CLI's line in
	// the transcript; same text.
	if len(lm) == 0 || len(sm) == 0 || lm[0].Type != conversation.BlockUserMessage || sm[0].Type != conversation.BlockUserMessage || lm[0].Content != sm[0].Content {
		t.Fatalf("first blocks: live %+v saved %+v", lm, sm)
	}
	if !reflect.DeepEqual(lm[1:], sm[1:]) {
		t.Errorf("main blocks differ\nlive:  %s\nsaved: %s", blockIDs(lm[1:]), blockIDs(sm[1:]))
	}
	if len(saved.Subagents) != 1 {
		t.Fatalf("saved subagents %d", len(saved.Subagents))
	}
	ls, ss := live.Subagents[0], saved.Subagents[0]
	if ls.ID != ss.ID || ls.AgentID != ss.AgentID || ls.Output != ss.Output || ls.Status != ss.Status {
		t.Errorf("subagent differs\nlive  %+v\nsaved %+v", ls, ss)
	}
	if !reflect.DeepEqual(clear(ls.Blocks), clear(ss.Blocks)) {
		t.Errorf("subagent blocks differ\nlive:  %s\nsaved: %s", blockIDs(ls.Blocks), blockIDs(ss.Blocks))
	}
}

func blockIDs(bs []conversation.Block) string {
	var s []string
	for _, b := range bs {
		s = append(s, b.ID+"("+string(b.Type)+")")
	}
	return strings.Join(s, " ")
}

// convertSavedTranscript converts the CLI's session files in a workspace.
func convertSavedTranscript(t *testing.T, ws, claudeSession string) conversation.State {
	t.Helper()
	mains, _ := filepath.Glob(filepath.Join(ws, ".agentd", "claude", "projects", "*", claudeSession+".jsonl"))
	if len(mains) != 1 {
		t.Fatalf("transcript of %s: %v", claudeSession, mains)
	}
	subs, _ := filepath.Glob(filepath.Join(filepath.Dir(mains[0]), claudeSession, "subagents", "agent-*.jsonl"))
	var inputs []claudeconv.Input
	for _, p := range append(mains, subs...) {
		f, err := os.Open(p)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		inputs = append(inputs, claudeconv.Input{Name: p, R: f})
	}
	sink := &collect{}
	if err := claudeconv.ConvertTranscripts(inputs, sink); err != nil {
		t.Fatal(err)
	}
	st, err := conversation.Reduce(sink.events)
	if err != nil {
		t.Fatal(err)
	}
	return st
}

type collect struct{ events []conversation.Event }

func (c *collect) Emit(e conversation.Event) error { c.events = append(c.events, e); return nil }
func (c *collect) Warn(string, int, error)         {}

func TestE2ERestartBetweenTurnsResumes(t *testing.T) {
	e := newE2E(t, "", nil)
	id := e.session("")
	end, evs := e.turn(id, "remember the word PINEAPPLE", nil)
	mustComplete(t, end, evs)
	first := e.state(id).Runtime.AgentSessionID

	e.srv.Restart()
	e.c = e.srv.Client
	// Lose the CLI's files too, as a new machine would: the transcript
	// comes back from the store.
	if err := os.RemoveAll(filepath.Join(e.workspace(id), ".agentd")); err != nil {
		t.Fatal(err)
	}
	end, evs = e.turn(id, "what was the word?", nil)
	if done := mustComplete(t, end, evs); done.Result != "Let me look back." {
		t.Fatalf("result %q", done.Result)
	}
	main := e.mock.ModelRequests(mockllm.KindMain)
	last := main[len(main)-1]
	if last.Rule != "recall" || !strings.Contains(string(last.Body), "remember the word PINEAPPLE") || !strings.Contains(string(last.Body), "I will remember it.") {
		t.Fatalf("the second turn's request does not carry the first turn (rule %s)", last.Rule)
	}
	if st := e.state(id); st.Runtime.AgentSessionID != first {
		t.Errorf("Claude session %s after restart, want %s", st.Runtime.AgentSessionID, first)
	}
}

func TestE2EModelErrors(t *testing.T) {
	e := newE2E(t, "", nil)
	id := e.session("auto")
	end, evs := e.turn(id, "rate me", nil)
	if done := mustComplete(t, end, evs); done.Result != "Recovered after a 429." {
		t.Fatalf("result %q", done.Result)
	}
	retried := false
	for _, ev := range agenttest.OfType(evs, conversation.TypeLog) {
		p := payload[conversation.LogEvent](t, ev)
		retried = retried || (p.Level == conversation.LevelWarn && strings.Contains(p.Message, "429"))
	}
	if !retried {
		t.Errorf("no warning about the 429: %s", types(evs))
	}

	end, evs = e.turn(id, "break me", nil)
	if end.Type != conversation.TypeQueryFailed {
		t.Fatalf("turn ended with %s %s", end.Type, end.Payload)
	}
	if f := payload[conversation.QueryFailed](t, end); f.Code != "MODEL_ERROR" || !strings.Contains(f.Error, "500") {
		t.Fatalf("failure %+v", f)
	}
	errs := agenttest.OfType(evs, conversation.TypeError)
	if len(errs) != 1 || payload[conversation.ErrorEvent](t, errs[0]).Code != "MODEL_ERROR" {
		t.Fatalf("error events: %v", errs)
	}
	st := e.state(id)
	if b := st.Blocks[len(st.Blocks)-1]; b.Type != conversation.BlockError {
		t.Errorf("last block %+v", b)
	}
	// The session stays usable.
	end, evs = e.turn(id, "say hello", nil)
	mustComplete(t, end, evs)
}

// Bad CLIs: no real CLI needed.

func badCLI(t *testing.T, script string) string {
	t.Helper()
	dir := t.TempDir()
	if script != "" {
		if err := os.WriteFile(filepath.Join(dir, "claude"), []byte("#!/bin/sh\n"+script+"\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func TestE2EBadCLIs(t *testing.T) {
	for _, tc := range []struct {
		name, script, code, says string
	}{
		{"missing", "", "AGENT_NOT_FOUND", "claude is not installed"},
		{"exits at start", `echo "claude: unsupported platform" >&2; exit 9`, "AGENT_EXITED", "unsupported platform"},
		{"prints garbage", `echo "this is not the CLI you are looking for"; exit 0`, "AGENT_PROTOCOL", "does not speak stream-json"},
		{"prints garbage forever", `while :; do echo "garbage"; done`, "AGENT_PROTOCOL", "not stream-json"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newE2E(t, badCLI(t, tc.script), nil)
			id := e.session("")
			end, evs := e.turn(id, "say hello", nil)
			if end.Type != conversation.TypeQueryFailed {
				t.Fatalf("turn ended with %s", end.Type)
			}
			f := payload[conversation.QueryFailed](t, end)
			if f.Code != tc.code || !strings.Contains(f.Error, tc.says) {
				t.Fatalf("failure %+v", f)
			}
			if _, err := e.c.Health(context.Background()); err != nil {
				t.Fatalf("server down: %v", err)
			}
			_ = evs
			// The session takes the next message (and fails it the same way).
			end, _ = e.turn(id, "say hello", nil)
			if end.Type != conversation.TypeQueryFailed {
				t.Fatalf("second turn ended with %s", end.Type)
			}
		})
	}
}

// TestE2EProbeRealCLI: what GET /api/architectures reports for claude-code
// (the registry calls Probe; listing every architecture probes the other
// CLIs too, which takes seconds, so the probe is called directly).
func TestE2EProbeRealCLI(t *testing.T) {
	if testing.Short() {
		t.Skip("-short")
	}
	bin := agentdtest.AgentBin(t, "claude")
	t.Parallel()
	v, err := claudecode.New(claudecode.Options{Command: filepath.Join(bin, "claude")}).Probe(context.Background())
	if err != nil || v != "2.1.197" {
		t.Fatalf("probe: %q %v", v, err)
	}
	if _, err := claudecode.New(claudecode.Options{Command: filepath.Join(t.TempDir(), "claude")}).Probe(context.Background()); err == nil {
		t.Fatal("a missing CLI probed fine")
	}
}

// TestServerPermissionOpenAtTurnEnd: a CLI that ends its turn while a
// permission request is open (fake CLI, real server). The request is
// resolved, the next turn runs and the session closes cleanly.
func TestServerPermissionOpenAtTurnEnd(t *testing.T) {
	e := newE2E(t, claudecode.FakeCLIDir(t), nil)
	id := e.session("")
	end, evs := e.turn(id, "askthenresult", nil)
	mustComplete(t, end, evs)
	if len(agenttest.OfType(evs, conversation.TypePermissionRequest)) != 1 {
		t.Fatalf("events %s", types(evs))
	}
	agenttest.WaitFor(t, 5*time.Second, "the request to be resolved", func() bool { return len(e.state(id).PendingPermissions) == 0 })
	end, evs = e.turn(id, "hello", nil)
	if done := mustComplete(t, end, evs); done.Result != "turn 2" {
		t.Fatalf("next turn: %q", done.Result)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := e.c.DeleteSession(ctx, id, false); err != nil {
		t.Fatalf("delete: %v", err)
	}
}

func TestE2EInterruptWhileAskingPermission(t *testing.T) {
	e := newE2E(t, "", nil)
	id := e.session("")
	ctx := context.Background()
	end, evs := e.turn(id, "run guarded", func(ev conversation.Event) {
		if ev.Type == conversation.TypePermissionRequest {
			if err := e.c.Interrupt(ctx, id); err != nil {
				t.Errorf("interrupt: %v", err)
			}
		}
	})
	if done := mustComplete(t, end, evs); !done.Interrupted {
		t.Fatalf("turn %+v", done)
	}
	res := agenttest.OfType(evs, conversation.TypePermissionResolved)
	if len(res) != 1 || payload[conversation.PermissionResolved](t, res[0]).Behavior != conversation.Deny {
		t.Fatalf("resolutions: %v", res)
	}
	if _, err := os.Stat(filepath.Join(e.workspace(id), "guarded.txt")); err == nil {
		t.Fatal("the command ran")
	}
	end, evs = e.turn(id, "say hello", nil)
	mustComplete(t, end, evs)
}
