package kubernetes_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/agentd/agentd/internal/agentdtest"
	"github.com/agentd/agentd/internal/sandbox/container"
	"github.com/agentd/agentd/internal/sandbox/kubernetes"
	"github.com/agentd/agentd/internal/sandbox/sandboxtest"
	"github.com/agentd/agentd/sandbox"
)

// These tests run real pods on the test cluster (scripts/kube.sh; see
// agentdtest.Kube), as the agentd service account of deploy/kubernetes/
// rbac.yaml. Each test labels its pods with a node of its own, so tests
// of other packages on the same cluster are not touched.

func TestMain(m *testing.M) {
	if os.Getenv("AGENTD_TEST_LOG") == "" {
		slog.SetDefault(slog.New(slog.DiscardHandler))
	}
	code := m.Run()
	agentdtest.CloseKube()
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintf(os.Stderr, "goleak: %v\n", err)
			code = 1
		}
	}
	os.Exit(code)
}

type fixture struct {
	t     testing.TB
	kube  *agentdtest.KubeCluster
	opts  kubernetes.Options
	proxy *sandboxtest.FakeProxy
}

func newFixture(t testing.TB) *fixture {
	t.Helper()
	if testing.Short() {
		t.Skip("starts pods")
	}
	kube := agentdtest.Kube(t)
	image := agentdtest.KubeImage(t)
	var rnd [4]byte
	rand.Read(rnd[:])
	f := &fixture{t: t, kube: kube, proxy: &sandboxtest.FakeProxy{}}
	t.Cleanup(f.proxy.Close)
	f.opts = kubernetes.Options{
		Options: container.Options{
			Image: image, RunDir: sandboxtest.ShortTempDir(t, "k8"),
			Node: "test-" + hex.EncodeToString(rnd[:]), ModelProxy: f.proxy,
			Limits: sandbox.Limits{MemoryBytes: 512 << 20, Pids: 128},
		},
		Config: kube.Config, Namespace: kube.Namespace,
	}
	t.Cleanup(func() {
		// Nothing of this test may be left.
		if left := agentdtest.KubePods(t, kube, f.opts.Node); len(left) > 0 {
			t.Errorf("pods left: %v", left)
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			for _, p := range left {
				kube.Admin.CoreV1().Pods(kube.Namespace).Delete(ctx, p, metav1.DeleteOptions{GracePeriodSeconds: new(int64)})
			}
		}
	})
	return f
}

func (f *fixture) provider(mod func(*kubernetes.Options)) *kubernetes.Provider {
	f.t.Helper()
	return sandboxtest.NewProvider(f.t, f.opts, mod, kubernetes.New)
}

// restarted is the provider of a restarted server.
func (f *fixture) restarted() sandboxtest.ContainerProvider { return f.provider(nil) }

func spec(id string) sandbox.Spec {
	return sandbox.Spec{SessionID: id, Workspace: "/nonexistent/agentd-test/" + id, Env: map[string]string{"FROM_SPEC": "yes"}, Profile: "default"}
}

func (f *fixture) pod(name string) (*corev1.Pod, bool) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	pod, err := f.kube.Admin.CoreV1().Pods(f.kube.Namespace).Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, false
	}
	if err != nil {
		f.t.Fatal(err)
	}
	return pod, true
}

