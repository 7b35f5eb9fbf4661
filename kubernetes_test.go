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

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/agentd/agentd"
	agentdclient "github.com/agentd/agentd/client"
	"github.com/agentd/agentd/conversation"
	"github.com/agentd/agentd/internal/agent/agenttest/e2etest"
	"github.com/agentd/agentd/internal/agentdtest"
	"github.com/agentd/agentd/internal/sandbox/sandboxtest"
	"github.com/agentd/agentd/restapi"
	"github.com/agentd/agentd/store/sqlite"
)

// The kubernetes sandbox end to end: real servers, the real test cluster
// (scripts/kube.sh; the tests run in its network namespace), the sandbox
// image with this source's agentd (agentdtest.KubeImage), the servers
// reaching the API server as the service account of
// deploy/kubernetes/rbac.yaml. They skip without a cluster unless
// AGENTD_REQUIRE_KUBERNETES is set.

func kubeSetup(t testing.TB) (*agentdtest.KubeCluster, string) {
	t.Helper()
	if testing.Short() {
		t.Skip("starts real servers and pods")
	}
	kube := agentdtest.Kube(t)
	return kube, agentdtest.KubeImage(t)
}

func kubeConfig(kube *agentdtest.KubeCluster, image string) agentd.KubernetesConfig {
	return agentd.KubernetesConfig{Kubeconfig: kube.Kubeconfig, Namespace: kube.Namespace, Image: image}
}

// kubeArgs are the serve flags of the kubernetes sandbox on the test
// cluster.
func kubeArgs(kube *agentdtest.KubeCluster, image string) []string {
	return []string{"--sandbox", "kubernetes", "--k8s-kubeconfig", kube.Kubeconfig, "--k8s-namespace", kube.Namespace, "--k8s-image", image}
}

