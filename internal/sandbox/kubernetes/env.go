package kubernetes

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/agentd/agentd/internal/sandbox/container"
	"github.com/agentd/agentd/internal/sandbox/executor"
	"github.com/agentd/agentd/sandbox"
)

// Environment is a session's pod: the executor backend's environment
// (everything but Terminate, Release and Handle) reached through the pod's
// port-forward, plus the pod around it and the model proxy's tunnels.
// Safe for concurrent use.
type Environment struct {
	*container.Environment
	p       *Provider
	box     box
	tunnels *tunnels // nil without a model proxy
	fresh   bool
}

var (
	_ sandbox.Environment    = (*Environment)(nil)
	_ sandbox.HandleReporter = (*Environment)(nil)
	_ sandbox.Attacher       = (*Environment)(nil)
	_ sandbox.WatchSyncer    = (*Environment)(nil)
	_ sandbox.Releaser       = (*Environment)(nil)
)

// Handle is what Environment.Handle records and Recover reads.
type Handle struct {
	Pod       string    `json:"pod"`
	UID       types.UID `json:"uid"` // the pod object's
	Namespace string    `json:"namespace"`
	Claim     string    `json:"claim,omitempty"` // the workspace's claim, if any
	// Executor is the executor backend's handle (start time, folder).
	Executor json.RawMessage `json:"executor"`
}

// Handle returns {pod, uid, namespace, claim, executor}.
func (e *Environment) Handle() json.RawMessage {
	b, _ := json.Marshal(Handle{Pod: e.box.name, UID: e.box.uid, Namespace: e.p.opts.Namespace, Claim: e.box.claim, Executor: e.Environment.Handle()})
	return b
}

// Pod is the pod's name.
func (e *Environment) Pod() string { return e.box.name }

// FreshWorkspace reports whether the workspace is new to this
// environment and must be filled (sandbox.FreshWorkspacer): always for an
// emptyDir, for a claim when it was made for this pod.
func (e *Environment) FreshWorkspace() bool { return e.fresh }

// bind connects the executor of b (reached through its port-forward) as
// spec's environment, and starts its model proxy tunnels.
func (p *Provider) bind(ctx context.Context, spec sandbox.Spec, b *box) (*Environment, error) {
	if b.fwd == nil || b.fwd.closed() {
		if b.fwd != nil {
			b.fwd.Close()
		}
		f, err := p.dialPod(ctx, b.name)
		if err != nil {
			return nil, err
		}
		b.fwd = f
	}
	if p.opts.ModelProxy != nil {
		// The model proxy's socket goes there (a server re-attaching on
		// another host, or after its run folder was cleaned, has none).
		if err := os.MkdirAll(container.ProxyDir(b.dir), 0o700); err != nil {
			return nil, err
		}
	}
	inner, err := p.exec.ConnectTransport(ctx, spec, executor.Handle{Dir: b.dir, StartedAt: b.startedAt}, podTransport{p: p, box: b})
	if err != nil {
		return nil, err
	}
	log := p.log.With("pod", b.name)
	e := &Environment{p: p, box: *b}
	e.Environment = container.NewEnvironment(inner, e.remove, e.release, log, "pod deleted")
	if sock := p.exec.ProxySocket(b.dir); sock != "" {
		e.tunnels = startTunnels(b.fwd, sock, log)
	}
	p.mu.Lock()
	p.envs[e] = struct{}{}
	p.mu.Unlock()
	return e, nil
}

// disconnect closes the connection to the pod (tunnels, executor
// protocol) and leaves the pod running: the server is shutting down.
func (e *Environment) disconnect() {
	if e.tunnels != nil {
		e.tunnels.stop()
	}
	e.box.fwd.Close()
}

// release is Release's end, once the executor's connection is closed:
// the model proxy's tunnels and the connection to the pod are closed
// too; the pod goes on, another server's.
func (e *Environment) release() {
	e.p.mu.Lock()
	delete(e.p.envs, e)
	e.p.mu.Unlock()
	e.disconnect()
	e.p.live.Remove(e.box.name)
}

