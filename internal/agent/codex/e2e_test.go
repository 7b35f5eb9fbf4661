package codex_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/agentd/agentd"
	"github.com/agentd/agentd/agent/agenttest"
	"github.com/agentd/agentd/client"
	"github.com/agentd/agentd/conversation"
	"github.com/agentd/agentd/internal/agent/agenttest/e2etest"
	"github.com/agentd/agentd/internal/agent/codex"
	"github.com/agentd/agentd/internal/agentdtest"
	"github.com/agentd/agentd/restapi"
)

func TestMain(m *testing.M) {
	agenttest.Main(m, codex.FakeAppServerMain)
}

// The model's side of every e2e turn. exec_command is the shell tool Codex
// offers gpt-5.5.
var e2eScript = e2etest.Script(`
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
  - name: subagent-child
    match: {noToolResult: true, userContains: "subtask: greet the user"}
    reply: {text: "Greetings from the subagent."}
  - name: subagent-spawn
    match: {noToolResult: true, userContains: "delegate the greeting"}
    reply:
      content:
        - text: "Delegating."
        - name: spawn_agent
          input: {task_name: "greeter", message: "subtask: greet the user", fork_turns: "none"}
  - name: subagent-wait
    match: {toolResult: {name: spawn_agent}}
    reply:
      content:
        - name: wait_agent
          input: {timeout_ms: 30000}
  - name: subagent-done
    match: {toolResult: {name: wait_agent}}
    reply: {text: "The greeter is done: {{toolResult}}"}
  - name: ticks
    match: {noToolResult: true, userContains: "stream the ticks"}
    reply:
      content:
        - name: exec_command
          input: {cmd: "for i in 1 2 3 4; do echo tick $i; sleep 0.5; done"}
`)

func TestE2ECodex(t *testing.T) {
	agentdtest.WithPath(t, agentdtest.AgentBin(t, "codex"))
	mock, url := agentdtest.MockLLM(t, e2eScript)
	srv := agentdtest.Start(t, agentd.Config{Env: map[string]string{
		"OPENAI_BASE_URL": url + "/v1", "OPENAI_API_KEY": "sk-test-not-a-real-key",
	}})
	c := srv.Client
	ctx := context.Background()
	e2etest.Listed(t, c, "codex", "0.169.0")

	created, err := c.CreateSession(ctx, restapi.CreateSessionRequest{Architecture: "codex", SessionOptions: json.RawMessage(`{"model":"gpt-5.5"}`)})
	if err != nil {
		t.Fatal(err)
	}
	id := created.SessionID
	t.Cleanup(func() { e2etest.LogEvents(t, srv.Client, id) })
	ok := true

	ok = ok && t.Run("StreamedText", func(t *testing.T) {
		st := e2etest.StreamedText(t, c, id, 2)
		last := st.Blocks[len(st.Blocks)-1]
		if last.Type != conversation.BlockAssistantText || last.Content != "Hello from mock-llm: say hello" || last.Status != conversation.StatusComplete {
			t.Fatalf("last block %+v", last)
		}
		if st.Usage.OutputTokens == 0 || st.Runtime.AgentSessionID == "" || st.Runtime.AgentVersion != "0.169.0" {
			t.Fatalf("usage %+v runtime %+v", st.Usage, st.Runtime)
		}
	})
	ok = ok && t.Run("ShellCommandWritesFileAfterApproval", func(t *testing.T) {
		e2etest.ShellAfterApproval(t, c, id, "shell", "codex-proof")
	})
	ok = ok && t.Run("ToolOutputStreams", func(t *testing.T) { e2etest.ToolOutputStreams(t, c, id) })
	ok = ok && t.Run("UserImage", func(t *testing.T) { e2etest.UserImage(t, c, id, e2etest.PNG(t, 6, 4)) })
	ok = ok && t.Run("Subagent", func(t *testing.T) { subagent(t, c, id) })
	ok = ok && t.Run("ApprovalDenied", func(t *testing.T) { e2etest.ApprovalDenied(t, c, id, false) })
	ok = ok && t.Run("Interrupt", func(t *testing.T) { e2etest.Interrupt(t, c, id) })

	if !ok {
		return
	}
	if !t.Run("SecondTurnAfterRestartSeesTheFirst", func(t *testing.T) {
		r := e2etest.RecallAfterRestart(t, srv, mock, id, "say hello", "please write the proof", "codex-proof", "what did I ask first?")
		// The resumed thread replays its token counts; they are not
		// counted twice.
		var resumed conversation.Usage
		for _, e := range r.Seen {
			if u := e2etest.Payload[conversation.MetadataUpdate](e).Usage; e.Type == conversation.TypeMetadataUpdate && u != nil {
				resumed = resumed.Add(*u)
			}
		}
		if resumed.InputTokens >= r.Before.Usage.InputTokens || r.After.Usage.InputTokens != r.Before.Usage.InputTokens+resumed.InputTokens {
			t.Fatalf("usage before %+v, resumed turn %+v, after %+v", r.Before.Usage, resumed, r.After.Usage)
		}
	}) {
		return
	}

	// A workspace restored elsewhere has no .agentd/codex: the runner writes the
	// transcript it saved with the session back, and the CLI resumes from it.
	t.Run("ResumeInAFreshWorkspace", func(t *testing.T) {
		e2etest.ResumeInAFreshWorkspace(t, srv, mock, id, ".agentd/codex", "say hello", "codex-proof", "what did I ask first? (again)")
	})
}

