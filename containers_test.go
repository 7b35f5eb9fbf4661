package agentd_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/agentd/agentd"
	agentdclient "github.com/agentd/agentd/client"
	"github.com/agentd/agentd/conversation"
	"github.com/agentd/agentd/internal/agent/agenttest/e2etest"
	"github.com/agentd/agentd/internal/agentdtest"
	"github.com/agentd/agentd/internal/sandbox/sandboxtest"
	"github.com/agentd/agentd/restapi"
	"github.com/agentd/agentd/sandbox"
	"github.com/agentd/agentd/store/sqlite"
)

// The end-to-end scenarios every container sandbox (docker_test.go,
// kubernetes_test.go) runs on its real engine.

// containerBackend is a container sandbox as these scenarios see it.
type containerBackend struct {
	name        string        // --sandbox, and its name in GET /api/sandboxes
	noun        string        // what the server's log calls a container: "container", "pod"
	enforcement string        // how GET /api/sandboxes' limits enforcement begins
	config      agentd.Config // a server of the backend: Sandbox and the backend's settings
	args        []string      // the same as serve flags
	runPrefix   string        // of the short XDG_RUNTIME_DIR of a server process
	// settle is how long a removal may take to show (pods are deleted in
	// the background; 0: at once).
	settle time.Duration
	// containers lists the node's containers, running or not.
	containers func(t testing.TB, node string) []string
	// clean, when set, fails unless the engine holds nothing else of a
	// server whose containers are gone.
	clean func(t *testing.T)
}

// server starts a server of b with a warm pool of warm and env.
func (b containerBackend) server(t testing.TB, warm int, env map[string]string) *agentdtest.Server {
	cfg := b.config
	cfg.WarmPool, cfg.Env = warm, env
	return agentdtest.Start(t, cfg)
}

// process starts a server process of b on data.
func (b containerBackend) process(t *testing.T, data string) *agentdtest.Process {
	return agentdtest.StartProcess(t, []string{"XDG_RUNTIME_DIR=" + sandboxtest.ShortTempDir(t, b.runPrefix)},
		append([]string{"--data-dir", data, "--no-ui"}, b.args...)...)
}

// waitContainers waits until node has n containers (within: at most that
// long; 0, it looks once) and returns the last list and whether it has n.
func (b containerBackend) waitContainers(t testing.TB, node string, n int, within time.Duration) ([]string, bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		left := b.containers(t, node)
		if len(left) == n {
			return left, true
		}
		if !time.Now().Before(deadline) {
			return left, false
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// noneLeft fails unless no container of node is left, waiting for
// removals under way, and nothing else b's engine holds of it.
func (b containerBackend) noneLeft(t *testing.T, node string) {
	t.Helper()
	if left, ok := b.waitContainers(t, node, 0, 30*time.Second); !ok {
		t.Fatalf("%ss left: %v", b.noun, left)
	}
	if b.clean != nil {
		b.clean(t)
	}
}

// nodeOf is the node id a server on dataDir labels its containers with.
func nodeOf(t *testing.T, dataDir string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dataDir, "node-id"))
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}

