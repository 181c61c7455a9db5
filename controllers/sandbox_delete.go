package controllers

// Deleting a Sandbox: its Vercel sandbox (per spec.deletionPolicy) and the
// automatic snapshots of its pauses.

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	logf "sigs.k8s.io/controller-runtime/pkg/log"

	sandboxv1 "github.com/getsentry/sandbox-controller/api/v1alpha1"
	"github.com/getsentry/sandbox-controller/internal/vercel"
)

// finalize deletes the Vercel sandbox and the automatic snapshots of its
// pauses, or, with deletionPolicy Retain, leaves the sandbox in place. The
// sandbox is the one this object stands for (remoteName), whatever status
// says, and it is read first: one whose owner tags are not this object's is
// left alone and reported.
func (r *SandboxReconciler) finalize(ctx context.Context, sbx *sandboxv1.Sandbox) (bool, ctrl.Result, error) {
	name, done, err := r.nameToFinalize(ctx, sbx)
	if done || err != nil {
		return done, ctrl.Result{}, err
	}
	if r.abandonRemote(ctx, sbx, name) {
		return true, ctrl.Result{}, nil
	}
	deleting := func(err error) (bool, ctrl.Result, error) {
		setReady(sbx, readiness{sandboxv1.SandboxDeleting, metav1.ConditionFalse, sandboxv1.ReasonDeleting, "Deleting the Vercel sandbox"})
		return false, ctrl.Result{}, err
	}
	resp, err := r.api(ctx).GetSandbox(ctx, name, false)
	switch {
	case vercel.IsNotFound(err):
		if err := r.finalizeMissing(ctx, sbx, name); err != nil {
			return deleting(err)
		}
		return true, ctrl.Result{}, nil
	case err != nil:
		return deleting(fmt.Errorf("get sandbox %s: %w", name, err))
	}
	if !r.ownedBy(&resp.Sandbox, sbx) {
		if claimant := handedOverTo(sbx, resp.Sandbox.Tags, r.ClusterID); claimant != "" {
			// The expected end of every claim, not a sandbox gone astray.
			logf.FromContext(ctx).Info("Left the Vercel sandbox to the Sandbox that claimed this member", "vercelName", name, "claimant", claimant)
			r.Recorder.Eventf(sbx, nil, corev1.EventTypeNormal, sandboxv1.ReasonHandedOver, "Delete",
				"Left Vercel sandbox %s to Sandbox %s, which claimed this member", name, claimant)
			return true, ctrl.Result{}, nil
		}
		logf.FromContext(ctx).Info("Left a Vercel sandbox that is not this object's", "vercelName", name)
		r.Recorder.Eventf(sbx, nil, corev1.EventTypeWarning, sandboxv1.ReasonOwnedElsewhere, "Delete",
			"Left Vercel sandbox %s alone: it is %s, not this object's", name, describeOwner(resp.Sandbox.Tags, r.ClusterID))
		return true, ctrl.Result{}, nil
	}
	if sbx.Spec.DeletionPolicy == sandboxv1.DeletionPolicyRetain {
		if err := r.retainRemote(ctx, sbx, name, resp); err != nil {
			return deleting(err)
		}
		return true, ctrl.Result{}, nil
	}
	if err := r.deleteRemote(ctx, sbx, name); err != nil {
		return deleting(err)
	}
	logf.FromContext(ctx).Info("Deleted Vercel sandbox", "vercelName", name)
	r.Recorder.Eventf(sbx, nil, corev1.EventTypeNormal, "Deleted", "Delete", "Deleted Vercel sandbox %s", name)
	return true, ctrl.Result{}, nil
}

// nameToFinalize is the Vercel sandbox the Sandbox stands for
// (remoteName), recorded in status whatever status said before; done when no
// reconcile recorded one and none exists under that name.
func (r *SandboxReconciler) nameToFinalize(ctx context.Context, sbx *sandboxv1.Sandbox) (string, bool, error) {
	st := &sbx.Status
	name := remoteName(sbx)
	if st.VercelName == "" {
		// No reconcile recorded an outcome, but one may have created the
		// sandbox and stopped before its status write: look it up under the
		// derived name.
		done, err := r.neverRecorded(ctx, sbx, name)
		if done || err != nil {
			return name, done, err
		}
		st.VercelName = name
	}
	if st.VercelName != name {
		r.statusNameIgnored(ctx, sbx, name)
		st.VercelName = name
	}
	return name, false, nil
}

// abandonRemote reports whether the Sandbox is released without touching
// its Vercel sandbox (annotation abandon-remote), with a warning event.
func (r *SandboxReconciler) abandonRemote(ctx context.Context, sbx *sandboxv1.Sandbox, name string) bool {
	if sbx.Annotations[sandboxv1.AnnotationAbandonRemote] != "true" {
		return false
	}
	// An operator released the object by hand: Vercel is unreachable for
	// good. Admission let only those allowed to leak a sandbox set it.
	logf.FromContext(ctx).Info("Abandoned the Vercel sandbox", "vercelName", name)
	r.Recorder.Eventf(sbx, nil, corev1.EventTypeWarning, "AbandonedRemote", "Delete",
		"Released without deleting Vercel sandbox %s (annotation %s): it and its snapshots are left in Vercel, billed until deleted there", name, sandboxv1.AnnotationAbandonRemote)
	return true
}

