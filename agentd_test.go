package agentd_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/agentd/agentd"
	"github.com/agentd/agentd/client"
	"github.com/agentd/agentd/conversation"
	"github.com/agentd/agentd/internal/agentdtest"
	"github.com/agentd/agentd/internal/sandbox/local"
	"github.com/agentd/agentd/restapi"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(closeKube{m},
		goleak.IgnoreAnyFunction("github.com/zishang520/socket.io/v3/pkg/queue.(*Queue).run"),
		goleak.IgnoreTopFunction("net/http.(*persistConn).readLoop"),
		goleak.IgnoreTopFunction("net/http.(*persistConn).writeLoop"),
		// modernc's SQLite keeps a package-level finalizer goroutine? no; the
		// http test client idles its connections.
	)
}

// closeKube runs the tests, then closes the connections of the
// kubernetes tests' admin client (agentdtest.Kube) before the leak check.
type closeKube struct{ m *testing.M }

func (c closeKube) Run() int {
	code := c.m.Run()
	agentdtest.CloseKube()
	return code
}

// waitTurn follows the session until the query ends and returns its end event.
func waitTurn(t *testing.T, c *client.Client, id, query string) conversation.Event {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	s := c.Stream(ctx, id, 0)
	defer s.Close()
	for {
		ev, err := s.Next(ctx)
		if err != nil {
			t.Fatalf("waiting for %s: %v", query, err)
		}
		if ev.Type != conversation.TypeQueryCompleted && ev.Type != conversation.TypeQueryFailed {
			continue
		}
		var p struct{ QueryID string }
		json.Unmarshal(ev.Payload, &p)
		if p.QueryID == query {
			return ev
		}
	}
}

