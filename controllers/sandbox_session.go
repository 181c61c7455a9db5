package controllers

// The session phase: a Sandbox whose session runs or rests, handled from
// status between polls — keep-alive, idle stop, resume, scheduled shutdown.

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	logf "sigs.k8s.io/controller-runtime/pkg/log"

	sandboxv1 "github.com/getsentry/sandbox-controller/api/v1alpha1"
	"github.com/getsentry/sandbox-controller/internal/vercel"
)

// fromStatus handles a reconcile that needs no look at Vercel: a running
// session whose next poll is not due (a heartbeat, an extension or shutdown
// timer), or a stopped one, which is never polled. It reports done=false when
// Vercel must be observed: the spec changed, a reconcile was requested, a poll
// or the session's deadline is due, or the status is not one of these.
func (r *SandboxReconciler) fromStatus(ctx context.Context, sbx *sandboxv1.Sandbox, now time.Time) (ctrl.Result, bool, error) {
	st := &sbx.Status
	if st.SessionID == "" || st.ObservedGeneration != sbx.Generation ||
		sbx.Annotations[sandboxv1.AnnotationReconcileRequestedAt] != st.LastHandledReconcileAt {
		return ctrl.Result{}, false, nil
	}
	ready := meta.FindStatusCondition(st.Conditions, sandboxv1.ConditionReady)
	if ready == nil {
		return ctrl.Result{}, false, nil
	}
	sd := shutdownSchedule(now, sbx.Spec.ShutdownTime, r.shutdownWarning())
	key := client.ObjectKeyFromObject(sbx)
	switch {
	case st.Phase == sandboxv1.SandboxRunning && ready.Status == metav1.ConditionTrue:
		if st.StartedAt == nil || st.ExpiresAt == nil || r.pollDue(key, now) || !now.Before(st.ExpiresAt.Time) {
			return ctrl.Result{}, false, nil
		}
		if sd.due && sbx.Spec.ShutdownPolicy == sandboxv1.ShutdownDelete {
			res, err := r.shutdownDelete(ctx, sbx)
			return res, true, err
		}
		if !wantRunning(sbx, sd) {
			res, err := r.stopSession(ctx, sbx, st.SessionID, sd, now)
			return res, true, err
		}
		res, err := r.keepAlive(ctx, sbx, st.SessionID, st.StartedAt.Time, st.ExpiresAt.Time, sd, now)
		return res, true, err
	case restingReasons[ready.Reason] != "" && st.Phase == restingReasons[ready.Reason]:
		if sd.due && sbx.Spec.ShutdownPolicy == sandboxv1.ShutdownDelete {
			res, err := r.shutdownDelete(ctx, sbx)
			return res, true, err
		}
		if !notPersistent(st) &&
			shouldResume(ready.Reason, wantRunning(sbx, sd), timeOf(st.StoppedAt), lastActivity(sbx)) {
			res, err := r.resume(ctx, sbx)
			return res, true, err
		}
		r.warnShutdown(sbx, sd, false)
		return ctrl.Result{RequeueAfter: r.restingRequeue(sbx, sd, now)}, true, nil
	}
	return ctrl.Result{}, false, nil
}

