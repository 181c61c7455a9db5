package controllers

// spec.rewind: a persistent Sandbox goes back to an earlier snapshot of its
// own (docs/decisions/0006-rewind.md). planRewind weighs spec.rewind against
// status.rewind (and, on a fresh look, against Vercel) before decide;
// decideRewind chooses the step; rewind takes it. A running session is first
// stopped by the ordinary stop action (as a pause), then the intent is
// recorded in status with an optimistic lock, then Vercel's
// currentSnapshotId is PATCHed, then the rewind is recorded done. A crash
// between the PATCH and that record is recognised on the next fresh look:
// Vercel shows another current snapshot or session than the intent
// recorded, so the PATCH is not sent again.

import (
	"cmp"
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	logf "sigs.k8s.io/controller-runtime/pkg/log"

	sandboxv1 "github.com/getsentry/sandbox-controller/api/v1alpha1"
	"github.com/getsentry/sandbox-controller/internal/vercel"
)

// rewindStep is the step of a rewind an actRewind decision takes.
type rewindStep int

const (
	// rewindLook reads the Vercel sandbox first: status may be behind
	// Vercel (a crash after the PATCH), and every step below needs Vercel's
	// current snapshot and session.
	rewindLook rewindStep = iota + 1
	// rewindRefuse records that the target cannot be rewound to
	// (status.rewind Failed); the sandbox is left as it is.
	rewindRefuse
	// rewindApply records the intent, PATCHes currentSnapshotId and records
	// the rewind done.
	rewindApply
	// rewindRecord records a rewind Vercel already has: its PATCH went out
	// before a crash, and sending it again could undo work done since.
	rewindRecord
)

// rewindWaitPoll is how often a rewind that waits for its SandboxSnapshot
// looks again (SandboxSnapshot events wake only Sandboxes booted from it).
const rewindWaitPoll = 5 * time.Second

// rewindPlan is where spec.rewind stands, as decide weighs it.
type rewindPlan struct {
	// pending: spec.rewind has a token status.rewind has not finished
	// (Rewound or Failed).
	pending bool
	// inFlight: status.rewind records the intent of this token (Rewinding).
	inFlight bool
	// applied: on a fresh look, Vercel shows the in-flight rewind done.
	applied bool
	// target is the Vercel snapshot to rewind to ("" until resolved).
	target string
	// refused says why the target cannot be rewound to; waiting why not
	// yet (its SandboxSnapshot is not ready); failed is the message of this
	// token's rewind that failed. Each names the field.
	refused, waiting, failed string
}

// decideRewind chooses the step of a pending rewind of a sandbox whose
// session runs or rests; ok is false when no rewind step comes first.
func decideRewind(l lifecycle) (d decision, ok bool) {
	rw, o := l.rewind, l.obs
	if !rw.pending || rw.waiting != "" || (o.state != sessionRunning && o.state != sessionStopped) {
		return decision{}, false
	}
	switch {
	case !o.fromVercel:
		return decision{action: actRewind, rewindStep: rewindLook}, true
	case rw.inFlight && rw.applied:
		return decision{action: actRewind, rewindStep: rewindRecord}, true
	case rw.refused != "":
		return decision{action: actRewind, rewindStep: rewindRefuse,
			event: &event{corev1.EventTypeWarning, sandboxv1.ReasonRewindFailed, rw.refused}}, true
	case o.state == sessionRunning:
		// Stopped as a pause is: Vercel snapshots the filesystem, so the
		// files of this session stay in the history.
		why := fmt.Sprintf("spec.rewind asks to rewind to snapshot %s", rw.target)
		return decision{action: actStop, stopEvent: "Stopped", stopWhy: why, requeue: minRequeue,
			ready: &readiness{sandboxv1.SandboxStopped, metav1.ConditionFalse, sandboxv1.ReasonStopped,
				fmt.Sprintf("Session %s stopped because %s", o.sessionID, why)}}, true
	}
	return decision{action: actRewind, rewindStep: rewindApply}, true
}

// report adds to d the Ready condition of a rewind that waits for its
// SandboxSnapshot or failed: the sandbox goes on as it is, but does not match
// its spec.
func (rw rewindPlan) report(d decision) decision {
	switch {
	case rw.pending && rw.waiting != "":
		d.rewindReady = &readiness{ready: metav1.ConditionFalse, reason: sandboxv1.ReasonRewindWaiting, message: rw.waiting}
	case !rw.pending && rw.failed != "":
		d.rewindReady = &readiness{ready: metav1.ConditionFalse, reason: sandboxv1.ReasonRewindFailed, message: rw.failed}
	}
	return d
}

