package controllers

// A Sandbox's end of life: when nobody uses it (spec.idle), and when its
// Vercel sandbox is gone (spec.recreatePolicy, below). When nobody uses it: the end of the
// idle window deletes the object under action Delete, and a Sandbox that has
// rested (no session) for deleteObjectAfterSeconds is deleted, with a Warning
// event IdleDeletionSoon before. Deleting the object hands the Vercel sandbox
// to the finalizer, so spec.deletionPolicy decides about it as for any delete.

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	logf "sigs.k8s.io/controller-runtime/pkg/log"

	sandboxv1 "github.com/getsentry/sandbox-controller/api/v1alpha1"
	"github.com/getsentry/sandbox-controller/internal/vercel"
)

// maxIdleDeletionWarning caps how long before an idle deletion the
// IdleDeletionSoon event comes.
const maxIdleDeletionWarning = 5 * time.Minute

// idleDeletionWarning is how long before the deletion of a resting Sandbox
// the IdleDeletionSoon event comes: a tenth of the rest allowed, at most
// maxIdleDeletionWarning.
func idleDeletionWarning(after time.Duration) time.Duration {
	return min(after/10, maxIdleDeletionWarning)
}

// idleSettings reads spec.idle: whether the end of the idle window deletes
// the object, and how long it may rest before it is deleted (0: never).
func idleSettings(sbx *sandboxv1.Sandbox) (deleteAtIdle bool, deleteAfter time.Duration) {
	p := sbx.Spec.Idle
	if p == nil {
		return false, 0
	}
	if p.DeleteObjectAfterSeconds != nil {
		deleteAfter = time.Duration(*p.DeleteObjectAfterSeconds) * time.Second
	}
	return p.Action == sandboxv1.IdleDelete, deleteAfter
}

// restDeletion is where a resting Sandbox stands with deleteObjectAfterSeconds.
type restDeletion struct {
	due  bool      // it has rested long enough: delete it
	warn bool      // within the warning lead time before
	at   time.Time // when it is deleted; zero when never
	next time.Time // when due or warn changes next; zero when never
}

// restSchedule is the deletion schedule of a Sandbox that rests since
// stoppedAt and may rest for after (0: for ever).
func restSchedule(now, stoppedAt time.Time, after time.Duration) restDeletion {
	if after <= 0 || stoppedAt.IsZero() {
		return restDeletion{}
	}
	at := stoppedAt.Add(after)
	switch warnAt := at.Add(-idleDeletionWarning(after)); {
	case !now.Before(at):
		return restDeletion{due: true, at: at}
	case !now.Before(warnAt):
		return restDeletion{warn: true, at: at, next: at}
	default:
		return restDeletion{at: at, next: warnAt}
	}
}

// endOfLife decides, for a session that stopped for reason at stoppedAt and
// is not resumed, whether the Sandbox is deleted now (idle action Delete
// after an idle stop, or rested long enough), warned about, or looked at
// again at the next step of its schedule. It fills d's action, why and timers.
func (l lifecycle) endOfLife(d *decision, reason string, stoppedAt time.Time) {
	if l.deleteAtIdle && reason == sandboxv1.ReasonIdleTimeout {
		d.action, d.deleteWhy = actIdleDelete, "its idle window passed (spec.idle.action Delete)"
		return
	}
	if restingReasons[reason] != sandboxv1.SandboxIdle && restingReasons[reason] != sandboxv1.SandboxStopped {
		return
	}
	rd := restSchedule(l.now, stoppedAt, l.deleteAfter)
	switch {
	case rd.due:
		d.action, d.deleteWhy = actIdleDelete, fmt.Sprintf("it rested %s without a session (spec.idle.deleteObjectAfterSeconds)", l.deleteAfter)
		return
	case rd.warn:
		d.idleWarnAt = rd.at
	}
	if rd.next.IsZero() {
		return
	}
	if r := requeueAt(l.now, rd.next); d.requeue == 0 || r < d.requeue {
		d.requeue = r
	}
}

