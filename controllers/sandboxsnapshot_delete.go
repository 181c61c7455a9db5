package controllers

// Deleting a SandboxSnapshot: what its Vercel snapshot (and a builder it
// drives) becomes when the object goes, and who among the users of a shared
// snapshot deletes it.

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	logf "sigs.k8s.io/controller-runtime/pkg/log"

	sandboxv1 "github.com/getsentry/sandbox-controller/api/v1alpha1"
	"github.com/getsentry/sandbox-controller/internal/metrics"
	"github.com/getsentry/sandbox-controller/internal/recipe"
	"github.com/getsentry/sandbox-controller/internal/vercel"
)

// finalize deletes the Vercel snapshot (and any builder this object drives)
// unless the policy retains it or another live SandboxSnapshot still uses it
// (decideDelete). Intents recorded in status are resolved first, so a crash
// between a Vercel call and the status write that would have recorded its
// result leaks nothing: a capture taken but not recorded is found by its
// session, and a builder's capture by the builder's name. The last user of a
// content hash also deletes a builder of that hash that a deleted driver left
// for it (orphanedBuilders). A capture that its source Sandbox would resume
// from is deleted only once the source no longer needs it.
func (r *SandboxSnapshotReconciler) finalize(ctx context.Context, snap *sandboxv1.SandboxSnapshot) (bool, ctrl.Result, error) {
	orig := snap.DeepCopy()
	peers, err := r.namespaceSnapshots(ctx, snap.Namespace)
	if err != nil {
		return false, ctrl.Result{}, err
	}
	ids, wait, err := r.finalizeIDs(ctx, snap, peers)
	if err == nil && wait == "" {
		wait, err = r.deleteSnapshots(ctx, snap, peers, ids)
	}
	switch {
	case err != nil:
		setSnapshotReady(snap, snapReadiness{phase: sandboxv1.SnapshotDeleting})
		return false, ctrl.Result{}, err
	case wait != "":
		return r.waitToDelete(ctx, orig, snap, wait)
	}
	return true, ctrl.Result{}, nil
}

// doomedSnapshot is one Vercel snapshot a delete considers.
type doomedSnapshot struct {
	id string
	// served: the snapshot this object serves, which its capture's source
	// may still need.
	served bool
	// builtBy: a builder of this cluster, read (tags) in this finalize
	// before it was deleted, under whose name Vercel lists the snapshot.
	builtBy string
}

// finalizeIDs lists the Vercel snapshots a delete of snap considers, the
// served one first: the capture Vercel took of a recorded intent, the
// snapshots an abandoned build's builder left (the builder is deleted), the
// one a rebuild replaced, and those of builders nobody is left to finish.
// wait says why the delete must wait.
func (r *SandboxSnapshotReconciler) finalizeIDs(ctx context.Context, snap *sandboxv1.SandboxSnapshot, peers []sandboxv1.SandboxSnapshot) ([]doomedSnapshot, string, error) {
	st := &snap.Status
	ids := []doomedSnapshot{{id: st.SnapshotID, served: true}}
	if st.SnapshotID == "" && st.Capture != nil && st.Capture.SessionID != "" {
		id, wait, err := r.unrecordedCapture(ctx, st.Capture)
		switch {
		case err != nil:
			return nil, "", err
		case wait:
			return nil, fmt.Sprintf("Waiting for Vercel to finish capturing session %s before deleting its snapshot", st.Capture.SessionID), nil
		}
		ids[0].id = id
	}
	if b := st.Build; b != nil && b.BuilderName != "" && !waitsForHash(snap, peers) {
		left, err := r.abandonBuild(ctx, snap, b)
		if err != nil {
			return nil, "", err
		}
		for _, id := range left {
			ids = append(ids, doomedSnapshot{id: id})
		}
	}
	if st.Build != nil && st.Build.Replaces != "" {
		ids = append(ids, doomedSnapshot{id: st.Build.Replaces})
	}
	left, err := r.orphanedBuilders(ctx, snap, peers)
	if err != nil {
		return nil, "", err
	}
	return append(ids, left...), "", nil
}

