package kubernetes

import (
	"context"
	"encoding/json"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/agentd/agentd/internal/sandbox/container"
)

// Collect deletes this server's pods (label agentd.node) that no handle
// in keep names and that this process did not start — those of sessions
// deleted or settled while the server was down, and warm pods of a
// previous run — and the folders here of pods that are no more. Then it
// starts the warm pools. Workspace claims are the sessions' and are left
// to DeleteWorkspace and CollectWorkspaces.
func (p *Provider) Collect(ctx context.Context, keep []json.RawMessage) error {
	kept := container.Kept(keep, func(h Handle) []string { return []string{h.Pod} })
	list, err := p.cs.CoreV1().Pods(p.opts.Namespace).List(ctx, metav1.ListOptions{
		LabelSelector: LabelManaged + "=true," + LabelNode + "=" + labelValue(p.opts.Node),
	})
	if err != nil {
		return fmt.Errorf("kubernetes sandbox: list pods: %w", err)
	}
	removed := 0
	left := map[string]bool{}
	for _, pod := range list.Items {
		if kept[pod.Name] || p.live.Has(pod.Name) {
			left[pod.Name] = true
			continue
		}
		if err := p.deletePod(ctx, pod.Name, 0); err != nil {
			p.log.Error("delete pod of no session", "pod", pod.Name, "err", err)
			left[pod.Name] = true
			continue
		}
		removed++
		p.log.Info("pod of no session removed", "pod", pod.Name, "session", pod.Annotations["agentd.session"], "pool", pod.Labels[LabelPool])
	}
	container.RemoveStaleDirs(p.opts.RunDir, func(name string) bool { return left[name] || kept[name] || p.live.Has(name) })
	p.log.Info("kubernetes sandbox: leftovers collected", "pods", len(list.Items), "removed", removed)
	p.pools.Fill()
	return nil
}

// RemoveWorkspace deletes a purged session's workspace claim, if it has
// one (sandbox.WorkspaceCollector).
func (p *Provider) RemoveWorkspace(ctx context.Context, sessionID string) error {
	if p.opts.WorkspaceSize.IsZero() {
		return nil
	}
	err := p.cs.CoreV1().PersistentVolumeClaims(p.opts.Namespace).Delete(ctx, claimName(sessionID), metav1.DeleteOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("delete workspace claim: %w", err)
	}
	return nil
}

// CollectWorkspaces deletes this server's workspace claims whose session
// is not in sessions: sessions purged while the server was down.
func (p *Provider) CollectWorkspaces(ctx context.Context, sessions []string) error {
	exists := map[string]bool{}
	for _, id := range sessions {
		exists[id] = true
	}
	list, err := p.cs.CoreV1().PersistentVolumeClaims(p.opts.Namespace).List(ctx, metav1.ListOptions{
		LabelSelector: LabelManaged + "=true," + LabelNode + "=" + labelValue(p.opts.Node),
	})
	if err != nil {
		return fmt.Errorf("kubernetes sandbox: list workspace claims: %w", err)
	}
	for _, pvc := range list.Items {
		id := pvc.Annotations["agentd.session"]
		if id == "" || exists[id] {
			continue
		}
		err := p.cs.CoreV1().PersistentVolumeClaims(p.opts.Namespace).Delete(ctx, pvc.Name, metav1.DeleteOptions{})
		if err != nil && !apierrors.IsNotFound(err) {
			p.log.Error("delete workspace claim of no session", "claim", pvc.Name, "err", err)
			continue
		}
		p.log.Info("workspace claim of no session removed", "claim", pvc.Name, "session", id)
	}
	return nil
}
