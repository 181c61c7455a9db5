package controllers

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
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
// ready to use; until then ok is false, retry says when to look again (0: only
// on a change), and the Sandbox reports Ready=False: WaitingForSnapshot while
// the SandboxSnapshot exists and may still become ready (a snapshot becoming
// ready wakes the Sandbox, see snapshotRefRequests), SnapshotRefNotFound or
// SnapshotRefFailed (also on ResolvedRefs) while it does not exist or is
// Failed. Those fail the Sandbox after the reference deadline, for good.
func (r *SandboxReconciler) resolveSource(ctx context.Context, sbx *sandboxv1.Sandbox) (src sandboxv1.SandboxSource, retry time.Duration, ok bool, err error) {
	ref := sbx.Spec.Source.SnapshotRef
	if ref == nil {
		return sbx.Spec.Source, 0, true, nil
	}
	st := &sbx.Status
	if st.Phase == sandboxv1.SandboxFailed && failedOnRef(st.Conditions) {
		return src, 0, false, nil
	}
	snap := &sandboxv1.SandboxSnapshot{}
	err = r.Get(ctx, types.NamespacedName{Namespace: sbx.Namespace, Name: ref.Name}, snap)
	var bad *unresolvedRef
	switch {
	case apierrors.IsNotFound(err):
		bad = &unresolvedRef{sandboxv1.ReasonSnapshotRefNotFound, fmt.Sprintf("SandboxSnapshot %q (spec.source.snapshotRef) does not exist", ref.Name)}
	case err != nil:
		return src, 0, false, err
	case classMismatch(ctx, snap, "SandboxSnapshot", "spec.source.snapshotRef") != "":
		bad = &unresolvedRef{sandboxv1.ReasonClassMismatch, classMismatch(ctx, snap, "SandboxSnapshot", "spec.source.snapshotRef")}
	case snap.Status.Phase == sandboxv1.SnapshotFailed:
		bad = &unresolvedRef{sandboxv1.ReasonSnapshotRefFailed, fmt.Sprintf("SandboxSnapshot %q (spec.source.snapshotRef) is Failed: %s", ref.Name, readyMessage(snap.Status.Conditions))}
	}
	if bad != nil {
		w := markUnresolved(&st.Conditions, sbx.Generation, *bad, r.now(), referenceDeadline(r.ReferenceDeadline))
		if w.failed {
			setReady(sbx, readiness{sandboxv1.SandboxFailed, metav1.ConditionFalse, bad.reason, w.message})
			r.Recorder.Eventf(sbx, nil, corev1.EventTypeWarning, bad.reason, "Create", "%s", w.message)
			return src, 0, false, nil
		}
		setReady(sbx, readiness{sandboxv1.SandboxPending, metav1.ConditionFalse, bad.reason, w.message})
		return src, min(w.retry, snapshotRefPoll), false, nil
	}
	markResolved(&st.Conditions, sbx.Generation, fmt.Sprintf("SandboxSnapshot %q exists", ref.Name))
	if !snap.Status.ReadyToUse || snap.Status.SnapshotID == "" {
		setReady(sbx, readiness{sandboxv1.SandboxPending, metav1.ConditionFalse, sandboxv1.ReasonWaitingForSnapshot,
			fmt.Sprintf("Waiting for SandboxSnapshot %q to be ready to use (phase %s)", ref.Name, snap.Status.Phase)})
		return src, snapshotRefPoll, false, nil
	}
	id := snap.Status.SnapshotID
	return sandboxv1.SandboxSource{SnapshotID: &id}, 0, true, nil
}

// snapshotRefRequests maps a SandboxSnapshot to the Sandboxes of its
// namespace that boot from it and have not been created (nor failed) yet:
// when it is ready to use, and, for the Sandboxes that reported it missing or
// Failed, on any change (it appeared, or was replaced), so they recover at once.
func (r *SandboxReconciler) snapshotRefRequests(ctx context.Context, obj client.Object) []reconcile.Request {
	snap, ok := obj.(*sandboxv1.SandboxSnapshot)
	if !ok {
		return nil
	}
	list := &sandboxv1.SandboxList{}
	if err := r.List(ctx, list, client.InNamespace(snap.Namespace), client.MatchingFields{indexSnapshotRef: snap.Name}); err != nil {
		return nil
	}
	return requestsFor(list.Items, func(s *sandboxv1.Sandbox) bool {
		if b := s.Status.BootedFrom; b != nil && snap.Status.ReadyToUse && snapshotChanged(b, &snap.Status) {
			// New content: the Sandbox reports it (SnapshotOutdated).
			return true
		}
		if s.Status.SessionID != "" || s.Status.Phase == sandboxv1.SandboxFailed {
			return false
		}
		return snap.Status.ReadyToUse || hasCondition(s.Status.Conditions, sandboxv1.ConditionResolvedRefs, sandboxv1.ReasonSnapshotRefNotFound) ||
			hasCondition(s.Status.Conditions, sandboxv1.ConditionResolvedRefs, sandboxv1.ReasonSnapshotRefFailed)
	})
}
