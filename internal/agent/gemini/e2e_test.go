package gemini_test

import (
	"context"
	"strings"
	"testing"

	"github.com/agentd/agentd"
	"github.com/agentd/agentd/agent/agenttest"
	"github.com/agentd/agentd/client"
	"github.com/agentd/agentd/conversation"
	"github.com/agentd/agentd/internal/agent/agenttest/e2etest"
	"github.com/agentd/agentd/internal/agent/gemini"
	"github.com/agentd/agentd/internal/agentdtest"
	"github.com/agentd/agentd/internal/mockllm"
	"github.com/agentd/agentd/profile"
	"github.com/agentd/agentd/restapi"
)

func TestMain(m *testing.M) {
	agenttest.Main(m, gemini.FakeGeminiMain)
}

// The model's side of every e2e turn (Gemini offers run_shell_command only
// in yolo mode or when allowed).
var e2eScript = e2etest.Script(`
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
`)

func newServer(t *testing.T) (*agentdtest.Server, *mockllm.Server) {
	agentdtest.WithPath(t, agentdtest.AgentBin(t, "gemini"))
	mock, url := agentdtest.MockLLM(t, e2eScript)
	srv := agentdtest.Start(t, agentd.Config{
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
	e2etest.Listed(t, c, "gemini-cli", "0.61.0")

	created, err := c.CreateSession(ctx, restapi.CreateSessionRequest{Architecture: "gemini-cli", AgentProfileRef: "yolo"})
	if err != nil {
		t.Fatal(err)
	}
	id := created.SessionID
	t.Cleanup(func() { e2etest.LogEvents(t, srv.Client, id) })
	ok := true

	ok = ok && t.Run("StreamedText", func(t *testing.T) {
		st := e2etest.StreamedText(t, c, id, 1)
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

	ok = ok && t.Run("UserImage", func(t *testing.T) { e2etest.UserImage(t, c, id, e2etest.PNG(t, 6, 4)) })
	ok = ok && t.Run("ShellCommandWritesFile", func(t *testing.T) {
		q, after := e2etest.Send(t, c, id, "please write the proof")
		seen, end := e2etest.Turn(t, c, id, after, q, nil)
		e2etest.Completed(t, end, seen)
		e2etest.ProofWritten(t, c, id, after, "gemini-proof\n")
		st := e2etest.State(t, c, id)
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
		st := e2etest.Interrupt(t, c, id)
		agenttest.NoPending(t, st.Blocks)
	})

	if !ok {
		return
	}
	if !t.Run("SecondTurnAfterRestartSeesTheFirst", func(t *testing.T) {
		e2etest.RecallAfterRestart(t, srv, mock, id, "say hello", "please write the proof", "gemini-proof", "what did I ask first?")
	}) {
		return
	}

	// A workspace restored elsewhere has no .agentd/gemini: the runner writes the
	// transcript it saved with the session back, and the CLI resumes from it.
	t.Run("ResumeInAFreshWorkspace", func(t *testing.T) {
		e2etest.ResumeInAFreshWorkspace(t, srv, mock, id, ".agentd/gemini", "say hello", "gemini-proof", "what did I ask first? (again)")
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
	t.Cleanup(func() { e2etest.LogEvents(t, srv.Client, id) })
	q, after := e2etest.Send(t, c, id, "please write the proof")
	seen, end := e2etest.Turn(t, c, id, after, q, nil)
	e2etest.Completed(t, end, seen)
	st := e2etest.State(t, c, id)
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

func TestE2EGeminiMissing(t *testing.T) { e2etest.Missing(t, "gemini-cli", "gemini") }

func TestE2EGeminiCrash(t *testing.T) {
	e2etest.Crash(t, "gemini-cli", "gemini", "#!/bin/sh\ncat >/dev/null\necho 'Error: gemini exploded' >&2\nexit 41\n",
		"gemini exploded", "code 41")
}
