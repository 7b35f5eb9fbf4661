package kubernetes

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/utils/ptr"

	"github.com/agentd/agentd/internal/executor/rpc"
	"github.com/agentd/agentd/internal/sandbox/container"
	"github.com/agentd/agentd/internal/sandbox/executor"
)

// box is a started pod whose executor answered ping, not yet bound to a
// session's Environment (or started ahead, for no session yet).
type box struct {
	name      string
	uid       types.UID // the pod object's
	claim     string    // the workspace's PersistentVolumeClaim, if any
	newClaim  bool      // made for this pod: the workspace is new
	dir       string    // the environment's folder here (model proxy socket)
	startedAt time.Time // the executor's
	fwd       *forwarder
}

// Name is the pod's name (also its folders' under RunDir).
func (b *box) Name() string { return b.name }

// newUID picks the pod's uid from the configured range: at random, or,
// for a pod on a session's claim, the session's own (a hash of it), so
// that the files earlier pods made in the claim are the next one's. The
// pod's fsGroup alone does not ensure that: a volume still mounted for the
// previous pod (deleted with grace 0, its teardown not done yet) keeps
// its group on some volume types (local), and hostPath gets none.
func (p *Provider) newUID(claimSession string) int64 {
	if p.opts.UIDCount == 1 {
		return p.opts.UIDBase
	}
	var b [8]byte
	if claimSession != "" {
		h := sha256.Sum256([]byte("agentd-uid\x00" + claimSession))
		copy(b[:], h[:])
	} else {
		_, _ = rand.Read(b[:])
	}
	return p.opts.UIDBase + int64(binary.LittleEndian.Uint64(b[:])%uint64(p.opts.UIDCount))
}

// claimName is the PersistentVolumeClaim of a session's workspace.
func claimName(session string) string {
	return "agentd-ws-" + labelValue(strings.ToLower(session))
}

// startPod creates a pod (and, with WorkspaceSize, the session's claim if
// missing) and waits until its executor answers.
func (p *Provider) startPod(ctx context.Context, name string, sh container.Shape, session string) (*box, error) {
	b := &box{name: name, dir: filepath.Join(p.opts.RunDir, name)}
	p.live.Add(name) // Collect leaves it alone from now on
	ok := false
	defer func() {
		if !ok {
			p.remove(context.WithoutCancel(ctx), b)
		}
	}()
	if p.opts.ModelProxy != nil {
		// The executor backend serves the model proxy on a socket in
		// <dir>.mp; the folder itself holds nothing.
		if err := os.Mkdir(b.dir, 0o700); err != nil {
			return nil, err
		}
		if err := os.Mkdir(container.ProxyDir(b.dir), 0o700); err != nil {
			return nil, err
		}
	}
	if session != "" && !p.opts.WorkspaceSize.IsZero() {
		b.claim = claimName(session)
		created, err := p.ensureClaim(ctx, b.claim, session)
		if err != nil {
			return nil, err
		}
		b.newClaim = created
	}
	pod := p.podSpec(name, sh, session, b.claim)
	t0 := time.Now()
	created, err := p.cs.CoreV1().Pods(p.opts.Namespace).Create(ctx, pod, metav1.CreateOptions{})
	if err != nil {
		return nil, fmt.Errorf("create pod: %w", err)
	}
	b.uid = created.UID
	if err := p.waitRunning(ctx, name); err != nil {
		return nil, err
	}
	running := time.Since(t0)
	if err := p.waitExecutor(ctx, b); err != nil {
		return nil, err
	}
	p.log.Debug("pod ready", "pod", name, "runningMs", running.Milliseconds(), "readyMs", time.Since(t0).Milliseconds())
	ok = true
	return b, nil
}

