package opencode_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/agentd/agentd"
	"github.com/agentd/agentd/client"
	"github.com/agentd/agentd/conversation"
	"github.com/agentd/agentd/internal/agent/opencode"
	"github.com/agentd/agentd/internal/mockllm"
	"github.com/agentd/agentd/internal/testenv"
	"github.com/agentd/agentd/profile"
	"github.com/agentd/agentd/restapi"
)

func TestMain(m *testing.M) {
	if opencode.FakeServeMain() {
		os.Exit(0)
	}
	goleak.VerifyTestMain(m,
		goleak.IgnoreAnyFunction("github.com/zishang520/socket.io/v3/pkg/queue.(*Queue).run"),
		goleak.IgnoreTopFunction("net/http.(*persistConn).readLoop"),
		goleak.IgnoreTopFunction("net/http.(*persistConn).writeLoop"),
	)
}

// The model's side of every e2e turn (OpenCode's shell tool is bash).
const e2eScript = `
rules:
  - name: write-proof
    match: {noToolResult: true, userContains: "write the proof"}
    reply:
      content:
        - thinking: "The user wants proof.txt."
        - text: "Writing the proof."
        - name: bash
          input: {command: "echo opencode-proof > proof.txt && cat proof.txt", description: "write proof.txt"}
  - name: write-denied
    match: {noToolResult: true, userContains: "write the forbidden file"}
    reply:
      content:
        - text: "Trying."
        - name: bash
          input: {command: "echo nope > forbidden.txt", description: "write forbidden.txt"}
  - name: write-allowed
    match: {noToolResult: true, userContains: "write the allowed file"}
    reply:
      content:
        - name: bash
          input: {command: "echo allowed > allowed.txt", description: "write allowed.txt"}
  - name: ticks
    match: {noToolResult: true, userContains: "stream the ticks"}
    reply:
      content:
        - name: bash
          input: {command: "for i in 1 2 3 4; do echo tick $i; sleep 0.5; done", description: "tick"}
  - name: delegate
    match: {noToolResult: true, userContains: "delegate the greeting"}
    reply:
      content:
        - text: "Delegating."
        - name: task
          input: {description: "greet", prompt: "subtask: greet the user", subagent_type: "general"}
  - name: subagent
    match: {noToolResult: true, userContains: "subtask: greet the user"}
    reply: {text: "Greetings from the subagent."}
  - name: after-tool
    match: {toolResult: {}}
    reply: {text: "The command said: {{toolResult}}"}
  - name: recall
    match: {userContains: "what did I ask first"}
    reply: {text: "You asked me to say hello."}
  - name: slow
    match: {userContains: "count slowly"}
    reply: {text: "one two three four five six seven eight nine ten eleven twelve", chunkSize: 4, delayMs: 400}
default: {text: "Hello from mock-llm: {{lastUserText}}"}
`

func turn(t *testing.T, c *client.Client, id string, after int64, query string, on func(conversation.Event)) ([]conversation.Event, conversation.Event) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	s := c.Stream(ctx, id, after)
	defer s.Close()
	var seen []conversation.Event
	for {
		ev, err := s.Next(ctx)
		if err != nil {
			t.Fatalf("waiting for the end of %s: %v (events so far: %s)", query, err, dump(seen))
		}
		seen = append(seen, ev)
		if on != nil {
			on(ev)
		}
		if ev.Type != conversation.TypeQueryCompleted && ev.Type != conversation.TypeQueryFailed {
			continue
		}
		var p struct{ QueryID string }
		_ = json.Unmarshal(ev.Payload, &p)
		if p.QueryID == query {
			return seen, ev
		}
	}
}

func dump(evs []conversation.Event) string {
	var b strings.Builder
	for _, e := range evs {
		b.WriteString("\n  " + string(e.Type) + " " + string(e.Payload))
	}
	return b.String()
}