// warnIdleDeletion emits the IdleDeletionSoon event once per deletion time.
func (r *SandboxReconciler) warnIdleDeletion(sbx *sandboxv1.Sandbox, at time.Time) {
	key := client.ObjectKeyFromObject(sbx)
	if prev, ok := r.idleWarned.Load(key); ok && prev.(time.Time).Equal(at) {
		return
	}
	r.idleWarned.Store(key, at)
	what := "deleted with its Vercel sandbox"
	if sbx.Spec.DeletionPolicy == sandboxv1.DeletionPolicyRetain {
		what = "deleted, keeping its Vercel sandbox (deletionPolicy Retain),"
	}
	r.Recorder.Eventf(sbx, nil, corev1.EventTypeWarning, sandboxv1.ReasonIdleDeletionSoon, "Delete",
		"This Sandbox will be %s at %s unless a session starts before (spec.idle.deleteObjectAfterSeconds)", what, at.UTC().Format(time.RFC3339))
}

// idleDelete deletes a Sandbox at the end of its idle life; the finalizer
// then deletes or keeps the Vercel sandbox per spec.deletionPolicy. The
// session has stopped already.
func (r *SandboxReconciler) idleDelete(ctx context.Context, sbx *sandboxv1.Sandbox, why string) (ctrl.Result, error) {
	logf.FromContext(ctx).Info("Deleting idle Sandbox", "vercelName", sbx.Status.VercelName, "why", why)
	// Only the object as decided on: a heartbeat or spec change written
	// meanwhile fails the delete, and the retry decides on it.
	rv, uid := sbx.ResourceVersion, sbx.UID
	err := r.Delete(ctx, sbx, client.Preconditions{ResourceVersion: &rv, UID: &uid})
	if err != nil && !apierrors.IsNotFound(err) {
		return ctrl.Result{}, fmt.Errorf("delete idle sandbox: %w", err)
	}
	r.Recorder.Eventf(sbx, nil, corev1.EventTypeNormal, sandboxv1.ReasonIdleDelete, "Delete",
		"Deleting this Sandbox because %s (deletionPolicy %s)", why, sbx.Spec.DeletionPolicy)
	return ctrl.Result{}, nil
}

// Recreation (spec.recreatePolicy): a Sandbox whose Vercel sandbox is gone —
// deleted outside the operator, non-persistent and ended, or unable to
// resume because its snapshot is gone — gets a new one from spec.source when
// it should run; under OnNewerSnapshot a resting snapshotRef sandbox is also
// recreated from the SandboxSnapshot's new content instead of resumed. The
// count and the new name are recorded in status before the create, so a
// crash after the create adopts the new sandbox instead of making another.

// recreates reports whether policy recreates a gone sandbox.
func recreates(policy sandboxv1.RecreatePolicy) bool {
	return policy == sandboxv1.RecreateOnGone || policy == sandboxv1.RecreateOnNewerSnapshot
}

// recreateWhy is why a stopped sandbox that should run again gets a new
// Vercel sandbox instead of a resume, or "" when it does not: a
// non-persistent one cannot resume (NotPersistent), and under
// OnNewerSnapshot an outdated one is not resumed (SnapshotOutdated).
func (l lifecycle) recreateWhy(reason string, stoppedAt time.Time) string {
	if !recreates(l.recreate) || !shouldResume(reason, l.wantRunning(), stoppedAt, l.activity) {
		return ""
	}
	switch {
	case !l.persistent:
		return sandboxv1.ReasonNotPersistent
	case l.snapshotOutdated && l.recreate == sandboxv1.RecreateOnNewerSnapshot:
		return sandboxv1.ReasonSnapshotOutdated
	}
	return ""
}