// podWorkspace is the folder on the node (this host) of the workspace
// volume of session id's pod.
func podWorkspace(t *testing.T, id string) string {
	t.Helper()
	kube := agentdtest.Kube(t)
	dir := os.Getenv("AGENTD_KUBELET_DIR")
	if dir == "" {
		t.Fatal("AGENTD_KUBELET_DIR is not set (scripts/kube.sh start prints it)")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	list, err := kube.Admin.CoreV1().Pods(kube.Namespace).List(ctx, metav1.ListOptions{LabelSelector: "agentd.session=" + id})
	if err != nil || len(list.Items) != 1 {
		t.Fatalf("the pod of session %s: %v %v", id, list, err)
	}
	return filepath.Join(dir, "pods", string(list.Items[0].UID), "volumes", "kubernetes.io~empty-dir", "workspace")
}

// noPodsLeft fails unless no pod of node is left, waiting for deletions
// under way.
func noPodsLeft(t *testing.T, kube *agentdtest.KubeCluster, node string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		left := agentdtest.KubePods(t, kube, node)
		if len(left) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("pods left: %v", left)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// A shell session in a pod: output, a file written by the agent (its
// event, its bytes through the API, from the store while the pod is
// down, back in the next pod), GET /api/sandboxes, and a purge that
// leaves no pod.
func TestKubernetesShell(t *testing.T) {
	kube, image := kubeSetup(t)
	srv := agentdtest.Start(t, agentd.Config{Sandbox: "kubernetes", Kubernetes: kubeConfig(kube, image), Env: map[string]string{}})
	c := srv.Client
	ctx := context.Background()
	created, err := c.CreateSession(ctx, restapi.CreateSessionRequest{Architecture: "shell"})
	if err != nil {
		t.Fatal(err)
	}
	id := created.SessionID
	q, after := e2etest.Send(t, c, id, `echo made-in-a-pod > made.txt; cat made.txt; ls /sys/class/net; cat /sys/class/net/eth0/operstate`)
	seen, end := e2etest.Turn(t, c, id, after, q, nil)
	e2etest.Completed(t, end, seen)
	st := e2etest.State(t, c, id)
	if last := st.Blocks[len(st.Blocks)-1]; last.Output != "made-in-a-pod\neth0\nlo\ndown\n" || last.IsError {
		t.Fatalf("result %+v", last)
	}
	if st.Runtime.Sandbox != "kubernetes" {
		t.Fatalf("runtime %+v", st.Runtime)
	}
	e2etest.WaitEvent(t, c, id, after, func(e conversation.Event) bool {
		return e.Type == conversation.TypeFileCreated && e2etest.Payload[conversation.FileChange](e).Path == "made.txt"
	})
	if b, err := c.File(ctx, id, "made.txt"); err != nil || string(b) != "made-in-a-pod\n" {
		t.Fatalf("file %q %v", b, err)
	}
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
		if sb.Name != "kubernetes" {
			continue
		}
		if !sb.Default || !sb.SurvivesRestart || !strings.HasPrefix(sb.Limits.Enforcement, "kubernetes") || len(sb.Protections) != 13 {
			t.Fatalf("kubernetes sandbox %+v", sb)
		}
		for _, p := range sb.Protections {
			// No provider key in this server: the model proxy is off.
			if !p.Protected && p.Threat != "providerKey" {
				t.Errorf("kubernetes does not protect %s: %s", p.Threat, p.Detail)
			}
		}
	}
	if !slices.Equal(names, []string{"kubernetes", "local"}) {
		t.Fatalf("sandboxes %v", names)
	}
	node := nodeOf(t, srv.Config.DataDir)
	if n := len(agentdtest.KubePods(t, kube, node)); n != 1 {
		t.Fatalf("%d pods for one session", n)
	}

	// The pod goes (delete without purge): the files API serves the
	// store's copy, and the next message's pod has the file back.
	if err := c.DeleteSession(ctx, id, false); err != nil {
		t.Fatal(err)
	}
	noPodsLeft(t, kube, node)
	if b, err := c.File(ctx, id, "made.txt"); err != nil || string(b) != "made-in-a-pod\n" {
		t.Fatalf("file while the pod is down %q %v", b, err)
	}
	if files, err := c.Files(ctx, id); err != nil || len(files) != 1 || files[0].Path != "made.txt" {
		t.Fatalf("files while the pod is down %+v %v", files, err)
	}
	q, after = e2etest.Send(t, c, id, `cat made.txt`)
	seen, end = e2etest.Turn(t, c, id, after, q, nil)
	e2etest.Completed(t, end, seen)
	if last := e2etest.State(t, c, id).Blocks; last[len(last)-1].Output != "made-in-a-pod\n" {
		t.Fatalf("the file in the next pod: %+v", last[len(last)-1])
	}
	if err := c.DeleteSession(ctx, id, true); err != nil {
		t.Fatal(err)
	}
	noPodsLeft(t, kube, node)
}

// The real Claude Code CLI in a pod (from the warm pool), reaching
// mock-llm only through the model proxy's tunnels: streamed text, a Bash
// tool that writes a file after approval, a denied one, an interrupt,
// and the conversation resumed after a server restart (the pod and its
// CLI are re-attached).
func TestKubernetesClaudeCode(t *testing.T) {
	kube, image := kubeSetup(t)
	mock, url := agentdtest.MockLLM(t, claudeDockerScript)
	srv := agentdtest.Start(t, agentd.Config{
		Sandbox: "kubernetes", Kubernetes: kubeConfig(kube, image), WarmPool: 1,
		Env: map[string]string{"ANTHROPIC_BASE_URL": url, "ANTHROPIC_API_KEY": "sk-ant-test-not-a-real-key"},
	})
	c := srv.Client
	ctx := context.Background()
	waitWarmPool(t, c, "kubernetes", 1)
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
		if sb.Name == "kubernetes" && (len(sb.Pools) != 1 || sb.Pools[0].Claims != 1 || sb.Pools[0].Misses != 0) {
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
	noPodsLeft(t, kube, nodeOf(t, srv.Config.DataDir))
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

// TestKubernetesTurnSurvivesKill9: kill -9 the server mid-turn; the new
// server re-attaches to the pod through a new port-forward and the turn
// finishes with every line once, seqs contiguous; deleting the session
// leaves no pod.
func TestKubernetesTurnSurvivesKill9(t *testing.T) {
	kube, image := kubeSetup(t)
	data := t.TempDir()
	p := agentdtest.StartProcess(t, []string{"XDG_RUNTIME_DIR=" + sandboxtest.ShortTempDir(t, "k8s")},
		append([]string{"--data-dir", data, "--no-ui"}, kubeArgs(kube, image)...)...)
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
	if !strings.Contains(p.Logs(), "pod re-attached") {
		t.Fatalf("no re-attach in the log:\n%s", p.Logs())
	}
	if err := p.Client.DeleteSession(ctx, r.id, true); err != nil {
		t.Fatal(err)
	}
	noPodsLeft(t, kube, nodeOf(t, data))
}

// Sessions deleted while the server was down (here: straight from the
// store) lose their pods at the next start; the others are re-attached.
func TestKubernetesCollectsDeletedWhileDown(t *testing.T) {
	kube, image := kubeSetup(t)
	data := t.TempDir()
	p := agentdtest.StartProcess(t, []string{"XDG_RUNTIME_DIR=" + sandboxtest.ShortTempDir(t, "k8s")},
		append([]string{"--data-dir", data, "--no-ui"}, kubeArgs(kube, image)...)...)
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
	if n := len(agentdtest.KubePods(t, kube, node)); n != 2 {
		t.Fatalf("%d pods, want 2", n)
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
	for deadline := time.Now().Add(30 * time.Second); len(agentdtest.KubePods(t, kube, node)) != 1; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("pods after the restart: %v\n%s", agentdtest.KubePods(t, kube, node), p.Logs())
		}
	}
	if !strings.Contains(p.Logs(), "pod of no session removed") {
		t.Fatalf("no removal in the log:\n%s", p.Logs())
	}
	if out, failed := turn(t, ctx, p.Client, ids[1], "cat n.txt"); failed || out != "session 1\n" {
		t.Fatalf("kept session: %q %v\n%s", out, failed, p.Logs())
	}
	if err := p.Client.DeleteSession(ctx, ids[1], true); err != nil {
		t.Fatal(err)
	}
	noPodsLeft(t, kube, node)
}

// BenchmarkKubernetesSessionReady: POST /api/sessions, then the first
// message, until the session's status is ready (its pod is up, the
// executor answered through the port-forward, the runner started),
// through a real server; cold (no warm pool) and warm (a pool of one,
// refilled untimed before each session). Targets: cold p50 < 3 s, warm
// p50 < 100 ms.
func BenchmarkKubernetesSessionReady(b *testing.B) {
	kube, image := kubeSetup(b)
	for _, warm := range []int{0, 1} {
		name := map[int]string{0: "cold", 1: "warm"}[warm]
		b.Run(name, func(b *testing.B) {
			srv := agentdtest.Start(b, agentd.Config{Sandbox: "kubernetes", Kubernetes: kubeConfig(kube, image), WarmPool: warm, Env: map[string]string{}})
			c := srv.Client
			ctx := context.Background()
			var ds []time.Duration
			for b.Loop() {
				b.StopTimer()
				if warm > 0 {
					waitWarmPool(b, c, "kubernetes", 1)
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
