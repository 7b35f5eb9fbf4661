package kubernetes_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"os"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/agentd/agentd/internal/agentdtest"
	"github.com/agentd/agentd/internal/sandbox/kubernetes"
	"github.com/agentd/agentd/internal/sandbox/sandboxtest"
	"github.com/agentd/agentd/sandbox"
)

// The test cluster has no storage provisioner: staticVolume makes a
// PersistentVolume by hand, a "local" volume on a folder of this host (the
// kubelet runs here), of a storage class of the test's own, so that only
// the test's claim binds it. A local volume, unlike hostPath, gets the
// pod's fsGroup, as the volumes of a real provisioner do. It is deleted
// when the test ends (reclaim policy Retain: no deleter runs).
func staticVolume(t *testing.T, f *fixture, size string) (class string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	dir := t.TempDir()
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	nodes, err := f.kube.Admin.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil || len(nodes.Items) != 1 {
		t.Fatalf("the test cluster's nodes: %v (%d)", err, len(nodes.Items))
	}
	host := nodes.Items[0].Labels[corev1.LabelHostname]
	var rnd [4]byte
	rand.Read(rnd[:])
	class = "agentd-test-" + hex.EncodeToString(rnd[:])
	pv := &corev1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: class},
		Spec: corev1.PersistentVolumeSpec{
			Capacity:                      corev1.ResourceList{corev1.ResourceStorage: resource.MustParse(size)},
			AccessModes:                   []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			PersistentVolumeReclaimPolicy: corev1.PersistentVolumeReclaimRetain,
			StorageClassName:              class,
			PersistentVolumeSource:        corev1.PersistentVolumeSource{Local: &corev1.LocalVolumeSource{Path: dir}},
			NodeAffinity: &corev1.VolumeNodeAffinity{Required: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{
				MatchExpressions: []corev1.NodeSelectorRequirement{{Key: corev1.LabelHostname, Operator: corev1.NodeSelectorOpIn, Values: []string{host}}},
			}}}},
		},
	}
	if _, err := f.kube.Admin.CoreV1().PersistentVolumes().Create(ctx, pv, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// Registered after t.TempDir: runs before the folder is removed.
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		// A failed test's pods first: they hold the volume.
		for _, name := range agentdtest.KubePods(t, f.kube, f.opts.Node) {
			t.Errorf("pod left: %s", name)
			f.kube.Admin.CoreV1().Pods(f.kube.Namespace).Delete(ctx, name, metav1.DeleteOptions{GracePeriodSeconds: new(int64)})
		}
		pvs := f.kube.Admin.CoreV1().PersistentVolumes()
		if err := pvs.Delete(ctx, class, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			t.Errorf("delete the volume: %v", err)
			return
		}
		for {
			if _, err := pvs.Get(ctx, class, metav1.GetOptions{}); apierrors.IsNotFound(err) {
				return
			}
			if ctx.Err() != nil {
				t.Errorf("volume %s still there", class)
				return
			}
			time.Sleep(100 * time.Millisecond)
		}
	})
	return class
}

