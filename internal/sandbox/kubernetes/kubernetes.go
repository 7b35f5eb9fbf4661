// Package kubernetes is the sandbox backend that runs each session in a
// pod of a Kubernetes cluster: the executor (`agentd executor`,
// internal/executor) is the pod's main process, and the server speaks the
// executor protocol to it through the API server's port-forward streams,
// never by connecting to a pod's address. The executor listens on a
// loopback port inside the pod (--listen-tcp; only the node's runtime,
// root, which dials port-forwards, may connect); everything the executor
// backend does — re-attaching after a server restart, output replay from
// the offsets the log holds, flow control, file watching — works
// unchanged through executor.Provider.ConnectTransport.
//
// The pod has no network: an init container takes its interfaces down
// (only loopback is left). Agents reach the model proxy through a
// loopback port whose connections the executor hands to tunnels, streams
// the server opened to it ahead of need (the executor's TunnelPool); the server
// relays each to the session's model proxy socket. The workspace is an
// emptyDir (filled from the store by the session layer at every start) or
// a PersistentVolumeClaim per session.
//
// Pods and claims carry labels (agentd.managed, agentd.node,
// agentd.session or agentd.pool) and are owned by a ConfigMap per server
// node (deleting it removes everything of that server); Collect removes
// those of this node that no session records. With a warm pool, pods are
// started ahead and claimed by new sessions.
package kubernetes

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilnet "k8s.io/apimachinery/pkg/util/net"
	"k8s.io/apimachinery/pkg/util/validation"
	k8s "k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/agentd/agentd/internal/sandbox/container"
	"github.com/agentd/agentd/internal/sandbox/executor"
	"github.com/agentd/agentd/sandbox"
)

// Name is the backend name given to --sandbox.
const Name = "kubernetes"

// Defaults for Options fields left empty (and container.Options'
// defaults).
const (
	DefaultNamespace    = "default"
	DefaultStartTimeout = 60 * time.Second
	// DefaultUIDBase and DefaultUIDCount: each pod runs as a uid of its
	// own from this range, so that the process limit (RLIMIT_NPROC,
	// counted per uid on the node) is the session's alone.
	DefaultUIDBase  = 1_000_000_000
	DefaultUIDCount = 1_000_000_000
)

// Labels set on every pod and claim of this backend.
const (
	LabelManaged = "agentd.managed" // "true"
	LabelNode    = "agentd.node"    // the server's node id
	LabelSession = "agentd.session" // the session, for pods started for one
	LabelPool    = "agentd.pool"    // the warm pool key's hash, for pods started ahead
)

// Inside the pod.
const (
	workspaceDir  = "/workspace"
	runDir        = "/run/agentd" // spool
	etcDir        = "/run/agentd-etc"
	executorPort  = 7070 // the executor's JSON-RPC, loopback
	tunnelPort    = 7071 // model-proxy tunnels, loopback
	containerName = "executor"
	initName      = "setup"
	tini          = "/usr/bin/tini"
)

// Options configure a Provider: what every container backend is given
// (the image built by scripts/sandbox-image.sh --oci and imported into
// the nodes' runtime, or pushed to a registry; the limits are the
// executor container's resources.limits for memory and CPU, and
// RLIMIT_NPROC of the pod's own uid for pids) and Kubernetes' own.
type Options struct {
	container.Options
	// Config reaches the API server; default: Kubeconfig, else the
	// in-cluster configuration, else $KUBECONFIG / ~/.kube/config.
	Config *rest.Config
	// Kubeconfig is a kubeconfig file (used when Config is nil).
	Kubeconfig string
	// Namespace holds the pods (default "default").
	Namespace string
	// PullPolicy of the pods' image (default Never: the image must be on
	// the node).
	PullPolicy corev1.PullPolicy
	// ServiceAccount the pods run as ("" : the namespace's default). Its
	// token is never mounted.
	ServiceAccount string
	// NodeSelector and Tolerations place the pods; RuntimeClass, when
	// set, is their runtime class (gVisor, Kata…).
	NodeSelector map[string]string
	Tolerations  []corev1.Toleration
	RuntimeClass string
	// Requests are each pod's resource requests (default cpu 100m,
	// memory 128Mi; never above the limits).
	Requests corev1.ResourceList
	// UIDBase and UIDCount: each pod runs as a random uid from
	// [UIDBase, UIDBase+UIDCount) (defaults 1e9 and 1e9). UIDCount 1
	// runs every pod as UIDBase.
	UIDBase, UIDCount int64
	// AllowNetwork keeps the pods' network: without it an init container
	// (root, CAP_NET_ADMIN, nothing else) takes every interface but
	// loopback down before the executor starts.
	AllowNetwork bool
	// WorkspaceSize, when set, gives each session a PersistentVolumeClaim
	// of that size (StorageClass; "" the cluster's default) as its
	// workspace, kept across its pods; otherwise the workspace is an
	// emptyDir, filled from the store at each start.
	WorkspaceSize resource.Quantity
	StorageClass  string
}

