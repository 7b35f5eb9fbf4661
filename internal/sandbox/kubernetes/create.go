package kubernetes

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/agentd/agentd/internal/sandbox/container"
	"github.com/agentd/agentd/sandbox"
)

// Create starts a pod for spec, or claims one started ahead when one of
// its kind is ready (the workspace of an emptyDir pod is always new: the
// session layer fills it).
func (p *Provider) Create(ctx context.Context, spec sandbox.Spec) (sandbox.Environment, error) {
	sh := p.def.For(spec)
	env, err := p.pools.Claim(ctx, sh, spec.Profile, nil,
		func(w *box) (sandbox.Environment, error) { return p.claim(ctx, spec, w) })
	if err != nil {
		return nil, fmt.Errorf("create pod: %w", err)
	}
	if env != nil {
		return env, nil
	}
	b, err := p.startPod(ctx, container.NewName(), sh, spec.SessionID)
	if err != nil {
		return nil, fmt.Errorf("create pod: %w", err)
	}
	e, err := p.bind(ctx, spec, b)
	if err != nil {
		p.remove(context.WithoutCancel(ctx), b)
		return nil, fmt.Errorf("create pod: %w", err)
	}
	e.fresh = b.claim == "" || b.newClaim
	p.log.Info("pod started", "session", spec.SessionID, "pod", b.name)
	return e, nil
}

// claim makes a warm pod spec's: it is labelled as the session's (so it
// is found by session) and its executor bound to the session.
func (p *Provider) claim(ctx context.Context, spec sandbox.Spec, w *box) (sandbox.Environment, error) {
	patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{
		"labels":      map[string]any{LabelPool: nil, LabelSession: labelValue(spec.SessionID)},
		"annotations": map[string]any{"agentd.pool": nil, "agentd.session": spec.SessionID},
	}})
	if _, err := p.cs.CoreV1().Pods(p.opts.Namespace).Patch(ctx, w.name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		return nil, fmt.Errorf("label the pod: %w", err)
	}
	e, err := p.bind(ctx, spec, w)
	if err != nil {
		return nil, err
	}
	e.fresh = true
	p.log.Info("warm pod claimed", "session", spec.SessionID, "pod", w.name)
	return e, nil
}

// startWarm is the warm pool's Start: a pod for no session yet.
func (p *Provider) startWarm(ctx context.Context, sh container.Shape) (*box, error) {
	return p.startPod(ctx, container.NewName(), sh, "")
}

// stopWarm is the warm pool's Stop: the pod goes.
func (p *Provider) stopWarm(ctx context.Context, _ container.Shape, w *box) {
	p.remove(ctx, w)
}

// errPoolWithClaims: warm pods have no session, hence no claim.
var errPoolWithClaims = errors.New("a warm pool needs emptyDir workspaces (no WorkspaceSize)")
