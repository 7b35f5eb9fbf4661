package agentd_test

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/agentd/agentd/client"
	"github.com/agentd/agentd/conversation"
	"github.com/agentd/agentd/internal/agentdtest"
	"github.com/agentd/agentd/internal/sandbox/sandboxtest"
	"github.com/agentd/agentd/restapi"
)

// TestDeadExecutorIsReplaced is issue 11's item 5: an agent that killed
// its executor (kill -9 -1 inside bwrap did that) left the session unusable
// until it was deleted, every later message failing with "environment
// gone". Now the session drops the dead environment, says so (an error
// event with code ENVIRONMENT_GONE, then status terminated), and the next
// message starts a new one on the same workspace. Both ways an executor can
// die are covered: during a turn (the turn kills it), and while the session
// is idle (killed from outside; the session notices without a message).
func TestDeadExecutorIsReplaced(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a real server and executors")
	}
	t.Run("executor", func(t *testing.T) {
		deadExecutor(t, "executor", "kill -9 $PPID; sleep 30", true)
	})
	t.Run("bwrap", func(t *testing.T) {
		if _, err := exec.LookPath("bwrap"); err != nil {
			t.Skip("bubblewrap is not installed")
		}
		// What the agent ran: it kills every process it may signal, which
		// in the sandbox's PID namespace includes the executor.
		deadExecutor(t, "bwrap", "kill -9 -1; sleep 30", false)
	})
}

// deadExecutor runs the scenario with --sandbox sb: a turn that kills its
// executor with kill; then, when fromOutside, an idle executor killed by
// the test.
func deadExecutor(t *testing.T, sb, kill string, fromOutside bool) {
	// The parents of the run and data folders must let the sandbox's uid
	// pass (bwrap as root runs as an unprivileged uid).
	base := sandboxtest.ShortTempDir(t, "gone")
	runDir := filepath.Join(base, "run")
	if err := os.Mkdir(runDir, 0o755); err != nil {
		t.Fatal(err)
	}
	p := agentdtest.StartProcess(t, []string{"XDG_RUNTIME_DIR=" + runDir}, "--data-dir", filepath.Join(base, "data"), "--no-ui", "--sandbox", sb)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	c := p.Client
	created, err := c.CreateSession(ctx, restapi.CreateSessionRequest{Architecture: "shell"})
	if err != nil {
		t.Fatal(err)
	}
	id := created.SessionID
	t.Cleanup(func() {
		dctx, dcancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer dcancel()
		c.DeleteSession(dctx, id, true)
	})
	run := func(cmd string) conversation.Event {
		t.Helper()
		sent, err := c.Send(ctx, id, cmd)
		if err != nil {
			t.Fatalf("send %q: %v\n%s", cmd, err, p.Logs())
		}
		return waitTurn(t, c, id, sent.QueryID)
	}
	if end := run("echo one > one.txt && cat /proc/1/comm"); end.Type != conversation.TypeQueryCompleted {
		t.Fatalf("first turn: %s", end.Payload)
	}
	if sb == "bwrap" {
		// kill -1 outside a PID namespace would kill the test's machine.
		if init := strings.Fields(turnOutput(ctx, t, c, id)); len(init) != 1 || init[0] != "bwrap" {
			t.Fatalf("process 1 in the sandbox is %q, not bwrap: no PID namespace; not running kill -1", init)
		}
	}

	// The turn kills its own executor.
	after := lastSeq(ctx, t, c, id)
	end := run(kill)
	var failed conversation.QueryFailed
	json.Unmarshal(end.Payload, &failed)
	if end.Type != conversation.TypeQueryFailed || failed.Code != "ENVIRONMENT_GONE" {
		t.Fatalf("the turn that killed its executor ended %s %s", end.Type, end.Payload)
	}
	waitGoneReported(ctx, t, c, id, after, p)

	// The next message gets a new executor, on the same workspace.
	end = run("cat one.txt && echo $PPID")
	if end.Type != conversation.TypeQueryCompleted {
		t.Fatalf("the turn after the executor died: %s %s\n%s", end.Type, end.Payload, p.Logs())
	}
	out := turnOutput(ctx, t, c, id)
	lines := strings.Fields(out)
	if len(lines) != 2 || lines[0] != "one" {
		t.Fatalf("output %q, want the workspace's one.txt and a pid", out)
	}
	if !fromOutside {
		return
	}
	pid, err := strconv.Atoi(lines[1])
	if err != nil {
		t.Fatal(err)
	}

	// Killed while idle: the session notices by itself.
	after = lastSeq(ctx, t, c, id)
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	waitGoneReported(ctx, t, c, id, after, p)
	if end := run("cat one.txt"); end.Type != conversation.TypeQueryCompleted {
		t.Fatalf("the turn after the idle executor died: %s %s\n%s", end.Type, end.Payload, p.Logs())
	}
	if out := turnOutput(ctx, t, c, id); out != "one\n" {
		t.Fatalf("output %q", out)
	}
}

func lastSeq(ctx context.Context, t *testing.T, c *client.Client, id string) int64 {
	t.Helper()
	page, err := c.Events(ctx, id, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	return page.LastSeq
}

// waitGoneReported waits until, after seq after, the log has an error event
// with code ENVIRONMENT_GONE followed by status terminated.
func waitGoneReported(ctx context.Context, t *testing.T, c *client.Client, id string, after int64, p *agentdtest.Process) {
	t.Helper()
	var seen []string
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		page, err := c.Events(ctx, id, after, 0)
		if err != nil {
			t.Fatal(err)
		}
		seen = seen[:0]
		reported := false
		for _, e := range page.Events {
			seen = append(seen, string(e.Type)+" "+string(e.Payload))
			switch e.Type {
			case conversation.TypeError:
				var p conversation.ErrorEvent
				json.Unmarshal(e.Payload, &p)
				reported = reported || p.Code == "ENVIRONMENT_GONE"
			case conversation.TypeStatus:
				var p conversation.StatusChange
				json.Unmarshal(e.Payload, &p)
				if reported && p.Status == conversation.SessionTerminated {
					return
				}
			}
		}
	}
	t.Fatalf("no ENVIRONMENT_GONE error then status terminated; events:\n%s\n%s", strings.Join(seen, "\n"), p.Logs())
}

// turnOutput is the output of the session's last tool_result block.
func turnOutput(ctx context.Context, t *testing.T, c *client.Client, id string) string {
	t.Helper()
	st, err := c.Session(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	for i := len(st.Blocks) - 1; i >= 0; i-- {
		if st.Blocks[i].Type == conversation.BlockToolResult {
			return st.Blocks[i].Output
		}
	}
	t.Fatal("no tool_result block")
	return ""
}