// planRewind weighs spec.rewind against status.rewind and, for a pending one
// of a sandbox whose session runs or rests, resolves its target: the
// SandboxSnapshot from the cache, and on a fresh look the Vercel snapshot
// (two reads, only while a rewind is pending).
func (r *SandboxReconciler) planRewind(ctx context.Context, sbx *sandboxv1.Sandbox, o observation) (rewindPlan, error) {
	p := recordedRewind(sbx)
	if !p.pending || (o.state != sessionRunning && o.state != sessionStopped) {
		return p, nil
	}
	if rec := sbx.Status.Rewind; p.inFlight {
		// The target was checked before the intent was recorded. Vercel
		// shows the PATCH done when its current snapshot or session is no
		// longer the one the intent recorded: nothing else changes them
		// while the controller holds the sandbox stopped for the rewind.
		p.applied = o.fromVercel && (sbx.Status.CurrentSnapshotID != rec.FromSnapshotID || o.sessionID != rec.FromSessionID)
		return p, nil
	}
	id, msg, wait, err := r.rewindTarget(ctx, sbx)
	switch {
	case err != nil:
		return p, err
	case wait:
		p.waiting = msg
		return p, nil
	case msg != "":
		p.refused = msg
		return p, nil
	}
	p.target = id
	if o.fromVercel {
		p.refused, err = r.checkRewindTarget(ctx, sbx, id)
	}
	return p, err
}

// recordedRewind is where spec.rewind stands by what status.rewind records:
// none, done, failed, in flight (the intent recorded) or pending.
func recordedRewind(sbx *sandboxv1.Sandbox) rewindPlan {
	spec, rec := sbx.Spec.Rewind, sbx.Status.Rewind
	var p rewindPlan
	if spec == nil {
		return p
	}
	if rec != nil && rec.Token == spec.Token {
		switch rec.State {
		case sandboxv1.RewindRewound:
			return p
		case sandboxv1.RewindFailed:
			p.failed = rec.Message
			return p
		}
		p.inFlight, p.target = true, rec.SnapshotID
	}
	p.pending = true
	return p
}

// rewindField names the field of spec.rewind that chose the target.
func rewindField(rw *sandboxv1.SandboxRewind) string {
	if rw.SnapshotRef != nil {
		return "spec.rewind.snapshotRef"
	}
	return "spec.rewind.snapshotID"
}

// rewindTarget is the Vercel snapshot id spec.rewind names: the id itself,
// or the snapshot of its SandboxSnapshot (from the cache). msg says why there
// is none: the SandboxSnapshot is missing or failed, or (wait) not ready yet.
func (r *SandboxReconciler) rewindTarget(ctx context.Context, sbx *sandboxv1.Sandbox) (id, msg string, wait bool, err error) {
	rw := sbx.Spec.Rewind
	if rw.SnapshotID != nil {
		return *rw.SnapshotID, "", false, nil
	}
	name := rw.SnapshotRef.Name
	snap := &sandboxv1.SandboxSnapshot{}
	err = r.Get(ctx, types.NamespacedName{Namespace: sbx.Namespace, Name: name}, snap)
	switch {
	case apierrors.IsNotFound(err):
		return "", fmt.Sprintf("spec.rewind.snapshotRef: SandboxSnapshot %q does not exist in namespace %s", name, sbx.Namespace), false, nil
	case err != nil:
		return "", "", false, fmt.Errorf("get SandboxSnapshot %s: %w", name, err)
	}
	st := &snap.Status
	switch {
	case st.Phase == sandboxv1.SnapshotFailed || st.Phase == sandboxv1.SnapshotExpired || snap.DeletionTimestamp != nil:
		return "", fmt.Sprintf("spec.rewind.snapshotRef: SandboxSnapshot %q is %s; it cannot be rewound to", name, cmp.Or(string(st.Phase), "being deleted")), false, nil
	case !st.ReadyToUse || st.SnapshotID == "":
		return "", fmt.Sprintf("spec.rewind.snapshotRef: SandboxSnapshot %q is not ready to use yet (phase %s); the rewind waits for it", name, cmp.Or(string(st.Phase), "Pending")), true, nil
	}
	return st.SnapshotID, "", false, nil
}