func TestRestartBetweenTurnsKeepsEverything(t *testing.T) {
	srv := agentdtest.Start(t, agentd.Config{})
	ctx := context.Background()
	c := srv.Client
	created, err := c.CreateSession(ctx, restapi.CreateSessionRequest{Architecture: "shell", Name: "restart"})
	if err != nil {
		t.Fatal(err)
	}
	id := created.SessionID
	sent, err := c.Send(ctx, id, "echo one > one.txt && echo first")
	if err != nil {
		t.Fatal(err)
	}
	waitTurn(t, c, id, sent.QueryID)
	before, err := c.Session(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	evBefore, _ := c.Events(ctx, id, 0, 0)

	srv.Restart()
	c = srv.Client

	list, err := c.Sessions(ctx)
	if err != nil || len(list) != 1 || list[0].SessionID != id || list[0].Name != "restart" {
		t.Fatalf("after restart: %v %+v", err, list)
	}
	after, err := c.Session(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	a, _ := json.Marshal(before.Blocks)
	b, _ := json.Marshal(after.Blocks)
	if string(a) != string(b) {
		t.Fatalf("blocks changed across restart:\n%s\n%s", a, b)
	}
	evAfter, _ := c.Events(ctx, id, 0, 0)
	for i := range evBefore.Events {
		x, _ := json.Marshal(evBefore.Events[i])
		y, _ := json.Marshal(evAfter.Events[i])
		if string(x) != string(y) {
			t.Fatalf("event %d changed across restart", i+1)
		}
	}
	// The session was idle at shutdown: graceful shutdown terminated its
	// environment and recorded that.
	last := evBefore.LastSeq
	sent2, err := c.Send(ctx, id, "cat one.txt")
	if err != nil {
		t.Fatal(err)
	}
	end := waitTurn(t, c, id, sent2.QueryID)
	if end.Type != conversation.TypeQueryCompleted {
		t.Fatalf("second turn: %s %s", end.Type, end.Payload)
	}
	page, _ := c.Events(ctx, id, 0, 0)
	for i, e := range page.Events {
		if e.Seq != int64(i+1) {
			t.Fatalf("seq gap at %d: %d", i, e.Seq)
		}
	}
	if page.LastSeq <= last {
		t.Fatalf("seq did not continue: %d <= %d", page.LastSeq, last)
	}
	st, _ := c.Session(ctx, id)
	out := st.Blocks[len(st.Blocks)-1]
	if out.Type != conversation.BlockToolResult || out.Output != "one\n" {
		t.Fatalf("second turn output %+v (the workspace must survive the restart)", out)
	}
	if sent2.QueryID != "q2" {
		t.Fatalf("query id %s, want q2", sent2.QueryID)
	}
}

// TestKilledServerFailsRunningTurn kills agentd (SIGKILL) mid-turn: on the
// next start the turn is failed with a reason and the session is usable.
func TestKilledServerFailsRunningTurn(t *testing.T) {
	data := t.TempDir()
	p := agentdtest.StartProcess(t, nil, "--data-dir", data, "--no-ui")
	ctx := context.Background()
	created, err := p.Client.CreateSession(ctx, restapi.CreateSessionRequest{Architecture: "shell"})
	if err != nil {
		t.Fatal(err)
	}
	id := created.SessionID
	marker := filepath.Join(t.TempDir(), "pid")
	sent, err := p.Client.Send(ctx, id, fmt.Sprintf("echo $$ > %s; for i in $(seq 1 100); do echo tick $i; sleep 0.1; done", marker))
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool { _, err := os.Stat(marker); return err == nil })
	// Mid-turn: the first ticks are in the log.
	waitFor(t, func() bool {
		page, err := p.Client.Events(ctx, id, 0, 0)
		if err != nil {
			return false
		}
		for _, ev := range page.Events {
			if ev.Type == conversation.TypeBlockDelta && strings.Contains(string(ev.Payload), "tick 2") {
				return true
			}
		}
		return false
	})
	p.Restart()
	end := waitTurn(t, p.Client, id, sent.QueryID)
	var f conversation.QueryFailed
	json.Unmarshal(end.Payload, &f)
	if end.Type != conversation.TypeQueryFailed || f.Code != "SERVER_RESTARTED" || !strings.Contains(f.Error, "restarted") {
		t.Fatalf("turn end after kill: %s %s", end.Type, end.Payload)
	}
	// The command died with the server (no orphan left ticking).
	pid, _ := os.ReadFile(marker)
	waitFor(t, func() bool {
		_, err := os.Stat("/proc/" + strings.TrimSpace(string(pid)))
		return err != nil
	})
	st, err := p.Client.Session(ctx, id)
	if err != nil || st.Status != conversation.SessionTerminated {
		t.Fatalf("status after restart %v %v", st.Status, err)
	}
	sent2, err := p.Client.Send(ctx, id, "echo back")
	if err != nil {
		t.Fatal(err)
	}
	if end := waitTurn(t, p.Client, id, sent2.QueryID); end.Type != conversation.TypeQueryCompleted {
		t.Fatalf("turn after restart: %s", end.Payload)
	}
}

func TestDeleteLeavesNoProcess(t *testing.T) {
	srv := agentdtest.Start(t, agentd.Config{})
	ctx := context.Background()
	c := srv.Client
	created, _ := c.CreateSession(ctx, restapi.CreateSessionRequest{Architecture: "shell"})
	marker := filepath.Join(t.TempDir(), "pids")
	if _, err := c.Send(ctx, created.SessionID, fmt.Sprintf("sleep 60 & echo $! > %s; echo $$ >> %s; sleep 60", marker, marker)); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool { b, _ := os.ReadFile(marker); return strings.Count(string(b), "\n") == 2 })
	if err := c.DeleteSession(ctx, created.SessionID, true); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(marker)
	for _, pid := range strings.Fields(string(b)) {
		waitFor(t, func() bool { _, err := os.Stat("/proc/" + pid); return err != nil })
	}
	if _, err := c.Session(ctx, created.SessionID); !client.IsCode(err, "SESSION_NOT_FOUND") {
		t.Fatalf("purged session still there: %v", err)
	}
}

func TestIdleTimeoutTerminatesAndNextMessageRestarts(t *testing.T) {
	srv := agentdtest.Start(t, agentd.Config{IdleTimeout: 300 * time.Millisecond})
	ctx := context.Background()
	c := srv.Client
	created, _ := c.CreateSession(ctx, restapi.CreateSessionRequest{Architecture: "shell"})
	sent, _ := c.Send(ctx, created.SessionID, "echo hi")
	waitTurn(t, c, created.SessionID, sent.QueryID)
	waitFor(t, func() bool {
		st, _ := c.Session(ctx, created.SessionID)
		return st.Status == conversation.SessionTerminated
	})
	sent, _ = c.Send(ctx, created.SessionID, "echo again")
	if end := waitTurn(t, c, created.SessionID, sent.QueryID); end.Type != conversation.TypeQueryCompleted {
		t.Fatalf("after idle timeout: %s", end.Payload)
	}
}