func TestE2ECodexMissing(t *testing.T) { e2etest.Missing(t, "codex", "codex") }

func TestE2ECodexCrash(t *testing.T) {
	srv, id := e2etest.Crash(t, "codex", "codex", "#!/bin/sh\necho 'codex: fatal: the config is broken' >&2\nexit 3\n",
		"the config is broken", "code 3")
	// The session stays usable: the next turn tries again (and fails the
	// same way, with the same reason).
	q, after := e2etest.Send(t, srv.Client, id, "again")
	if _, end := e2etest.Turn(t, srv.Client, id, after, q, nil); end.Type != conversation.TypeQueryFailed {
		t.Fatalf("second turn %s", end.Payload)
	}
}

// subagent plays "delegate the greeting": the parent calls spawn_agent (a
// tool Codex offers because the runner enables multi_agent_v2), the child
// thread answers on its own Responses request, the parent waits for it
// (wait_agent) and ends the turn.
func subagent(t *testing.T, c *client.Client, id string) {
	seen, spawned, finished := e2etest.SubagentTurn(t, c, id, "please delegate the greeting")
	// The app-server does not report spawn_agent's message: no prompt,
	// but the agent's path.
	if spawned.ToolUseID == "" || spawned.AgentID == "" || spawned.Description != "/root/greeter" ||
		finished.ToolUseID != spawned.ToolUseID || finished.Status != conversation.StatusComplete ||
		finished.Output != "Greetings from the subagent." {
		t.Fatalf("spawned %+v completed %+v:%s", spawned, finished, e2etest.Dump(seen))
	}
	// The child's streamed text is in its own conversation's events.
	var childText strings.Builder
	for _, e := range seen {
		if e.Type == conversation.TypeBlockDelta && e.Context.ConversationID == spawned.ToolUseID {
			childText.WriteString(e2etest.Payload[conversation.BlockDelta](e).Delta)
		}
	}
	st, sub := e2etest.SubagentOf(t, c, id, spawned.ToolUseID)
	found := false
	for _, b := range sub.Blocks {
		if b.Type == conversation.BlockAssistantText && b.Content == "Greetings from the subagent." && b.Status == conversation.StatusComplete {
			found = true
		}
	}
	if !found || childText.String() != "Greetings from the subagent." {
		t.Fatalf("the child's text is not in its own conversation (deltas %q): %+v:%s", childText.String(), sub, e2etest.Dump(seen))
	}
	last := st.Blocks[len(st.Blocks)-1]
	if last.Type != conversation.BlockAssistantText || !strings.HasPrefix(last.Content, "The greeter is done:") || last.Status != conversation.StatusComplete {
		t.Fatalf("the parent's last block %+v", last)
	}
	// The child's greeting stays out of the parent's conversation.
	for _, b := range st.Blocks {
		if strings.Contains(b.Content, "Greetings from the subagent.") && b.Type == conversation.BlockAssistantText {
			t.Fatalf("the child's text leaked into the parent: %+v", b)
		}
	}
}