func TestCreateExecTerminate(t *testing.T) {
	f := newFixture(t)
	p := f.provider(nil)
	sp := spec("s1")
	env, err := p.Create(context.Background(), sp)
	if err != nil {
		t.Fatal(err)
	}
	e := env.(*kubernetes.Environment)
	if env.WorkDir() != "/workspace" || !e.FreshWorkspace() {
		t.Fatalf("workdir %q, fresh %v", env.WorkDir(), e.FreshWorkspace())
	}
	var h kubernetes.Handle
	if err := json.Unmarshal(e.Handle(), &h); err != nil || h.Pod != e.Pod() || h.UID == "" || h.Namespace != f.kube.Namespace {
		t.Fatalf("handle %s: %v", e.Handle(), err)
	}
	pod, ok := f.pod(e.Pod())
	if !ok || pod.Labels["agentd.session"] != "s1" || pod.Labels["agentd.node"] != f.opts.Node || len(pod.OwnerReferences) != 1 {
		t.Fatalf("pod %+v", pod.ObjectMeta)
	}
	out, errOut, st := sandboxtest.Shell(t, env, `id -u; id -un; pwd; ls -ld /workspace >&2; echo $HOME $FROM_SPEC; echo hello > made.txt; ls /sys/class/net
cat /sys/class/net/eth0/operstate; touch /etc/x 2>&1 || echo ro-root; touch /tmp/x && echo tmp-ok; bash -c 'ulimit -u'
curl -s -H "x-api-key: $ANTHROPIC_API_KEY" $ANTHROPIC_BASE_URL/v1/messages; echo
curl -s -m 2 -o /dev/null -w 'node:%{http_code}\n' -k https://10.77.0.1:6443/version
for port in 7070 7071; do bash -c "exec 3<>/dev/tcp/127.0.0.1/$port; echo '{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\"}' >&3; timeout 5 head -c 300 <&3; echo"; done`)
	if !st.Success() {
		t.Fatalf("exit %+v: %s %s", st, out, errOut)
	}
	t.Logf("inside the pod:\n%s%s", out, errOut)
	lines := strings.Split(out, "\n")
	if uid := lines[0]; uid == "0" || uid == "10001" || len(uid) != 10 {
		t.Fatalf("uid %q: want one of the pod's own range", uid)
	}
	want := []string{"\nagent\n/workspace\n/workspace yes\n", "\ndown\n", "ro-root\ntmp-ok\n128\n",
		"proxy for s1: GET /v1/messages key=tok-s1\n", "node:000\n"}
	for _, w := range want {
		if !strings.Contains(out, w) {
			t.Fatalf("output %q lacks %q (stderr %q)", out, w, errOut)
		}
	}
	// The executor's ports refuse the pod's own processes (peer uid).
	if strings.Count(out, `"code":-32006`) != 2 || strings.Contains(out, "protocolVersion") {
		t.Fatalf("the executor's ports answered an agent: %q", out)
	}
	if b, err := env.ReadFile(context.Background(), "made.txt"); err != nil || string(b) != "hello\n" {
		t.Fatalf("ReadFile %q %v", b, err)
	}
	if fr, err := e.OpenFile(context.Background(), "made.txt"); err != nil || fr.Info().Size != 6 {
		t.Fatalf("OpenFile %v %v", fr, err)
	} else {
		fr.Close()
	}
	if _, err := os.Stat(sp.Workspace); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("a host folder for the workspace: %v", err)
	}
	sandboxtest.Terminate(t, env)
	if _, ok := f.pod(e.Pod()); ok {
		t.Fatal("pod left after Terminate")
	}
	sandboxtest.Terminated(t, env)
}

// A process keeps running while no server is attached; a new provider
// (a restarted server, on another host) re-attaches and reads its output
// from where the first stopped, every line once.
func TestRecoverAttach(t *testing.T) {
	f := newFixture(t)
	env, recovered := sandboxtest.RecoverAttach(t, f.provider(nil), spec("s2"), func() sandboxtest.ContainerProvider {
		// The restarted server runs elsewhere: a run folder of its own.
		return f.provider(func(o *kubernetes.Options) { o.RunDir = sandboxtest.ShortTempDir(t, "k9") })
	})
	// The model proxy through the recovered environment's tunnels.
	sandboxtest.ModelProxy(t, recovered, "s2", "/again")
	sandboxtest.Terminate(t, recovered)
	// The first view of it ends with the pod.
	sandboxtest.Terminate(t, env)
}

// A server that lost the session releases its pod (its tunnels and
// port-forward closed): the process in it goes on, and another server
// re-attaches to it through a port-forward of its own.
func TestReleaseRecover(t *testing.T) {
	f := newFixture(t)
	env := sandboxtest.ReleaseRecover(t, f.provider(nil), spec("s4"), func() sandboxtest.ContainerProvider {
		return f.provider(func(o *kubernetes.Options) { o.RunDir = sandboxtest.ShortTempDir(t, "k9") })
	})
	sandboxtest.ModelProxy(t, env, "s4", "/again")
	sandboxtest.Terminate(t, env)
	waitGone(t, f, env.(*kubernetes.Environment).Pod())
}

// A pod deleted while the server is away is gone for the restarted
// server.
func TestRecoverGone(t *testing.T) {
	f := newFixture(t)
	sandboxtest.RecoverGone(t, f.provider(nil), spec("s3"), f.restarted, func(env sandbox.Environment) {
		name := env.(*kubernetes.Environment).Pod()
		if err := f.kube.Admin.CoreV1().Pods(f.kube.Namespace).Delete(context.Background(), name, metav1.DeleteOptions{GracePeriodSeconds: new(int64)}); err != nil {
			t.Fatal(err)
		}
	}, nil, `{"pod":`)
}

