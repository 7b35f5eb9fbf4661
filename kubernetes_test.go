package agentd_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/agentd/agentd"
	"github.com/agentd/agentd/internal/agent/agenttest/e2etest"
	"github.com/agentd/agentd/internal/agentdtest"
)

// The kubernetes sandbox end to end: real servers, the real test cluster
// (scripts/kube.sh; the tests run in its network namespace), the sandbox
// image with this source's agentd (agentdtest.KubeImage), the servers
// reaching the API server as the service account of
// deploy/kubernetes/rbac.yaml. They skip without a cluster unless
// AGENTD_REQUIRE_KUBERNETES is set. The scenarios are containers_test.go's.

func kubeSetup(t testing.TB) (*agentdtest.KubeCluster, string) {
	t.Helper()
	if testing.Short() {
		t.Skip("starts real servers and pods")
	}
	kube := agentdtest.Kube(t)
	return kube, agentdtest.KubeImage(t)
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

// kubeBackend is the kubernetes sandbox of containers_test.go's
// scenarios.
func kubeBackend(t testing.TB) containerBackend {
	t.Helper()
	kube, image := kubeSetup(t)
	return containerBackend{
		name: "kubernetes", noun: "pod", enforcement: "kubernetes",
		config: agentd.Config{Sandbox: "kubernetes", Kubernetes: agentd.KubernetesConfig{
			Kubeconfig: kube.Kubeconfig, Namespace: kube.Namespace, Image: image,
		}},
		args:       kubeArgs(kube, image),
		runPrefix:  "k8s",
		settle:     30 * time.Second, // pods are deleted in the background
		containers: func(t testing.TB, node string) []string { return agentdtest.KubePods(t, kube, node) },
	}
}

// A shell session in a pod: output, a file written by the agent (its
// event, its bytes through the API, from the store while the pod is
// down, back in the next pod), GET /api/sandboxes, and a purge that
// leaves no pod.
func TestKubernetesShell(t *testing.T) {
	b := kubeBackend(t)
	srv := b.server(t, 0, map[string]string{})
	c := srv.Client
	ctx := context.Background()
	id, node := containerShell(t, b, srv, `echo made-in-a-pod > made.txt; cat made.txt; ls /sys/class/net; cat /sys/class/net/eth0/operstate`,
		"made-in-a-pod\neth0\nlo\ndown\n", "made-in-a-pod\n")

	// The pod goes (delete without purge): the files API serves the
	// store's copy, and the next message's pod has the file back.
	if err := c.DeleteSession(ctx, id, false); err != nil {
		t.Fatal(err)
	}
	b.noneLeft(t, node)
	if got, err := c.File(ctx, id, "made.txt"); err != nil || string(got) != "made-in-a-pod\n" {
		t.Fatalf("file while the pod is down %q %v", got, err)
	}
	if files, err := c.Files(ctx, id); err != nil || len(files) != 1 || files[0].Path != "made.txt" {
		t.Fatalf("files while the pod is down %+v %v", files, err)
	}
	q, after := e2etest.Send(t, c, id, `cat made.txt`)
	seen, end := e2etest.Turn(t, c, id, after, q, nil)
	e2etest.Completed(t, end, seen)
	if last := e2etest.State(t, c, id).Blocks; last[len(last)-1].Output != "made-in-a-pod\n" {
		t.Fatalf("the file in the next pod: %+v", last[len(last)-1])
	}
	if err := c.DeleteSession(ctx, id, true); err != nil {
		t.Fatal(err)
	}
	b.noneLeft(t, node)
}

// TestKubernetesClaudeCode: containerClaudeCode in a pod, through the
// model proxy's tunnels.
func TestKubernetesClaudeCode(t *testing.T) { containerClaudeCode(t, kubeBackend(t)) }

// TestKubernetesTurnSurvivesKill9: containerTurnSurvivesKill9, re-attached
// to the pod through a new port-forward.
func TestKubernetesTurnSurvivesKill9(t *testing.T) { containerTurnSurvivesKill9(t, kubeBackend(t)) }

// TestKubernetesCollectsDeletedWhileDown: containerCollectsDeletedWhileDown
// (the pod of the deleted session may take a while to go).
func TestKubernetesCollectsDeletedWhileDown(t *testing.T) {
	containerCollectsDeletedWhileDown(t, kubeBackend(t))
}

// BenchmarkKubernetesSessionReady: benchSessionReady in pods. Targets:
// cold p50 < 3 s, warm p50 < 100 ms.
func BenchmarkKubernetesSessionReady(b *testing.B) { benchSessionReady(b, kubeBackend(b)) }
