package controllers

// A Sandbox's end of life when nobody uses it (spec.idle): the end of the
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
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	logf "sigs.k8s.io/controller-runtime/pkg/log"

	sandboxv1 "github.com/getsentry/sandbox-controller/api/v1alpha1"
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