func send(t *testing.T, c *client.Client, id, content string) (string, int64) {
	t.Helper()
	ctx := context.Background()
	page, err := c.Events(ctx, id, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	sent, err := c.Send(ctx, id, content)
	if err != nil {
		t.Fatal(err)
	}
	return sent.QueryID, page.LastSeq
}

func completed(t *testing.T, end conversation.Event, seen []conversation.Event) conversation.QueryCompleted {
	t.Helper()
	if end.Type != conversation.TypeQueryCompleted {
		t.Fatalf("turn ended with %s %s; events:%s", end.Type, end.Payload, dump(seen))
	}
	var q conversation.QueryCompleted
	_ = json.Unmarshal(end.Payload, &q)
	return q
}

// waitEvent polls the log for an event after seq that pred accepts (file
// events come from the watcher and may trail the turn's end).
func waitEvent(t *testing.T, c *client.Client, id string, after int64, pred func(conversation.Event) bool) conversation.Event {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for time.Now().Before(deadline) {
		page, err := c.Events(context.Background(), id, after, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range page.Events {
			if pred(e) {
				return e
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	page, _ := c.Events(context.Background(), id, after, 0)
	t.Fatalf("event not seen; events:%s", dump(page.Events))
	return conversation.Event{}
}

// logEvents logs a session's whole log when AGENTD_E2E_DUMP is set.
func logEvents(t *testing.T, c *client.Client, id string) {
	if os.Getenv("AGENTD_E2E_DUMP") == "" {
		return
	}
	page, err := c.Events(context.Background(), id, 0, 0)
	if err != nil {
		t.Logf("events: %v", err)
		return
	}
	for _, e := range page.Events {
		t.Logf("%d %s %s %s %s", e.Seq, e.Context.Timestamp.Format("15:04:05.000"), e.Type, e.Context.ConversationID, e.Payload)
	}
}

func payload[T any](e conversation.Event) T {
	var v T
	_ = json.Unmarshal(e.Payload, &v)
	return v
}

func TestE2EOpenCode(t *testing.T) {
	testenv.WithPath(t, testenv.AgentBin(t, "opencode"))
	mock, url := testenv.MockLLM(t, e2eScript)
	srv := testenv.Start(t, agentd.Config{
		Env: map[string]string{"OPENAI_BASE_URL": url + "/v1", "OPENAI_API_KEY": "sk-test-not-a-real-key"},
		Profiles: []profile.Profile{{ID: "bash-ok", Name: "OpenCode, bash allowed", AllowedTools: []string{"bash"},
			SystemPrompt: "You are tested by agentd."}},
	})
	c := srv.Client
	ctx := context.Background()

	archs, err := c.Architectures(ctx)
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, a := range archs {
		if a.Name == "opencode" {
			found = true
			if !a.Available || a.Version != "1.18.33" {
				t.Fatalf("opencode architecture %+v, want available 1.18.33", a)
			}
		}
	}
	if !found {
		t.Fatalf("opencode not listed: %+v", archs)
	}

	created, err := c.CreateSession(ctx, restapi.CreateSessionRequest{Architecture: "opencode", SessionOptions: json.RawMessage(`{"model":"mock-model"}`)})
	if err != nil {
		t.Fatal(err)
	}
	id := created.SessionID
	t.Cleanup(func() { logEvents(t, c, id) })
	ok := true

	ok = ok && t.Run("StreamedText", func(t *testing.T) {
		q, after := send(t, c, id, "say hello")
		seen, end := turn(t, c, id, after, q, nil)
		completed(t, end, seen)
		deltas, usage := 0, false
		for _, e := range seen {
			switch e.Type {
			case conversation.TypeBlockDelta:
				deltas++
			case conversation.TypeMetadataUpdate:
				if payload[conversation.MetadataUpdate](e).Usage != nil {
					usage = true
				}
			}
		}
		if deltas < 1 || !usage {
			t.Fatalf("want streamed deltas and usage; got %d deltas, usage %v:%s", deltas, usage, dump(seen))
		}
		st, _ := c.Session(ctx, id)
		last := st.Blocks[len(st.Blocks)-1]
		if last.Type != conversation.BlockAssistantText || !strings.Contains(last.Content, "Hello from mock-llm:") || !strings.Contains(last.Content, "say hello") || last.Status != conversation.StatusComplete {
			t.Fatalf("last block %+v", last)
		}
		if st.Usage.OutputTokens == 0 || st.Runtime.AgentSessionID == "" || st.Runtime.AgentVersion != "1.18.33" {
			t.Fatalf("usage %+v runtime %+v", st.Usage, st.Runtime)
		}
		reqs := mock.ModelRequests(mockllm.KindMain)
		if len(reqs) == 0 || reqs[len(reqs)-1].Model != "mock-model" {
			t.Fatalf("model requests %+v", reqs)
		}
	})

	ok = ok && t.Run("ShellCommandWritesFileAfterApproval", func(t *testing.T) {
		q, after := send(t, c, id, "please write the proof")
		var req conversation.PermissionRequested
		seen, end := turn(t, c, id, after, q, func(e conversation.Event) {
			if e.Type == conversation.TypePermissionRequest {
				req = payload[conversation.PermissionRequested](e)
				if err := c.AnswerPermission(ctx, id, req.RequestID, restapi.PermissionAnswer{Behavior: conversation.Allow}); err != nil {
					t.Errorf("answer: %v", err)
				}
			}
		})
		completed(t, end, seen)
		if req.ToolName != "bash" || !strings.Contains(string(req.Input), "proof.txt") || req.ToolUseID == "" {
			t.Fatalf("permission request %+v", req)
		}
		waitEvent(t, c, id, after, func(e conversation.Event) bool {
			return e.Type == conversation.TypeFileCreated && payload[conversation.FileChange](e).Path == "proof.txt"
		})
		data, err := c.File(ctx, id, "proof.txt")
		if err != nil || string(data) != "opencode-proof\n" {
			t.Fatalf("proof.txt = %q, %v", data, err)
		}
		st, _ := c.Session(ctx, id)
		var use, result, thinking *conversation.Block
		for i := range st.Blocks {
			b := &st.Blocks[i]
			switch {
			case b.ID == req.ToolUseID && b.Type == conversation.BlockToolUse:
				use = b
			case b.Type == conversation.BlockToolResult && b.ToolUseID == req.ToolUseID:
				result = b
			case b.Type == conversation.BlockThinking && strings.Contains(b.Content, "proof.txt"):
				thinking = b
			}
		}
		if use == nil || use.ToolName != "bash" || result == nil || !strings.Contains(result.Output, "opencode-proof") || result.IsError || thinking == nil {
			t.Fatalf("tool_use %+v result %+v thinking %+v; blocks %+v", use, result, thinking, st.Blocks)
		}
		// Nothing OpenCode keeps for itself showed up as a workspace change.
		for _, e := range seen {
			if p := payload[conversation.FileChange](e); strings.HasPrefix(string(e.Type), "file:") && p.Path != "proof.txt" {
				t.Fatalf("unexpected file event %s %s", e.Type, e.Payload)
			}
		}
	})

	ok = ok && t.Run("ToolOutputStreams", func(t *testing.T) {
		q, after := send(t, c, id, "stream the ticks")
		var resultID string
		deltasBeforeEnd := 0
		done := false
		seen, end := turn(t, c, id, after, q, func(e conversation.Event) {
			switch e.Type {
			case conversation.TypePermissionRequest:
				req := payload[conversation.PermissionRequested](e)
				resultID = conversation.ToolResultID(req.ToolUseID)
				_ = c.AnswerPermission(ctx, id, req.RequestID, restapi.PermissionAnswer{Behavior: conversation.Allow})
			case conversation.TypeBlockDelta:
				if p := payload[conversation.BlockDelta](e); p.BlockID == resultID && !done {
					deltasBeforeEnd++
				}
			case conversation.TypeBlockUpsert:
				if b := payload[conversation.BlockUpsert](e).Block; b.ID == resultID && b.Status == conversation.StatusComplete {
					done = true
				}
			}
		})
		completed(t, end, seen)
		if resultID == "" || deltasBeforeEnd < 2 {
			t.Fatalf("tool output not streamed (%d deltas before the result completed):%s", deltasBeforeEnd, dump(seen))
		}
		st, _ := c.Session(ctx, id)
		for _, b := range st.Blocks {
			if b.ID == resultID && !strings.Contains(b.Output, "tick 1\ntick 2\ntick 3\ntick 4") {
				t.Fatalf("result %+v", b)
			}
		}
	})

	ok = ok && t.Run("Subagent", func(t *testing.T) {
		q, after := send(t, c, id, "delegate the greeting")
		seen, end := turn(t, c, id, after, q, nil)
		completed(t, end, seen)
		var spawned conversation.SubagentSpawned
		var finished conversation.SubagentCompleted
		for _, e := range seen {
			switch e.Type {
			case conversation.TypeSubagentSpawned:
				spawned = payload[conversation.SubagentSpawned](e)
			case conversation.TypeSubagentCompleted:
				finished = payload[conversation.SubagentCompleted](e)
			}
		}
		if spawned.ToolUseID == "" || !strings.Contains(spawned.Prompt, "subtask: greet the user") || finished.ToolUseID != spawned.ToolUseID ||
			finished.Status != conversation.StatusComplete {
			t.Fatalf("spawned %+v completed %+v:%s", spawned, finished, dump(seen))
		}
		st, _ := c.Session(ctx, id)
		var sub *conversation.Subagent
		for i := range st.Subagents {
			if st.Subagents[i].ToolUseID == spawned.ToolUseID {
				sub = &st.Subagents[i]
			}
		}
		if sub == nil {
			t.Fatalf("no subagent %s in %+v", spawned.ToolUseID, st.Subagents)
		}
		found := false
		for _, b := range sub.Blocks {
			if b.Type == conversation.BlockAssistantText && strings.Contains(b.Content, "Greetings from the subagent.") {
				found = true
			}
		}
		if !found {
			t.Fatalf("subagent %+v", sub)
		}
	})

	ok = ok && t.Run("ApprovalDenied", func(t *testing.T) {
		q, after := send(t, c, id, "now write the forbidden file")
		var req conversation.PermissionRequested
		seen, end := turn(t, c, id, after, q, func(e conversation.Event) {
			if e.Type == conversation.TypePermissionRequest {
				req = payload[conversation.PermissionRequested](e)
				_ = c.AnswerPermission(ctx, id, req.RequestID, restapi.PermissionAnswer{Behavior: conversation.Deny, Message: "not that"})
			}
		})
		if end.Type != conversation.TypeQueryCompleted && end.Type != conversation.TypeQueryFailed {
			t.Fatalf("turn end %s", end.Payload)
		}
		resolved := false
		for _, e := range seen {
			if e.Type == conversation.TypePermissionResolved {
				r := payload[conversation.PermissionResolved](e)
				resolved = r.RequestID == req.RequestID && r.Behavior == conversation.Deny && r.By == conversation.ByUser
			}
		}
		if !resolved {
			t.Fatalf("no deny resolution for %+v:%s", req, dump(seen))
		}
		if _, err := c.File(ctx, id, "forbidden.txt"); !client.IsCode(err, "FILE_NOT_FOUND") {
			t.Fatalf("a denied command ran: %v", err)
		}
		st, _ := c.Session(ctx, id)
		for _, b := range st.Blocks {
			if b.Type == conversation.BlockToolResult && b.ToolUseID == req.ToolUseID && !b.IsError {
				t.Fatalf("denied command's result is not an error: %+v", b)
			}
		}
	})

	ok = ok && t.Run("Interrupt", func(t *testing.T) {
		q, after := send(t, c, id, "count slowly")
		interrupted := false
		seen, end := turn(t, c, id, after, q, func(e conversation.Event) {
			if e.Type == conversation.TypeBlockDelta && !interrupted {
				interrupted = true
				if err := c.Interrupt(ctx, id); err != nil {
					t.Errorf("interrupt: %v", err)
				}
			}
		})
		if q := completed(t, end, seen); !q.Interrupted {
			t.Fatalf("turn end %s", end.Payload)
		}
		st, _ := c.Session(ctx, id)
		for _, b := range st.Blocks {
			if strings.Contains(b.Content, "twelve") {
				t.Fatalf("the interrupted answer ran to the end: %+v", b)
			}
			if b.Status == conversation.StatusPending {
				t.Fatalf("block left pending: %+v", b)
			}
		}
	})

	ok = ok && t.Run("PreAllowedToolNeverAsks", func(t *testing.T) {
		other, err := c.CreateSession(ctx, restapi.CreateSessionRequest{Architecture: "opencode", AgentProfileRef: "bash-ok",
			SessionOptions: json.RawMessage(`{"model":"mock-model"}`)})
		if err != nil {
			t.Fatal(err)
		}
		q, after := send(t, c, other.SessionID, "write the allowed file")
		seen, end := turn(t, c, other.SessionID, after, q, nil)
		completed(t, end, seen)
		for _, e := range seen {
			if e.Type == conversation.TypePermissionRequest {
				t.Fatalf("a pre-allowed tool asked: %s", e.Payload)
			}
		}
		if data, err := c.File(ctx, other.SessionID, "allowed.txt"); err != nil || string(data) != "allowed\n" {
			t.Fatalf("allowed.txt = %q, %v", data, err)
		}
		reqs := mock.ModelRequests(mockllm.KindMain)
		if !strings.Contains(string(reqs[len(reqs)-1].Body), "You are tested by agentd.") {
			t.Fatal("the profile's system prompt did not reach the model")
		}
		if err := c.DeleteSession(ctx, other.SessionID, false); err != nil {
			t.Fatal(err)
		}
	})

	if !ok {
		return
	}
	t.Run("SecondTurnAfterRestartSeesTheFirst", func(t *testing.T) {
		before, _ := c.Session(ctx, id)
		srv.Restart()
		c = srv.Client
		n := len(mock.ModelRequests(mockllm.KindMain))
		q, after := send(t, c, id, "what did I ask first?")
		seen, end := turn(t, c, id, after, q, nil)
		completed(t, end, seen)
		reqs := mock.ModelRequests(mockllm.KindMain)
		if len(reqs) != n+1 {
			t.Fatalf("%d model requests for the continued session, want 1", len(reqs)-n)
		}
		body := string(reqs[n].Body)
		for _, want := range []string{"say hello", "please write the proof", "opencode-proof", "what did I ask first?"} {
			if !strings.Contains(body, want) {
				t.Fatalf("the continued session's request lacks %q: %s", want, body)
			}
		}
		after2, _ := c.Session(ctx, id)
		if after2.Runtime.AgentSessionID != before.Runtime.AgentSessionID {
			t.Fatalf("session changed across restart: %s -> %s", before.Runtime.AgentSessionID, after2.Runtime.AgentSessionID)
		}
		if last := after2.Blocks[len(after2.Blocks)-1]; last.Content != "You asked me to say hello." {
			t.Fatalf("last block %+v", last)
		}
	})
}

func TestE2EOpenCodeMissing(t *testing.T) {
	t.Setenv("PATH", "/usr/bin:/bin")
	srv := testenv.Start(t, agentd.Config{Env: map[string]string{}})
	c := srv.Client
	ctx := context.Background()
	archs, _ := c.Architectures(ctx)
	for _, a := range archs {
		if a.Name == "opencode" && (a.Available || a.Problem == "") {
			t.Fatalf("missing opencode reported %+v", a)
		}
	}
	created, err := c.CreateSession(ctx, restapi.CreateSessionRequest{Architecture: "opencode"})
	if err != nil {
		t.Fatal(err)
	}
	q, after := send(t, c, created.SessionID, "hello")
	_, end := turn(t, c, created.SessionID, after, q, nil)
	f := payload[conversation.QueryFailed](end)
	if end.Type != conversation.TypeQueryFailed || f.Code != "AGENT_NOT_FOUND" || !strings.Contains(f.Error, "opencode") {
		t.Fatalf("turn end %s %s", end.Type, end.Payload)
	}
}

func TestE2EOpenCodeCrash(t *testing.T) {
	bin := t.TempDir()
	script := "#!/bin/sh\necho 'Error: opencode could not start: database is locked' >&2\nexit 7\n"
	if err := os.WriteFile(filepath.Join(bin, "opencode"), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	testenv.WithPath(t, bin)
	srv := testenv.Start(t, agentd.Config{Env: map[string]string{}})
	c := srv.Client
	ctx := context.Background()
	created, err := c.CreateSession(ctx, restapi.CreateSessionRequest{Architecture: "opencode"})
	if err != nil {
		t.Fatal(err)
	}
	q, after := send(t, c, created.SessionID, "hello")
	_, end := turn(t, c, created.SessionID, after, q, nil)
	f := payload[conversation.QueryFailed](end)
	if end.Type != conversation.TypeQueryFailed || f.Code != "AGENT_EXITED" || !strings.Contains(f.Error, "database is locked") || !strings.Contains(f.Error, "code 7") {
		t.Fatalf("turn end %s %s", end.Type, end.Payload)
	}
}
