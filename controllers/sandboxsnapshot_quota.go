package controllers

// Where a SandboxSnapshot meets the quota ledger (quota_ledger.go): the
// check before a snapshot is taken or a builder is created, what a waiting
// snapshot or build looks like, and the wake-up of the waiters when a
// SandboxQuota's status changes.

import (
	"context"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	sandboxv1 "github.com/getsentry/sandbox-controller/api/v1alpha1"
)

// waitForSnapshotQuota asks the ledger whether a new snapshot may be taken
// in snap's namespace. Refused, the SandboxSnapshot waits in phase Pending
// with Ready=False, reason QuotaExceeded (one event when it starts waiting);
// a change of a SandboxQuota's status in its namespace wakes it.
func (r *SandboxSnapshotReconciler) waitForSnapshotQuota(ctx context.Context, snap *sandboxv1.SandboxSnapshot) (bool, error) {
	ok, msg, err := r.Quota.AdmitSnapshot(ctx, snap.Namespace)
	if err != nil || ok {
		return false, err
	}
	if !hasCondition(snap.Status.Conditions, sandboxv1.ConditionReady, sandboxv1.ReasonQuotaExceeded) {
		r.Recorder.Eventf(snap, nil, corev1.EventTypeWarning, sandboxv1.ReasonQuotaExceeded, "CreateSnapshot", "%s", msg)
	}
	setSnapshotReady(snap, snapPending(sandboxv1.ReasonQuotaExceeded, msg))
	return true, nil
}

// waitForBuildQuota asks the ledger whether the build of snap may create
// its builder sandbox: snapshotBytes must not be used up, and the builder
// must fit in sandboxes, runningSandboxes and runningVCPUs, as a Sandbox's
// create must. Refused, the build waits like a snapshot does (phase Pending,
// Ready=False, reason QuotaExceeded, one event) — a rebuild keeps serving
// its snapshot, Ready=True with that reason — and a change of a
// SandboxQuota's status in its namespace (capacity freed) wakes it. The
// wait is not the build's: its time budget starts once it is let through.
func (r *SandboxSnapshotReconciler) waitForBuildQuota(ctx context.Context, snap *sandboxv1.SandboxSnapshot, builder string, serving bool) (bool, error) {
	wait, err := r.buildQuota(ctx, snap, builder, serving)
	if b := snap.Status.Build; b != nil && err == nil {
		switch {
		case wait:
			b.StartedAt, b.StepStartedAt = nil, nil
		case b.StartedAt == nil:
			now := metav1.NewTime(r.now().Truncate(time.Second))
			b.StartedAt, b.StepStartedAt = &now, &now
		}
	}
	return wait, err
}

func (r *SandboxSnapshotReconciler) buildQuota(ctx context.Context, snap *sandboxv1.SandboxSnapshot, builder string, serving bool) (bool, error) {
	if !serving {
		if wait, err := r.waitForSnapshotQuota(ctx, snap); wait || err != nil {
			return wait, err
		}
	} else if ok, msg, err := r.Quota.AdmitSnapshot(ctx, snap.Namespace); err != nil || !ok {
		if err == nil {
			r.buildWaits(ctx, snap, true, msg)
		}
		return err == nil, err
	}
	ok, msg, err := r.Quota.AdmitBuild(ctx, snap, builder)
	if err != nil || ok {
		return false, err
	}
	r.buildWaits(ctx, snap, serving, msg)
	return true, nil
}

// buildWaits reports a build waiting for quota.
func (r *SandboxSnapshotReconciler) buildWaits(ctx context.Context, snap *sandboxv1.SandboxSnapshot, serving bool, msg string) {
	st := &snap.Status
	if !hasCondition(st.Conditions, sandboxv1.ConditionReady, sandboxv1.ReasonQuotaExceeded) {
		logf.FromContext(ctx).Info("Waiting for quota to build", "reason", msg)
		r.Recorder.Eventf(snap, nil, corev1.EventTypeWarning, sandboxv1.ReasonQuotaExceeded, "Build", "%s", msg)
	}
	setSnapshotReady(snap, buildReadiness(serving, st.SnapshotID, sandboxv1.SnapshotPending, sandboxv1.ReasonQuotaExceeded, msg, "; its rebuild waits"))
}

// quotaWaiters maps a SandboxQuota to the SandboxSnapshots of its namespace
// that wait for quota: its status changed, maybe freeing snapshot bytes.
func (r *SandboxSnapshotReconciler) quotaWaiters(ctx context.Context, obj client.Object) []reconcile.Request {
	list := &sandboxv1.SandboxSnapshotList{}
	if err := r.List(ctx, list, client.InNamespace(obj.GetNamespace())); err != nil {
		return nil
	}
	var out []reconcile.Request
	for i := range list.Items {
		s := &list.Items[i]
		if hasCondition(s.Status.Conditions, sandboxv1.ConditionReady, sandboxv1.ReasonQuotaExceeded) {
			out = append(out, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(s)})
		}
	}
	return out
}
