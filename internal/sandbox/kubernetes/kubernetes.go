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
	"path/filepath"
	"slices"
	"strconv"
	"strings"
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

	"github.com/agentd/agentd/internal/sandbox/executor"
	"github.com/agentd/agentd/internal/sandbox/warmpool"
	"github.com/agentd/agentd/sandbox"
)

// Name is the backend name given to --sandbox.
const Name = "kubernetes"

// Defaults for Options fields left empty.
const (
	DefaultImage        = "agentd-sandbox:latest"
	DefaultNamespace    = "default"
	DefaultStartTimeout = 60 * time.Second
	DefaultStopTimeout  = 10 * time.Second
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

// Options configure a Provider.
type Options struct {
	// Config reaches the API server; default: Kubeconfig, else the
	// in-cluster configuration, else $KUBECONFIG / ~/.kube/config.
	Config *rest.Config
	// Kubeconfig is a kubeconfig file (used when Config is nil).
	Kubeconfig string
	// Namespace holds the pods (default "default").
	Namespace string
	// Image is the default image (default agentd-sandbox:latest; built by
	// scripts/sandbox-image.sh --oci and imported into the nodes'
	// runtime, or pushed to a registry). Spec.Image overrides it.
	Image string
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
	// RunDir holds, in a sub-folder per Node, each environment's model
	// proxy socket on this host. Default: $XDG_RUNTIME_DIR/agentd-k8s,
	// else <temp>/agentd-k8s-<uid>.
	RunDir string
	// Node labels this server's pods; Collect removes only those
	// (default "default").
	Node string
	// Limits are every pod's limits (memory and CPU: the container's
	// resources.limits; pids: RLIMIT_NPROC of the pod's own uid); the
	// non-zero fields of Spec.Limits override them.
	Limits sandbox.Limits
	// Ignore is the workspace watcher's ignore list of pods started
	// ahead.
	Ignore []string
	// WarmPool is how many pods of each kind are kept started ahead;
	// MaxPools bounds the kinds (default 4).
	WarmPool int
	MaxPools int
	// ModelProxy, when set, is the pods' only way to the model APIs.
	ModelProxy executor.ModelProxy
	// Nice is added to the niceness of the processes the executor starts.
	Nice int
	// SpoolBytes is the executor's spool per process and stream.
	SpoolBytes int64
	// StartTimeout bounds a pod's start until its executor answers;
	// StopTimeout how long Terminate waits for the executor to end.
	StartTimeout, StopTimeout time.Duration
	// OnCall is called after every call to an executor (audit).
	OnCall func(sessionID, method string, paramsSize int, err error, dur time.Duration)
	Logger *slog.Logger
}

// Provider starts pods. Safe for concurrent use.
type Provider struct {
	opts   Options
	log    *slog.Logger
	cfg    *rest.Config
	cs     k8s.Interface
	hc     *http.Client
	exec   *executor.Provider
	image  string
	owner  metav1.OwnerReference // the node's ConfigMap
	server string                // the API server's version, for logs

	pool *warmpool.Pool[shape, *warm] // nil without a warm pool

	mu       sync.Mutex
	live     map[string]struct{}       // pods of this process (environments, warm ones), by name
	envs     map[*Environment]struct{} // environments handed out and not terminated
	profiles map[shape]map[string]bool // profiles that claimed each shape
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
	if opts.Image == "" {
		opts.Image = DefaultImage
	}
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
	if opts.Node == "" {
		opts.Node = "default"
	}
	if opts.WarmPool < 0 {
		return fail(fmt.Errorf("warm pool size %d", opts.WarmPool))
	}
	if opts.WarmPool > 0 && !opts.WorkspaceSize.IsZero() {
		return fail(errPoolWithClaims)
	}
	if opts.StartTimeout <= 0 {
		opts.StartTimeout = DefaultStartTimeout
	}
	if opts.StopTimeout <= 0 {
		opts.StopTimeout = DefaultStopTimeout
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.Requests == nil {
		opts.Requests = corev1.ResourceList{
			corev1.ResourceCPU:    resource.MustParse("100m"),
			corev1.ResourceMemory: resource.MustParse("128Mi"),
		}
	}
	if opts.RunDir == "" {
		if d := os.Getenv("XDG_RUNTIME_DIR"); d != "" {
			opts.RunDir = filepath.Join(d, "agentd-k8s")
		} else {
			opts.RunDir = filepath.Join(os.TempDir(), "agentd-k8s-"+strconv.Itoa(os.Getuid()))
		}
	}
	node := sha256.Sum256([]byte(opts.Node))
	var err error
	if opts.RunDir, err = filepath.Abs(filepath.Join(opts.RunDir, hex.EncodeToString(node[:4]))); err != nil {
		return fail(err)
	}
	if len(filepath.Join(opts.RunDir, "agentd-0123456789ab.mp", "model.sock")) > 107 {
		return fail(fmt.Errorf("run folder %s is too long for socket paths: use a shorter one", opts.RunDir))
	}
	cfg := opts.Config
	if cfg == nil {
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
		opts: opts, log: opts.Logger.With("sandbox", Name), cfg: cfg, cs: cs, hc: hc, image: opts.Image,
		live: map[string]struct{}{}, envs: map[*Environment]struct{}{}, profiles: map[shape]map[string]bool{},
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
	if err := os.MkdirAll(filepath.Dir(opts.RunDir), 0o711); err != nil {
		return fail(err)
	}
	if err := os.MkdirAll(opts.RunDir, 0o711); err != nil {
		return fail(err)
	}
	p.exec, err = executor.New(executor.Options{
		RunDir: opts.RunDir, LimitMode: executor.LimitsOff, ModelProxy: opts.ModelProxy,
		StartTimeout: opts.StartTimeout, StopTimeout: opts.StopTimeout, OnCall: opts.OnCall, Logger: opts.Logger,
	})
	if err != nil {
		return fail(err)
	}
	if opts.WarmPool > 0 {
		p.pool, err = warmpool.New(warmpool.Options[shape, *warm]{
			Size: opts.WarmPool, MaxKeys: opts.MaxPools,
			Start: p.startWarm, Stop: p.stopWarm, KeyString: shape.String,
			StopTimeout: opts.StopTimeout + 30*time.Second, Logger: opts.Logger,
		})
		if err != nil {
			return fail(err)
		}
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
	var err error
	if p.pool != nil {
		err = p.pool.Close(ctx)
	}
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

// shape is what a pod is made with, before any session: the key of the
// warm pools.
type shape struct {
	Image  string
	Limits sandbox.Limits
	Ignore string // the ignore list, NUL-separated
}

func (s shape) String() string {
	return fmt.Sprintf("%s mem=%d pids=%d cpu=%d%%", s.Image, s.Limits.MemoryBytes, s.Limits.Pids, s.Limits.CPUPercent)
}

// hash is the shape as a label value.
func (s shape) hash() string {
	h := sha256.Sum256([]byte(s.String() + "\x00" + s.Ignore))
	return hex.EncodeToString(h[:8])
}

func (s shape) ignore() []string {
	if s.Ignore == "" {
		return nil
	}
	return strings.Split(s.Ignore, "\x00")
}

func (p *Provider) shapeOf(spec sandbox.Spec) shape {
	s := shape{Image: p.image, Limits: p.opts.Limits, Ignore: strings.Join(spec.Ignore, "\x00")}
	if spec.Image != "" {
		s.Image = spec.Image
	}
	if spec.Limits.MemoryBytes > 0 {
		s.Limits.MemoryBytes = spec.Limits.MemoryBytes
	}
	if spec.Limits.Pids > 0 {
		s.Limits.Pids = spec.Limits.Pids
	}
	if spec.Limits.CPUPercent > 0 {
		s.Limits.CPUPercent = spec.Limits.CPUPercent
	}
	return s
}

func (p *Provider) defaultShape() shape {
	return shape{Image: p.image, Limits: p.opts.Limits, Ignore: strings.Join(p.opts.Ignore, "\x00")}
}

func (p *Provider) track(name string) {
	p.mu.Lock()
	p.live[name] = struct{}{}
	p.mu.Unlock()
}

func (p *Provider) untrack(name string) {
	p.mu.Lock()
	delete(p.live, name)
	p.mu.Unlock()
}

func (p *Provider) isLive(name string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	_, ok := p.live[name]
	return ok
}

func (p *Provider) noteProfile(s shape, profile string) {
	if profile == "" {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	m := p.profiles[s]
	if m == nil {
		m = map[string]bool{}
		p.profiles[s] = m
	}
	m[profile] = true
}

// Describe says what a pod protects against (docs/security.md's
// kubernetes column) and the warm pools' state.
func (p *Provider) Describe() sandbox.Info {
	info := sandbox.Info{
		Protections: p.protections(), Limits: p.opts.Limits,
		LimitsEnforcement: p.LimitsEnforcement(), SurvivesRestart: true,
	}
	if p.pool == nil {
		return info
	}
	byKey := map[string]shape{}
	p.mu.Lock()
	for s := range p.profiles {
		byKey[s.String()] = s
	}
	p.mu.Unlock()
	def := p.defaultShape()
	byKey[def.String()] = def
	for _, st := range p.pool.Stats() {
		pi := sandbox.PoolInfo{
			Key: st.Key, Size: st.Size, Ready: st.Ready, Starting: st.Starting,
			Claims: st.Takes, Misses: st.Misses, Failures: st.Failures, LastError: st.LastError, LastStartMS: st.LastStartMS,
		}
		if s, ok := byKey[st.Key]; ok {
			pi.Image, pi.Limits = s.Image, s.Limits
			p.mu.Lock()
			for prof := range p.profiles[s] {
				pi.Profiles = append(pi.Profiles, prof)
			}
			p.mu.Unlock()
			slices.Sort(pi.Profiles)
		}
		info.Pools = append(info.Pools, pi)
	}
	return info
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