// recreateText says in words why a sandbox was recreated.
var recreateText = map[string]string{
	sandboxv1.ReasonNotFound:         "it was deleted outside the operator",
	sandboxv1.ReasonNotPersistent:    "it is not persistent and its session ended",
	sandboxv1.ReasonSnapshotMissing:  "the snapshot to resume it from is gone",
	sandboxv1.ReasonSnapshotOutdated: "its SandboxSnapshot has new content",
}

// recreate replaces a gone Vercel sandbox: it deletes the old one, if it
// still exists and deletionPolicy is Delete, then records the recreation
// (count, new name, condition Recreated) in status and returns an
// observation that makes decide create the new one. The record is written
// before the create and with an optimistic lock, so neither a crash nor a
// stale cache makes a second sandbox: the same count derives the same name,
// which a repeated create adopts.
func (r *SandboxReconciler) recreate(ctx context.Context, sbx *sandboxv1.Sandbox, why string) (ctrl.Result, *observation, error) {
	st := &sbx.Status
	old := st.VercelName
	if why != sandboxv1.ReasonNotFound && sbx.Spec.DeletionPolicy != sandboxv1.DeletionPolicyRetain {
		if err := r.deleteReplaced(ctx, sbx); err != nil {
			return ctrl.Result{}, nil, err
		}
	}
	before := sbx.DeepCopy()
	st.Recreations++
	st.VercelName = remoteName(sbx)
	// Nothing of the old sandbox carries over: a new filesystem runs setup again.
	st.SessionID, st.Routes, st.StartedAt, st.ExpiresAt, st.StoppedAt = "", nil, nil, nil, nil
	st.CurrentSnapshotID, st.BootedFrom, st.Setup = "", nil, nil
	msg := fmt.Sprintf("Vercel sandbox %s was replaced by %s (recreation %d) because %s", old, st.VercelName, st.Recreations, recreateText[why])
	setCondition(&st.Conditions, sbx.Generation, sandboxv1.ConditionRecreated, metav1.ConditionTrue, why, msg)
	meta.RemoveStatusCondition(&st.Conditions, sandboxv1.ConditionSnapshotOutdated)
	setReady(sbx, readiness{sandboxv1.SandboxCreating, metav1.ConditionFalse, sandboxv1.ReasonCreating, "Recreating the Vercel sandbox"})
	if err := r.Status().Patch(ctx, sbx, client.MergeFromWithOptions(before, client.MergeFromWithOptimisticLock{})); err != nil {
		return ctrl.Result{}, nil, fmt.Errorf("record recreation of %s: %w", old, err)
	}
	key := client.ObjectKeyFromObject(sbx)
	r.forgetPoll(key)
	r.refused.Delete(key)
	logf.FromContext(ctx).Info("Recreating Vercel sandbox", "old", old, "vercelName", st.VercelName, "reason", why, "recreations", st.Recreations)
	r.Recorder.Eventf(sbx, nil, corev1.EventTypeWarning, "Recreating", "Create", "%s", msg)
	return ctrl.Result{}, &observation{state: remoteMissing, fromVercel: true}, nil
}

// deleteReplaced deletes the Vercel sandbox a recreation replaces, and the
// automatic snapshots of its pauses, after checking that it was created for
// this object. One that is already gone is fine.
func (r *SandboxReconciler) deleteReplaced(ctx context.Context, sbx *sandboxv1.Sandbox) error {
	name := remoteName(sbx) // derived, never taken from status alone
	resp, err := r.api(ctx).GetSandbox(ctx, name, false)
	switch {
	case vercel.IsNotFound(err):
		return nil
	case err != nil:
		return fmt.Errorf("get sandbox %s: %w", name, err)
	case !r.ownedBy(&resp.Sandbox, sbx):
		return nil
	}
	if _, err := r.api(ctx).DeleteSandbox(ctx, name, false); err != nil && !vercel.IsNotFound(err) {
		return fmt.Errorf("delete replaced sandbox %s: %w", name, err)
	}
	if err := r.deleteAutomaticSnapshots(ctx, sbx, name); err != nil {
		return err
	}
	r.Recorder.Eventf(sbx, nil, corev1.EventTypeNormal, "Deleted", "Delete", "Deleted Vercel sandbox %s, which a new one replaces", name)
	return nil
}

