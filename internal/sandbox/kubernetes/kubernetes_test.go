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
	"slices"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/agentd/agentd/internal/agentdtest"
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
		Config: kube.Config, Namespace: kube.Namespace, Image: image,
		RunDir: sandboxtest.ShortTempDir(t, "k8"),
		Node:   "test-" + hex.EncodeToString(rnd[:]), ModelProxy: f.proxy,
		Limits: sandbox.Limits{MemoryBytes: 512 << 20, Pids: 128},
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
	opts := f.opts
	if mod != nil {
		mod(&opts)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	p, err := kubernetes.New(ctx, opts)
	if err != nil {
		f.t.Fatal(err)
	}
	f.t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := p.Close(ctx); err != nil {
			f.t.Errorf("close: %v", err)
		}
	})
	return p
}

func spec(id string) sandbox.Spec {
	return sandbox.Spec{SessionID: id, Workspace: "/nonexistent/agentd-test/" + id, Env: map[string]string{"FROM_SPEC": "yes"}, Profile: "default"}
}

// run runs a shell command in env and returns its stdout, stderr and exit.
func run(t *testing.T, env sandbox.Environment, script string) (string, string, sandbox.ExitStatus) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	p, err := env.Exec(ctx, sandbox.Cmd{Argv: []string{"sh", "-c", script}})
	if err != nil {
		t.Fatalf("exec %q: %v", script, err)
	}
	out, errOut := sandboxtest.Collect(t, p)
	st, err := p.Wait(ctx)
	if err != nil {
		t.Fatalf("wait %q: %v", script, err)
	}
	return out, errOut, st
}

