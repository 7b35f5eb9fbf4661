package agentd_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/tools/portforward"
	"k8s.io/client-go/transport/spdy"

	"github.com/agentd/agentd/client"
	"github.com/agentd/agentd/conversation"
	"github.com/agentd/agentd/internal/agentdtest"
	"github.com/agentd/agentd/restapi"
)

// The Helm chart (deploy/helm/agentd) installed on the test cluster as an
// operator installs it: two agentd servers of one fleet from the server's
// image (scripts/agentd-image.sh, imported into the node), the chart's
// service account and Role running sessions in kubernetes sandbox pods.
// A session is created and streamed through a port-forward to the
// Service's pods (what `kubectl port-forward svc/…` does), then `helm
// upgrade` to a new image replaces every server while a turn runs: the
// session's events are all there afterwards, the turn ends with all its
// output, and the session takes more messages.
//
// The cluster has no DNS and no kube-proxy (scripts/kube.sh), so the test
// cannot use the chart's bundled PostgreSQL and NATS (Services by name)
// nor reach the API server by its Service address: PostgreSQL and NATS
// run on the node's address inside the cluster's network namespace
// (scripts/pg.sh, scripts/nats.sh with PGLISTEN/NATSLISTEN) and are given
// as postgresql.url and nats.url, and the servers get the API server's
// address in KUBERNETES_SERVICE_HOST (extraEnv). The bundled ones are only
// rendered and validated (TestKubernetesManifests).
func TestKubernetesHelm(t *testing.T) {
	kube, sandboxImage := kubeSetup(t)
	helm := helmBinary(t)
	sock := os.Getenv("AGENTD_KUBE_CONTAINERD")
	ctx := t.Context()
	const ns = "agentd-helm"

	// Two server images, told apart by their version.
	for _, v := range []string{"helm-a", "helm-b"} {
		archive, _ := agentdtest.ServerImage(t, v)
		if out, err := exec.CommandContext(ctx, "ctr", "-a", sock, "-n", "k8s.io", "images", "import", archive).CombinedOutput(); err != nil {
			t.Fatalf("ctr images import %s: %v\n%s", v, err, out)
		}
	}

	nodes, err := kube.Admin.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil || len(nodes.Items) == 0 {
		t.Fatalf("nodes: %v", err)
	}
	var nodeIP string
	for _, a := range nodes.Items[0].Status.Addresses {
		if a.Type == corev1.NodeInternalIP {
			nodeIP = a.Address
		}
	}
	pgURL := startScript(t, "pg.sh", "PGSTATE", "PGLISTEN="+nodeIP, "AGENTD_TEST_POSTGRES_TCP")
	natsURL := startScript(t, "nats.sh", "NATSSTATE", "NATSLISTEN="+nodeIP, "AGENTD_TEST_NATS")

	values := filepath.Join(t.TempDir(), "values.yaml")
	if err := os.WriteFile(values, []byte(fmt.Sprintf(`replicaCount: 2
image: {repository: agentd-test, tag: helm-a, pullPolicy: Never}
kubernetesSandbox: {image: %q, pullPolicy: Never}
postgresql: {enabled: false, url: %q}
nats: {enabled: false, url: %q}
leaseTTL: 5s
preStopDelaySeconds: 0
extraEnv:
  - {name: KUBERNETES_SERVICE_HOST, value: %q}
  - {name: KUBERNETES_SERVICE_PORT, value: "6443"}
`, sandboxImage, pgURL, natsURL, nodeIP)), 0o600); err != nil {
		t.Fatal(err)
	}
	admin := os.Getenv("AGENTD_KUBECONFIG")
	helmHome := t.TempDir()
	helmEnv := append(os.Environ(), "HELM_CACHE_HOME="+helmHome+"/cache", "HELM_CONFIG_HOME="+helmHome+"/config", "HELM_DATA_HOME="+helmHome+"/data")
	runHelm := func(args ...string) {
		t.Helper()
		args = append(args, "--kubeconfig", admin, "--namespace", ns)
		cmd := exec.CommandContext(ctx, helm, args...)
		cmd.Env = helmEnv
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("helm %s: %v\n%s\n%s", strings.Join(args, " "), err, out, helmDiagnose(kube, ns))
		}
	}
	t.Cleanup(func() {
		// The release, then everything left in the namespace (the
		// sessions' pods), then the namespace.
		c, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(c, helm, "uninstall", "agentd", "--kubeconfig", admin, "--namespace", ns, "--wait")
		cmd.Env = helmEnv
		_ = cmd.Run()
		zero := int64(0)
		_ = kube.Admin.CoreV1().Pods(ns).DeleteCollection(c, metav1.DeleteOptions{GracePeriodSeconds: &zero}, metav1.ListOptions{})
		_ = kube.Admin.CoreV1().Namespaces().Delete(c, ns, metav1.DeleteOptions{})
		for c.Err() == nil {
			if _, err := kube.Admin.CoreV1().Namespaces().Get(c, ns, metav1.GetOptions{}); apierrors.IsNotFound(err) {
				return
			}
			time.Sleep(200 * time.Millisecond)
		}
	})
	chart := filepath.Join(agentdtest.RepoRoot(t), "deploy", "helm", "agentd")
	runHelm("install", "agentd", chart, "--create-namespace", "--values", values, "--wait", "--timeout", "5m")

	adminCfg, err := clientcmd.BuildConfigFromFlags("", admin)
	if err != nil {
		t.Fatal(err)
	}
	c := forwardService(t, kube, adminCfg, ns, "agentd")
	if h, err := c.Health(ctx); err != nil || h.Status != "ok" || h.Version != "helm-a" || h.Bus == nil || h.Bus.Kind != "nats" {
		t.Fatalf("GET /health through the Service: %+v %v", h, err)
	}
	created, err := c.CreateSession(ctx, restapi.CreateSessionRequest{Architecture: "shell", Name: "through helm"})
	if err != nil {
		t.Fatal(err)
	}
	id := created.SessionID
	sent, err := c.Send(ctx, id, "echo before the upgrade")
	if err != nil {
		t.Fatal(err)
	}
	waitTurn(t, c, id, sent.QueryID)
	if out := turnOutput(ctx, t, c, id); out != "before the upgrade\n" {
		t.Fatalf("first turn: %q", out)
	}

	// A turn runs while every server is replaced.
	const lines = 120
	running, err := c.Send(ctx, id, fmt.Sprintf(`for i in $(seq 1 %d); do echo line $i; sleep 0.25; done`, lines))
	if err != nil {
		t.Fatal(err)
	}
	waitEventText(t, c, id, "line 2")
	before, err := c.Events(ctx, id, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	upgradeStart := time.Now()
	runHelm("upgrade", "agentd", chart, "--values", values, "--set", "image.tag=helm-b", "--wait", "--timeout", "5m")
	upgraded := time.Now()

	c = forwardService(t, kube, adminCfg, ns, "agentd")
	if h, err := c.Health(ctx); err != nil || h.Version != "helm-b" {
		t.Fatalf("GET /health after the upgrade: %+v %v", h, err)
	}
	end := waitTurnLong(t, c, id, running.QueryID, 3*time.Minute)
	after, err := c.Events(ctx, id, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(after.Events) < len(before.Events) || !reflect.DeepEqual(after.Events[:len(before.Events)], before.Events) {
		t.Fatalf("events after helm upgrade: %d, before: %d (or they differ)", len(after.Events), len(before.Events))
	}
	// Whether the turn outlived the old servers depends on the rollout's
	// pace; say which it was.
	t.Logf("helm upgrade took %s; the turn ended %s after it returned", upgraded.Sub(upgradeStart).Round(time.Second),
		end.Context.Timestamp.Sub(upgraded).Round(time.Second))
	if end.Type != conversation.TypeQueryCompleted {
		t.Fatalf("the turn across the upgrade ended %s: %s", end.Type, end.Payload)
	}
	var want strings.Builder
	for i := 1; i <= lines; i++ {
		fmt.Fprintf(&want, "line %d\n", i)
	}
	if out := turnOutput(ctx, t, c, id); out != want.String() {
		t.Fatalf("the turn across the upgrade printed %q", out)
	}
	sent, err = c.Send(ctx, id, "echo after the upgrade")
	if err != nil {
		t.Fatal(err)
	}
	waitTurn(t, c, id, sent.QueryID)
	if out := turnOutput(ctx, t, c, id); out != "after the upgrade\n" {
		t.Fatalf("turn after the upgrade: %q", out)
	}
}

// helmBinary is the pinned Helm CLI (scripts/helm-build.sh, cached).
func helmBinary(t *testing.T) string {
	t.Helper()
	out, err := exec.Command(filepath.Join(agentdtest.RepoRoot(t), "scripts", "helm-build.sh")).Output()
	if err != nil {
		t.Fatalf("scripts/helm-build.sh: %v", err)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	return lines[len(lines)-1]
}

// startScript runs scripts/NAME start with its state in a temporary file
// and the extra variable set, returns the value of the variable named
// want in its output (export X='…'), and stops it at the test's end.
func startScript(t *testing.T, name, stateVar, extra, want string) string {
	t.Helper()
	script := filepath.Join(agentdtest.RepoRoot(t), "scripts", name)
	env := append(os.Environ(), stateVar+"="+filepath.Join(t.TempDir(), name+".state"), extra)
	cmd := exec.Command(script, "start")
	cmd.Env = env
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%s start: %v", name, err)
	}
	t.Cleanup(func() {
		stop := exec.Command(script, "stop")
		stop.Env = env
		_ = stop.Run()
	})
	for _, line := range strings.Split(string(out), "\n") {
		if v, ok := strings.CutPrefix(line, "export "+want+"="); ok {
			return strings.Trim(v, "'")
		}
	}
	t.Fatalf("%s start printed no %s: %s", name, want, out)
	return ""
}

// forwardService forwards a loopback port to a ready pod of the Service
// (as `kubectl port-forward svc/NAME` does) and returns a client of it.
// The forward ends with the test, or when its pod goes.
func forwardService(t *testing.T, kube *agentdtest.KubeCluster, cfg *rest.Config, ns, name string) *client.Client {
	t.Helper()
	ctx := t.Context()
	svc, err := kube.Admin.CoreV1().Services(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	sel := metav1.FormatLabelSelector(&metav1.LabelSelector{MatchLabels: svc.Spec.Selector})
	var pod string
	deadline := time.Now().Add(2 * time.Minute)
	for pod == "" {
		list, err := kube.Admin.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: sel})
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range list.Items {
			if p.DeletionTimestamp != nil {
				continue
			}
			for _, c := range p.Status.Conditions {
				if c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue {
					pod = p.Name
				}
			}
		}
		if pod == "" {
			if time.Now().After(deadline) {
				t.Fatalf("no ready pod of service %s\n%s", name, helmDiagnose(kube, ns))
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
	u := kube.Admin.CoreV1().RESTClient().Post().Resource("pods").Namespace(ns).Name(pod).SubResource("portforward").URL()
	rt, upgrader, err := spdy.RoundTripperFor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	dialer := spdy.NewDialer(upgrader, &http.Client{Transport: rt}, http.MethodPost, u)
	stop, ready := make(chan struct{}), make(chan struct{})
	fw, err := portforward.NewOnAddresses(dialer, []string{"127.0.0.1"}, []string{"0:8080"}, stop, ready, io.Discard, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- fw.ForwardPorts() }()
	// A transport of its own: its idle connections (each a stream of the
	// forward's connection) are closed before the forward, or the
	// connection's shutdown waits for them after the test.
	tr := &http.Transport{}
	t.Cleanup(func() {
		tr.CloseIdleConnections()
		close(stop)
		<-done
	})
	select {
	case <-ready:
	case err := <-done:
		t.Fatalf("port-forward to %s: %v", pod, err)
	}
	ports, err := fw.GetPorts()
	if err != nil || len(ports) != 1 {
		t.Fatalf("port-forward ports: %v %v", ports, err)
	}
	c, err := client.New(fmt.Sprintf("http://127.0.0.1:%d", ports[0].Local), client.WithHTTPClient(&http.Client{Transport: tr}))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// waitEventText waits until an event of the session holds text.
func waitEventText(t *testing.T, c *client.Client, id, text string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	s := c.Stream(ctx, id, 0)
	defer s.Close()
	for {
		ev, err := s.Next(ctx)
		if err != nil {
			t.Fatalf("waiting for %q: %v", text, err)
		}
		if strings.Contains(string(ev.Payload), text) {
			return
		}
	}
}

// waitTurnLong is waitTurn with a longer deadline, reading the events
// again after a broken stream (the upgrade).
func waitTurnLong(t *testing.T, c *client.Client, id, query string, d time.Duration) conversation.Event {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), d)
	defer cancel()
	for {
		page, err := c.Events(ctx, id, 0, 0)
		if err == nil {
			for _, ev := range page.Events {
				if ev.Type != conversation.TypeQueryCompleted && ev.Type != conversation.TypeQueryFailed {
					continue
				}
				if strings.Contains(string(ev.Payload), query) {
					return ev
				}
			}
		}
		if ctx.Err() != nil {
			t.Fatalf("turn %s did not end within %s: %v", query, d, err)
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// helmDiagnose describes the namespace's pods, for failure messages.
func helmDiagnose(kube *agentdtest.KubeCluster, ns string) string {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	list, err := kube.Admin.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return err.Error()
	}
	var b strings.Builder
	for _, p := range list.Items {
		fmt.Fprintf(&b, "pod %s: %s", p.Name, p.Status.Phase)
		for _, cs := range p.Status.ContainerStatuses {
			fmt.Fprintf(&b, " %s ready=%v restarts=%d %+v", cs.Name, cs.Ready, cs.RestartCount, cs.State)
		}
		b.WriteString("\n")
		if len(p.Spec.Containers) > 0 && p.Labels["agentd.managed"] == "" {
			tail := int64(30)
			logs, err := kube.Admin.CoreV1().Pods(ns).GetLogs(p.Name, &corev1.PodLogOptions{TailLines: &tail}).DoRaw(ctx)
			if err == nil {
				fmt.Fprintf(&b, "%s\n", logs)
			}
		}
	}
	return b.String()
}

// The kustomize manifests (deploy/kubernetes) and the chart with its
// bundled PostgreSQL and NATS, checked by the test cluster's API server
// (kubectl apply --dry-run=server: every object validated, none
// created). The cluster cannot run the bundled ones (no image can be
// pulled here, no DNS); TestKubernetesHelm runs the chart with existing
// ones.
func TestKubernetesManifests(t *testing.T) {
	if testing.Short() {
		t.Skip("needs the test cluster")
	}
	kube := agentdtest.Kube(t)
	helm := helmBinary(t)
	kubectl := kubeBinary(t, "kubectl")
	admin := os.Getenv("AGENTD_KUBECONFIG")
	ctx := t.Context()
	const ns = "agentd"
	if _, err := kube.Admin.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err == nil {
		t.Cleanup(func() {
			_ = kube.Admin.CoreV1().Namespaces().Delete(context.Background(), ns, metav1.DeleteOptions{})
		})
	} else if !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	root := agentdtest.RepoRoot(t)
	want := []string{
		"serviceaccount/agentd", "role.rbac.authorization.k8s.io/agentd-sandbox",
		"rolebinding.rbac.authorization.k8s.io/agentd-sandbox", "networkpolicy.networking.k8s.io/agentd-sandbox-isolation",
		"service/agentd ", "deployment.apps/agentd ", "poddisruptionbudget.policy/agentd ",
		"service/agentd-postgresql", "statefulset.apps/agentd-postgresql", "service/agentd-nats", "deployment.apps/agentd-nats",
	}
	check := func(what string, out []byte, err error) {
		t.Helper()
		if err != nil {
			t.Fatalf("%s: %v\n%s", what, err, out)
		}
		for _, w := range want {
			if !strings.Contains(string(out), w) {
				t.Errorf("%s: no %s in\n%s", what, w, out)
			}
		}
	}
	out, err := exec.CommandContext(ctx, kubectl, "--kubeconfig", admin, "apply", "--dry-run=server", "-k", filepath.Join(root, "deploy", "kubernetes")).CombinedOutput()
	check("kubectl apply -k deploy/kubernetes", out, err)

	render := exec.CommandContext(ctx, helm, "template", "agentd", filepath.Join(root, "deploy", "helm", "agentd"), "--namespace", ns)
	render.Env = append(os.Environ(), "HELM_CACHE_HOME="+t.TempDir(), "HELM_CONFIG_HOME="+t.TempDir())
	manifests, err := render.Output()
	if err != nil {
		t.Fatalf("helm template: %v", err)
	}
	apply := exec.CommandContext(ctx, kubectl, "--kubeconfig", admin, "apply", "--dry-run=server", "--namespace", ns, "-f", "-")
	apply.Stdin = strings.NewReader(string(manifests))
	out, err = apply.CombinedOutput()
	check("helm template | kubectl apply", out, err)
}

// kubeBinary is one of the test cluster's binaries (scripts/kube-build.sh,
// cached).
func kubeBinary(t *testing.T, name string) string {
	t.Helper()
	out, err := exec.Command(filepath.Join(agentdtest.RepoRoot(t), "scripts", "kube-build.sh")).Output()
	if err != nil {
		t.Fatalf("scripts/kube-build.sh: %v", err)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	return filepath.Join(lines[len(lines)-1], name)
}
