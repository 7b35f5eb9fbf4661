package claudecode_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agentd/agentd"
	"github.com/agentd/agentd/client"
	"github.com/agentd/agentd/conversation"
	"github.com/agentd/agentd/internal/agentdtest"
	"github.com/agentd/agentd/internal/mockllm"
	"github.com/agentd/agentd/internal/sandbox/executor"
	"github.com/agentd/agentd/profile"
	"github.com/agentd/agentd/restapi"
	"github.com/agentd/agentd/sandbox"
)

// Server restarts in the middle of a real Claude Code turn, with the
// executor sandbox: the CLI keeps running in its executor, the next server
// resumes the turn, and a client that stayed connected sees every block
// and line exactly once with contiguous seqs.

// The turn: a Bash call that prints a numbered line every 100 ms for 3 s,
// then a text answer once the model has the command's output; Bash runs
// without a prompt.
var (
	restartScript  = agentdtest.CountSlowlyScript
	restartProfile = agentdtest.CountSlowlyProfile
)

// shortDir is a temporary folder with a short path (socket paths are
// limited to 107 bytes).
func shortDir(t *testing.T) string {
	t.Helper()
	d, err := os.MkdirTemp("", "cr")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(d) })
	return d
}

// followRestart sends "count slowly" and follows the session from seq 0
// until the turn ends; restart is called once the Bash command is running.
// It returns the events and the end event.
func followRestart(t *testing.T, c *client.Client, id string, restart func(), logs func() string) []conversation.Event {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	stream := c.Stream(ctx, id, 0)
	defer stream.Close()
	sent, err := c.Send(ctx, id, "count slowly")
	if err != nil {
		t.Fatal(err)
	}
	var evs []conversation.Event
	restarted := false
	var bashAt time.Time
	for {
		ev, err := stream.Next(ctx)
		if err != nil {
			t.Fatalf("stream after %d events: %v\n%s", len(evs), err, logs())
		}
		evs = append(evs, ev)
		if ev.Type == conversation.TypeBlockUpsert && bashAt.IsZero() {
			var u conversation.BlockUpsert
			_ = json.Unmarshal(ev.Payload, &u)
			if u.Block.Type == conversation.BlockToolUse && u.Block.Status == conversation.StatusComplete {
				bashAt = time.Now()
			}
		}
		if !restarted && !bashAt.IsZero() {
			// The command runs for 3 s: stop the server a second into it.
			time.Sleep(time.Until(bashAt.Add(time.Second)))
			restarted = true
			start := time.Now()
			restart()
			t.Logf("server restarted in %v", time.Since(start).Round(time.Millisecond))
		}
		if ev.Type == conversation.TypeQueryCompleted || ev.Type == conversation.TypeQueryFailed {
			var q struct{ QueryID string }
			_ = json.Unmarshal(ev.Payload, &q)
			if q.QueryID != sent.QueryID {
				continue
			}
			if ev.Type == conversation.TypeQueryFailed {
				t.Fatalf("the turn failed across the restart: %s\n%s", ev.Payload, logs())
			}
			if !restarted {
				t.Fatal("the turn ended before the server could be restarted")
			}
			if stream.Reconnects() == 0 {
				t.Fatal("the client never reconnected: the server was not restarted")
			}
			return evs
		}
	}
}

// checkRestartedTurn checks the turn's events and the session's state:
// seqs contiguous, every block's events once, every line of the command's
// output once, and the model saw the command's whole output.
func checkRestartedTurn(t *testing.T, evs []conversation.Event, st restapi.SessionState, mock *mockllm.Server) {
	t.Helper()
	for i, ev := range evs {
		if ev.Seq != int64(i+1) {
			t.Fatalf("event %d has seq %d: gap or repeat across the restart", i, ev.Seq)
		}
	}
	// No event of a block twice (an upsert repeated with the same content,
	// a delta sent again).
	seen := map[string]int{}
	deltas := map[string]string{}
	for _, ev := range evs {
		switch ev.Type {
		case conversation.TypeBlockDelta:
			var d conversation.BlockDelta
			_ = json.Unmarshal(ev.Payload, &d)
			deltas[d.BlockID] += d.Delta
		case conversation.TypeBlockUpsert, conversation.TypeMetadataUpdate:
			if seen[string(ev.Payload)]++; seen[string(ev.Payload)] > 1 {
				t.Errorf("event stored twice: %s %s", ev.Type, ev.Payload)
			}
		}
	}
	var want strings.Builder
	for i := 1; i <= 30; i++ {
		fmt.Fprintf(&want, "line %d\n", i)
	}
	var result, text *conversation.Block
	for i := range st.Blocks {
		b := &st.Blocks[i]
		switch b.Type {
		case conversation.BlockToolResult:
			result = b
		case conversation.BlockAssistantText:
			text = b
			if d, ok := deltas[b.ID]; ok && d != b.Content {
				t.Errorf("block %s: deltas %q, content %q", b.ID, d, b.Content)
			}
		}
	}
	if result == nil || strings.TrimSpace(result.Output) != strings.TrimSpace(want.String()) || result.IsError {
		t.Fatalf("tool result %+v, want the 30 lines once", result)
	}
	if text == nil || text.Content != "Counted to thirty." {
		t.Fatalf("final text %+v", text)
	}
	ids := map[string]bool{}
	for _, b := range st.Blocks {
		if ids[b.ID] {
			t.Errorf("block %s twice", b.ID)
		}
		ids[b.ID] = true
	}
	if len(st.Blocks) != 5 { // user, text, tool_use, tool_result, text
		t.Errorf("%d blocks: %+v", len(st.Blocks), st.Blocks)
	}
	if st.CostUSD <= 0 || st.Usage.OutputTokens == 0 {
		t.Errorf("usage %+v cost %v", st.Usage, st.CostUSD)
	}
	saw := false
	for _, r := range mock.ModelRequests(mockllm.KindMain) {
		for _, tr := range r.ToolResults {
			if strings.Contains(tr.Content, "line 1\n") && strings.Contains(tr.Content, "line 30") {
				saw = true
			}
		}
	}
	if !saw {
		t.Error("the model never got the command's output")
	}
}