// Provider starts pods. Safe for concurrent use.
type Provider struct {
	opts   Options
	log    *slog.Logger
	cfg    *rest.Config
	cs     k8s.Interface
	hc     *http.Client
	exec   *executor.Provider
	def    container.Shape       // of a session that sets nothing of its own
	owner  metav1.OwnerReference // the node's ConfigMap
	server string                // the API server's version, for logs

	pools *container.Pools[*box] // nil without a warm pool
	live  container.Live         // pods of this process (environments, warm ones), by name

	mu   sync.Mutex
	envs map[*Environment]struct{} // environments handed out and not terminated
}

var (
	_ sandbox.Provider  = (*Provider)(nil)
	_ sandbox.Recoverer = (*Provider)(nil)
	_ sandbox.Collector = (*Provider)(nil)
	_ sandbox.Closer    = (*Provider)(nil)
	_ sandbox.Describer = (*Provider)(nil)

	_ sandbox.RemoteWorkspacer   = (*Provider)(nil)
	_ sandbox.WorkspaceCollector = (*Provider)(nil)
)

// New reaches the API server, makes sure the node's owner ConfigMap
// exists and returns a Provider.
func New(ctx context.Context, opts Options) (*Provider, error) {
	fail := func(err error) (*Provider, error) { return nil, fmt.Errorf("kubernetes sandbox: %w", err) }
	if opts.Namespace == "" {
		opts.Namespace = DefaultNamespace
	}
	if opts.PullPolicy == "" {
		opts.PullPolicy = corev1.PullNever
	}
	if opts.UIDBase == 0 && opts.UIDCount == 0 {
		opts.UIDBase, opts.UIDCount = DefaultUIDBase, DefaultUIDCount
	}
	if opts.UIDCount <= 0 || opts.UIDBase <= 0 || opts.UIDBase+opts.UIDCount-1 > 2147483647 {
		return fail(fmt.Errorf("uid range %d+%d: want uids from 1 to 2147483647", opts.UIDBase, opts.UIDCount))
	}
	if err := opts.Complete("agentd-k8s", DefaultStartTimeout); err != nil {
		return fail(err)
	}
	if opts.WarmPool > 0 && !opts.WorkspaceSize.IsZero() {
		return fail(errPoolWithClaims)
	}
	if opts.Requests == nil {
		opts.Requests = corev1.ResourceList{
			corev1.ResourceCPU:    resource.MustParse("100m"),
			corev1.ResourceMemory: resource.MustParse("128Mi"),
		}
	}
	cfg := opts.Config
	if cfg == nil {
		var err error
		if cfg, err = loadConfig(opts.Kubeconfig); err != nil {
			return fail(err)
		}
	}
	cfg = rest.CopyConfig(cfg)
	// Pod watches and port-forwards are long; everything else is quick.
	if cfg.QPS == 0 {
		cfg.QPS, cfg.Burst = 50, 100
	}
	// A transport of the provider's own (client-go shares one per TLS
	// configuration otherwise), whose connections Close closes.
	if cfg.Proxy == nil {
		cfg.Proxy = http.ProxyFromEnvironment
	}
	hc, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return fail(err)
	}
	cs, err := k8s.NewForConfigAndClient(cfg, hc)
	if err != nil {
		return fail(err)
	}
	p := &Provider{
		opts: opts, log: opts.Logger.With("sandbox", Name), cfg: cfg, cs: cs, hc: hc,
		def: opts.DefaultShape(), envs: map[*Environment]struct{}{},
	}
	vctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	v, err := cs.Discovery().ServerVersion()
	if err != nil {
		utilnet.CloseIdleConnectionsFor(hc.Transport)
		return fail(fmt.Errorf("reach the API server %s: %w", cfg.Host, err))
	}
	p.server = v.GitVersion
	if err := p.ensureOwner(vctx); err != nil {
		utilnet.CloseIdleConnectionsFor(hc.Transport)
		return fail(err)
	}
	if p.exec, err = opts.NewExecutor(); err != nil {
		return fail(err)
	}
	p.pools, err = container.NewPools(&opts.Options, container.PoolOptions[*box]{
		Start: p.startWarm, Stop: p.stopWarm, StopTimeout: opts.StopTimeout + 30*time.Second, Log: p.log, Noun: "pod",
	})
	if err != nil {
		return fail(err)
	}
	p.log.Info("kubernetes sandbox", "server", cfg.Host, "version", p.server, "namespace", opts.Namespace,
		"image", opts.Image, "limits", p.LimitsEnforcement(), "warmPool", opts.WarmPool,
		"modelProxy", opts.ModelProxy != nil, "network", opts.AllowNetwork, "pvc", !opts.WorkspaceSize.IsZero())
	return p, nil
}