// Terminate stops the model proxy's tunnels, shuts the executor down (it
// kills every process), waits for it to end, and deletes the pod and the
// environment's folders here. The workspace claim, if any, stays (the
// session's). An environment already gone is not an error; later calls
// return the first one's result.
func (e *Environment) Terminate(ctx context.Context) error {
	e.p.mu.Lock()
	delete(e.p.envs, e)
	e.p.mu.Unlock()
	if e.tunnels != nil {
		e.tunnels.stop() // idempotent
	}
	return e.Environment.Terminate(ctx)
}

// remove is Terminate's end, once the executor has ended: the connection
// to the pod is closed and the pod and its folders here are deleted.
func (e *Environment) remove(ctx context.Context) error {
	e.box.fwd.Close()
	var err error
	if derr := e.p.deletePod(ctx, e.box.name, 0); derr != nil {
		err = fmt.Errorf("delete pod %s: %w", e.box.name, derr)
	} else {
		e.p.live.Remove(e.box.name)
	}
	container.RemoveDirs(e.p.opts.RunDir, e.box.name)
	return err
}

// Recover re-attaches to the pod handle names: sandbox.ErrGone when it
// is gone, replaced, ended or restarted, or its executor no longer
// answers (what is left of it is deleted then).
func (p *Provider) Recover(ctx context.Context, spec sandbox.Spec, handle json.RawMessage) (sandbox.Environment, error) {
	var h Handle
	if err := json.Unmarshal(handle, &h); err != nil {
		return nil, fmt.Errorf("recover pod: bad handle: %w", err)
	}
	var xh executor.Handle
	if err := json.Unmarshal(h.Executor, &xh); err != nil || h.Pod == "" || filepath.Base(h.Pod) != h.Pod {
		return nil, fmt.Errorf("recover pod: bad handle: %s", handle)
	}
	if h.Namespace != "" && h.Namespace != p.opts.Namespace {
		return nil, fmt.Errorf("recover pod %s: it is in namespace %s, this server uses %s", h.Pod, h.Namespace, p.opts.Namespace)
	}
	b := &box{name: h.Pod, uid: h.UID, claim: h.Claim, dir: filepath.Join(p.opts.RunDir, h.Pod), startedAt: xh.StartedAt}
	gone := func(why string, args ...any) (sandbox.Environment, error) {
		if b.fwd != nil {
			b.fwd.Close()
			b.fwd = nil
		}
		p.remove(context.WithoutCancel(ctx), b)
		return nil, fmt.Errorf("recover pod %s: %w", h.Pod, errGoneWhy(why, args...))
	}
	pod, err := p.cs.CoreV1().Pods(p.opts.Namespace).Get(ctx, h.Pod, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return gone("no such pod")
	case err != nil:
		return nil, fmt.Errorf("recover pod %s: %w", h.Pod, err)
	case pod.UID != h.UID:
		b.uid = ""
		p.live.Remove(h.Pod)
		return nil, fmt.Errorf("recover pod %s: %w", h.Pod, errGoneWhy("another pod of that name (uid %s, was %s)", pod.UID, h.UID))
	case pod.DeletionTimestamp != nil:
		return gone("pod being deleted")
	case executorEnded(pod):
		return gone("pod %s: the executor ended or was restarted", pod.Status.Phase)
	}
	p.live.Add(h.Pod)
	cctx, cancel := context.WithTimeout(ctx, p.opts.StartTimeout)
	defer cancel()
	f, err := p.dialPod(cctx, h.Pod)
	if err != nil {
		if ctx.Err() != nil {
			p.live.Remove(h.Pod)
			return nil, fmt.Errorf("recover pod %s: %w", h.Pod, err)
		}
		return gone("%v", err)
	}
	b.fwd = f
	e, err := p.bind(ctx, spec, b)
	if err != nil {
		if !container.Gone(ctx, err) {
			f.Close()
			p.live.Remove(h.Pod)
			return nil, fmt.Errorf("recover pod %s: %w", h.Pod, err)
		}
		return gone("%v", err)
	}
	p.log.Info("pod re-attached", "session", spec.SessionID, "pod", h.Pod)
	return e, nil
}
