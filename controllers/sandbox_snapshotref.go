package controllers

import (
	"context"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	sandboxv1 "github.com/getsentry/sandbox-controller/api/v1alpha1"
)

// +kubebuilder:rbac:groups=sandbox.sentry.io,resources=sandboxsnapshots,verbs=get;list;watch

// resolveSource returns the source to create the Vercel sandbox from. A
// snapshotRef resolves to its SandboxSnapshot's Vercel snapshot id once that is
// ready to use; until then ok is false and the Sandbox reports Ready=False with
// reason WaitingForSnapshot (a snapshot becoming ready wakes the Sandbox, see
// snapshotRefRequests).
func (r *SandboxReconciler) resolveSource(ctx context.Context, sbx *sandboxv1.Sandbox) (src sandboxv1.SandboxSource, ok bool, err error) {
	ref := sbx.Spec.Source.SnapshotRef
	if ref == nil {
		return sbx.Spec.Source, true, nil
	}
	snap := &sandboxv1.SandboxSnapshot{}
	err = r.Get(ctx, types.NamespacedName{Namespace: sbx.Namespace, Name: ref.Name}, snap)
	var why string
	switch {
	case apierrors.IsNotFound(err):
		why = fmt.Sprintf("Waiting for SandboxSnapshot %q, which does not exist", ref.Name)
	case err != nil:
		return src, false, err
	case !snap.Status.ReadyToUse || snap.Status.SnapshotID == "":
		why = fmt.Sprintf("Waiting for SandboxSnapshot %q to be ready to use (phase %s)", ref.Name, snap.Status.Phase)
	}
	if why != "" {
		setReady(sbx, readiness{sandboxv1.SandboxPending, metav1.ConditionFalse, sandboxv1.ReasonWaitingForSnapshot, why})
		return src, false, nil
	}
	id := snap.Status.SnapshotID
	return sandboxv1.SandboxSource{SnapshotID: &id}, true, nil
}

// snapshotRefRequests maps a SandboxSnapshot that is ready to use to the
// Sandboxes of its namespace that boot from it and have not been created yet.
func (r *SandboxReconciler) snapshotRefRequests(ctx context.Context, obj client.Object) []reconcile.Request {
	snap, ok := obj.(*sandboxv1.SandboxSnapshot)
	if !ok || !snap.Status.ReadyToUse {
		return nil
	}
	list := &sandboxv1.SandboxList{}
	if err := r.List(ctx, list, client.InNamespace(snap.Namespace), client.MatchingFields{indexSnapshotRef: snap.Name}); err != nil {
		return nil
	}
	return requestsFor(list.Items, func(s *sandboxv1.Sandbox) bool { return s.Status.SessionID == "" })
}