// observeStopped reports a stopped session — why it stopped, and whether it
// can come back — and resumes it when it should run again.
func (r *SandboxReconciler) observeStopped(ctx context.Context, sbx *sandboxv1.Sandbox, s *vercel.Session, sameSession bool, sd shutdownState, now time.Time) (ctrl.Result, error) {
	st := &sbx.Status
	if stopped := msTime(s.StoppedAt); stopped != nil {
		st.StoppedAt = stopped
	} else if st.StoppedAt == nil {
		st.StoppedAt = &metav1.Time{Time: now.Truncate(time.Second)}
	}
	prev := meta.FindStatusCondition(st.Conditions, sandboxv1.ConditionReady)
	reason := ""
	switch {
	case sbx.Spec.State == sandboxv1.SandboxStateStopped:
		reason = sandboxv1.ReasonStopped
	case sd.due:
		reason = sandboxv1.ReasonShutdownTime
	case sameSession && prev != nil && restingReasons[prev.Reason] != "":
		// Already classified, by the controller's own stop or an earlier look.
		reason = prev.Reason
	default:
		reason = stopCause(s, r.maxSessionLength())
		if reason == sandboxv1.ReasonIdleTimeout && r.extensionRefused(client.ObjectKeyFromObject(sbx), s.ID) {
			// It ran to the deadline Vercel would not move: the plan's limit.
			reason = sandboxv1.ReasonMaxSessionLength
		}
	}
	if st.ObservedGeneration != sbx.Generation {
		if err := r.update(ctx, sbx, ""); err != nil {
			return ctrl.Result{}, err
		}
	}
	persistent := !notPersistent(st)
	msg := r.stopMessage(sbx, s, reason)
	if !persistent {
		msg += cannotRunAgain
	}
	if prev == nil || prev.Reason != reason {
		// Reported even when a heartbeat resumes the sandbox right away.
		switch reason {
		case sandboxv1.ReasonSessionStopped:
			r.Recorder.Eventf(sbx, nil, corev1.EventTypeWarning, reason, "Observe", "%s", msg)
		case sandboxv1.ReasonIdleTimeout, sandboxv1.ReasonMaxSessionLength, sandboxv1.ReasonSnapshotted:
			r.Recorder.Eventf(sbx, nil, corev1.EventTypeNormal, reason, "Observe", "%s", msg)
		}
	}
	if persistent && (reason == sandboxv1.ReasonSnapshotMissing && wantRunning(sbx, sd) ||
		shouldResume(reason, wantRunning(sbx, sd), st.StoppedAt.Time, lastActivity(sbx))) {
		// A fresh look at a sandbox whose snapshot was missing happens only on
		// a spec change or a requested reconcile: both retry the resume.
		return r.resume(ctx, sbx)
	}
	if reason == sandboxv1.ReasonSnapshotMissing {
		return ctrl.Result{}, nil
	}
	phase := restingReasons[reason]
	st.Phase = phase
	setCondition(&st.Conditions, sbx.Generation, sandboxv1.ConditionReady, metav1.ConditionFalse, reason, msg)
	r.forgetPoll(client.ObjectKeyFromObject(sbx))
	r.warnShutdown(sbx, sd, false)
	return ctrl.Result{RequeueAfter: r.restingRequeue(sbx, sd, now)}, nil
}

func (r *SandboxReconciler) stopMessage(sbx *sandboxv1.Sandbox, s *vercel.Session, reason string) string {
	switch reason {
	case sandboxv1.ReasonStopped:
		return fmt.Sprintf("Session %s stopped because spec.state is Stopped", s.ID)
	case sandboxv1.ReasonShutdownTime:
		return fmt.Sprintf("Session %s stopped at spec.shutdownTime", s.ID)
	case sandboxv1.ReasonIdleTimeout:
		return fmt.Sprintf("Session %s stopped after %s without activity; a newer %s heartbeat resumes it", s.ID, idleWindow(sbx), sandboxv1.AnnotationLastActivity)
	case sandboxv1.ReasonMaxSessionLength:
		return fmt.Sprintf("Session %s stopped at the plan's maximum session length (%s); a newer %s heartbeat resumes it in a new session",
			s.ID, r.maxSessionLength(), sandboxv1.AnnotationLastActivity)
	case sandboxv1.ReasonSnapshotted:
		return fmt.Sprintf("Session %s stopped when a snapshot was taken of it; a newer %s heartbeat resumes it", s.ID, sandboxv1.AnnotationLastActivity)
	default:
		return fmt.Sprintf("Session %s was stopped outside the operator; a newer %s heartbeat resumes it", s.ID, sandboxv1.AnnotationLastActivity)
	}
}