// finalizeMissing finishes a Sandbox whose Vercel sandbox is not found:
// deleted already (a delete whose answer was lost before a restart), or never
// created: only its automatic snapshots may be left. An adoption that never
// happened left none of this object's.
func (r *SandboxReconciler) finalizeMissing(ctx context.Context, sbx *sandboxv1.Sandbox, name string) error {
	if sbx.Spec.DeletionPolicy == sandboxv1.DeletionPolicyRetain || (sbx.Spec.Source.Adopt != nil && sbx.Status.SessionID == "") {
		return nil
	}
	// A 404 counts only once Vercel knows the project (with a wrong
	// project id every read answers 404): the client's delete checks.
	return r.deleteRemote(ctx, sbx, name)
}

// deleteRemote deletes the Vercel sandbox name (gone already is deleted)
// and then its automatic snapshots.
func (r *SandboxReconciler) deleteRemote(ctx context.Context, sbx *sandboxv1.Sandbox, name string) error {
	if _, err := r.api(ctx).DeleteSandbox(ctx, name, false); err != nil && !vercel.IsNotFound(err) {
		return fmt.Errorf("delete sandbox %s: %w", name, err)
	}
	return r.deleteAutomaticSnapshots(ctx, sbx, name)
}

// retainRemote leaves the Vercel sandbox in place (deletionPolicy Retain),
// its session stopped when a quota would lose count of it.
func (r *SandboxReconciler) retainRemote(ctx context.Context, sbx *sandboxv1.Sandbox, name string, resp *vercel.SandboxResponse) error {
	if err := r.stopBeforeRetain(ctx, sbx, resp); err != nil {
		return err
	}
	// Released, not only left: without owner tags it can be adopted
	// again, by a new Sandbox or from another cluster.
	if _, err := r.api(ctx).UpdateSandbox(ctx, name, vercel.UpdateSandboxRequest{Tags: releasedTags(resp.Sandbox.Tags)}, false); err != nil && !vercel.IsNotFound(err) {
		return fmt.Errorf("remove the owner tags of sandbox %s: %w", name, err)
	}
	r.Recorder.Eventf(sbx, nil, corev1.EventTypeNormal, "Retained", "Delete", "Left Vercel sandbox %s in place without owner tags (deletionPolicy Retain)", name)
	return nil
}

// deleteAutomaticSnapshots deletes the snapshots Vercel took by itself when
// the deleted sandbox's sessions stopped (pause, idle timeout). They exist only
// to resume that sandbox, so once it is gone they are billed storage nobody
// can use. Vercel's own deleteOrphanSnapshots is not used because it would
// also take manual snapshots that SandboxSnapshots captured from the sandbox.
// A snapshot that any SandboxSnapshot or Sandbox in the namespace names is
// kept all the same.
func (r *SandboxReconciler) deleteAutomaticSnapshots(ctx context.Context, sbx *sandboxv1.Sandbox, name string) error {
	snaps, err := r.api(ctx).ListAllSnapshots(ctx, vercel.ListSnapshotsOptions{Name: name})
	if err != nil {
		return fmt.Errorf("list snapshots of %s: %w", name, err)
	}
	var inUse map[string]bool
	for _, s := range snaps {
		if s.CreationMethod != "automatic" || s.Status != vercel.SnapshotCreated {
			continue
		}
		if inUse == nil {
			if inUse, err = r.snapshotIDsInUse(ctx, sbx.Namespace); err != nil {
				return err
			}
		}
		if inUse[s.ID] {
			continue
		}
		if _, err := r.api(ctx).DeleteSnapshot(ctx, s.ID); err != nil && !vercel.IsNotFound(err) && !vercel.IsGone(err) {
			return fmt.Errorf("delete automatic snapshot %s of %s: %w", s.ID, name, err)
		}
	}
	return nil
}

// snapshotIDsInUse lists the Vercel snapshot ids that objects in a namespace
// name, in spec or status.
func (r *SandboxReconciler) snapshotIDsInUse(ctx context.Context, namespace string) (map[string]bool, error) {
	ids := map[string]bool{}
	snaps := &sandboxv1.SandboxSnapshotList{}
	if err := r.List(ctx, snaps, client.InNamespace(namespace)); err != nil {
		return nil, err
	}
	for _, s := range snaps.Items {
		ids[s.Status.SnapshotID] = true
		if s.Spec.Source.SnapshotID != nil {
			ids[*s.Spec.Source.SnapshotID] = true
		}
	}
	sandboxes := &sandboxv1.SandboxList{}
	if err := r.List(ctx, sandboxes, client.InNamespace(namespace)); err != nil {
		return nil, err
	}
	for _, s := range sandboxes.Items {
		if s.Spec.Source.SnapshotID != nil {
			ids[*s.Spec.Source.SnapshotID] = true
		}
	}
	delete(ids, "")
	return ids, nil
}

// neverRecorded decides the deletion of a Sandbox whose status names no
// Vercel sandbox: done when Vercel has no sandbox of this object under its
// derived name (never created, or an adoption never made); not done, to be
// deleted as usual, when the tagged sandbox is there.
func (r *SandboxReconciler) neverRecorded(ctx context.Context, sbx *sandboxv1.Sandbox, name string) (bool, error) {
	// The class's client: a class Sandbox's sandbox is in the class's
	// project, where the manager's own client would find nothing and leak it.
	resp, err := r.api(ctx).GetSandbox(ctx, name, false)
	switch {
	case vercel.IsNotFound(err):
		return true, nil
	case err != nil:
		setReady(sbx, readiness{sandboxv1.SandboxDeleting, metav1.ConditionFalse, sandboxv1.ReasonDeleting, "Deleting the Vercel sandbox"})
		return false, fmt.Errorf("get sandbox %s: %w", name, err)
	}
	return !r.ownedBy(&resp.Sandbox, sbx), nil
}