// podSpec is a pod: the executor as its main process under tini, as an
// unprivileged uid of its own, no capabilities, a read-only root, the
// workspace, /tmp and the spool as volumes, the limits; an init container
// that takes the network down and writes passwd and group for the uid.
func (p *Provider) podSpec(name string, sh container.Shape, session, claim string) *corev1.Pod {
	claimSession := ""
	if claim != "" {
		claimSession = session
	}
	uid := p.newUID(claimSession)
	execSession := session
	if execSession == "" {
		execSession = name // a warm pod: its name, for the executor's logs
	}
	argv := []string{tini, "--", "agentd", "executor",
		"--listen-tcp", "127.0.0.1:" + strconv.Itoa(executorPort),
		"--workspace", workspaceDir,
		"--session", execSession,
		"--spool-dir", runDir,
		"--peer-uid", "0",
	}
	argv = append(argv, sh.ExecutorArgs(p.opts.Nice, p.opts.SpoolBytes)...)
	if p.opts.ModelProxy != nil {
		argv = append(argv, "--model-proxy-tunnel", "127.0.0.1:"+strconv.Itoa(tunnelPort))
	}
	limits := corev1.ResourceList{}
	requests := corev1.ResourceList{}
	for k, v := range p.opts.Requests {
		requests[k] = v
	}
	if m := sh.Limits.MemoryBytes; m > 0 {
		limits[corev1.ResourceMemory] = *resource.NewQuantity(m, resource.BinarySI)
		if r, ok := requests[corev1.ResourceMemory]; ok && r.Value() > m {
			requests[corev1.ResourceMemory] = limits[corev1.ResourceMemory]
		}
	}
	if c := sh.Limits.CPUPercent; c > 0 {
		limits[corev1.ResourceCPU] = *resource.NewMilliQuantity(int64(c)*10, resource.DecimalSI)
		if r, ok := requests[corev1.ResourceCPU]; ok && r.MilliValue() > int64(c)*10 {
			requests[corev1.ResourceCPU] = limits[corev1.ResourceCPU]
		}
	}
	if n := sh.Limits.Pids; n > 0 {
		// RLIMIT_NPROC counts the uid's tasks on the node: the pod's own
		// uid makes it the pod's limit.
		argv = append(argv, "--nproc", strconv.FormatInt(n, 10))
	}
	labels := map[string]string{LabelManaged: "true", LabelNode: labelValue(p.opts.Node)}
	annotations := map[string]string{"agentd.node": p.opts.Node}
	if session != "" {
		labels[LabelSession] = labelValue(session)
		annotations["agentd.session"] = session
	} else {
		labels[LabelPool] = poolLabel(sh)
		annotations["agentd.pool"] = sh.String()
	}
	ws := corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}
	if claim != "" {
		ws = corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: claim}}
	}
	mem := corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{Medium: corev1.StorageMediumMemory}}
	noPriv := ptr.To(false)
	initSec := &corev1.SecurityContext{
		RunAsUser: ptr.To(uid), RunAsGroup: ptr.To(uid), RunAsNonRoot: ptr.To(true),
		AllowPrivilegeEscalation: noPriv, ReadOnlyRootFilesystem: ptr.To(true),
		Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
	}
	initArgv := []string{"agentd", "executor", "pod-init", "--etc", etcDir, "--uid", strconv.FormatInt(uid, 10)}
	if !p.opts.AllowNetwork {
		// Root with CAP_NET_ADMIN and nothing else, for the time it takes
		// to set the pod's interfaces down; the executor's container
		// never has either.
		initArgv = append(initArgv, "--network-off")
		initSec.RunAsUser, initSec.RunAsGroup, initSec.RunAsNonRoot = ptr.To(int64(0)), ptr.To(int64(0)), ptr.To(false)
		initSec.Capabilities.Add = []corev1.Capability{"NET_ADMIN"}
	}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name: name, Namespace: p.opts.Namespace, Labels: labels, Annotations: annotations,
			OwnerReferences: []metav1.OwnerReference{p.owner},
		},
		Spec: corev1.PodSpec{
			RestartPolicy:                 corev1.RestartPolicyNever,
			AutomountServiceAccountToken:  ptr.To(false),
			EnableServiceLinks:            ptr.To(false),
			ServiceAccountName:            p.opts.ServiceAccount,
			NodeSelector:                  p.opts.NodeSelector,
			Tolerations:                   p.opts.Tolerations,
			TerminationGracePeriodSeconds: ptr.To(int64(5)),
			SecurityContext: &corev1.PodSecurityContext{
				SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
			},
			InitContainers: []corev1.Container{{
				Name: initName, Image: sh.Image, ImagePullPolicy: p.opts.PullPolicy,
				Command: initArgv, SecurityContext: initSec,
				VolumeMounts: []corev1.VolumeMount{{Name: "etc", MountPath: etcDir}},
				Resources:    corev1.ResourceRequirements{Limits: limits, Requests: requests},
			}},
			Containers: []corev1.Container{{
				Name: containerName, Image: sh.Image, ImagePullPolicy: p.opts.PullPolicy,
				Command: argv, WorkingDir: workspaceDir,
				Env: []corev1.EnvVar{{Name: "LANG", Value: "C.UTF-8"}, {Name: "HOME", Value: workspaceDir}},
				SecurityContext: &corev1.SecurityContext{
					RunAsUser: ptr.To(uid), RunAsGroup: ptr.To(uid), RunAsNonRoot: ptr.To(true),
					AllowPrivilegeEscalation: noPriv, ReadOnlyRootFilesystem: ptr.To(true),
					Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
				},
				Resources: corev1.ResourceRequirements{Limits: limits, Requests: requests},
				VolumeMounts: []corev1.VolumeMount{
					{Name: "workspace", MountPath: workspaceDir},
					{Name: "run", MountPath: runDir},
					{Name: "tmp", MountPath: "/tmp"},
					{Name: "vartmp", MountPath: "/var/tmp"},
					{Name: "etc", MountPath: "/etc/passwd", SubPath: "passwd", ReadOnly: true},
					{Name: "etc", MountPath: "/etc/group", SubPath: "group", ReadOnly: true},
				},
				TerminationMessagePolicy: corev1.TerminationMessageFallbackToLogsOnError,
			}},
			Volumes: []corev1.Volume{
				{Name: "workspace", VolumeSource: ws},
				{Name: "run", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
				{Name: "tmp", VolumeSource: mem},
				{Name: "vartmp", VolumeSource: mem},
				{Name: "etc", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
			},
		},
	}
	if p.opts.RuntimeClass != "" {
		pod.Spec.RuntimeClassName = ptr.To(p.opts.RuntimeClass)
	}
	if claim != "" {
		// The claim's files must be the pod's uid's, whichever uid made
		// them before.
		pod.Spec.SecurityContext.FSGroup = ptr.To(uid)
		pod.Spec.SecurityContext.FSGroupChangePolicy = ptr.To(corev1.FSGroupChangeOnRootMismatch)
	}
	return pod
}

