package gemini_test

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
	"github.com/agentd/agentd/internal/agent/gemini"
	"github.com/agentd/agentd/internal/mockllm"
	"github.com/agentd/agentd/internal/testenv"
	"github.com/agentd/agentd/profile"
	"github.com/agentd/agentd/restapi"
)

func TestMain(m *testing.M) {
	if gemini.FakeGeminiMain() {
		os.Exit(0)
	}
	goleak.VerifyTestMain(m,
		goleak.IgnoreAnyFunction("github.com/zishang520/socket.io/v3/pkg/queue.(*Queue).run"),
		goleak.IgnoreTopFunction("net/http.(*persistConn).readLoop"),
		goleak.IgnoreTopFunction("net/http.(*persistConn).writeLoop"),
	)
}

// The model's side of every e2e turn (Gemini offers run_shell_command only
// in yolo mode or when allowed).
const e2eScript = `
rules:
  - name: write-proof
    match: {noToolResult: true, userContains: "write the proof", tool: run_shell_command}
    reply:
      content:
        - text: "Writing the proof."
        - name: run_shell_command
          input: {command: "echo gemini-proof > proof.txt && cat proof.txt", description: "write proof.txt"}
  - name: write-unoffered
    match: {noToolResult: true, userContains: "write the proof"}
    reply:
      content:
        - text: "Trying anyway."
        - name: run_shell_command
          input: {command: "echo nope > forbidden.txt", description: "write"}
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

func newServer(t *testing.T) (*testenv.Server, *mockllm.Server) {
	testenv.WithPath(t, testenv.AgentBin(t, "gemini"))
	mock, url := testenv.MockLLM(t, e2eScript)
	srv := testenv.Start(t, agentd.Config{
		Env: map[string]string{"GOOGLE_GEMINI_BASE_URL": url, "GEMINI_API_KEY": "test-not-a-real-key"},
		Profiles: []profile.Profile{{ID: "yolo", Name: "Gemini, all tools", ApprovalMode: "yolo",
			SystemPrompt: "You are tested by agentd."}},
	})
	return srv, mock
}

func TestE2EGemini(t *testing.T) {
	srv, mock := newServer(t)
	c := srv.Client
	ctx := context.Background()

	archs, err := c.Architectures(ctx)
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, a := range archs {
		if a.Name == "gemini-cli" {
			found = true
			if !a.Available || a.Version != "0.61.0" {
				t.Fatalf("gemini-cli architecture %+v, want available 0.61.0", a)
			}
		}
	}
	if !found {
		t.Fatalf("gemini-cli not listed: %+v", archs)
	}

	created, err := c.CreateSession(ctx, restapi.CreateSessionRequest{Architecture: "gemini-cli", AgentProfileRef: "yolo"})
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
		if last.Type != conversation.BlockAssistantText || last.Content != "Hello from mock-llm: say hello" || last.Status != conversation.StatusComplete {
			t.Fatalf("last block %+v", last)
		}
		if st.Usage.OutputTokens == 0 || st.Runtime.AgentSessionID == "" {
			t.Fatalf("usage %+v runtime %+v", st.Usage, st.Runtime)
		}
		// The profile's system prompt reached the model (as GEMINI.md).
		reqs := mock.ModelRequests(mockllm.KindMain)
		if len(reqs) == 0 || !strings.Contains(string(reqs[len(reqs)-1].Body), "You are tested by agentd.") {
			t.Fatal("the system prompt did not reach the model")
		}
	})

	ok = ok && t.Run("ShellCommandWritesFile", func(t *testing.T) {
		q, after := send(t, c, id, "please write the proof")
		seen, end := turn(t, c, id, after, q, nil)
		completed(t, end, seen)
		waitEvent(t, c, id, after, func(e conversation.Event) bool {
			return e.Type == conversation.TypeFileCreated && payload[conversation.FileChange](e).Path == "proof.txt"
		})
		data, err := c.File(ctx, id, "proof.txt")
		if err != nil || string(data) != "gemini-proof\n" {
			t.Fatalf("proof.txt = %q, %v", data, err)
		}
		st, _ := c.Session(ctx, id)
		var use, result *conversation.Block
		for i := range st.Blocks {
			b := &st.Blocks[i]
			switch {
			case b.Type == conversation.BlockToolUse && b.ToolName == "run_shell_command":
				use = b
			case b.Type == conversation.BlockToolResult && use != nil && b.ToolUseID == use.ID:
				result = b
			}
		}
		if use == nil || result == nil || !strings.Contains(result.Output, "gemini-proof") || result.IsError {
			t.Fatalf("tool_use %+v result %+v", use, result)
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

	if !ok {
		return
	}
	if !t.Run("SecondTurnAfterRestartSeesTheFirst", func(t *testing.T) {
		before, _ := c.Session(ctx, id)
		srv.Restart()
		c = srv.Client
		n := len(mock.ModelRequests(mockllm.KindMain))
		q, after := send(t, c, id, "what did I ask first?")
		seen, end := turn(t, c, id, after, q, nil)
		completed(t, end, seen)
		reqs := mock.ModelRequests(mockllm.KindMain)
		if len(reqs) != n+1 {
			t.Fatalf("%d model requests for the resumed turn, want 1", len(reqs)-n)
		}
		body := string(reqs[n].Body)
		for _, want := range []string{"say hello", "please write the proof", "gemini-proof", "what did I ask first?"} {
			if !strings.Contains(body, want) {
				t.Fatalf("the resumed session's request lacks %q: %s", want, body)
			}
		}
		after2, _ := c.Session(ctx, id)
		if after2.Runtime.AgentSessionID != before.Runtime.AgentSessionID {
			t.Fatalf("session changed across restart: %s -> %s", before.Runtime.AgentSessionID, after2.Runtime.AgentSessionID)
		}
		if last := after2.Blocks[len(after2.Blocks)-1]; last.Content != "You asked me to say hello." {
			t.Fatalf("last block %+v", last)
		}
	}) {
		return
	}

	// A workspace restored elsewhere has no .agentd/gemini: the runner writes the
	// transcript it saved with the session back, and the CLI resumes from it.
	t.Run("ResumeInAFreshWorkspace", func(t *testing.T) {
		srv.Restart()
		c = srv.Client
		if err := os.RemoveAll(filepath.Join(srv.Config.DataDir, "workspaces", id, ".agentd/gemini")); err != nil {
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
		for _, want := range []string{"say hello", "gemini-proof", "what did I ask first? (again)"} {
			if !strings.Contains(body, want) {
				t.Fatalf("the request lacks %q: %s", want, body)
			}
		}
	})
}

// TestE2EGeminiDefaultModeNeverWaits: with the default approval mode
// Gemini offers no shell tool and has nobody to ask, so a call to it
// fails at once and the turn ends; nothing is written.
func TestE2EGeminiDefaultModeNeverWaits(t *testing.T) {
	srv, _ := newServer(t)
	c := srv.Client
	ctx := context.Background()
	created, err := c.CreateSession(ctx, restapi.CreateSessionRequest{Architecture: "gemini-cli"})
	if err != nil {
		t.Fatal(err)
	}
	id := created.SessionID
	t.Cleanup(func() { logEvents(t, c, id) })
	q, after := send(t, c, id, "please write the proof")
	seen, end := turn(t, c, id, after, q, nil)
	completed(t, end, seen)
	st, _ := c.Session(ctx, id)
	failed := false
	for _, b := range st.Blocks {
		if b.Type == conversation.BlockToolResult && b.IsError {
			failed = true
		}
	}
	if !failed {
		t.Fatalf("want a failed tool call; blocks %+v", st.Blocks)
	}
	if _, err := c.File(ctx, id, "forbidden.txt"); !client.IsCode(err, "FILE_NOT_FOUND") {
		t.Fatalf("the unoffered tool ran: %v", err)
	}
}

func TestE2EGeminiMissing(t *testing.T) {
	t.Setenv("PATH", "/usr/bin:/bin")
	srv := testenv.Start(t, agentd.Config{Env: map[string]string{}})
	c := srv.Client
	ctx := context.Background()
	archs, _ := c.Architectures(ctx)
	for _, a := range archs {
		if a.Name == "gemini-cli" && (a.Available || a.Problem == "") {
			t.Fatalf("missing gemini reported %+v", a)
		}
	}
	created, err := c.CreateSession(ctx, restapi.CreateSessionRequest{Architecture: "gemini-cli"})
	if err != nil {
		t.Fatal(err)
	}
	q, after := send(t, c, created.SessionID, "hello")
	_, end := turn(t, c, created.SessionID, after, q, nil)
	f := payload[conversation.QueryFailed](end)
	if end.Type != conversation.TypeQueryFailed || f.Code != "AGENT_NOT_FOUND" || !strings.Contains(f.Error, "gemini") {
		t.Fatalf("turn end %s %s", end.Type, end.Payload)
	}
}

func TestE2EGeminiCrash(t *testing.T) {
	bin := t.TempDir()
	script := "#!/bin/sh\ncat >/dev/null\necho 'Error: gemini exploded' >&2\nexit 41\n"
	if err := os.WriteFile(filepath.Join(bin, "gemini"), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	testenv.WithPath(t, bin)
	srv := testenv.Start(t, agentd.Config{Env: map[string]string{}})
	c := srv.Client
	ctx := context.Background()
	created, err := c.CreateSession(ctx, restapi.CreateSessionRequest{Architecture: "gemini-cli"})
	if err != nil {
		t.Fatal(err)
	}
	q, after := send(t, c, created.SessionID, "hello")
	_, end := turn(t, c, created.SessionID, after, q, nil)
	f := payload[conversation.QueryFailed](end)
	if end.Type != conversation.TypeQueryFailed || f.Code != "AGENT_EXITED" || !strings.Contains(f.Error, "gemini exploded") || !strings.Contains(f.Error, "code 41") {
		t.Fatalf("turn end %s %s", end.Type, end.Payload)
	}
}
