package codex_test

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
	"github.com/agentd/agentd/internal/agent/codex"
	"github.com/agentd/agentd/internal/mockllm"
	"github.com/agentd/agentd/internal/testenv"
	"github.com/agentd/agentd/restapi"
)

func TestMain(m *testing.M) {
	if codex.FakeAppServerMain() {
		os.Exit(0)
	}
	goleak.VerifyTestMain(m,
		goleak.IgnoreAnyFunction("github.com/zishang520/socket.io/v3/pkg/queue.(*Queue).run"),
		goleak.IgnoreTopFunction("net/http.(*persistConn).readLoop"),
		goleak.IgnoreTopFunction("net/http.(*persistConn).writeLoop"),
	)
}

// The model's side of every e2e turn. exec_command is the shell tool Codex
// offers gpt-5.5.
const e2eScript = `
rules:
  - name: write-proof
    match: {noToolResult: true, userContains: "write the proof"}
    reply:
      content:
        - thinking: "The user wants proof.txt."
        - text: "Writing the proof."
        - name: exec_command
          input: {cmd: "echo codex-proof > proof.txt && cat proof.txt"}
  - name: write-denied
    match: {noToolResult: true, userContains: "write the forbidden file"}
    reply:
      content:
        - text: "Trying."
        - name: exec_command
          input: {cmd: "echo nope > forbidden.txt"}
  - name: ticks
    match: {noToolResult: true, userContains: "stream the ticks"}
    reply:
      content:
        - name: exec_command
          input: {cmd: "for i in 1 2 3 4; do echo tick $i; sleep 0.5; done"}
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

// turn follows a session's events from after until the end of query, calling
// on for each; it returns the events seen and the end event.
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

func TestE2ECodex(t *testing.T) {
	testenv.WithPath(t, testenv.AgentBin(t, "codex"))
	mock, url := testenv.MockLLM(t, e2eScript)
	srv := testenv.Start(t, agentd.Config{Env: map[string]string{
		"OPENAI_BASE_URL": url + "/v1", "OPENAI_API_KEY": "sk-test-not-a-real-key",
	}})
	c := srv.Client
	ctx := context.Background()

	archs, err := c.Architectures(ctx)
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, a := range archs {
		if a.Name == "codex" {
			found = true
			if !a.Available || a.Version != "0.169.0" {
				t.Fatalf("codex architecture %+v, want available 0.169.0", a)
			}
		}
	}
	if !found {
		t.Fatalf("codex not listed: %+v", archs)
	}

	created, err := c.CreateSession(ctx, restapi.CreateSessionRequest{Architecture: "codex", SessionOptions: json.RawMessage(`{"model":"gpt-5.5"}`)})
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
		if deltas < 2 || !usage {
			t.Fatalf("want streamed deltas and usage; got %d deltas, usage %v:%s", deltas, usage, dump(seen))
		}
		st, _ := c.Session(ctx, id)
		last := st.Blocks[len(st.Blocks)-1]
		if last.Type != conversation.BlockAssistantText || last.Content != "Hello from mock-llm: say hello" || last.Status != conversation.StatusComplete {
			t.Fatalf("last block %+v", last)
		}
		if st.Usage.OutputTokens == 0 || st.Runtime.AgentSessionID == "" || st.Runtime.AgentVersion != "0.169.0" {
			t.Fatalf("usage %+v runtime %+v", st.Usage, st.Runtime)
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
		if req.ToolName != "shell" || !strings.Contains(string(req.Input), "proof.txt") || req.ToolUseID == "" {
			t.Fatalf("permission request %+v", req)
		}
		waitEvent(t, c, id, after, func(e conversation.Event) bool {
			return e.Type == conversation.TypeFileCreated && payload[conversation.FileChange](e).Path == "proof.txt"
		})
		data, err := c.File(ctx, id, "proof.txt")
		if err != nil || string(data) != "codex-proof\n" {
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
		if use == nil || use.ToolName != "shell" || result == nil || !strings.Contains(result.Output, "codex-proof") || result.IsError || thinking == nil {
			t.Fatalf("tool_use %+v result %+v thinking %+v; blocks %+v", use, result, thinking, st.Blocks)
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

	ok = ok && t.Run("ApprovalDenied", func(t *testing.T) {
		q, after := send(t, c, id, "now write the forbidden file")
		var req conversation.PermissionRequested
		seen, end := turn(t, c, id, after, q, func(e conversation.Event) {
			if e.Type == conversation.TypePermissionRequest {
				req = payload[conversation.PermissionRequested](e)
				_ = c.AnswerPermission(ctx, id, req.RequestID, restapi.PermissionAnswer{Behavior: conversation.Deny, Message: "not that"})
			}
		})
		completed(t, end, seen)
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
		}
	})

	if !ok {
		return
	}
	if !t.Run("SecondTurnAfterRestartSeesTheFirst", func(t *testing.T) {
		before, _ := c.Session(ctx, id)
		srv.Restart()
		c = srv.Client
		// mock-llm keeps running (and numbering its ids on), as a real
		// model API would.
		n := len(mock.ModelRequests(mockllm.KindMain))
		q, after := send(t, c, id, "what did I ask first?")
		seen, end := turn(t, c, id, after, q, nil)
		completed(t, end, seen)
		reqs := mock.ModelRequests(mockllm.KindMain)
		if len(reqs) != n+1 {
			t.Fatalf("%d model requests for the resumed turn, want 1", len(reqs)-n)
		}
		body := string(reqs[n].Body)
		for _, want := range []string{"say hello", "please write the proof", "codex-proof", "what did I ask first?"} {
			if !strings.Contains(body, want) {
				t.Fatalf("the resumed thread's request lacks %q: %s", want, body)
			}
		}
		after2, _ := c.Session(ctx, id)
		if after2.Runtime.AgentSessionID != before.Runtime.AgentSessionID {
			t.Fatalf("thread changed across restart: %s -> %s", before.Runtime.AgentSessionID, after2.Runtime.AgentSessionID)
		}
		if last := after2.Blocks[len(after2.Blocks)-1]; last.Content != "You asked me to say hello." {
			t.Fatalf("last block %+v", last)
		}
		// The resumed thread replays its token counts; they are not
		// counted twice.
		var resumed conversation.Usage
		for _, e := range seen {
			if u := payload[conversation.MetadataUpdate](e).Usage; e.Type == conversation.TypeMetadataUpdate && u != nil {
				resumed = resumed.Add(*u)
			}
		}
		if resumed.InputTokens >= before.Usage.InputTokens || after2.Usage.InputTokens != before.Usage.InputTokens+resumed.InputTokens {
			t.Fatalf("usage before %+v, resumed turn %+v, after %+v", before.Usage, resumed, after2.Usage)
		}
	}) {
		return
	}

	// A workspace restored elsewhere has no .agentd/codex: the runner writes the
	// transcript it saved with the session back, and the CLI resumes from it.
	t.Run("ResumeInAFreshWorkspace", func(t *testing.T) {
		srv.Restart()
		c = srv.Client
		if err := os.RemoveAll(filepath.Join(srv.Config.DataDir, "workspaces", id, ".agentd/codex")); err != nil {
			t.Fatal(err)
		}
		n := len(mock.ModelRequests(mockllm.KindMain))
		q, after := send(t, c, id, "what did I ask first? (again)")
		seen, end := turn(t, c, id, after, q, nil)
		completed(t, end, seen)
		for _, e := range seen {
			if e.Type == conversation.TypeLog && strings.Contains(string(e.Payload), "without the earlier turns") {
				t.Fatalf("the conversation was lost: %s", e.Payload)
			}
		}
		reqs := mock.ModelRequests(mockllm.KindMain)
		if len(reqs) != n+1 {
			t.Fatalf("%d model requests for the resumed turn, want 1", len(reqs)-n)
		}
		body := string(reqs[n].Body)
		for _, want := range []string{"say hello", "codex-proof", "what did I ask first? (again)"} {
			if !strings.Contains(body, want) {
				t.Fatalf("the request lacks %q: %s", want, body)
			}
		}
	})
}

func TestE2ECodexMissing(t *testing.T) {
	t.Setenv("PATH", "/usr/bin:/bin")
	srv := testenv.Start(t, agentd.Config{Env: map[string]string{}})
	c := srv.Client
	ctx := context.Background()
	archs, _ := c.Architectures(ctx)
	for _, a := range archs {
		if a.Name == "codex" && (a.Available || a.Problem == "") {
			t.Fatalf("missing codex reported %+v", a)
		}
	}
	created, err := c.CreateSession(ctx, restapi.CreateSessionRequest{Architecture: "codex"})
	if err != nil {
		t.Fatal(err)
	}
	q, after := send(t, c, created.SessionID, "hello")
	_, end := turn(t, c, created.SessionID, after, q, nil)
	f := payload[conversation.QueryFailed](end)
	if end.Type != conversation.TypeQueryFailed || f.Code != "AGENT_NOT_FOUND" || !strings.Contains(f.Error, "codex") {
		t.Fatalf("turn end %s %s", end.Type, end.Payload)
	}
}

func TestE2ECodexCrash(t *testing.T) {
	bin := t.TempDir()
	script := "#!/bin/sh\necho 'codex: fatal: the config is broken' >&2\nexit 3\n"
	if err := os.WriteFile(filepath.Join(bin, "codex"), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	testenv.WithPath(t, bin)
	srv := testenv.Start(t, agentd.Config{Env: map[string]string{}})
	c := srv.Client
	ctx := context.Background()
	created, err := c.CreateSession(ctx, restapi.CreateSessionRequest{Architecture: "codex"})
	if err != nil {
		t.Fatal(err)
	}
	q, after := send(t, c, created.SessionID, "hello")
	_, end := turn(t, c, created.SessionID, after, q, nil)
	f := payload[conversation.QueryFailed](end)
	if end.Type != conversation.TypeQueryFailed || f.Code != "AGENT_EXITED" || !strings.Contains(f.Error, "the config is broken") || !strings.Contains(f.Error, "code 3") {
		t.Fatalf("turn end %s %s", end.Type, end.Payload)
	}
	// The session stays usable: the next turn tries again (and fails the
	// same way, with the same reason).
	q, after = send(t, c, created.SessionID, "again")
	if _, end := turn(t, c, created.SessionID, after, q, nil); end.Type != conversation.TypeQueryFailed {
		t.Fatalf("second turn %s", end.Payload)
	}
}