func TestProfilesFolderSkipsMalformed(t *testing.T) {
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "good.yaml"), []byte("name: Good\ndescription: ok\ndefaultWorkspaceFiles:\n  - path: README.md\n    content: hello\n"), 0o644)
	os.WriteFile(filepath.Join(dir, "bad.yaml"), []byte("name: [unclosed\n"), 0o644)
	os.WriteFile(filepath.Join(dir, "worse.json"), []byte(`{"id":"x","mcpServers":{"m":{"type":"stdio"}}}`), 0o644)
	srv := agentdtest.Start(t, agentd.Config{ProfilesDir: dir})
	ctx := context.Background()
	ps, err := srv.Client.Profiles(ctx)
	if err != nil {
		t.Fatal(err)
	}
	ids := []string{}
	for _, p := range ps {
		ids = append(ids, p.ID)
	}
	if strings.Join(ids, ",") != "default,good" {
		t.Fatalf("profiles %v", ids)
	}
	created, err := srv.Client.CreateSession(ctx, restapi.CreateSessionRequest{Architecture: "shell", AgentProfileRef: "good"})
	if err != nil {
		t.Fatal(err)
	}
	sent, _ := srv.Client.Send(ctx, created.SessionID, "cat README.md")
	waitTurn(t, srv.Client, created.SessionID, sent.QueryID)
	st, _ := srv.Client.Session(ctx, created.SessionID)
	if out := st.Blocks[len(st.Blocks)-1].Output; out != "hello" {
		t.Fatalf("default workspace file: %q", out)
	}
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met in time")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Agent processes run at a lower CPU priority than the server: by default
// 10 more niceness (agentd.DefaultAgentNice), as --agent-nice sets, or the
// server's own with --agent-nice 0. A value outside 0–19 is refused.
func TestAgentNice(t *testing.T) {
	own, err := local.Nice(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	niceOfTurn := func(c *client.Client) int {
		t.Helper()
		ctx := context.Background()
		created, err := c.CreateSession(ctx, restapi.CreateSessionRequest{Architecture: "shell"})
		if err != nil {
			t.Fatal(err)
		}
		sent, err := c.Send(ctx, created.SessionID, "sleep 0.5; cut -d' ' -f19 /proc/self/stat")
		if err != nil {
			t.Fatal(err)
		}
		waitTurn(t, c, created.SessionID, sent.QueryID)
		st, err := c.Reduce(ctx, created.SessionID)
		if err != nil {
			t.Fatal(err)
		}
		for _, b := range st.Blocks {
			if b.Type == conversation.BlockToolResult {
				n, err := strconv.Atoi(strings.TrimSpace(b.Output))
				if err != nil {
					t.Fatalf("output %q", b.Output)
				}
				return n
			}
		}
		t.Fatal("no tool result")
		return 0
	}
	srv := agentdtest.Start(t, agentd.Config{})
	if got, want := niceOfTurn(srv.Client), min(own+agentd.DefaultAgentNice, 19); got != want {
		t.Errorf("default: the command runs at niceness %d, want %d", got, want)
	}
	p := agentdtest.StartProcess(t, nil, "--data-dir", t.TempDir(), "--no-ui", "--agent-nice", "3")
	if got, want := niceOfTurn(p.Client), min(own+3, 19); got != want {
		t.Errorf("--agent-nice 3: the command runs at niceness %d, want %d", got, want)
	}
	p0 := agentdtest.StartProcess(t, nil, "--data-dir", t.TempDir(), "--no-ui", "--agent-nice", "0")
	if got := niceOfTurn(p0.Client); got != own {
		t.Errorf("--agent-nice 0: the command runs at niceness %d, want the server's %d", got, own)
	}
	if _, err := agentd.New(context.Background(), agentd.Config{DataDir: t.TempDir(), AgentNice: 20}); err == nil {
		t.Error("agentd.New took AgentNice 20")
	}
	for _, bad := range []string{"20", "-1"} {
		out, err := exec.Command(agentdtest.Binary(t), "serve", "--data-dir", t.TempDir(), "--agent-nice="+bad).CombinedOutput()
		if err == nil || !strings.Contains(string(out), "--agent-nice "+bad+": want 0 to 19") {
			t.Errorf("--agent-nice %s: %v, %s", bad, err, out)
		}
	}
}
