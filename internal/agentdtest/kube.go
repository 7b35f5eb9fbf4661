package agentdtest

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	authv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	utilnet "k8s.io/apimachinery/pkg/util/net"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	k8s "k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// The Kubernetes tests need a cluster (scripts/kube.sh start: its admin
// kubeconfig in AGENTD_KUBECONFIG, the runtime's socket in
// AGENTD_KUBE_CONTAINERD) and must run in the cluster's network namespace
// (AGENTD_KUBE_NETNS; scripts/test.sh runs them there). Without them they
// skip, unless AGENTD_REQUIRE_KUBERNETES is set: then they fail.

// KubeNamespace is where the tests' pods run; it gets
// deploy/kubernetes/rbac.yaml, and the servers under test use its service
// account, so the manifest is what they are allowed.
const KubeNamespace = "agentd-test"

func kubeSkip(t testing.TB, format string, args ...any) {
	t.Helper()
	if os.Getenv("AGENTD_REQUIRE_KUBERNETES") != "" {
		t.Fatalf("agentdtest: "+format, args...)
	}
	t.Skipf("agentdtest: "+format+" (scripts/kube.sh start; AGENTD_REQUIRE_KUBERNETES=1 fails instead)", args...)
}

// KubeCluster is the test cluster as the tests see it.
type KubeCluster struct {
	// Admin is a client with every right, for checks.
	Admin k8s.Interface
	// Config reaches the API server as the agentd service account of
	// KubeNamespace (deploy/kubernetes/rbac.yaml), and Kubeconfig is a
	// file saying the same, for servers started as processes.
	Config     *rest.Config
	Kubeconfig string
	Namespace  string
}

var (
	kubeMu     sync.Mutex
	kubeHTTP   *http.Client
	kubeSetUp  *KubeCluster
	kubeImages = map[string]string{} // binary → image
)