// loadConfig finds the API server: a kubeconfig file given, the in-cluster
// configuration, or the default kubeconfig rules ($KUBECONFIG,
// ~/.kube/config).
func loadConfig(kubeconfig string) (*rest.Config, error) {
	if kubeconfig != "" {
		c, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
		if err != nil {
			return nil, fmt.Errorf("kubeconfig %s: %w", kubeconfig, err)
		}
		return c, nil
	}
	if c, err := rest.InClusterConfig(); err == nil {
		return c, nil
	}
	c, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(
		clientcmd.NewDefaultClientConfigLoadingRules(), &clientcmd.ConfigOverrides{}).ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("no cluster configuration (not in a cluster, no kubeconfig): %w", err)
	}
	return c, nil
}

// ownerName is the node's ConfigMap, which owns its pods and claims.
func (p *Provider) ownerName() string {
	h := sha256.Sum256([]byte(p.opts.Node))
	return "agentd-node-" + hex.EncodeToString(h[:6])
}

// ensureOwner gets or creates the node's ConfigMap.
func (p *Provider) ensureOwner(ctx context.Context) error {
	cms := p.cs.CoreV1().ConfigMaps(p.opts.Namespace)
	name := p.ownerName()
	cm, err := cms.Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		cm, err = cms.Create(ctx, &corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{LabelManaged: "true", LabelNode: labelValue(p.opts.Node)}},
			Data:       map[string]string{"node": p.opts.Node, "about": "owns the agentd sandbox pods of this server node: deleting it removes them"},
		}, metav1.CreateOptions{})
		if apierrors.IsAlreadyExists(err) {
			cm, err = cms.Get(ctx, name, metav1.GetOptions{})
		}
	}
	if err != nil {
		return fmt.Errorf("the node's owner ConfigMap %s/%s: %w", p.opts.Namespace, name, err)
	}
	p.owner = metav1.OwnerReference{APIVersion: "v1", Kind: "ConfigMap", Name: cm.Name, UID: cm.UID}
	return nil
}

// labelValue is s if it is a valid label value, else a hash of it.
func labelValue(s string) string {
	if len(validation.IsValidLabelValue(s)) == 0 {
		return s
	}
	h := sha256.Sum256([]byte(s))
	return "h-" + hex.EncodeToString(h[:12])
}

// Name returns "kubernetes".
func (p *Provider) Name() string { return Name }

// Namespace is where the pods are.
func (p *Provider) Namespace() string { return p.opts.Namespace }

// Client is the provider's clientset.
func (p *Provider) Client() k8s.Interface { return p.cs }

// LimitsEnforcement says how limits are enforced, for logs.
func (p *Provider) LimitsEnforcement() string {
	pids := "pids: RLIMIT_NPROC of the pod's own uid"
	if p.opts.UIDCount == 1 {
		pids = "pids: RLIMIT_NPROC of a uid every pod shares (set a uid range)"
	}
	return "kubernetes resources.limits (memory, cpu); " + pids
}

// RemoteWorkspaces reports that workspaces live in the pods, not in
// folders of this host: the session layer fills each new pod's from the
// store, and serves the files of a session whose pod is down from there.
func (p *Provider) RemoteWorkspaces() bool { return true }