// markSnapshotOutdated sets the SnapshotOutdated condition of a Sandbox
// that booted from a snapshotRef: True when the SandboxSnapshot, ready to
// use, has a content hash other than the one the sandbox booted from (for a
// capture or an import, which have none: another snapshot id), with an event
// when it turns True. A SandboxSnapshot that is gone or rebuilding changes
// nothing.
func (r *SandboxReconciler) markSnapshotOutdated(ctx context.Context, sbx *sandboxv1.Sandbox) error {
	ref, booted := sbx.Spec.Source.SnapshotRef, sbx.Status.BootedFrom
	if ref == nil || booted == nil || booted.SnapshotID == "" {
		return nil
	}
	snap := &sandboxv1.SandboxSnapshot{}
	if err := r.Get(ctx, types.NamespacedName{Namespace: sbx.Namespace, Name: ref.Name}, snap); err != nil {
		return client.IgnoreNotFound(err)
	}
	if !snap.Status.ReadyToUse || snap.Status.SnapshotID == "" {
		return nil
	}
	st := &sbx.Status
	if !snapshotChanged(booted, &snap.Status) {
		setCondition(&st.Conditions, sbx.Generation, sandboxv1.ConditionSnapshotOutdated, metav1.ConditionFalse, sandboxv1.ReasonSnapshotCurrent,
			fmt.Sprintf("The sandbox booted from the current content of SandboxSnapshot %q", ref.Name))
		return nil
	}
	msg := fmt.Sprintf("SandboxSnapshot %q has new content (snapshot %s) since the sandbox booted from %s", ref.Name, snap.Status.SnapshotID, booted.SnapshotID)
	if sbx.Spec.RecreatePolicy == sandboxv1.RecreateOnNewerSnapshot {
		msg += "; its next session starts from the new content (recreatePolicy OnNewerSnapshot)"
	}
	if !hasCondition(st.Conditions, sandboxv1.ConditionSnapshotOutdated, sandboxv1.ReasonSnapshotOutdated) {
		r.Recorder.Eventf(sbx, nil, corev1.EventTypeNormal, sandboxv1.ReasonSnapshotOutdated, "Observe", "%s", msg)
	}
	setCondition(&st.Conditions, sbx.Generation, sandboxv1.ConditionSnapshotOutdated, metav1.ConditionTrue, sandboxv1.ReasonSnapshotOutdated, msg)
	return nil
}

// snapshotChanged reports whether a SandboxSnapshot's content is not what
// the sandbox booted from: another content hash, or where either side has
// none (a capture, an import, a sandbox adopted after a lost create answer)
// another snapshot id. A recipe rebuilt with the same hash (maxAgeSeconds)
// is the same content.
func snapshotChanged(booted *sandboxv1.BootedFrom, snap *sandboxv1.SandboxSnapshotStatus) bool {
	if booted.ContentHash != "" && snap.ContentHash != "" {
		return booted.ContentHash != snap.ContentHash
	}
	return booted.SnapshotID != snap.SnapshotID
}

// bootedSnapshot is the SandboxSnapshot of spec.source.snapshotRef when it
// (still) serves snapshot id id, the one a session booted from; nil when
// there is no reference, it is gone, or it serves another snapshot since.
func (r *SandboxReconciler) bootedSnapshot(ctx context.Context, sbx *sandboxv1.Sandbox, id string) *sandboxv1.SandboxSnapshot {
	ref := sbx.Spec.Source.SnapshotRef
	if ref == nil {
		return nil
	}
	snap := &sandboxv1.SandboxSnapshot{}
	if err := r.Get(ctx, types.NamespacedName{Namespace: sbx.Namespace, Name: ref.Name}, snap); err != nil || snap.Status.SnapshotID != id {
		return nil
	}
	return snap
}