// With WorkspaceSize, a session's workspace is a claim that outlives its
// pods: a file written in the first pod is in the next one, which may
// write it (both run as the session's uid); RemoveWorkspace deletes the
// claim, CollectWorkspaces keeps those of live sessions and other nodes'.
func TestWorkspaceClaim(t *testing.T) {
	f := newFixture(t)
	class := staticVolume(t, f, "64Mi")
	mod := func(o *kubernetes.Options) {
		o.WorkspaceSize = resource.MustParse("16Mi")
		o.StorageClass = class
	}
	p := f.provider(mod)
	var rnd [4]byte
	rand.Read(rnd[:])
	sp := spec("pvc-" + hex.EncodeToString(rnd[:]))
	pvcs := f.kube.Admin.CoreV1().PersistentVolumeClaims(f.kube.Namespace)
	claim := func() (*corev1.PersistentVolumeClaim, bool) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		c, err := pvcs.Get(ctx, "agentd-ws-"+sp.SessionID, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return nil, false
		}
		if err != nil {
			t.Fatal(err)
		}
		return c, true
	}
	t.Cleanup(func() {
		if _, ok := claim(); ok {
			t.Errorf("claim left")
			pvcs.Delete(context.Background(), "agentd-ws-"+sp.SessionID, metav1.DeleteOptions{})
		}
	})

	start := func(wantFresh bool) (*kubernetes.Environment, kubernetes.Handle) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		env, err := p.Create(ctx, sp)
		if err != nil {
			t.Fatal(err)
		}
		e := env.(*kubernetes.Environment)
		var h kubernetes.Handle
		if err := json.Unmarshal(e.Handle(), &h); err != nil || h.Claim != "agentd-ws-"+sp.SessionID {
			t.Fatalf("handle %s: %v", e.Handle(), err)
		}
		if e.FreshWorkspace() != wantFresh {
			t.Fatalf("fresh workspace %v, want %v", e.FreshWorkspace(), wantFresh)
		}
		return e, h
	}

	e1, _ := start(true)
	c, ok := claim()
	if !ok || c.Status.Phase != corev1.ClaimBound || c.Spec.VolumeName != class || c.Labels[kubernetes.LabelNode] != f.opts.Node ||
		len(c.OwnerReferences) != 1 || c.OwnerReferences[0].Kind != "ConfigMap" {
		t.Fatalf("claim %+v %+v", c.ObjectMeta, c.Status)
	}
	if got := c.Spec.Resources.Requests[corev1.ResourceStorage]; got.Cmp(resource.MustParse("16Mi")) != 0 {
		t.Fatalf("claim requests %v", got.String())
	}
	out, errOut, st := sandboxtest.Shell(t, e1, "id -u; echo kept > kept.txt; mkdir sub && echo deep > sub/f")
	if !st.Success() {
		t.Fatalf("write in the claim: %+v %q %q", st, out, errOut)
	}
	uid1 := strings.TrimSpace(out)
	sandboxtest.Terminate(t, e1)
	waitGone(t, f, e1.Pod())
	if _, ok := claim(); !ok {
		t.Fatal("Terminate removed the claim")
	}

	// The same session's next pod: the same files, writable by its uid.
	e2, _ := start(false)
	if e2.Pod() == e1.Pod() {
		t.Fatalf("the same pod %s", e2.Pod())
	}
	if b, err := e2.ReadFile(context.Background(), "kept.txt"); err != nil || string(b) != "kept\n" {
		t.Fatalf("ReadFile in the next pod: %q %v", b, err)
	}
	out, errOut, st = sandboxtest.Shell(t, e2, "id -u; cat sub/f; echo more >> kept.txt && echo more >> sub/f && cat kept.txt")
	if !st.Success() || !strings.HasSuffix(out, "\ndeep\nkept\nmore\n") {
		t.Fatalf("the next pod's view of the claim: %+v %q %q", st, out, errOut)
	}
	// The session's uid: the volume may still be mounted for the first
	// pod, and then a local volume keeps its group (no fsGroup change).
	if uid2, _, _ := strings.Cut(out, "\n"); uid2 != uid1 {
		t.Fatalf("the next pod runs as %s, the first as %s", uid2, uid1)
	}
	sandboxtest.Terminate(t, e2)
	waitGone(t, f, e2.Pod())

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	// Collection keeps the claims of live sessions, and another node's
	// provider leaves this node's alone.
	if err := p.CollectWorkspaces(ctx, []string{"other", sp.SessionID}); err != nil {
		t.Fatal(err)
	}
	other := f.provider(func(o *kubernetes.Options) { mod(o); o.Node += "-other" })
	if err := other.CollectWorkspaces(ctx, nil); err != nil {
		t.Fatal(err)
	}
	if c, ok := claim(); !ok || c.DeletionTimestamp != nil {
		t.Fatal("CollectWorkspaces removed a live session's claim")
	}

	// The session purged: its claim goes, and nothing is left.
	var wc sandbox.WorkspaceCollector = p
	if err := wc.RemoveWorkspace(ctx, sp.SessionID); err != nil {
		t.Fatal(err)
	}
	for {
		if _, ok := claim(); !ok {
			break
		}
		if ctx.Err() != nil {
			t.Fatal("claim still there after RemoveWorkspace")
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err := wc.RemoveWorkspace(ctx, sp.SessionID); err != nil {
		t.Fatalf("RemoveWorkspace of a removed claim: %v", err)
	}
	if pv, err := f.kube.Admin.CoreV1().PersistentVolumes().Get(ctx, class, metav1.GetOptions{}); err != nil || pv.Status.Phase == corev1.VolumeBound {
		t.Fatalf("the volume after its claim went: %v %v", pv.Status.Phase, err)
	}
}

// A session whose claim cannot bind (no volume of its class) fails Create
// within the start timeout with the scheduler's reason, and leaves no pod;
// a warm pool cannot have claims.
func TestWorkspaceClaimRejects(t *testing.T) {
	f := newFixture(t)
	var rnd [4]byte
	rand.Read(rnd[:])
	class := "agentd-test-none-" + hex.EncodeToString(rnd[:])
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if p, err := kubernetes.New(ctx, func() kubernetes.Options {
		o := f.opts
		o.WarmPool, o.WorkspaceSize = 1, resource.MustParse("1Mi")
		return o
	}()); err == nil || !strings.Contains(err.Error(), "warm pool") {
		if p != nil {
			p.Close(ctx)
		}
		t.Fatalf("a warm pool with claims: %v", err)
	}

	p := f.provider(func(o *kubernetes.Options) {
		o.WorkspaceSize, o.StorageClass, o.StartTimeout = resource.MustParse("1Mi"), class, 5*time.Second
	})
	sp := spec("pvc-unbound-" + hex.EncodeToString(rnd[:]))
	if _, err := p.Create(ctx, sp); err == nil || !strings.Contains(err.Error(), "not running within") || !strings.Contains(err.Error(), "PersistentVolumeClaim") {
		t.Fatalf("create with an unbindable claim: %v", err)
	} else {
		t.Logf("%v", err)
	}
	for deadline := time.Now().Add(30 * time.Second); len(agentdtest.KubePods(t, f.kube, f.opts.Node)) > 0; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("pods left: %v", agentdtest.KubePods(t, f.kube, f.opts.Node))
		}
	}
	// The claim is the session's, left for RemoveWorkspace.
	if err := p.RemoveWorkspace(ctx, sp.SessionID); err != nil {
		t.Fatal(err)
	}
	pvcs := f.kube.Admin.CoreV1().PersistentVolumeClaims(f.kube.Namespace)
	for {
		if _, err := pvcs.Get(ctx, "agentd-ws-"+sp.SessionID, metav1.GetOptions{}); apierrors.IsNotFound(err) {
			break
		}
		if ctx.Err() != nil {
			t.Fatal("claim still there after RemoveWorkspace")
		}
		time.Sleep(100 * time.Millisecond)
	}
}