// abandonBuild deletes the builder of a build nobody else will finish, and
// returns the snapshots taken of it: its capture may have been taken without
// being recorded, and goes too unless another SandboxSnapshot serves it.
func (r *SandboxSnapshotReconciler) abandonBuild(ctx context.Context, snap *sandboxv1.SandboxSnapshot, b *sandboxv1.SnapshotBuildStatus) ([]string, error) {
	left, err := r.builderSnapshots(ctx, b.BuilderName)
	if err != nil {
		return nil, err
	}
	// Never created, or deleted by an earlier try of this finalizer, or not
	// this object's: nothing to delete.
	deleted, err := r.deleteBuilder(ctx, snap, b.BuilderName, "Delete")
	if err != nil {
		return nil, err
	}
	if deleted && !b.Failed && b.StartedAt != nil {
		metrics.ObserveSnapshotBuild(metrics.BuildAbandoned, r.now().Sub(b.StartedAt.Time))
	}
	return left, nil
}

// orphanedBuilders deletes the builders of snap's content hash that no live
// user is left to finish, and returns the snapshots taken of them. A driver
// deleted mid-build leaves its builder to a live user waiting for the build,
// which takes it over on its next reconcile (decideClaim); one deleted before
// that is the last that knows of it, and followers record no builder name.
// The names are derived (the hash's first build, and a rebuild of the
// snapshot this object serves); only a builder of this cluster tagged with
// this hash is deleted. Its own builder, if abandonBuild deleted it, reads
// as gone.
func (r *SandboxSnapshotReconciler) orphanedBuilders(ctx context.Context, snap *sandboxv1.SandboxSnapshot, peers []sandboxv1.SandboxSnapshot) ([]doomedSnapshot, error) {
	st := &snap.Status
	if snap.Spec.Source.Recipe == nil || st.ContentHash == "" || usesHash(snap, peers) {
		return nil, nil
	}
	names := []string{builderName(r.ClusterID, snap.Namespace, st.ContentHash, "")}
	if st.SnapshotID != "" {
		names = append(names, builderName(r.ClusterID, snap.Namespace, st.ContentHash, st.SnapshotID))
	}
	var out []doomedSnapshot
	for _, name := range names {
		left, err := r.deleteOrphanedBuilder(ctx, snap, name)
		if err != nil {
			return nil, err
		}
		for _, id := range left {
			out = append(out, doomedSnapshot{id: id, builtBy: name})
		}
	}
	return out, nil
}

// deleteOrphanedBuilder deletes builder name after reading it, when it is a
// builder of this cluster for snap's content hash (whichever user's tag it
// carries), and returns the live snapshots taken of it.
func (r *SandboxSnapshotReconciler) deleteOrphanedBuilder(ctx context.Context, snap *sandboxv1.SandboxSnapshot, name string) ([]string, error) {
	resp, err := r.api(ctx).GetSandbox(ctx, name, false)
	switch {
	case vercel.IsNotFound(err):
		return nil, nil
	case err != nil:
		return nil, fmt.Errorf("get builder sandbox %s: %w", name, err)
	}
	tags := resp.Sandbox.Tags
	o := ownerOf(tags, r.ClusterID, snap.UID)
	if (o != ownedBySelf && o != ownedByPeer) || tags[tagContentHash] != recipe.Short(snap.Status.ContentHash) {
		return nil, nil
	}
	left, err := r.builderSnapshots(ctx, name)
	if err != nil {
		return nil, err
	}
	if _, err := r.api(ctx).DeleteSandbox(ctx, name, false); err != nil && !vercel.IsNotFound(err) {
		return nil, fmt.Errorf("delete builder sandbox %s: %w", name, err)
	}
	r.Quota.ReleaseBuild(ctx, snap.Namespace, name)
	logf.FromContext(ctx).Info("Deleted a builder no user was left to finish", "vercelName", name, "contentHash", recipe.Short(snap.Status.ContentHash))
	r.Recorder.Eventf(snap, nil, corev1.EventTypeNormal, "Deleted", "Delete", "Deleted builder sandbox %s: no other user of content hash %s is left to finish its build", name, recipe.Short(snap.Status.ContentHash))
	return left, nil
}