// ensureClaim creates the session's workspace claim unless it exists; it
// reports whether it made it.
func (p *Provider) ensureClaim(ctx context.Context, name, session string) (bool, error) {
	pvcs := p.cs.CoreV1().PersistentVolumeClaims(p.opts.Namespace)
	if _, err := pvcs.Get(ctx, name, metav1.GetOptions{}); err == nil {
		return false, nil
	} else if !apierrors.IsNotFound(err) {
		return false, fmt.Errorf("workspace claim %s: %w", name, err)
	}
	pvc := &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{
			Name: name, Namespace: p.opts.Namespace,
			Labels:          map[string]string{LabelManaged: "true", LabelNode: labelValue(p.opts.Node), LabelSession: labelValue(session)},
			Annotations:     map[string]string{"agentd.session": session},
			OwnerReferences: []metav1.OwnerReference{p.owner},
		},
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			Resources:   corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: p.opts.WorkspaceSize}},
		},
	}
	if p.opts.StorageClass != "" {
		pvc.Spec.StorageClassName = ptr.To(p.opts.StorageClass)
	}
	if _, err := pvcs.Create(ctx, pvc, metav1.CreateOptions{}); err != nil {
		if apierrors.IsAlreadyExists(err) {
			return false, nil
		}
		return false, fmt.Errorf("workspace claim %s: %w", name, err)
	}
	return true, nil
}