func terminate(t *testing.T, env sandbox.Environment) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := env.Terminate(ctx); err != nil {
		t.Fatalf("terminate: %v", err)
	}
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
	out, errOut, st := run(t, env, `id -u; id -un; pwd; ls -ld /workspace >&2; echo $HOME $FROM_SPEC; echo hello > made.txt; ls /sys/class/net
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
	terminate(t, env)
	if _, ok := f.pod(e.Pod()); ok {
		t.Fatal("pod left after Terminate")
	}
	if err := env.Terminate(context.Background()); err != nil {
		t.Fatalf("second Terminate: %v", err)
	}
	if _, err := env.Exec(context.Background(), sandbox.Cmd{Argv: []string{"true"}}); !errors.Is(err, sandbox.ErrTerminated) {
		t.Fatalf("exec after Terminate: %v", err)
	}
}

// A process keeps running while no server is attached; a new provider
// (a restarted server, on another host) re-attaches and reads its output
// from where the first stopped, every line once.
func TestRecoverAttach(t *testing.T) {
	f := newFixture(t)
	p1 := f.provider(nil)
	sp := spec("s2")
	env, err := p1.Create(context.Background(), sp)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	proc, err := env.Exec(ctx, sandbox.Cmd{Argv: []string{"sh", "-c", "for i in $(seq 1 30); do echo line $i; sleep 0.02; done"}, Tag: "t1"})
	if err != nil {
		t.Fatal(err)
	}
	var got strings.Builder
	var off int64
	for c := range proc.Output() {
		got.Write(c.Data)
		off = c.Offset + int64(len(c.Data))
		if strings.Contains(got.String(), "line 5\n") {
			break
		}
	}
	// The restarted server runs elsewhere: a run folder of its own.
	p2 := f.provider(func(o *kubernetes.Options) { o.RunDir = sandboxtest.ShortTempDir(t, "k9") })
	env2, err := p2.Recover(ctx, sp, env.(sandbox.HandleReporter).Handle())
	if err != nil {
		t.Fatal(err)
	}
	proc2, err := env2.(sandbox.Attacher).Attach(ctx, "t1", sandbox.Offsets{Stdout: off})
	if err != nil {
		t.Fatal(err)
	}
	for c := range proc2.Output() {
		if c.Stream != sandbox.Stdout || c.Offset != off {
			t.Fatalf("chunk %s at %d, want stdout at %d", c.Stream, c.Offset, off)
		}
		got.Write(c.Data)
		off += int64(len(c.Data))
	}
	if st, err := proc2.Wait(ctx); err != nil || !st.Success() {
		t.Fatalf("wait %+v %v", st, err)
	}
	var want strings.Builder
	for i := 1; i <= 30; i++ {
		fmt.Fprintf(&want, "line %d\n", i)
	}
	if got.String() != want.String() {
		t.Fatalf("output across the re-attach:\n%q", got.String())
	}
	// The model proxy through the recovered environment's tunnels.
	if out, _, _ := run(t, env2, `curl -s -H "x-api-key: $ANTHROPIC_API_KEY" $ANTHROPIC_BASE_URL/again`); out != "proxy for s2: GET /again key=tok-s2" {
		t.Fatalf("model proxy after the re-attach: %q", out)
	}
	terminate(t, env2)
	// The first view of it ends with the pod.
	terminate(t, env)
}

func TestRecoverGone(t *testing.T) {
	f := newFixture(t)
	p := f.provider(nil)
	sp := spec("s3")
	env, err := p.Create(context.Background(), sp)
	if err != nil {
		t.Fatal(err)
	}
	name := env.(*kubernetes.Environment).Pod()
	handle := env.(sandbox.HandleReporter).Handle()
	ctx := context.Background()
	// The pod goes while the server is away.
	if err := f.kube.Admin.CoreV1().Pods(f.kube.Namespace).Delete(ctx, name, metav1.DeleteOptions{GracePeriodSeconds: new(int64)}); err != nil {
		t.Fatal(err)
	}
	p2 := f.provider(nil)
	if _, err := p2.Recover(ctx, sp, handle); !errors.Is(err, sandbox.ErrGone) {
		t.Fatalf("recover of a deleted pod: %v", err)
	}
	// Its view in the first provider still terminates cleanly.
	terminate(t, env)
	if _, err := p2.Recover(ctx, sp, []byte(`{"pod":`)); err == nil || errors.Is(err, sandbox.ErrGone) {
		t.Fatalf("bad handle: %v", err)
	}
}

// Collect removes the pods no handle names (sessions deleted while the
// server was down), keeps the others, and leaves other nodes' alone.
func TestCollect(t *testing.T) {
	f := newFixture(t)
	p1 := f.provider(nil)
	ctx := context.Background()
	kept, err := p1.Create(ctx, spec("keep"))
	if err != nil {
		t.Fatal(err)
	}
	dropped, err := p1.Create(ctx, spec("drop"))
	if err != nil {
		t.Fatal(err)
	}
	other := f.provider(func(o *kubernetes.Options) { o.Node += "-other" })
	foreign, err := other.Create(ctx, spec("foreign"))
	if err != nil {
		t.Fatal(err)
	}
	defer terminate(t, foreign)

	p2 := f.provider(nil) // the restarted server
	if err := p2.Collect(ctx, []json.RawMessage{kept.(sandbox.HandleReporter).Handle(), []byte(`"not a handle"`)}); err != nil {
		t.Fatal(err)
	}
	waitGone(t, f, dropped.(*kubernetes.Environment).Pod())
	if _, ok := f.pod(kept.(*kubernetes.Environment).Pod()); !ok {
		t.Fatal("Collect removed a kept pod")
	}
	if _, ok := f.pod(foreign.(*kubernetes.Environment).Pod()); !ok {
		t.Fatal("Collect removed another node's pod")
	}
	env, err := p2.Recover(ctx, spec("keep"), kept.(sandbox.HandleReporter).Handle())
	if err != nil {
		t.Fatal(err)
	}
	if out, _, _ := run(t, env, "echo still"); out != "still\n" {
		t.Fatalf("kept pod: %q", out)
	}
	terminate(t, env)
	terminate(t, kept)
	terminate(t, dropped) // gone already: not an error
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
	ctx := context.Background()
	if err := p.Collect(ctx, nil); err != nil {
		t.Fatal(err)
	}
	pool := waitPool(t, p, func(pi sandbox.PoolInfo) bool { return pi.Ready == 2 })
	if pool.Size != 2 || pool.Image != f.opts.Image || pool.Limits.Pids != 128 {
		t.Fatalf("pool %+v", pool)
	}
	t0 := time.Now()
	env, err := p.Create(ctx, spec("w1"))
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("create from the warm pool: %v", time.Since(t0))
	pool = waitPool(t, p, func(pi sandbox.PoolInfo) bool { return pi.Claims == 1 })
	if pool.Misses != 0 || !slices.Equal(pool.Profiles, []string{"default"}) {
		t.Fatalf("pool after the claim %+v", pool)
	}
	name := env.(*kubernetes.Environment).Pod()
	if pod, _ := f.pod(name); pod.Labels["agentd.session"] != "w1" || pod.Labels["agentd.pool"] != "" {
		t.Fatalf("claimed pod's labels %v", pod.Labels)
	}
	if out, _, st := run(t, env, "echo warm > w.txt; cat w.txt; pwd; echo $FROM_SPEC"); !st.Success() || out != "warm\n/workspace\nyes\n" {
		t.Fatalf("warm exec: %q %+v", out, st)
	}
	if out, _, _ := run(t, env, `curl -s -H "x-api-key: $ANTHROPIC_API_KEY" $ANTHROPIC_BASE_URL/x`); out != "proxy for w1: GET /x key=tok-w1" {
		t.Fatalf("model proxy from a claimed pod: %q", out)
	}
	waitPool(t, p, func(pi sandbox.PoolInfo) bool { return pi.Ready == 2 && pi.Claims == 1 })
	// Shutdown drains the pool; the claimed environment stays.
	cctx, cancel := context.WithTimeout(ctx, time.Minute)
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
	terminate(t, env)
}

func waitPool(t *testing.T, p *kubernetes.Provider, ok func(sandbox.PoolInfo) bool) sandbox.PoolInfo {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for {
		info := p.Describe()
		for _, pi := range info.Pools {
			if ok(pi) {
				return pi
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("pool never ready: %+v", info.Pools)
		}
		time.Sleep(20 * time.Millisecond)
	}
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
	ctx := context.Background()
	for name, mod := range map[string]func(*kubernetes.Options){
		"root uid":      func(o *kubernetes.Options) { o.UIDBase, o.UIDCount = 0, 10 },
		"uid overflow":  func(o *kubernetes.Options) { o.UIDBase, o.UIDCount = 2147483600, 100 },
		"negative pool": func(o *kubernetes.Options) { o.WarmPool = -1 },
		"long run dir":  func(o *kubernetes.Options) { o.RunDir = "/tmp/" + strings.Repeat("x", 100) },
		"no cluster":    func(o *kubernetes.Options) { o.Config = nil; o.Kubeconfig = "/nonexistent/kubeconfig" },
	} {
		opts := f.opts
		mod(&opts)
		if p, err := kubernetes.New(ctx, opts); err == nil {
			p.Close(ctx)
			t.Errorf("%s: accepted", name)
		} else {
			t.Logf("%s: %v", name, err)
		}
	}
}
