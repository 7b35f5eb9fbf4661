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

	"github.com/moby/moby/client"

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

// The docker sandbox end to end: real servers, a real Docker daemon
// (DOCKER_HOST), the sandbox image with this source's agentd
// (agentdtest.DockerImage). They skip without a daemon or image unless
// AGENTD_REQUIRE_DOCKER is set.

func dockerSetup(t *testing.T) (*client.Client, string) {
	t.Helper()
	if testing.Short() {
		t.Skip("starts real servers and containers")
	}
	cli := agentdtest.Docker(t)
	return cli, agentdtest.DockerImage(t)
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

// noLeftovers fails unless no container of node is left and no docker
// volume exists.
func noLeftovers(t *testing.T, cli *client.Client, node string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		left := agentdtest.DockerContainers(t, cli, node)
		if len(left) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("containers left: %v", left)
		}
		time.Sleep(50 * time.Millisecond)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	vols, err := cli.VolumeList(ctx, client.VolumeListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(vols.Items) > 0 {
		t.Fatalf("docker volumes left: %d", len(vols.Items))
	}
}

// A shell session in a container: output, a file written by the agent
// (its event, its bytes through the API), GET /api/sandboxes, and a
// purge that leaves no container, volume or workspace.
func TestDockerShell(t *testing.T) {
	cli, image := dockerSetup(t)
	srv := agentdtest.Start(t, agentd.Config{Sandbox: "docker", DockerImage: image, Env: map[string]string{}})
	c := srv.Client
	ctx := context.Background()
	created, err := c.CreateSession(ctx, restapi.CreateSessionRequest{Architecture: "shell"})
	if err != nil {
		t.Fatal(err)
	}
	id := created.SessionID
	q, after := e2etest.Send(t, c, id, `echo made-in-docker > made.txt; cat made.txt; id -u; ls /sys/class/net`)
	seen, end := e2etest.Turn(t, c, id, after, q, nil)
	e2etest.Completed(t, end, seen)
	st := e2etest.State(t, c, id)
	if last := st.Blocks[len(st.Blocks)-1]; last.Output != "made-in-docker\n10001\nlo\n" || last.IsError {
		t.Fatalf("result %+v", last)
	}
	if st.Runtime.Sandbox != "docker" {
		t.Fatalf("runtime %+v", st.Runtime)
	}
	e2etest.WaitEvent(t, c, id, after, func(e conversation.Event) bool {
		return e.Type == conversation.TypeFileCreated && e2etest.Payload[conversation.FileChange](e).Path == "made.txt"
	})
	if b, err := c.File(ctx, id, "made.txt"); err != nil || string(b) != "made-in-docker\n" {
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
		if sb.Name != "docker" {
			continue
		}
		if !sb.Default || !sb.SurvivesRestart || !strings.HasPrefix(sb.Limits.Enforcement, "cgroup") || len(sb.Protections) != len(sandbox.Threats) {
			t.Fatalf("docker sandbox %+v", sb)
		}
		for _, p := range sb.Protections {
			// No provider key in this server: nothing to protect, and the
			// model proxy is off.
			if !p.Protected && p.Threat != "providerKey" {
				t.Errorf("docker does not protect %s: %s", p.Threat, p.Detail)
			}
		}
	}
	if !slices.Equal(names, []string{"docker", "local"}) {
		t.Fatalf("sandboxes %v", names)
	}

	node := nodeOf(t, srv.Config.DataDir)
	if n := len(agentdtest.DockerContainers(t, cli, node)); n != 1 {
		t.Fatalf("%d containers for one session", n)
	}
	if err := c.DeleteSession(ctx, id, true); err != nil {
		t.Fatal(err)
	}
	noLeftovers(t, cli, node)
	if _, err := os.Stat(filepath.Join(srv.Config.DataDir, "workspaces", id)); !os.IsNotExist(err) {
		t.Fatalf("workspace after purge: %v", err)
	}
}

// claudeDockerScript answers the shared e2e scenarios for Claude Code,
// whose shell tool is Bash.
var claudeDockerScript = e2etest.Script(`
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

// The real Claude Code CLI in a container (from the warm pool), reaching
// mock-llm only through the model proxy's relay: streamed text, a Bash
// tool that writes a file after approval, a denied one, an interrupt,
// and the conversation resumed after a server restart (the container and
// its CLI are re-attached).
func TestDockerClaudeCode(t *testing.T) {
	cli, image := dockerSetup(t)
	mock, url := agentdtest.MockLLM(t, claudeDockerScript)
	srv := agentdtest.Start(t, agentd.Config{
		Sandbox: "docker", DockerImage: image, WarmPool: 1,
		Env: map[string]string{"ANTHROPIC_BASE_URL": url, "ANTHROPIC_API_KEY": "sk-ant-test-not-a-real-key"},
	})
	c := srv.Client
	ctx := context.Background()
	waitWarm(t, c, 1)
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
		if sb.Name == "docker" && (len(sb.Pools) != 1 || sb.Pools[0].Claims != 1 || sb.Pools[0].Misses != 0) {
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
	noLeftovers(t, cli, nodeOf(t, srv.Config.DataDir))
}

// waitWarm waits until the docker sandbox's default pool has n ready.
func waitWarm(t testing.TB, c *agentdclient.Client, n int) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for {
		sbs, err := c.Sandboxes(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		for _, sb := range sbs {
			if sb.Name == "docker" && len(sb.Pools) > 0 && sb.Pools[0].Ready >= n {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("warm pool not ready: %+v", sbs)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestDockerTurnSurvivesKill9: kill -9 the server mid-turn; the new
// server re-attaches to the container and the turn finishes with every
// line once, seqs contiguous; deleting the session leaves nothing.
func TestDockerTurnSurvivesKill9(t *testing.T) {
	cli, image := dockerSetup(t)
	data := t.TempDir()
	p := agentdtest.StartProcess(t, []string{"XDG_RUNTIME_DIR=" + sandboxtest.ShortTempDir(t, "dkr")}, "--data-dir", data, "--no-ui",
		"--sandbox", "docker", "--docker-image", image)
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
	if !strings.Contains(p.Logs(), "container re-attached") {
		t.Fatalf("no re-attach in the log:\n%s", p.Logs())
	}
	if err := p.Client.DeleteSession(ctx, r.id, true); err != nil {
		t.Fatal(err)
	}
	noLeftovers(t, cli, nodeOf(t, data))
}

// Sessions deleted while the server was down (here: straight from the
// store, as another node or a crash between delete and cleanup would
// leave them) lose their containers at the next start; the others are
// re-attached.
func TestDockerCollectsDeletedWhileDown(t *testing.T) {
	cli, image := dockerSetup(t)
	data := t.TempDir()
	p := agentdtest.StartProcess(t, []string{"XDG_RUNTIME_DIR=" + sandboxtest.ShortTempDir(t, "dkr")}, "--data-dir", data, "--no-ui",
		"--sandbox", "docker", "--docker-image", image)
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
	if n := len(agentdtest.DockerContainers(t, cli, node)); n != 2 {
		t.Fatalf("%d containers, want 2", n)
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
	if left := agentdtest.DockerContainers(t, cli, node); len(left) != 1 {
		t.Fatalf("containers after the restart: %v\n%s", left, p.Logs())
	}
	if !strings.Contains(p.Logs(), "container of no session removed") {
		t.Fatalf("no removal in the log:\n%s", p.Logs())
	}
	// The other one was re-attached and works.
	if out, failed := turn(t, ctx, p.Client, ids[1], "cat n.txt"); failed || out != "session 1\n" {
		t.Fatalf("kept session: %q %v\n%s", out, failed, p.Logs())
	}
	if err := p.Client.DeleteSession(ctx, ids[1], true); err != nil {
		t.Fatal(err)
	}
	noLeftovers(t, cli, node)
}

// BenchmarkDockerSessionReady: POST /api/sessions, then the first
// message, until the session's status is ready (its container is up and
// the runner started), through a real server; cold (no warm pool) and
// warm (a pool of one, refilled untimed before each session). Targets:
// cold p50 < 1 s, warm p50 < 100 ms.
func BenchmarkDockerSessionReady(b *testing.B) {
	if testing.Short() {
		b.Skip("starts real servers and containers")
	}
	agentdtest.Docker(b)
	image := agentdtest.DockerImage(b)
	for _, warm := range []int{0, 1} {
		name := map[int]string{0: "cold", 1: "warm"}[warm]
		b.Run(name, func(b *testing.B) {
			srv := agentdtest.Start(b, agentd.Config{Sandbox: "docker", DockerImage: image, WarmPool: warm, Env: map[string]string{}})
			c := srv.Client
			ctx := context.Background()
			var ds []time.Duration
			for b.Loop() {
				b.StopTimer()
				if warm > 0 {
					waitWarm(b, c, 1)
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