// checkRewindTarget says why the Vercel snapshot id cannot be rewound to
// ("" when it can): it does not exist in the Sandbox's Vercel project, it was
// deleted or expired, or it was not taken of this Sandbox's Vercel sandbox
// (Vercel would accept any snapshot of the project; another sandbox's files
// are not this Sandbox's history, and may be another tenant's).
func (r *SandboxReconciler) checkRewindTarget(ctx context.Context, sbx *sandboxv1.Sandbox, id string) (string, error) {
	field := rewindField(sbx.Spec.Rewind)
	snap, err := r.api(ctx).GetSnapshot(ctx, id)
	switch {
	case vercel.IsNotFound(err):
		return fmt.Sprintf("%s: Vercel snapshot %s does not exist in this Sandbox's Vercel project", field, id), nil
	case err != nil:
		return "", fmt.Errorf("get snapshot %s: %w", id, err)
	case snap.Status != vercel.SnapshotCreated:
		return fmt.Sprintf("%s: Vercel snapshot %s was deleted or has expired (status %s)", field, id, snap.Status), nil
	case snap.ExpiresAt > 0 && !time.UnixMilli(snap.ExpiresAt).After(r.now()):
		return fmt.Sprintf("%s: Vercel snapshot %s expired at %s", field, id, time.UnixMilli(snap.ExpiresAt).UTC().Format(time.RFC3339)), nil
	}
	other := fmt.Sprintf("%s: Vercel snapshot %s was not taken of this Sandbox's Vercel sandbox %s; only its own snapshots (status.history) can be rewound to",
		field, id, sbx.Status.VercelName)
	if snap.SourceSessionID == "" {
		return other, nil
	}
	sess, err := r.api(ctx).GetSession(ctx, snap.SourceSessionID)
	switch {
	case vercel.IsNotFound(err):
		return other, nil
	case err != nil:
		return "", fmt.Errorf("get session %s of snapshot %s: %w", snap.SourceSessionID, id, err)
	case sess.Session.SourceSandboxName != sbx.Status.VercelName:
		return other, nil
	}
	return "", nil
}

// rewind takes the step d names. Each step but the look answers with the
// observation to decide on next: the rewind recorded, the sandbox resumes
// (or rests) as a stopped one would.
func (r *SandboxReconciler) rewind(ctx context.Context, sbx *sandboxv1.Sandbox, l lifecycle, d decision) (ctrl.Result, *observation, error) {
	st := &sbx.Status
	o := l.obs
	switch d.rewindStep {
	case rewindLook:
		resp, err := r.api(ctx).GetSandbox(ctx, st.VercelName, false)
		if vercel.IsNotFound(err) {
			return ctrl.Result{}, &observation{state: remoteMissing, fromVercel: true}, nil
		}
		if err != nil {
			return ctrl.Result{}, nil, fmt.Errorf("get sandbox %s: %w", st.VercelName, err)
		}
		o = r.observe(ctx, sbx, resp)
		return ctrl.Result{}, &o, nil
	case rewindRefuse:
		r.recordRewind(sbx, sandboxv1.RewindFailed, l.rewind.refused)
		return ctrl.Result{}, &o, nil
	case rewindRecord:
		msg := fmt.Sprintf("Rewound Vercel sandbox %s to snapshot %s (Vercel had it before this record: its request was not sent again)", st.VercelName, l.rewind.target)
		r.recordRewind(sbx, sandboxv1.RewindRewound, msg)
		r.Recorder.Eventf(sbx, nil, corev1.EventTypeNormal, sandboxv1.EventRewound, "Rewind", "%s", msg)
		return ctrl.Result{}, &o, nil
	}
	return r.applyRewind(ctx, sbx, l)
}