// Collect removes the pods no handle names (sessions deleted while the
// server was down), keeps the others, and leaves other nodes' alone.
func TestCollect(t *testing.T) {
	f := newFixture(t)
	other := f.provider(func(o *kubernetes.Options) { o.Node += "-other" })
	sandboxtest.CollectLeftovers(t, f.provider(nil), other, spec, f.restarted, func(l sandboxtest.Leftovers) {
		waitGone(t, f, l.Dropped.(*kubernetes.Environment).Pod())
		if _, ok := f.pod(l.Kept.(*kubernetes.Environment).Pod()); !ok {
			t.Fatal("Collect removed a kept pod")
		}
		if _, ok := f.pod(l.Foreign.(*kubernetes.Environment).Pod()); !ok {
			t.Fatal("Collect removed another node's pod")
		}
	})
}

func waitGone(t *testing.T, f *fixture, name string) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if _, ok := f.pod(name); !ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("pod %s still there", name)
		}
	}
}

func TestWarmPool(t *testing.T) {
	f := newFixture(t)
	p := f.provider(func(o *kubernetes.Options) { o.WarmPool = 2 })
	env := sandboxtest.ClaimWarm(t, p, 2, f.opts.Image, f.opts.Limits, spec("w1"))
	name := env.(*kubernetes.Environment).Pod()
	if pod, _ := f.pod(name); pod.Labels["agentd.session"] != "w1" || pod.Labels["agentd.pool"] != "" {
		t.Fatalf("claimed pod's labels %v", pod.Labels)
	}
	if out, _, st := sandboxtest.Shell(t, env, "echo warm > w.txt; cat w.txt; pwd; echo $FROM_SPEC"); !st.Success() || out != "warm\n/workspace\nyes\n" {
		t.Fatalf("warm exec: %q %+v", out, st)
	}
	sandboxtest.ModelProxy(t, env, "w1", "/x")
	sandboxtest.WaitPool(t, p, func(pi sandbox.PoolInfo) bool { return pi.Ready == 2 && pi.Claims == 1 })
	// Shutdown drains the pool; the claimed environment stays.
	cctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := p.Close(cctx); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		left := agentdtest.KubePods(t, f.kube, f.opts.Node)
		if len(left) == 1 && left[0] == name {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("pods after Close: %v", left)
		}
	}
	sandboxtest.Terminate(t, env)
}

// A pod whose image is not on the node fails Create at once with what the
// kubelet says, and leaves nothing.
func TestStartFailure(t *testing.T) {
	f := newFixture(t)
	p := f.provider(func(o *kubernetes.Options) { o.Image = "agentd-no-such-image:x"; o.StartTimeout = 30 * time.Second })
	t0 := time.Now()
	_, err := p.Create(context.Background(), spec("bad"))
	if err == nil || !strings.Contains(err.Error(), "ErrImageNeverPull") {
		t.Fatalf("create with a missing image: %v", err)
	}
	if d := time.Since(t0); d > 20*time.Second {
		t.Errorf("the failure took %v", d)
	}
	t.Logf("%v", err)
	for deadline := time.Now().Add(30 * time.Second); len(agentdtest.KubePods(t, f.kube, f.opts.Node)) > 0; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("pods left: %v", agentdtest.KubePods(t, f.kube, f.opts.Node))
		}
	}
}

func TestNewRejects(t *testing.T) {
	f := newFixture(t)
	sandboxtest.NewRejects(t, f.opts, map[string]func(*kubernetes.Options){
		"root uid":      func(o *kubernetes.Options) { o.UIDBase, o.UIDCount = 0, 10 },
		"uid overflow":  func(o *kubernetes.Options) { o.UIDBase, o.UIDCount = 2147483600, 100 },
		"negative pool": func(o *kubernetes.Options) { o.WarmPool = -1 },
		"long run dir":  func(o *kubernetes.Options) { o.RunDir = "/tmp/" + strings.Repeat("x", 100) },
		"no cluster":    func(o *kubernetes.Options) { o.Config = nil; o.Kubeconfig = "/nonexistent/kubeconfig" },
	}, kubernetes.New)
}
