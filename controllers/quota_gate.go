package controllers

// Where the reconcilers meet the quota ledger (quota_ledger.go): the check
// before a session start or a builder's create, what a waiting Sandbox or
// build looks like, the settling of the account after each reconcile, and
// the stop of a retained Sandbox's session that the quota could no longer
// count.

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	sandboxv1 "github.com/getsentry/sandbox-controller/api/v1alpha1"
	"github.com/getsentry/sandbox-controller/internal/vercel"
)

// quotaRecheck is how long a Sandbox waiting for quota waits before it asks
// again on its own. Freed capacity wakes the waiters at once; this only
// bounds the wait should a wake-up be lost.
const quotaRecheck = time.Minute

// startsSession reports whether an action asks Vercel to start a session.
// A re-creation starts it with the create that follows.
func startsSession(a action) bool { return a == actCreate || a == actResume }

// waitForQuota asks the ledger for a session start of sbx. Granted, status
// records the vCPUs the session starts with (the spec's now), which the
// ledger counts until it stops. Refused, the Sandbox waits with
// Ready=False, reason QuotaExceeded (one event when it starts waiting),
// keeping its phase when it has a Vercel sandbox; the ledger wakes it when
// capacity frees. An adoption starts nothing and is not checked.
func (r *SandboxReconciler) waitForQuota(ctx context.Context, sbx *sandboxv1.Sandbox) (bool, error) {
	if sbx.Spec.Source.Adopt != nil && sbx.Status.SessionID == "" {
		return false, nil
	}
	ok, msg, err := r.Quota.Admit(ctx, sbx)
	if err != nil {
		return false, err
	}
	if ok {
		sbx.Status.SessionVCPUs = int32(vcpusOf(sbx))
		return false, nil
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
	if serving {
		setCondition(&st.Conditions, snap.Generation, sandboxv1.ConditionReady, metav1.ConditionTrue, sandboxv1.ReasonQuotaExceeded,
			fmt.Sprintf("Serving %s; its rebuild waits: %s", st.SnapshotID, msg))
		return
	}
	st.Phase = sandboxv1.SnapshotPending
	setCondition(&st.Conditions, snap.Generation, sandboxv1.ConditionReady, metav1.ConditionFalse, sandboxv1.ReasonQuotaExceeded, msg)
}

// stopBeforeRetain stops the session of a Sandbox whose Vercel sandbox is
// about to be retained (deletionPolicy Retain) when a SandboxQuota of its
// namespace limits running sessions: once the object is gone nothing counts
// the session, which would run outside the quota until its deadline. A
// persistent sandbox keeps its filesystem (Vercel snapshots it on stop), so
// whoever adopts it resumes where it stopped. Without such a quota the
// session is left running, as before.
func (r *SandboxReconciler) stopBeforeRetain(ctx context.Context, sbx *sandboxv1.Sandbox, resp *vercel.SandboxResponse) error {
	s := resp.Session
	if s == nil || (s.Status != vercel.SessionRunning && s.Status != vercel.SessionPending) {
		return nil
	}
	if limited, err := r.Quota.LimitsRunning(ctx, sbx.Namespace); err != nil || !limited {
		return err
	}
	if _, err := r.api(ctx).StopSession(ctx, s.ID); err != nil && !vercel.IsGone(err) {
		return fmt.Errorf("stop session %s before retaining sandbox %s: %w", s.ID, resp.Sandbox.Name, err)
	}
	logf.FromContext(ctx).Info("Stopped session", "vercelName", resp.Sandbox.Name, "session", s.ID, "reason", "Retain")
	r.Recorder.Eventf(sbx, nil, corev1.EventTypeNormal, "Stopped", "Delete",
		"Stopped session %s before retaining Vercel sandbox %s: a SandboxQuota of the namespace counts running sessions, and it cannot count one of a sandbox it no longer owns", s.ID, resp.Sandbox.Name)
	return nil
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