// applyRewind records the intent (unless a crash before the PATCH left it
// recorded), PATCHes the Vercel sandbox's currentSnapshotId and records the
// rewind done. The intent is written with an optimistic lock before the
// PATCH, as a recreation is: a reconcile on a stale cache fails the write
// instead of rewinding again, and a crash after the PATCH is recognised
// (planRewind) rather than repeated.
func (r *SandboxReconciler) applyRewind(ctx context.Context, sbx *sandboxv1.Sandbox, l lifecycle) (ctrl.Result, *observation, error) {
	st := &sbx.Status
	rw, spec := l.rewind, sbx.Spec.Rewind
	if !rw.inFlight {
		before := sbx.DeepCopy()
		st.Rewind = &sandboxv1.RewindStatus{Token: spec.Token, SnapshotID: rw.target, FromSnapshotID: st.CurrentSnapshotID, FromSessionID: l.obs.sessionID}
		if spec.SnapshotRef != nil {
			st.Rewind.SnapshotName = spec.SnapshotRef.Name
		}
		r.recordRewind(sbx, sandboxv1.RewindRewinding, fmt.Sprintf("Rewinding to snapshot %s", rw.target))
		if err := r.Status().Patch(ctx, sbx, client.MergeFromWithOptions(before, client.MergeFromWithOptimisticLock{})); err != nil {
			return ctrl.Result{}, nil, fmt.Errorf("record the rewind of %s: %w", st.VercelName, err)
		}
		r.Recorder.Eventf(sbx, nil, corev1.EventTypeNormal, sandboxv1.EventRewinding, "Rewind",
			"Rewinding Vercel sandbox %s from snapshot %s to snapshot %s (%s)", st.VercelName, cmp.Or(st.Rewind.FromSnapshotID, "none"), rw.target, rewindField(spec))
	}
	resp, err := r.api(ctx).UpdateSandbox(ctx, st.VercelName, vercel.UpdateSandboxRequest{CurrentSnapshotID: rw.target}, false)
	if vercel.IsInvalid(err) {
		// The snapshot went between the check and the PATCH (expired,
		// deleted): Vercel refused it and changed nothing.
		r.recordRewind(sbx, sandboxv1.RewindFailed, fmt.Sprintf("%s: Vercel refused snapshot %s: %v", rewindField(spec), rw.target, err))
		return ctrl.Result{}, &l.obs, nil
	}
	if err != nil {
		return ctrl.Result{}, nil, fmt.Errorf("rewind sandbox %s to snapshot %s: %w", st.VercelName, rw.target, err)
	}
	st.CurrentSnapshotID = cmp.Or(resp.Sandbox.CurrentSnapshotID, rw.target)
	msg := fmt.Sprintf("Rewound Vercel sandbox %s to snapshot %s: the next session resumes from it", st.VercelName, rw.target)
	r.recordRewind(sbx, sandboxv1.RewindRewound, msg)
	logf.FromContext(ctx).Info("Rewound Vercel sandbox", "vercelName", st.VercelName, "snapshot", rw.target, "from", st.Rewind.FromSnapshotID)
	r.Recorder.Eventf(sbx, nil, corev1.EventTypeNormal, sandboxv1.EventRewound, "Rewind", "%s", msg)
	return ctrl.Result{}, &l.obs, nil
}

// recordRewind records in status.rewind where spec.rewind's token stands.
func (r *SandboxReconciler) recordRewind(sbx *sandboxv1.Sandbox, state sandboxv1.RewindState, msg string) {
	st := &sbx.Status
	spec := sbx.Spec.Rewind
	if st.Rewind == nil || st.Rewind.Token != spec.Token {
		st.Rewind = &sandboxv1.RewindStatus{Token: spec.Token}
		if spec.SnapshotRef != nil {
			st.Rewind.SnapshotName = spec.SnapshotRef.Name
		}
		if spec.SnapshotID != nil {
			st.Rewind.SnapshotID = *spec.SnapshotID
		}
	}
	if st.Rewind.State != state {
		st.Rewind.LastTransitionTime = &metav1.Time{Time: r.now().Truncate(time.Second)}
	}
	st.Rewind.State, st.Rewind.Message = state, truncate(msg, 1024)
}

// settleRewind writes, after the last action of a reconcile, the Ready
// condition of a rewind that waits or failed (keeping its transition time
// while it stays, so a reconcile that changes nothing writes nothing) and
// looks again soon at one that waits.
func settleRewind(sbx *sandboxv1.Sandbox, prev *metav1.Condition, d decision, res ctrl.Result) ctrl.Result {
	rd := d.rewindReady
	if rd == nil {
		return res
	}
	st := &sbx.Status
	setCondition(&st.Conditions, sbx.Generation, sandboxv1.ConditionReady, rd.ready, rd.reason, rd.message)
	if prev != nil && prev.Status == rd.ready {
		for i := range st.Conditions {
			if st.Conditions[i].Type == sandboxv1.ConditionReady {
				st.Conditions[i].LastTransitionTime = prev.LastTransitionTime
			}
		}
	}
	if rd.reason == sandboxv1.ReasonRewindWaiting && (res.RequeueAfter <= 0 || res.RequeueAfter > rewindWaitPoll) {
		res.RequeueAfter = rewindWaitPoll
	}
	return res
}
