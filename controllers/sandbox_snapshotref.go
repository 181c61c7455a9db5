package controllers

import (
	"context"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	sandboxv1 "github.com/getsentry/sandbox-controller/api/v1alpha1"
)

// +kubebuilder:rbac:groups=sandbox.sentry.io,resources=sandboxsnapshots,verbs=get;list;watch

// createFromSnapshotRef creates a Sandbox whose source is a SandboxSnapshot:
// once the snapshot is ready to use, exactly as if spec.source named its
// Vercel snapshot id; until then Ready=False with reason WaitingForSnapshot
// (a snapshot becoming ready wakes the Sandbox, see snapshotRefRequests).
func (r *SandboxReconciler) createFromSnapshotRef(ctx context.Context, sbx *sandboxv1.Sandbox) (ctrl.Result, error) {
	ref := sbx.Spec.Source.SnapshotRef
	st := &sbx.Status
	snap := &sandboxv1.SandboxSnapshot{}
	err := r.Get(ctx, types.NamespacedName{Namespace: sbx.Namespace, Name: ref.Name}, snap)
	var why string
	switch {
	case apierrors.IsNotFound(err):
		why = fmt.Sprintf("Waiting for SandboxSnapshot %q, which does not exist", ref.Name)
	case err != nil:
		return ctrl.Result{}, err
	case !snap.Status.ReadyToUse || snap.Status.SnapshotID == "":
		why = fmt.Sprintf("Waiting for SandboxSnapshot %q to be ready to use (phase %s)", ref.Name, snap.Status.Phase)
	}
	if why != "" {
		st.Phase = sandboxv1.SandboxPending
		setCondition(&st.Conditions, sbx.Generation, sandboxv1.ConditionReady, metav1.ConditionFalse, sandboxv1.ReasonWaitingForSnapshot, why)
		return ctrl.Result{RequeueAfter: snapshotRefPoll}, nil
	}
	// Boot through the ordinary create path with the snapshot id as source;
	// only this in-memory copy's spec changes, and its status is taken back.
	id := snap.Status.SnapshotID
	resolved := sbx.DeepCopy()
	resolved.Spec.Source = sandboxv1.SandboxSource{SnapshotID: &id}
	res, err := r.create(ctx, resolved)
	sbx.Status = resolved.Status
	if sbx.Status.BootedFrom != nil {
		sbx.Status.BootedFrom.SnapshotName = ref.Name
	}
	return res, err
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