// TestE2EExecutorTurnSurvivesKill9: the server is killed (SIGKILL) while
// Claude Code runs a slow Bash command, and started again.
func TestE2EExecutorTurnSurvivesKill9(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: end-to-end test")
	}
	bin := agentdtest.AgentBin(t, "claude")
	t.Parallel()
	mock, url := agentdtest.MockLLM(t, restartScript)
	profiles := t.TempDir()
	data, _ := json.Marshal(restartProfile)
	if err := os.WriteFile(filepath.Join(profiles, "auto.json"), data, 0o644); err != nil {
		t.Fatal(err)
	}
	p := agentdtest.StartProcess(t, []string{"XDG_RUNTIME_DIR=" + shortDir(t), "ANTHROPIC_BASE_URL=" + url, "ANTHROPIC_API_KEY=test-key",
		"PATH=" + bin + ":/usr/local/bin:/usr/bin:/bin"},
		"--data-dir", t.TempDir(), "--no-ui", "--sandbox", "executor", "--profiles", profiles)
	ctx := context.Background()
	s, err := p.Client.CreateSession(ctx, restapi.CreateSessionRequest{Architecture: "claude-code", AgentProfileRef: "auto"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		// The executor outlives the killed server: delete the session to
		// stop it.
		dctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		_ = p.Client.DeleteSession(dctx, s.SessionID, true)
	})
	evs := followRestart(t, p.Client, s.SessionID, p.Restart, p.Logs)
	st, err := p.Client.Session(ctx, s.SessionID)
	if err != nil {
		t.Fatal(err)
	}
	checkRestartedTurn(t, evs, st, mock)
	if !strings.Contains(p.Logs(), "environment re-attached") {
		t.Errorf("the new server did not re-attach:\n%s", p.Logs())
	}
}

// TestE2EExecutorTurnSurvivesGracefulRestart: the same with a graceful
// shutdown, where the session detaches the running turn.
func TestE2EExecutorTurnSurvivesGracefulRestart(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: end-to-end test")
	}
	bin := agentdtest.AgentBin(t, "claude")
	t.Parallel()
	mock, url := agentdtest.MockLLM(t, restartScript)
	prov, err := executor.New(executor.Options{Binary: agentdtest.Binary(t), RunDir: filepath.Join(shortDir(t), "run"),
		Path: bin + ":/usr/local/bin:/usr/bin:/bin"})
	if err != nil {
		t.Fatal(err)
	}
	srv := agentdtest.Start(t, agentd.Config{
		Env:       map[string]string{"ANTHROPIC_BASE_URL": url, "ANTHROPIC_API_KEY": "test-key"},
		Sandboxes: map[string]sandbox.Provider{"executor": prov},
		Sandbox:   "executor",
		Profiles:  []profile.Profile{restartProfile},
		DisableUI: true,
	})
	ctx := context.Background()
	s, err := srv.Client.CreateSession(ctx, restapi.CreateSessionRequest{Architecture: "claude-code", AgentProfileRef: "auto"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		dctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		_ = srv.Client.DeleteSession(dctx, s.SessionID, true)
	})
	// The client is made before the restart; it reconnects to the same
	// address.
	c := srv.Client
	evs := followRestart(t, c, s.SessionID, srv.Restart, func() string { return "" })
	st, err := srv.Client.Session(ctx, s.SessionID)
	if err != nil {
		t.Fatal(err)
	}
	checkRestartedTurn(t, evs, st, mock)
}
