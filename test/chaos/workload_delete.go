package chaos

// The workload's deletions: single objects within the constraints of
// docs/dev/chaos.md, and whole namespaces.

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	sandboxv1 "github.com/getsentry/sandbox-controller/api/v1alpha1"
)

// deleteObject deletes a random workload object of ns, within the
// constraints of docs/dev/chaos.md: no SandboxSnapshot that a Sandbox or
// SandboxFork boots from, no Sandbox with a capture still to be taken.
func (w *workload) deleteObject(ctx context.Context, ns *nsState) error {
	var obj client.Object
	var set map[string]bool
	switch k := w.rng.IntN(10); {
	case k < 5:
		set, obj = ns.sandboxes, &sandboxv1.Sandbox{}
	case k < 8:
		set, obj = ns.snapshots, &sandboxv1.SandboxSnapshot{}
	default:
		set, obj = ns.forks, &sandboxv1.SandboxFork{}
	}
	name := pick(w.rng, set)
	if name == "" {
		w.count(opSkipped)
		return nil
	}
	if err := w.c.Get(ctx, types.NamespacedName{Namespace: ns.name, Name: name}, obj); err != nil {
		if apierrors.IsNotFound(err) {
			delete(set, name)
		}
		return err
	}
	switch o := obj.(type) {
	case *sandboxv1.Sandbox:
		if busy, err := w.captureNeeds(ctx, ns.name, name); err != nil || busy {
			w.count(opSkipped)
			return err
		}
	case *sandboxv1.SandboxSnapshot:
		if used, err := w.snapshotInUse(ctx, ns.name, o.Name); err != nil || used {
			w.count(opSkipped)
			return err
		}
	}
	d := recordOf(obj)
	if err := w.c.Delete(ctx, obj, client.Preconditions{UID: ptr.To(obj.GetUID())}); err != nil {
		return w.refusal(opDelete, name, err)
	}
	delete(set, name)
	w.deleted = append(w.deleted, d)
	w.did(opDelete, d.key())
	return nil
}

// snapshotInUse reports whether a Sandbox or SandboxFork of ns names the
// SandboxSnapshot in spec.source.snapshotRef.
func (w *workload) snapshotInUse(ctx context.Context, ns, name string) (bool, error) {
	sbxs := &sandboxv1.SandboxList{}
	if err := w.c.List(ctx, sbxs, client.InNamespace(ns)); err != nil {
		return false, err
	}
	for _, s := range sbxs.Items {
		if ref := s.Spec.Source.SnapshotRef; ref != nil && ref.Name == name {
			return true, nil
		}
	}
	forks := &sandboxv1.SandboxForkList{}
	if err := w.c.List(ctx, forks, client.InNamespace(ns)); err != nil {
		return false, err
	}
	for _, f := range forks.Items {
		if ref := f.Spec.Source.SnapshotRef; ref != nil && ref.Name == name {
			return true, nil
		}
	}
	// A pool whose template boots from it waits for it forever once it is
	// gone (WaitingForSnapshot).
	pools := &sandboxv1.SandboxPoolList{}
	if err := w.c.List(ctx, pools, client.InNamespace(ns)); err != nil {
		return false, err
	}
	for _, p := range pools.Items {
		if ref := p.Spec.Template.Spec.Source.SnapshotRef; ref != nil && ref.Name == name {
			return true, nil
		}
	}
	return false, nil
}

func recordOf(obj client.Object) deletedObject {
	d := deletedObject{namespace: obj.GetNamespace(), name: obj.GetName(), uid: obj.GetUID()}
	switch o := obj.(type) {
	case *sandboxv1.Sandbox:
		d.kind, d.vercelName = "Sandbox", o.Status.VercelName
		if poolOf(o) != "" {
			d.kind = kindMember
		}
	case *sandboxv1.SandboxPool:
		d.kind = "SandboxPool"
	case *sandboxv1.SandboxSnapshot:
		d.kind, d.snapshotID = "SandboxSnapshot", o.Status.SnapshotID
	case *sandboxv1.SandboxFork:
		d.kind = "SandboxFork"
	case *corev1.Namespace:
		d.kind = "Namespace"
	}
	return d
}

// replaceNamespace deletes a namespace with everything in it (the
// namespace controller deletes the objects, the finalizers run) and creates
// a fresh one, keeping the number of namespaces.
func (w *workload) replaceNamespace(ctx context.Context, ns *nsState) error {
	// What the namespace holds now, fork children and captures included,
	// and whatever leaked into its events and status so far.
	w.h.scanCluster(ctx)
	var recs []deletedObject
	sbxs := &sandboxv1.SandboxList{}
	snaps := &sandboxv1.SandboxSnapshotList{}
	forks := &sandboxv1.SandboxForkList{}
	pools := &sandboxv1.SandboxPoolList{}
	for _, l := range []client.ObjectList{sbxs, snaps, forks, pools} {
		if err := w.c.List(ctx, l, client.InNamespace(ns.name)); err != nil {
			return err
		}
	}
	for i := range sbxs.Items {
		recs = append(recs, recordOf(&sbxs.Items[i]))
	}
	for i := range snaps.Items {
		recs = append(recs, recordOf(&snaps.Items[i]))
	}
	for i := range forks.Items {
		recs = append(recs, recordOf(&forks.Items[i]))
	}
	for i := range pools.Items {
		recs = append(recs, recordOf(&pools.Items[i]))
	}
	nsObj := &corev1.Namespace{}
	if err := w.c.Get(ctx, types.NamespacedName{Name: ns.name}, nsObj); err != nil {
		return err
	}
	recs = append(recs, recordOf(nsObj))
	if err := w.c.Delete(ctx, nsObj); err != nil {
		return w.refusal(opDeleteNamespace, ns.name, err)
	}
	w.deleted = append(w.deleted, recs...)
	for i, n := range w.nss {
		if n == ns {
			w.nss = append(w.nss[:i], w.nss[i+1:]...)
			break
		}
	}
	w.did(opDeleteNamespace, fmt.Sprintf("%s (%d objects)", ns.name, len(recs)-1))
	return w.createNamespace(ctx)
}