// restingRequeue is when a stopped sandbox needs the controller again without
// any change to it: only for its shutdown (warning, then delete).
func (r *SandboxReconciler) restingRequeue(sbx *sandboxv1.Sandbox, sd shutdownState, now time.Time) time.Duration {
	if sbx.Spec.ShutdownPolicy != sandboxv1.ShutdownDelete {
		return 0
	}
	return requeueAt(now, sd.next)
}

// stopSession stops the running session, because spec.state is Stopped or the
// shutdown time has come; a persistent sandbox keeps its filesystem.
func (r *SandboxReconciler) stopSession(ctx context.Context, sbx *sandboxv1.Sandbox, sessionID string, sd shutdownState, now time.Time) (ctrl.Result, error) {
	st := &sbx.Status
	reason, event, why := sandboxv1.ReasonStopped, "Stopped", "spec.state is Stopped"
	if sbx.Spec.State != sandboxv1.SandboxStateStopped {
		reason, event, why = sandboxv1.ReasonShutdownTime, "ShutdownStop", "spec.shutdownTime has come"
	}
	resp, err := r.Vercel.StopSession(ctx, sessionID)
	if err != nil && !vercel.IsGone(err) {
		return ctrl.Result{}, fmt.Errorf("stop session %s: %w", sessionID, err)
	}
	logf.FromContext(ctx).Info("Stopped session", "vercelName", st.VercelName, "session", sessionID, "reason", reason)
	r.Recorder.Eventf(sbx, nil, corev1.EventTypeNormal, event, "Stop", "Stopped session %s because %s", sessionID, why)
	st.StoppedAt = &metav1.Time{Time: now.Truncate(time.Second)}
	if resp != nil {
		if t := msTime(resp.Session.StoppedAt); t != nil {
			st.StoppedAt = t
		}
		if resp.Sandbox != nil {
			st.CurrentSnapshotID = resp.Sandbox.CurrentSnapshotID
		}
	}
	st.ExpiresAt = nil
	st.Phase = sandboxv1.SandboxStopped
	msg := fmt.Sprintf("Session %s stopped because %s", sessionID, why)
	if notPersistent(st) {
		msg += cannotRunAgain
	}
	setCondition(&st.Conditions, sbx.Generation, sandboxv1.ConditionReady, metav1.ConditionFalse, reason, msg)
	r.forgetPoll(client.ObjectKeyFromObject(sbx))
	if st.ObservedGeneration != sbx.Generation {
		if err := r.update(ctx, sbx, ""); err != nil {
			return ctrl.Result{}, err
		}
	}
	return ctrl.Result{RequeueAfter: r.restingRequeue(sbx, sd, now)}, nil
}

// resume starts a new session from the sandbox's latest snapshot. A snapshot
// that is gone makes the Sandbox report SnapshotMissing, and it waits for a
// spec change or a requested reconcile to try again.
func (r *SandboxReconciler) resume(ctx context.Context, sbx *sandboxv1.Sandbox) (ctrl.Result, error) {
	st := &sbx.Status
	resp, err := r.Vercel.GetSandbox(ctx, st.VercelName, true)
	if vercel.IsSnapshotNotFound(err) {
		msg := fmt.Sprintf("Cannot resume Vercel sandbox %s: the snapshot it resumes from (%s) is gone", st.VercelName, st.CurrentSnapshotID)
		if !hasCondition(st.Conditions, sandboxv1.ConditionReady, sandboxv1.ReasonSnapshotMissing) {
			r.Recorder.Eventf(sbx, nil, corev1.EventTypeWarning, sandboxv1.ReasonSnapshotMissing, "Resume", "%s", msg)
		}
		st.Phase = sandboxv1.SandboxFailed
		st.ExpiresAt = nil
		setCondition(&st.Conditions, sbx.Generation, sandboxv1.ConditionReady, metav1.ConditionFalse, sandboxv1.ReasonSnapshotMissing, msg)
		setCondition(&st.Conditions, sbx.Generation, sandboxv1.ConditionResumable, metav1.ConditionFalse, sandboxv1.ReasonSnapshotMissing, msg)
		return ctrl.Result{}, nil
	}
	if err != nil {
		return ctrl.Result{}, fmt.Errorf("resume sandbox %s: %w", st.VercelName, err)
	}
	r.polled(sbx, r.now())
	s := resp.Session
	if s == nil || (s.Status != vercel.SessionRunning && s.Status != vercel.SessionPending) {
		return ctrl.Result{RequeueAfter: sessionStartPoll}, nil
	}
	logf.FromContext(ctx).Info("Resumed Vercel sandbox", "vercelName", st.VercelName, "session", s.ID)
	r.Recorder.Eventf(sbx, nil, corev1.EventTypeNormal, "Resumed", "Resume", "Resumed Vercel sandbox %s in session %s", st.VercelName, s.ID)
	st.StoppedAt = nil
	return r.observe(ctx, sbx, resp)
}