// waitRunning waits until the pod's executor container runs. A pod that
// cannot start (image missing, init container failed, unschedulable past
// the start timeout) fails with what the pod's status says.
func (p *Provider) waitRunning(ctx context.Context, name string) error {
	ctx, cancel := context.WithTimeout(ctx, p.opts.StartTimeout)
	defer cancel()
	pods := p.cs.CoreV1().Pods(p.opts.Namespace)
	var last *corev1.Pod
	for {
		list, err := pods.List(ctx, metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("metadata.name", name).String()})
		if err != nil {
			return p.startFailed(name, last, fmt.Errorf("pod status: %w", err))
		}
		if len(list.Items) == 0 {
			return fmt.Errorf("pod %s: %w", name, errNoPod)
		}
		pod := &list.Items[0]
		last = pod
		if done, err := podRunning(pod); done {
			if err != nil {
				return p.startFailed(name, pod, err)
			}
			return nil
		}
		wctx, wcancel := context.WithCancel(ctx)
		w, err := pods.Watch(wctx, metav1.ListOptions{
			FieldSelector: fields.OneTermEqualSelector("metadata.name", name).String(), ResourceVersion: list.ResourceVersion,
		})
		if err != nil {
			wcancel()
			return p.startFailed(name, pod, fmt.Errorf("watch pod: %w", err))
		}
		stop := func() { w.Stop(); wcancel() }
		for ev := range w.ResultChan() {
			if ev.Type == watch.Deleted {
				stop()
				return fmt.Errorf("pod %s: deleted while starting: %w", name, errNoPod)
			}
			pod, ok := ev.Object.(*corev1.Pod)
			if !ok {
				continue
			}
			last = pod
			if done, err := podRunning(pod); done {
				stop()
				if err != nil {
					return p.startFailed(name, pod, err)
				}
				return nil
			}
		}
		stop()
		if ctx.Err() != nil {
			return p.startFailed(name, last, fmt.Errorf("pod not running within %v", p.opts.StartTimeout))
		}
		// The watch ended early: list again.
	}
}

// podRunning reports whether the pod's fate is known: its executor runs
// (nil), or it cannot (an error saying why).
func podRunning(pod *corev1.Pod) (bool, error) {
	switch pod.Status.Phase {
	case corev1.PodFailed, corev1.PodSucceeded:
		return true, fmt.Errorf("pod ended (%s): %s", pod.Status.Phase, pod.Status.Message)
	}
	for _, cs := range pod.Status.InitContainerStatuses {
		if t := cs.State.Terminated; t != nil && t.ExitCode != 0 {
			return true, fmt.Errorf("init container failed (exit %d, %s): %s", t.ExitCode, t.Reason, t.Message)
		}
		if w := cs.State.Waiting; w != nil && fatalWaiting(w.Reason) {
			return true, fmt.Errorf("init container cannot start (%s): %s", w.Reason, w.Message)
		}
	}
	for _, cs := range pod.Status.ContainerStatuses {
		if cs.Name != containerName {
			continue
		}
		if cs.State.Running != nil {
			return true, nil
		}
		if t := cs.State.Terminated; t != nil {
			return true, fmt.Errorf("executor exited at start (exit %d, %s): %s", t.ExitCode, t.Reason, t.Message)
		}
		if w := cs.State.Waiting; w != nil && fatalWaiting(w.Reason) {
			return true, fmt.Errorf("executor cannot start (%s): %s", w.Reason, w.Message)
		}
	}
	return false, nil
}

// fatalWaiting reports waiting reasons that will not pass by themselves.
func fatalWaiting(reason string) bool {
	switch reason {
	case "ErrImageNeverPull", "InvalidImageName", "CreateContainerConfigError", "CreateContainerError",
		"RunContainerError", "ImageInspectError", "ErrImagePull", "ImagePullBackOff":
		return true
	}
	return false
}