// deleteSnapshots deletes or keeps each id once, as decideDelete says. It
// returns why the delete must wait, or "".
func (r *SandboxSnapshotReconciler) deleteSnapshots(ctx context.Context, snap *sandboxv1.SandboxSnapshot, peers []sandboxv1.SandboxSnapshot, ids []doomedSnapshot) (string, error) {
	seen := map[string]bool{}
	for _, d := range ids {
		id := d.id
		if id == "" || seen[id] {
			continue
		}
		seen[id] = true
		switch decideDelete(snap, peers, id) {
		case keepImported:
			// Made outside this object, perhaps by another team.
			r.Recorder.Eventf(snap, nil, corev1.EventTypeNormal, "Retained", "Delete", "Left imported Vercel snapshot %s in place (the operator never deletes a snapshot it did not make)", id)
		case keepRetained:
			r.Recorder.Eventf(snap, nil, corev1.EventTypeNormal, "Retained", "Delete", "Left Vercel snapshot %s in place (deletionPolicy Retain)", id)
		case keepShared:
			r.Recorder.Eventf(snap, nil, corev1.EventTypeNormal, "Kept", "Delete", "Kept Vercel snapshot %s: another SandboxSnapshot still uses it", id)
		default:
			if wait, err := r.deleteOurs(ctx, snap, d); wait != "" || err != nil {
				return wait, err
			}
		}
	}
	return "", nil
}

// deleteOurs deletes snapshot d once a read shows it is the operator's; a
// capture (served) is deleted only once its source no longer needs it. A
// snapshot already gone is not deleted again: another user being deleted
// at the same time (holdsSnapshot) may have deleted it first, which is
// logged, so that a soak can count how often that happens.
func (r *SandboxSnapshotReconciler) deleteOurs(ctx context.Context, snap *sandboxv1.SandboxSnapshot, d doomedSnapshot) (string, error) {
	id := d.id
	if d.served && snap.Spec.Source.SandboxRef != nil {
		if wait, err := r.releaseSource(ctx, snap, id); wait != "" || err != nil {
			return wait, err
		}
	}
	found := snapshotOurs
	if d.builtBy == "" {
		var err error
		if found, err = r.snapshotIsOurs(ctx, snap, id); err != nil {
			return "", err
		}
	}
	switch found {
	case snapshotForeign:
		r.foreignSnapshotKept(snap, id)
		return "", nil
	case snapshotGone:
		logf.FromContext(ctx).Info("Found the Vercel snapshot already deleted", "snapshot", id, "alreadyDeleted", true)
		return "", nil
	}
	_, err := r.api(ctx).DeleteSnapshot(ctx, id)
	switch {
	case vercel.IsNotFound(err) || vercel.IsGone(err):
		logf.FromContext(ctx).Info("Found the Vercel snapshot already deleted", "snapshot", id, "alreadyDeleted", true)
		return "", nil
	case err != nil:
		return "", fmt.Errorf("delete snapshot %s: %w", id, err)
	}
	logf.FromContext(ctx).Info("Deleted Vercel snapshot", "snapshot", id)
	r.Recorder.Eventf(snap, nil, corev1.EventTypeNormal, "Deleted", "Delete", "Deleted Vercel snapshot %s", id)
	return "", nil
}