// Kube returns the test cluster, setting up KubeNamespace and the
// service account's credentials once per test binary; it skips (or
// fails) without a cluster.
func Kube(t testing.TB) *KubeCluster {
	t.Helper()
	if os.Getuid() != 0 {
		kubeSkip(t, "the kubernetes tests need root (the cluster runs here)")
	}
	path := os.Getenv("AGENTD_KUBECONFIG")
	if path == "" {
		kubeSkip(t, "no test cluster (AGENTD_KUBECONFIG is not set)")
	}
	kubeMu.Lock()
	defer kubeMu.Unlock()
	if kubeSetUp != nil {
		return kubeSetUp
	}
	admin, err := clientcmd.BuildConfigFromFlags("", path)
	if err != nil {
		kubeSkip(t, "kubeconfig %s: %v", path, err)
	}
	// Certificates read once: client-go watches certificate files with a
	// goroutine of its own, forever.
	if err := rest.LoadTLSFiles(admin); err != nil {
		kubeSkip(t, "kubeconfig %s: %v", path, err)
	}
	admin.Proxy = http.ProxyFromEnvironment // a transport of its own: CloseKube closes it
	hc, err := rest.HTTPClientFor(admin)
	if err != nil {
		t.Fatal(err)
	}
	kubeHTTP = hc
	cs, err := k8s.NewForConfigAndClient(admin, hc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if _, err := cs.Discovery().ServerVersion(); err != nil {
		kubeSkip(t, "the test cluster does not answer at %s (run the tests in its network namespace %q): %v",
			admin.Host, os.Getenv("AGENTD_KUBE_NETNS"), err)
	}
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: KubeNamespace}}
	if _, err := cs.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	if err := applyRBAC(ctx, cs, filepath.Join(RepoRoot(t), "deploy", "kubernetes", "rbac.yaml"), KubeNamespace); err != nil {
		t.Fatalf("agentdtest: apply rbac.yaml: %v", err)
	}
	// The namespace's default service account (the pods') is made by the
	// controller manager.
	for {
		_, err := cs.CoreV1().ServiceAccounts(KubeNamespace).Get(ctx, "default", metav1.GetOptions{})
		if err == nil {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("agentdtest: no default service account in %s: %v", KubeNamespace, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	tok, err := cs.CoreV1().ServiceAccounts(KubeNamespace).CreateToken(ctx, "agentd", &authv1.TokenRequest{
		Spec: authv1.TokenRequestSpec{ExpirationSeconds: ptrTo(int64(24 * 3600))},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("agentdtest: token of the agentd service account: %v", err)
	}
	sa := rest.AnonymousClientConfig(admin)
	sa.BearerToken = tok.Status.Token
	ca := admin.CAData
	if len(ca) == 0 && admin.CAFile != "" {
		if ca, err = os.ReadFile(admin.CAFile); err != nil {
			t.Fatal(err)
		}
	}
	sa.CAData, sa.CAFile = ca, ""
	dir, err := os.MkdirTemp("", "agentd-kube-test")
	if err != nil {
		t.Fatal(err)
	}
	kc := filepath.Join(dir, "agentd.kubeconfig")
	conf := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: test
  cluster: {server: %q, certificate-authority-data: %s}
users:
- name: agentd
  user: {token: %q}
contexts:
- name: test
  context: {cluster: test, user: agentd, namespace: %s}
current-context: test
`, admin.Host, base64.StdEncoding.EncodeToString(ca), tok.Status.Token, KubeNamespace)
	if err := os.WriteFile(kc, []byte(conf), 0o600); err != nil {
		t.Fatal(err)
	}
	kubeSetUp = &KubeCluster{Admin: cs, Config: sa, Kubeconfig: kc, Namespace: KubeNamespace}
	return kubeSetUp
}

func ptrTo[T any](v T) *T { return &v }

// CloseKube closes the admin client's connections, at the end of a test
// binary (before its goroutine leak check).
func CloseKube() {
	kubeMu.Lock()
	defer kubeMu.Unlock()
	if kubeHTTP != nil {
		utilnet.CloseIdleConnectionsFor(kubeHTTP.Transport)
	}
}

// applyRBAC creates (or updates) the manifest's objects in namespace.
func applyRBAC(ctx context.Context, cs k8s.Interface, path, namespace string) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096)
	for {
		var raw runtime.RawExtension
		if err := dec.Decode(&raw); err != nil {
			if errors.Is(err, io.EOF) {
				return nil
			}
			return err
		}
		if len(bytes.TrimSpace(raw.Raw)) == 0 {
			continue
		}
		obj, _, err := scheme.Codecs.UniversalDeserializer().Decode(raw.Raw, nil, nil)
		if err != nil {
			return err
		}
		switch o := obj.(type) {
		case *corev1.ServiceAccount:
			o.Namespace = namespace
			_, err = cs.CoreV1().ServiceAccounts(namespace).Create(ctx, o, metav1.CreateOptions{})
		case *rbacv1.Role:
			o.Namespace = namespace
			if _, err = cs.RbacV1().Roles(namespace).Create(ctx, o, metav1.CreateOptions{}); apierrors.IsAlreadyExists(err) {
				var cur *rbacv1.Role
				if cur, err = cs.RbacV1().Roles(namespace).Get(ctx, o.Name, metav1.GetOptions{}); err == nil {
					cur.Rules = o.Rules
					_, err = cs.RbacV1().Roles(namespace).Update(ctx, cur, metav1.UpdateOptions{})
				}
			}
		case *rbacv1.RoleBinding:
			o.Namespace = namespace
			for i := range o.Subjects {
				o.Subjects[i].Namespace = namespace
			}
			_, err = cs.RbacV1().RoleBindings(namespace).Create(ctx, o, metav1.CreateOptions{})
		default:
			return fmt.Errorf("unexpected %T in %s", obj, path)
		}
		if err != nil && !apierrors.IsAlreadyExists(err) {
			return err
		}
	}
}

// KubeImage returns an image in the test cluster's runtime made of the
// sandbox image's cached base layer (scripts/sandbox-image.sh --agents
// claude) and this source's agentd (Binary), imported once per binary.
func KubeImage(t testing.TB) string {
	t.Helper()
	Kube(t)
	sock := os.Getenv("AGENTD_KUBE_CONTAINERD")
	if sock == "" {
		kubeSkip(t, "AGENTD_KUBE_CONTAINERD is not set (scripts/kube.sh start prints it)")
	}
	bin := Binary(t)
	kubeMu.Lock()
	defer kubeMu.Unlock()
	if img, ok := kubeImages[bin]; ok {
		return img
	}
	data, err := os.ReadFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(data)
	ref := "agentd-sandbox-test:" + hex.EncodeToString(sum[:6])
	full := "docker.io/library/" + ref
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	ls, err := exec.CommandContext(ctx, "ctr", "-a", sock, "-n", "k8s.io", "images", "ls", "-q", "name=="+full).Output()
	if err != nil {
		kubeSkip(t, "ctr images ls: %v", err)
	}
	if strings.TrimSpace(string(ls)) == "" {
		dir := t.TempDir()
		out := filepath.Join(dir, "image.tar")
		cmd := exec.CommandContext(ctx, filepath.Join(RepoRoot(t), "scripts", "sandbox-image.sh"),
			"--no-docker", "--agents", "claude", "--agentd", bin, "--oci", out, "--tag", ref)
		if b, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("agentdtest: sandbox-image.sh: %v\n%s", err, b)
		}
		if b, err := exec.CommandContext(ctx, "ctr", "-a", sock, "-n", "k8s.io", "images", "import", out).CombinedOutput(); err != nil {
			t.Fatalf("agentdtest: ctr images import: %v\n%s", err, b)
		}
		os.Remove(out)
	}
	kubeImages[bin] = ref
	return ref
}

// KubePods lists the pods of node (label agentd.node; every agentd pod
// when node is empty) in the test namespace, by name.
func KubePods(t testing.TB, c *KubeCluster, node string) []string {
	t.Helper()
	sel := "agentd.managed=true"
	if node != "" {
		sel += ",agentd.node=" + node
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	list, err := c.Admin.CoreV1().Pods(c.Namespace).List(ctx, metav1.ListOptions{LabelSelector: sel})
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, p := range list.Items {
		out = append(out, p.Name)
	}
	return out
}
