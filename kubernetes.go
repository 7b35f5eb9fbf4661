package agentd

import (
	"fmt"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/agentd/agentd/internal/sandbox/kubernetes"
)

// KubernetesConfig configures the kubernetes sandbox (docs/kubernetes.md).
// The warm pool is Config.WarmPool, the limits Config.SandboxLimits.
type KubernetesConfig struct {
	// Kubeconfig is a kubeconfig file; empty: the in-cluster
	// configuration, else $KUBECONFIG or ~/.kube/config.
	Kubeconfig string
	// Namespace holds the pods (default "default").
	Namespace string
	// Image is the pods' image (default agentd-sandbox:latest); a
	// profile's sandbox.image overrides it.
	Image string
	// PullPolicy is the image's pull policy: Never (default: the image
	// must be on the nodes), IfNotPresent or Always.
	PullPolicy string
	// ServiceAccount the pods run as (its token is never mounted).
	ServiceAccount string
	// NodeSelector places the pods ("key=value" entries).
	NodeSelector []string
	// Tolerations of the pods: "key[=value]:Effect" or "key:Exists:Effect"
	// ("" effect: all).
	Tolerations []string
	// RuntimeClass of the pods ("": the cluster's default).
	RuntimeClass string
	// UIDRange is the uids pods run as, one each: "FIRST-LAST" or one uid
	// for all (default 1000000000-1999999999).
	UIDRange string
	// AllowNetwork keeps the pods' network (only a NetworkPolicy the
	// cluster enforces then limits it); by default an init container
	// takes every interface but loopback down.
	AllowNetwork bool
	// WorkspaceSize, when set ("10Gi"), gives each session a
	// PersistentVolumeClaim of that size as its workspace (StorageClass,
	// "" the default class); otherwise an emptyDir filled from the store.
	WorkspaceSize string
	StorageClass  string
}

// options parses the configuration into the kubernetes backend's options
// (the server adds its node, limits, warm pool and the rest).
func (kc KubernetesConfig) options() (kubernetes.Options, error) {
	opts := kubernetes.Options{
		Kubeconfig: kc.Kubeconfig, Namespace: kc.Namespace,
		PullPolicy: corev1.PullPolicy(kc.PullPolicy), ServiceAccount: kc.ServiceAccount,
		RuntimeClass: kc.RuntimeClass, AllowNetwork: kc.AllowNetwork, StorageClass: kc.StorageClass,
	}
	opts.Image = kc.Image
	var err error
	switch opts.PullPolicy {
	case "", corev1.PullNever, corev1.PullIfNotPresent, corev1.PullAlways:
	default:
		return opts, fmt.Errorf("kubernetes sandbox: pull policy %q: Never, IfNotPresent or Always", kc.PullPolicy)
	}
	if kc.WorkspaceSize != "" {
		if opts.WorkspaceSize, err = resource.ParseQuantity(kc.WorkspaceSize); err != nil {
			return opts, fmt.Errorf("kubernetes sandbox: workspace size %q: %w", kc.WorkspaceSize, err)
		}
	}
	if len(kc.NodeSelector) > 0 {
		opts.NodeSelector = map[string]string{}
		for _, kv := range kc.NodeSelector {
			k, v, ok := strings.Cut(kv, "=")
			if !ok || k == "" {
				return opts, fmt.Errorf("kubernetes sandbox: node selector %q: want key=value", kv)
			}
			opts.NodeSelector[k] = v
		}
	}
	for _, t := range kc.Tolerations {
		tol, err := parseToleration(t)
		if err != nil {
			return opts, fmt.Errorf("kubernetes sandbox: %w", err)
		}
		opts.Tolerations = append(opts.Tolerations, tol)
	}
	if kc.UIDRange != "" {
		first, last, ok := strings.Cut(kc.UIDRange, "-")
		if !ok {
			last = first
		}
		a, err1 := strconv.ParseInt(first, 10, 64)
		b, err2 := strconv.ParseInt(last, 10, 64)
		if err1 != nil || err2 != nil || a <= 0 || b < a {
			return opts, fmt.Errorf("kubernetes sandbox: uid range %q: want FIRST-LAST or one uid, not root", kc.UIDRange)
		}
		opts.UIDBase, opts.UIDCount = a, b-a+1
	}
	return opts, nil
}

// parseToleration reads "key[=value]:Effect" or "key:Exists[:Effect]".
func parseToleration(s string) (corev1.Toleration, error) {
	parts := strings.Split(s, ":")
	if len(parts) > 3 || parts[0] == "" {
		return corev1.Toleration{}, fmt.Errorf("toleration %q: want key[=value]:Effect or key:Exists[:Effect]", s)
	}
	t := corev1.Toleration{Operator: corev1.TolerationOpEqual}
	t.Key, t.Value, _ = strings.Cut(parts[0], "=")
	rest := parts[1:]
	if len(rest) > 0 && rest[0] == string(corev1.TolerationOpExists) {
		t.Operator, t.Value = corev1.TolerationOpExists, ""
		rest = rest[1:]
	}
	if len(rest) > 1 {
		return corev1.Toleration{}, fmt.Errorf("toleration %q: want key[=value]:Effect or key:Exists[:Effect]", s)
	}
	if len(rest) == 1 {
		switch e := corev1.TaintEffect(rest[0]); e {
		case "", corev1.TaintEffectNoSchedule, corev1.TaintEffectPreferNoSchedule, corev1.TaintEffectNoExecute:
			t.Effect = e
		default:
			return corev1.Toleration{}, fmt.Errorf("toleration %q: effect %q: NoSchedule, PreferNoSchedule or NoExecute", s, rest[0])
		}
	}
	return t, nil
}