// notPersistent reports whether Vercel reported the sandbox as not
// persistent: once its session stops, it cannot run again.
func notPersistent(st *sandboxv1.SandboxStatus) bool {
	return hasCondition(st.Conditions, sandboxv1.ConditionResumable, sandboxv1.ReasonNotPersistent)
}

// cannotRunAgain ends the message about a stopped session of a sandbox that
// is not persistent.
const cannotRunAgain = "; spec.persistent is false, so it cannot run again: delete and re-create this Sandbox for a new one"

// extensionRefused reports whether Vercel refused to extend this session of
// the Sandbox at key.
func (r *SandboxReconciler) extensionRefused(key client.ObjectKey, sessionID string) bool {
	id, ok := r.refused.Load(key)
	return ok && id == sessionID
}

// keepAlive extends the running session when its deadline comes near and a
// heartbeat asks for more time, warns of a coming shutdown, and says when to
// look again: the next poll, extension check, deadline or shutdown timer.
func (r *SandboxReconciler) keepAlive(ctx context.Context, sbx *sandboxv1.Sandbox, sessionID string, start, deadline time.Time, sd shutdownState, now time.Time) (ctrl.Result, error) {
	st := &sbx.Status
	k := keepAlive{start: start, deadline: deadline, activity: lastActivity(sbx), idle: idleWindow(sbx), max: r.maxSessionLength()}
	key := client.ObjectKeyFromObject(sbx)
	if r.extensionRefused(key, sessionID) {
		k.max = deadline.Sub(start) + capSafety // the deadline is the limit
	}
	if ext := k.extension(now); ext > 0 {
		s, err := r.Vercel.ExtendTimeout(ctx, sessionID, ext)
		switch {
		case vercel.IsGone(err), vercel.IsStopping(err), vercel.IsSnapshotting(err):
			// It stopped first: look at it again right away.
			r.forgetPoll(client.ObjectKeyFromObject(sbx))
			return ctrl.Result{RequeueAfter: minRequeue}, nil
		case vercel.IsInvalid(err):
			// Vercel's plan maximum is below --max-session-length: let the
			// session end rather than retry an extension that cannot succeed.
			r.Recorder.Eventf(sbx, nil, corev1.EventTypeWarning, sandboxv1.ReasonMaxSessionLength, "Extend",
				"Vercel refused to extend session %s (%v); the manager's --max-session-length may exceed the plan's", sessionID, err)
			r.refused.Store(key, sessionID)
			k.max = deadline.Sub(start) + capSafety
		case err != nil:
			return ctrl.Result{}, fmt.Errorf("extend session %s: %w", sessionID, err)
		default:
			k.deadline = time.UnixMilli(sessionDeadline(s))
			st.ExpiresAt = msTime(sessionDeadline(s))
			logf.FromContext(ctx).V(1).Info("Extended session", "vercelName", st.VercelName, "session", sessionID, "by", ext, "expiresAt", k.deadline)
			r.Recorder.Eventf(sbx, nil, corev1.EventTypeNormal, "Extended", "ExtendTimeout",
				"Extended session %s to keep it running %s past the last activity", sessionID, k.idle)
		}
	}
	r.warnShutdown(sbx, sd, true)
	next, _ := r.nextPoll.Load(client.ObjectKeyFromObject(sbx))
	pollAt, _ := next.(time.Time)
	if pollAt.IsZero() {
		pollAt = now.Add(r.pollInterval())
	}
	return ctrl.Result{RequeueAfter: requeueAt(now, pollAt, k.nextCheck(), sd.next)}, nil
}

