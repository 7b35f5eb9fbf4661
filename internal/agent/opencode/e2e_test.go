package opencode_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/agentd/agentd"
	"github.com/agentd/agentd/agent/agenttest"
	"github.com/agentd/agentd/conversation"
	"github.com/agentd/agentd/internal/agent/agenttest/e2etest"
	"github.com/agentd/agentd/internal/agent/opencode"
	"github.com/agentd/agentd/internal/agentdtest"
	"github.com/agentd/agentd/internal/mockllm"
	"github.com/agentd/agentd/profile"
	"github.com/agentd/agentd/restapi"
)

func TestMain(m *testing.M) {
	agenttest.Main(m, opencode.FakeServeMain)
}

// The model's side of every e2e turn (OpenCode's shell tool is bash).
var e2eScript = e2etest.Script(`
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
`)

func TestE2EOpenCode(t *testing.T) {
	agentdtest.WithPath(t, agentdtest.AgentBin(t, "opencode"))
	mock, url := agentdtest.MockLLM(t, e2eScript)
	srv := agentdtest.Start(t, agentd.Config{
		Env: map[string]string{"OPENAI_BASE_URL": url + "/v1", "OPENAI_API_KEY": "sk-test-not-a-real-key"},
		Profiles: []profile.Profile{{ID: "bash-ok", Name: "OpenCode, bash allowed", AllowedTools: []string{"bash"},
			SystemPrompt: "You are tested by agentd."}},
	})
	c := srv.Client
	ctx := context.Background()

	e2etest.Listed(t, c, "opencode", "1.18.33")

	created, err := c.CreateSession(ctx, restapi.CreateSessionRequest{Architecture: "opencode", SessionOptions: json.RawMessage(`{"model":"mock-model"}`)})
	if err != nil {
		t.Fatal(err)
	}
	id := created.SessionID
	t.Cleanup(func() { e2etest.LogEvents(t, srv.Client, id) })
	ok := true

	ok = ok && t.Run("StreamedText", func(t *testing.T) {
		st := e2etest.StreamedText(t, c, id, 1)
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
		seen := e2etest.ShellAfterApproval(t, c, id, "bash", "opencode-proof")
		// Nothing OpenCode keeps for itself showed up as a workspace change.
		for _, e := range seen {
			if p := e2etest.Payload[conversation.FileChange](e); strings.HasPrefix(string(e.Type), "file:") && p.Path != "proof.txt" {
				t.Fatalf("unexpected file event %s %s", e.Type, e.Payload)
			}
		}
	})

	ok = ok && t.Run("ToolOutputStreams", func(t *testing.T) { e2etest.ToolOutputStreams(t, c, id) })
	ok = ok && t.Run("UserImage", func(t *testing.T) { e2etest.UserImage(t, c, id, e2etest.PNG(t, 6, 4)) })

	ok = ok && t.Run("Subagent", func(t *testing.T) {
		seen, spawned, finished := e2etest.SubagentTurn(t, c, id, "delegate the greeting")
		if spawned.ToolUseID == "" || !strings.Contains(spawned.Prompt, "subtask: greet the user") || finished.ToolUseID != spawned.ToolUseID ||
			finished.Status != conversation.StatusComplete {
			t.Fatalf("spawned %+v completed %+v:%s", spawned, finished, e2etest.Dump(seen))
		}
		_, sub := e2etest.SubagentOf(t, c, id, spawned.ToolUseID)
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

	ok = ok && t.Run("ApprovalDenied", func(t *testing.T) { e2etest.ApprovalDenied(t, c, id, true) })

	ok = ok && t.Run("Interrupt", func(t *testing.T) {
		st := e2etest.Interrupt(t, c, id)
		agenttest.NoPending(t, st.Blocks)
	})

	ok = ok && t.Run("PreAllowedToolNeverAsks", func(t *testing.T) {
		other, err := c.CreateSession(ctx, restapi.CreateSessionRequest{Architecture: "opencode", AgentProfileRef: "bash-ok",
			SessionOptions: json.RawMessage(`{"model":"mock-model"}`)})
		if err != nil {
			t.Fatal(err)
		}
		q, after := e2etest.Send(t, c, other.SessionID, "write the allowed file")
		seen, end := e2etest.Turn(t, c, other.SessionID, after, q, nil)
		e2etest.Completed(t, end, seen)
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
		e2etest.RecallAfterRestart(t, srv, mock, id, "say hello", "please write the proof", "opencode-proof", "what did I ask first?")
	})
}

func TestE2EOpenCodeMissing(t *testing.T) { e2etest.Missing(t, "opencode", "opencode") }

func TestE2EOpenCodeCrash(t *testing.T) {
	e2etest.Crash(t, "opencode", "opencode", "#!/bin/sh\necho 'Error: opencode could not start: database is locked' >&2\nexit 7\n",
		"database is locked", "code 7")
}
