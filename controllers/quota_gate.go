package controllers

// Where the Sandbox reconciler meets the quota ledger (quota_ledger.go): the
// check before a session start, what a waiting Sandbox looks like, and the
// settling of the account after each reconcile.

import (
	"context"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	sandboxv1 "github.com/getsentry/sandbox-controller/api/v1alpha1"
)

// quotaRecheck is how long a Sandbox waiting for quota waits before it asks
// again on its own. Freed capacity wakes the waiters at once; this only
// bounds the wait should a wake-up be lost.
const quotaRecheck = time.Minute

// startsSession reports whether an action asks Vercel to start a session.
// A re-creation starts it with the create that follows.
func startsSession(a action) bool { return a == actCreate || a == actResume }

// waitForQuota asks the ledger for a session start of sbx. Refused, the
// Sandbox waits with Ready=False, reason QuotaExceeded (one event when it
// starts waiting), keeping its phase when it has a Vercel sandbox; the
// ledger wakes it when capacity frees. An adoption starts nothing and is not
// checked.
func (r *SandboxReconciler) waitForQuota(ctx context.Context, sbx *sandboxv1.Sandbox) (bool, error) {
	if sbx.Spec.Source.Adopt != nil && sbx.Status.SessionID == "" {
		return false, nil
	}
	ok, msg, err := r.Quota.Admit(ctx, sbx)
	if err != nil || ok {
		return false, err
	}
	if !isWaiting(sbx) {
		logf.FromContext(ctx).Info("Waiting for quota", "reason", msg)
		r.Recorder.Eventf(sbx, nil, corev1.EventTypeWarning, sandboxv1.ReasonQuotaExceeded, "Start", "%s", msg)
	}
	phase := sbx.Status.Phase
	switch {
	case sbx.Status.SessionID == "":
		phase = sandboxv1.SandboxPending
	case phase != sandboxv1.SandboxIdle:
		// A resume is decided on a session seen stopped, whatever phase an
		// earlier look recorded (Stopping); waitsToResume rests on it.
		phase = sandboxv1.SandboxStopped
	}
	setReady(sbx, readiness{phase, metav1.ConditionFalse, sandboxv1.ReasonQuotaExceeded, msg})
	return true, nil
}

// waitsToCreate reports whether sbx waits for quota to create its Vercel
// sandbox: nothing was created for it, so there is nothing to look at.
func waitsToCreate(sbx *sandboxv1.Sandbox) bool {
	return sbx.Status.SessionID == "" && isWaiting(sbx)
}

// waitsToResume reports whether sbx waits for quota to resume its stopped
// session: it rests as it did before the refused resume, unpolled.
func waitsToResume(sbx *sandboxv1.Sandbox) bool {
	st := &sbx.Status
	c := meta.FindStatusCondition(st.Conditions, sandboxv1.ConditionReady)
	return st.SessionID != "" && c != nil && c.Reason == sandboxv1.ReasonQuotaExceeded &&
		(st.Phase == sandboxv1.SandboxStopped || st.Phase == sandboxv1.SandboxIdle)
}

// settleQuota tells the ledger what the reconcile of key left: sbx as it
// ended, or gone when it was not found.
func (r *SandboxReconciler) settleQuota(ctx context.Context, key types.NamespacedName, sbx *sandboxv1.Sandbox) {
	if r.Quota == nil {
		return
	}
	if sbx.UID == "" {
		r.Quota.Settle(ctx, key, nil)
		return
	}
	r.Quota.Settle(ctx, key, sbx)
}

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
	snap.Status.Phase = sandboxv1.SnapshotPending
	setCondition(&snap.Status.Conditions, snap.Generation, sandboxv1.ConditionReady, metav1.ConditionFalse, sandboxv1.ReasonQuotaExceeded, msg)
	return true, nil
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