// Close drains the warm pool (its pods are deleted). Environments handed
// out stay, their pods running; the connections to them are closed (the
// next server re-attaches).
func (p *Provider) Close(ctx context.Context) error {
	err := p.pools.Close(ctx)
	p.mu.Lock()
	envs := make([]*Environment, 0, len(p.envs))
	for e := range p.envs {
		envs = append(envs, e)
	}
	clear(p.envs)
	p.mu.Unlock()
	for _, e := range envs {
		e.disconnect()
	}
	_ = os.Remove(p.opts.RunDir) // only when no environment is left in it
	utilnet.CloseIdleConnectionsFor(p.hc.Transport)
	return err
}

// poolLabel is a shape as a label value (agentd.pool).
func poolLabel(s container.Shape) string {
	h := sha256.Sum256([]byte(s.String() + "\x00" + s.Ignore))
	return hex.EncodeToString(h[:8])
}

// Describe says what a pod protects against (docs/security.md's
// kubernetes column) and the warm pools' state.
func (p *Provider) Describe() sandbox.Info {
	return sandbox.Info{
		Protections: p.protections(), Limits: p.opts.Limits,
		LimitsEnforcement: p.LimitsEnforcement(), SurvivesRestart: true, Pools: p.pools.Infos(),
	}
}

// protections is the kubernetes column of docs/security.md.
func (p *Provider) protections() []sandbox.Protection {
	pr := func(t sandbox.Threat, ok bool, detail string) sandbox.Protection {
		return sandbox.Protection{Threat: t, Protected: ok, Detail: detail}
	}
	key := pr(sandbox.ThreatProviderKey, true, "the model proxy holds the keys; the pod gets a per-session token and a relay through the API server to the proxy")
	if p.opts.ModelProxy == nil {
		key = pr(sandbox.ThreatProviderKey, false, "model proxy off: the keys are passed in")
	}
	net := pr(sandbox.ThreatNetwork, true, "the pod's interfaces are down (only loopback): the model proxy relay, through the API server, is the only way out")
	port := pr(sandbox.ThreatServerPort, true, "no network; the server is reached only through the API server, by the server")
	if p.opts.AllowNetwork {
		net = pr(sandbox.ThreatNetwork, false, "the pod keeps its network: only a NetworkPolicy the cluster enforces limits it (deploy/kubernetes)")
		port = pr(sandbox.ThreatServerPort, false, "the pod keeps its network: a NetworkPolicy must keep it from the server")
	}
	pids := "memory and CPU: the pod's resources.limits; processes: RLIMIT_NPROC of the pod's own uid"
	if p.opts.UIDCount == 1 {
		pids = "memory and CPU: the pod's resources.limits; processes: RLIMIT_NPROC of a uid every pod shares"
	}
	return []sandbox.Protection{
		pr(sandbox.ThreatOtherWorkspaces, true, "another pod's volume: never mounted"),
		pr(sandbox.ThreatHostFiles, true, "the pod sees the image and its own volumes, nothing of the server's host"),
		pr(sandbox.ThreatServerEnvironment, true, "another machine or pod; own pid namespace"),
		pr(sandbox.ThreatWriteOutside, true, "read-only root file system, private /tmp, unprivileged uid"),
		port,
		net,
		key,
		pr(sandbox.ThreatExhaustion, p.opts.UIDCount > 1, pids),
		pr(sandbox.ThreatLeftovers, true, "Terminate deletes the pod with everything in it; pods of no session are deleted at start"),
		pr(sandbox.ThreatSignal, true, "own pid namespace, no capabilities, a uid of its own"),
		pr(sandbox.ThreatHostUsers, true, "the workspace is a volume of the pod on its node, of the pod's own uid"),
		pr(sandbox.ThreatHostRoot, true, "the pod runs as an unprivileged uid without capabilities, no privilege escalation"),
		pr(sandbox.ThreatServerReads, true, "the server reads through the executor: regular files only, non-blocking, one message at most"),
	}
}

// errGoneWhy wraps sandbox.ErrGone with a reason.
func errGoneWhy(format string, args ...any) error {
	return fmt.Errorf("%w: %s", sandbox.ErrGone, fmt.Sprintf(format, args...))
}

var errNoPod = errors.New("no such pod")