// containerShell: a shell session of srv, a server of b: script's output
// is output, the file made.txt it writes (holding made) is reported and
// read through the API, a failing command is the turn's error result,
// GET /api/sandboxes describes b, and the session has one container. It
// returns the session and the server's node.
func containerShell(t *testing.T, b containerBackend, srv *agentdtest.Server, script, output, made string) (id, node string) {
	t.Helper()
	c := srv.Client
	ctx := context.Background()
	created, err := c.CreateSession(ctx, restapi.CreateSessionRequest{Architecture: "shell"})
	if err != nil {
		t.Fatal(err)
	}
	id = created.SessionID
	q, after := e2etest.Send(t, c, id, script)
	seen, end := e2etest.Turn(t, c, id, after, q, nil)
	e2etest.Completed(t, end, seen)
	st := e2etest.State(t, c, id)
	if last := st.Blocks[len(st.Blocks)-1]; last.Output != output || last.IsError {
		t.Fatalf("result %+v", last)
	}
	if st.Runtime.Sandbox != b.name {
		t.Fatalf("runtime %+v", st.Runtime)
	}
	e2etest.WaitEvent(t, c, id, after, func(e conversation.Event) bool {
		return e.Type == conversation.TypeFileCreated && e2etest.Payload[conversation.FileChange](e).Path == "made.txt"
	})
	if b, err := c.File(ctx, id, "made.txt"); err != nil || string(b) != made {
		t.Fatalf("file %q %v", b, err)
	}
	// A failing command is the turn's error result, not the sandbox's.
	q, after = e2etest.Send(t, c, id, `echo no >&2; exit 3`)
	seen, end = e2etest.Turn(t, c, id, after, q, nil)
	e2etest.Completed(t, end, seen)
	if blocks := e2etest.State(t, c, id).Blocks; !blocks[len(blocks)-1].IsError || !strings.Contains(blocks[len(blocks)-1].Output, "no") {
		t.Fatalf("exit 3 is not an error result: %+v", blocks[len(blocks)-1])
	}

	sbs, err := c.Sandboxes(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, sb := range sbs {
		names = append(names, sb.Name)
		if sb.Name != b.name {
			continue
		}
		if !sb.Default || !sb.SurvivesRestart || !strings.HasPrefix(sb.Limits.Enforcement, b.enforcement) || len(sb.Protections) != len(sandbox.Threats) {
			t.Fatalf("%s sandbox %+v", b.name, sb)
		}
		for _, p := range sb.Protections {
			// No provider key in this server: nothing to protect, and the
			// model proxy is off.
			if !p.Protected && p.Threat != "providerKey" {
				t.Errorf("%s does not protect %s: %s", b.name, p.Threat, p.Detail)
			}
		}
	}
	if !slices.Equal(names, []string{b.name, "local"}) {
		t.Fatalf("sandboxes %v", names)
	}
	node = nodeOf(t, srv.Config.DataDir)
	if n := len(b.containers(t, node)); n != 1 {
		t.Fatalf("%d %ss for one session", n, b.noun)
	}
	return id, node
}

// claudeContainerScript answers the shared e2e scenarios for Claude
// Code, whose shell tool is Bash.
var claudeContainerScript = e2etest.Script(`
  - name: hello
    match: {userContains: "say hello"}
    reply: {text: "Hello from mock-llm, streamed in pieces.", chunkSize: 4}
  - name: write-proof
    match: {noToolResult: true, userContains: "write the proof"}
    reply:
      content:
        - thinking: "The user wants proof.txt."
        - text: "Writing the proof."
        - type: tool_use
          name: Bash
          input: {command: "echo docker-proof > proof.txt && cat proof.txt", description: "Write proof.txt"}
  - name: write-denied
    match: {noToolResult: true, userContains: "write the forbidden file"}
    reply:
      content:
        - type: tool_use
          name: Bash
          input: {command: "echo nope > forbidden.txt", description: "Write forbidden.txt"}
`)

// containerClaudeCode: the real Claude Code CLI in b's sandbox (claimed
// from the warm pool), reaching mock-llm only through the model proxy:
// streamed text, a Bash tool that writes a file after approval, a denied
// one, an interrupt, and the conversation resumed after a server restart
// (the container and its CLI are re-attached). Nothing is left after.
func containerClaudeCode(t *testing.T, b containerBackend) {
	mock, url := agentdtest.MockLLM(t, claudeContainerScript)
	srv := b.server(t, 1, map[string]string{"ANTHROPIC_BASE_URL": url, "ANTHROPIC_API_KEY": "sk-ant-test-not-a-real-key"})
	c := srv.Client
	ctx := context.Background()
	waitWarmPool(t, c, b.name, 1)
	created, err := c.CreateSession(ctx, restapi.CreateSessionRequest{Architecture: "claude-code"})
	if err != nil {
		t.Fatal(err)
	}
	id := created.SessionID
	t.Cleanup(func() { e2etest.LogEvents(t, srv.Client, id) })
	ok := t.Run("StreamedText", func(t *testing.T) { e2etest.StreamedText(t, c, id, 2) })
	ok = ok && t.Run("BashWritesFileAfterApproval", func(t *testing.T) {
		e2etest.ShellAfterApproval(t, c, id, "Bash", "docker-proof")
	})
	ok = ok && t.Run("ApprovalDenied", func(t *testing.T) { e2etest.ApprovalDenied(t, c, id, false) })
	ok = ok && t.Run("Interrupt", func(t *testing.T) { e2etest.Interrupt(t, c, id) })
	if !ok {
		return
	}
	sbs, err := c.Sandboxes(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, sb := range sbs {
		if sb.Name == b.name && (len(sb.Pools) != 1 || sb.Pools[0].Claims != 1 || sb.Pools[0].Misses != 0) {
			t.Fatalf("the session did not come from the warm pool: %+v", sb.Pools)
		}
	}
	t.Run("SecondTurnAfterRestartSeesTheFirst", func(t *testing.T) {
		e2etest.RecallAfterRestart(t, srv, mock, id, "say hello", "please write the proof", "docker-proof", "what did I ask first?")
	})
	if err := c.DeleteSession(ctx, id, true); err != nil {
		t.Fatal(err)
	}
	srv.Stop() // drains the warm pool
	b.noneLeft(t, nodeOf(t, srv.Config.DataDir))
}

// waitWarmPool waits until the named sandbox's default pool has n ready.
func waitWarmPool(t testing.TB, c *agentdclient.Client, name string, n int) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for {
		sbs, err := c.Sandboxes(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		for _, sb := range sbs {
			if sb.Name == name && len(sb.Pools) > 0 && sb.Pools[0].Ready >= n {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("warm pool not ready: %+v", sbs)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// containerTurnSurvivesKill9: kill -9 a server of b mid-turn; the new
// server re-attaches to the container and the turn finishes with every
// line once, seqs contiguous; deleting the session leaves nothing.
func containerTurnSurvivesKill9(t *testing.T, b containerBackend) {
	data := t.TempDir()
	p := b.process(t, data)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	r := shellTurnAcrossKill9(ctx, t, p, 50, 12)
	for i, ev := range r.events {
		if ev.Seq != int64(i+1) {
			t.Fatalf("event %d has seq %d: gap or duplicate across the restart", i, ev.Seq)
		}
	}
	if r.stream.Reconnects() == 0 {
		t.Fatal("the client never reconnected: the server was not really restarted")
	}
	if !strings.Contains(p.Logs(), b.noun+" re-attached") {
		t.Fatalf("no re-attach in the log:\n%s", p.Logs())
	}
	if err := p.Client.DeleteSession(ctx, r.id, true); err != nil {
		t.Fatal(err)
	}
	b.noneLeft(t, nodeOf(t, data))
}

// containerCollectsDeletedWhileDown: sessions deleted while a server of b
// was down (here: straight from the store, as another node or a crash
// between delete and cleanup would leave them) lose their containers at
// the next start; the others are re-attached and work.
func containerCollectsDeletedWhileDown(t *testing.T, b containerBackend) {
	data := t.TempDir()
	p := b.process(t, data)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var ids []string
	for i := range 2 {
		id := newSession(t, ctx, p.Client)
		if out, failed := turn(t, ctx, p.Client, id, fmt.Sprintf("echo session %d > n.txt; cat n.txt", i)); failed || out != fmt.Sprintf("session %d\n", i) {
			t.Fatalf("turn: %q %v", out, failed)
		}
		ids = append(ids, id)
	}
	node := nodeOf(t, data)
	if n := len(b.containers(t, node)); n != 2 {
		t.Fatalf("%d %ss, want 2", n, b.noun)
	}
	p.Kill()
	st, err := sqlite.Open(ctx, filepath.Join(data, "agentd.db"))
	if err != nil {
		t.Fatal(err)
	}
	if err := st.DeleteSession(ctx, ids[0]); err != nil {
		t.Fatal(err)
	}
	st.Close()
	p.Restart()
	if left, ok := b.waitContainers(t, node, 1, b.settle); !ok {
		t.Fatalf("%ss after the restart: %v\n%s", b.noun, left, p.Logs())
	}
	if !strings.Contains(p.Logs(), b.noun+" of no session removed") {
		t.Fatalf("no removal in the log:\n%s", p.Logs())
	}
	// The other one was re-attached and works.
	if out, failed := turn(t, ctx, p.Client, ids[1], "cat n.txt"); failed || out != "session 1\n" {
		t.Fatalf("kept session: %q %v\n%s", out, failed, p.Logs())
	}
	if err := p.Client.DeleteSession(ctx, ids[1], true); err != nil {
		t.Fatal(err)
	}
	b.noneLeft(t, node)
}

// benchSessionReady: POST /api/sessions, then the first message, until
// the session's status is ready (its container is up, the executor
// answered, the runner started), through a real server of cb; cold (no
// warm pool) and warm (a pool of one, refilled untimed before each
// session).
func benchSessionReady(b *testing.B, cb containerBackend) {
	for _, warm := range []int{0, 1} {
		name := map[int]string{0: "cold", 1: "warm"}[warm]
		b.Run(name, func(b *testing.B) {
			c := cb.server(b, warm, map[string]string{}).Client
			ctx := context.Background()
			var ds []time.Duration
			for b.Loop() {
				b.StopTimer()
				if warm > 0 {
					waitWarmPool(b, c, cb.name, 1)
				}
				b.StartTimer()
				t0 := time.Now()
				created, err := c.CreateSession(ctx, restapi.CreateSessionRequest{Architecture: "shell"})
				if err != nil {
					b.Fatal(err)
				}
				stream := c.Stream(ctx, created.SessionID, 0)
				if _, err := c.Send(ctx, created.SessionID, "true"); err != nil {
					b.Fatal(err)
				}
				for {
					ev, err := stream.Next(ctx)
					if err != nil {
						b.Fatal(err)
					}
					if ev.Type == conversation.TypeStatus && e2etest.Payload[conversation.StatusChange](ev).Status == conversation.SessionReady {
						break
					}
				}
				ds = append(ds, time.Since(t0))
				b.StopTimer()
				stream.Close()
				if err := c.DeleteSession(ctx, created.SessionID, true); err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
			}
			sandboxtest.ReportPercentiles(b, ds, time.Millisecond, "ms")
		})
	}
}