// foreignSnapshotKept reports a snapshot recorded in status that a read
// did not show to be the operator's: it is left in Vercel.
func (r *SandboxSnapshotReconciler) foreignSnapshotKept(snap *sandboxv1.SandboxSnapshot, id string) {
	msg := fmt.Sprintf("Left Vercel snapshot %s alone: Vercel does not show it as taken of a sandbox this operator made for this object", id)
	logf.Log.Info("Left a Vercel snapshot not verified as ours", "namespace", snap.Namespace, "name", snap.Name, "snapshot", id)
	r.Recorder.Eventf(snap, nil, corev1.EventTypeWarning, sandboxv1.ReasonOwnedElsewhere, "Delete", "%s", msg)
	setSnapshotReady(snap, snapReadiness{ready: metav1.ConditionFalse, reason: sandboxv1.ReasonOwnedElsewhere, message: msg})
}

// waitToDelete keeps the finalizer while something must happen first, and
// says what in status.
func (r *SandboxSnapshotReconciler) waitToDelete(ctx context.Context, orig, snap *sandboxv1.SandboxSnapshot, msg string) (bool, ctrl.Result, error) {
	setSnapshotReady(snap, snapReadiness{sandboxv1.SnapshotDeleting, metav1.ConditionFalse, sandboxv1.ReasonDeleting, msg})
	// The skeleton writes status only after an error while a finalizer
	// waits; this wait is no error, but status must say why.
	if !apiequality.Semantic.DeepEqual(orig.Status, snap.Status) {
		if err := r.Status().Patch(ctx, snap, client.MergeFrom(orig)); err != nil {
			return false, ctrl.Result{}, err
		}
	}
	return false, ctrl.Result{RequeueAfter: snapshotBuildPoll}, nil
}

// holdsSnapshot reports whether another live SandboxSnapshot of the
// namespace (one not being deleted) serves the Vercel snapshot id. A holder
// being deleted does not count: of users deleted together or one after the
// other, the last to be marked for deletion sees every other one marked and
// deletes the snapshot; others that see the same may delete it too, which
// Vercel answers with 404 (deleteOurs). Before, of holders all being deleted
// the one with the smallest name deleted: a user that had kept the snapshot
// for a live peer, and was then held Terminating (another finalizer, a slow
// finalize), made that peer keep it too, and nobody deleted it (issue 36).
//
// The list comes from the manager's cache, which is one watch of
// SandboxSnapshots: it holds this object's own deletion (the finalize runs
// from it), so it holds every deletion marked before, and the last user to
// be marked sees all the others marked.
func holdsSnapshot(self *sandboxv1.SandboxSnapshot, all []sandboxv1.SandboxSnapshot, id string) bool {
	return anyLiveOther(self, all, func(o *sandboxv1.SandboxSnapshot) bool { return o.Status.SnapshotID == id })
}

// waitsForHash reports whether another live SandboxSnapshot with the same
// content hash has no snapshot yet: it waits for the shared build, and takes
// over its builder when the driver goes.
func waitsForHash(self *sandboxv1.SandboxSnapshot, all []sandboxv1.SandboxSnapshot) bool {
	hash := self.Status.ContentHash
	return hash != "" && anyLiveOther(self, all, func(o *sandboxv1.SandboxSnapshot) bool {
		return o.Status.ContentHash == hash && o.Status.SnapshotID == ""
	})
}

// usesHash reports whether another live SandboxSnapshot has the same content
// hash: a user that still drives or waits for builds of it.
func usesHash(self *sandboxv1.SandboxSnapshot, all []sandboxv1.SandboxSnapshot) bool {
	hash := self.Status.ContentHash
	return hash != "" && anyLiveOther(self, all, func(o *sandboxv1.SandboxSnapshot) bool { return o.Status.ContentHash == hash })
}

func anyLiveOther(self *sandboxv1.SandboxSnapshot, all []sandboxv1.SandboxSnapshot, uses func(o *sandboxv1.SandboxSnapshot) bool) bool {
	for i := range all {
		o := &all[i]
		if o.UID != self.UID && o.DeletionTimestamp.IsZero() && uses(o) {
			return true
		}
	}
	return false
}
