package controllers

// Where a Sandbox meets the quota ledger (quota_ledger.go): the check
// before a session start, what a waiting Sandbox looks like, the settling of
// the account after each reconcile, and the stop of a retained Sandbox's
// session that the quota could no longer count.

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	logf "sigs.k8s.io/controller-runtime/pkg/log"

	sandboxv1 "github.com/getsentry/sandbox-controller/api/v1alpha1"
	"github.com/getsentry/sandbox-controller/internal/vercel"
)

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