// warnShutdown emits the ShutdownWarning event once per shutdownTime, when
// the shutdown will change something (a running session, or a deletion).
func (r *SandboxReconciler) warnShutdown(sbx *sandboxv1.Sandbox, sd shutdownState, running bool) {
	if !sd.warn || (!running && sbx.Spec.ShutdownPolicy != sandboxv1.ShutdownDelete) {
		return
	}
	at := sbx.Spec.ShutdownTime.Time
	if prev, ok := r.warned.Load(client.ObjectKeyFromObject(sbx)); ok && prev.(time.Time).Equal(at) {
		return
	}
	r.warned.Store(client.ObjectKeyFromObject(sbx), at)
	what := "stopped"
	switch {
	case sbx.Spec.ShutdownPolicy == sandboxv1.ShutdownDelete && sbx.Spec.DeletionPolicy == sandboxv1.DeletionPolicyRetain:
		what = "deleted, keeping its Vercel sandbox stopped (deletionPolicy Retain),"
	case sbx.Spec.ShutdownPolicy == sandboxv1.ShutdownDelete:
		what = "deleted with its Vercel sandbox"
	}
	r.Recorder.Eventf(sbx, nil, corev1.EventTypeWarning, "ShutdownWarning", "Shutdown",
		"This Sandbox will be %s at %s (spec.shutdownTime)", what, at.UTC().Format(time.RFC3339))
}

// shutdownDelete ends a Sandbox whose shutdownTime has come with policy
// Delete by deleting the object: the finalizer then treats the Vercel sandbox
// as any delete does, so it is deleted once, and kept under deletionPolicy
// Retain. A kept sandbox has its session stopped first, because a shutdown
// time promises that nothing runs (and bills) after it.
func (r *SandboxReconciler) shutdownDelete(ctx context.Context, sbx *sandboxv1.Sandbox) (ctrl.Result, error) {
	st := &sbx.Status
	if sbx.Spec.DeletionPolicy == sandboxv1.DeletionPolicyRetain && st.SessionID != "" && sessionMayRun(st.Phase) {
		if _, err := r.Vercel.StopSession(ctx, st.SessionID); err != nil && !vercel.IsGone(err) && !vercel.IsNotFound(err) {
			return ctrl.Result{}, fmt.Errorf("stop session %s at shutdown: %w", st.SessionID, err)
		}
	}
	logf.FromContext(ctx).Info("Deleting Sandbox at shutdownTime", "vercelName", st.VercelName)
	r.Recorder.Eventf(sbx, nil, corev1.EventTypeNormal, "ShutdownDelete", "Delete", "Deleting this Sandbox because spec.shutdownTime has come (deletionPolicy %s)", sbx.Spec.DeletionPolicy)
	if err := r.Delete(ctx, sbx); err != nil && !apierrors.IsNotFound(err) {
		return ctrl.Result{}, err
	}
	return ctrl.Result{}, nil
}

// sessionMayRun reports whether a Sandbox in phase may have a session that
// has not stopped.
func sessionMayRun(phase sandboxv1.SandboxPhase) bool {
	switch phase {
	case sandboxv1.SandboxStopped, sandboxv1.SandboxIdle, sandboxv1.SandboxFailed:
		return false
	}
	return true
}