// startFailed adds what the pod's status and events say to err.
func (p *Provider) startFailed(name string, pod *corev1.Pod, err error) error {
	var why []string
	if pod != nil {
		for _, c := range pod.Status.Conditions {
			if c.Status != corev1.ConditionTrue && c.Message != "" {
				why = append(why, fmt.Sprintf("%s: %s", c.Type, c.Message))
			}
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	evs, lerr := p.cs.CoreV1().Events(p.opts.Namespace).List(ctx, metav1.ListOptions{
		FieldSelector: fields.OneTermEqualSelector("involvedObject.name", name).String(),
	})
	if lerr == nil {
		for _, ev := range evs.Items {
			if ev.Type == corev1.EventTypeWarning {
				why = append(why, ev.Reason+": "+ev.Message)
			}
		}
	}
	if len(why) > 0 {
		err = fmt.Errorf("%w (%s)", err, strings.Join(why, "; "))
	}
	if tail := p.logTail(name); tail != "" {
		err = fmt.Errorf("%w: %s", err, tail)
	}
	return fmt.Errorf("pod %s: %w", name, err)
}

// logTail is the end of the executor's log (its container's), for error
// messages.
func (p *Provider) logTail(name string) string {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	b, err := p.cs.CoreV1().Pods(p.opts.Namespace).GetLogs(name, &corev1.PodLogOptions{
		Container: containerName, TailLines: ptr.To(int64(20)), LimitBytes: ptr.To(int64(64 << 10)),
	}).DoRaw(ctx)
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

// waitExecutor opens the pod's port-forward connection and waits until the
// executor answers ping on it; it records the executor's start time.
func (p *Provider) waitExecutor(ctx context.Context, b *box) error {
	ctx, cancel := context.WithTimeout(ctx, p.opts.StartTimeout)
	defer cancel()
	var lastErr error
	for {
		if b.fwd == nil {
			f, err := p.dialPod(ctx, b.name)
			if err != nil {
				lastErr = err
			} else {
				b.fwd = f
			}
		}
		if b.fwd != nil {
			// Each try on its own clock: a stream the other end never
			// answers must not use up the start timeout.
			tctx, tcancel := context.WithTimeout(ctx, pingTry)
			ping, err := pingExecutor(tctx, b.fwd)
			tcancel()
			if err == nil {
				b.startedAt = ping.StartedAt
				return nil
			}
			if errors.Is(err, executor.ErrIncompatible) {
				return err
			}
			lastErr = err
			if b.fwd.closed() || errors.Is(err, context.DeadlineExceeded) {
				b.fwd.Close()
				b.fwd = nil
			}
		}
		select {
		case <-ctx.Done():
			return p.startFailed(b.name, nil, fmt.Errorf("executor did not answer within %v (last error: %v)", p.opts.StartTimeout, lastErr))
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// pingTry bounds one try of waitExecutor.
const pingTry = 3 * time.Second

// pingExecutor pings the executor once over a new stream.
func pingExecutor(ctx context.Context, f *forwarder) (rpc.PingResult, error) {
	rw, err := f.Dial(ctx)
	if err != nil {
		return rpc.PingResult{}, err
	}
	return container.Ping(ctx, rw, "rebuild the image")
}

// remove deletes a pod (killing what runs in it) and the environment's
// folders here. The workspace claim stays (the session's).
func (p *Provider) remove(ctx context.Context, b *box) {
	if b.fwd != nil {
		b.fwd.Close()
	}
	if err := p.deletePod(ctx, b.name, 0); err != nil {
		p.log.Error("delete pod", "pod", b.name, "err", err)
		return // the next Collect tries again
	}
	container.RemoveDirs(p.opts.RunDir, b.name)
	p.live.Remove(b.name)
}

// deletePod deletes a pod; a missing one is not an error.
func (p *Provider) deletePod(ctx context.Context, name string, grace int64) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	err := p.cs.CoreV1().Pods(p.opts.Namespace).Delete(ctx, name, metav1.DeleteOptions{
		GracePeriodSeconds: ptr.To(grace), PropagationPolicy: ptr.To(metav1.DeletePropagationBackground),
	})
	if err != nil && !apierrors.IsNotFound(err) {
		return err
	}
	return nil
}
