package controllers

import (
	"context"
	"fmt"
	"sort"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	sandboxv1 "github.com/getsentry/sandbox-controller/api/v1alpha1"
	"github.com/getsentry/sandbox-controller/internal/metrics"
	"github.com/getsentry/sandbox-controller/internal/recipe"
	"github.com/getsentry/sandbox-controller/internal/vercel"
)

// Poll delays of the SandboxSnapshot controller.
const (
	snapshotWaitPoll  = 5 * time.Second
	snapshotBuildPoll = 2 * time.Second
)

// SandboxSnapshotReconciler makes each SandboxSnapshot one Vercel snapshot:
// captured from a Sandbox, imported by id, or built from a recipe.
type SandboxSnapshotReconciler struct {
	client.Client
	// APIReader reads Secrets (clone credentials) uncached.
	APIReader client.Reader
	Vercel    SandboxAPI
	// Classes, when set, gives each object its SandboxClass's Vercel client
	// (Vercel is the client of objects of no class).
	Classes  *ClassClients
	Recorder events.EventRecorder
	// Quota, when set, refuses new snapshots once a SandboxQuota's
	// snapshotBytes is used up (sandboxsnapshot_quota.go).
	Quota *QuotaLedger
	// Notifier, when set, announces Ready and Failed transitions to
	// the namespace's webhook.
	Notifier Notifier
	// PollInterval is how often a ready snapshot is observed for expiry.
	PollInterval time.Duration
	// MaxConcurrentReconciles bounds parallel reconciles (default 1).
	MaxConcurrentReconciles int
	// BackoffCap caps the retry delay after errors (default one minute).
	BackoffCap time.Duration
	// ReferenceDeadline is how long a baseSnapshotRef that is missing,
	// Failed or part of a cycle is waited for before the object is Failed
	// (default DefaultReferenceDeadline).
	ReferenceDeadline time.Duration
	// Now is the clock (tests); time.Now when nil.
	Now func() time.Time
	// ClusterID names this cluster in the owner tags and builder names
	// (the manager's --cluster-id).
	ClusterID string
	// Shard is the part of the cluster this manager reconciles; the zero
	// value is all of it.
	Shard Shard
	// DigestKey is the manager's status digest key (digest_key.go), from
	// which the key of status.snapshotProof is derived; when unset it is
	// loaded from the Secret DigestKeySecret names.
	DigestKey       []byte
	DigestKeySecret DigestKeySecret

	// sentSecrets remembers the clone credentials sent to Vercel, to scrub
	// them from a step's output after a rotation.
	sentSecrets sentSecrets
	// proofKey signs and checks status.snapshotProof.
	proofKey proofKey
}

// +kubebuilder:rbac:groups=sandbox.sentry.io,resources=sandboxsnapshots,verbs=get;list;watch;update;patch
// +kubebuilder:rbac:groups=sandbox.sentry.io,resources=sandboxsnapshots/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=sandbox.sentry.io,resources=sandboxsnapshots/finalizers,verbs=update
// +kubebuilder:rbac:groups=sandbox.sentry.io,resources=sandboxes,verbs=get;list;watch;patch
// +kubebuilder:rbac:groups="",resources=secrets,verbs=get
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch

// Reconcile observes the Vercel snapshot of one SandboxSnapshot (or the
// capture or build that makes it), acts at most once, and records what it
// saw in status.
func (r *SandboxSnapshotReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	return skeleton[*sandboxv1.SandboxSnapshot]{
		classes:   r.Classes,
		client:    r.Client,
		recorder:  r.Recorder,
		notifier:  r.Notifier,
		finalizer: sandboxv1.SandboxSnapshotFinalizer,
		pausable:  true,
		labels:    r.hashLabel,
		finalize:  r.finalize,
		reconcile: r.reconcileSnapshot,
	}.run(ctx, req.NamespacedName, &sandboxv1.SandboxSnapshot{})
}

func (r *SandboxSnapshotReconciler) reconcileSnapshot(ctx context.Context, snap *sandboxv1.SandboxSnapshot) (ctrl.Result, error) {
	var res ctrl.Result
	var err error
	switch src := snap.Spec.Source; {
	case src.SnapshotID != nil:
		res, err = r.observe(ctx, snap, *src.SnapshotID)
	case src.SandboxRef != nil:
		res, err = r.reconcileCapture(ctx, snap)
	case src.Recipe != nil:
		// The content hash needs the base's own hash, so a recipe layered on
		// a snapshot that is not ready yet has none.
		if hash, baseWait := r.contentHash(ctx, snap); baseWait != "" {
			res, err = r.waitForBase(ctx, snap, baseWait)
		} else {
			res, err = r.reconcileRecipe(ctx, snap, hash)
		}
	}
	if err == nil {
		snap.Status.ObservedGeneration = snap.Generation
	}
	return res, err
}

// hashLabel sets, on recipes, the content-hash label that lets every user of
// a shared build find the others (and survives restarts). It reports whether
// the label changed.
func (r *SandboxSnapshotReconciler) hashLabel(ctx context.Context, snap *sandboxv1.SandboxSnapshot) bool {
	hash, _ := r.contentHash(ctx, snap)
	if hash == "" || snap.Labels[sandboxv1.LabelContentHash] == recipe.Short(hash) {
		return false
	}
	if snap.Labels == nil {
		snap.Labels = map[string]string{}
	}
	snap.Labels[sandboxv1.LabelContentHash] = recipe.Short(hash)
	return true
}

// patchStatusNow writes status in the middle of a reconcile: an intent
// (capture requested, builder named, build captured) must be durable before
// Vercel is asked, so a restart or a delete finds it instead of asking twice
// or leaking what Vercel made. Only the mutation is sent; the rest of the
// status as this reconcile has it so far is kept in memory (the answer holds
// the stored status, without those changes) for the reconcile's own write.
func (r *SandboxSnapshotReconciler) patchStatusNow(ctx context.Context, snap *sandboxv1.SandboxSnapshot, mutate func(st *sandboxv1.SandboxSnapshotStatus)) error {
	before := snap.DeepCopy()
	mutate(&snap.Status)
	if apiequality.Semantic.DeepEqual(before.Status, snap.Status) {
		return nil
	}
	want := snap.Status.DeepCopy()
	err := r.Status().Patch(ctx, snap, client.MergeFrom(before))
	snap.Status = *want
	return err
}

// observe reads the Vercel snapshot id and reports it: Ready with size and
// expiry while it exists, Expired once Vercel expired or deleted it.
func (r *SandboxSnapshotReconciler) observe(ctx context.Context, snap *sandboxv1.SandboxSnapshot, id string) (ctrl.Result, error) {
	remote, err := r.api(ctx).GetSnapshot(ctx, id)
	state, err := classifyServed(remote, err, r.now())
	switch {
	case err != nil:
		return ctrl.Result{}, fmt.Errorf("get snapshot %s: %w", id, err)
	case state == servedGone || state == servedExpired:
		r.markExpired(snap, id)
		return ctrl.Result{}, nil
	case state == servedFailed:
		snap.Status.SnapshotID = id
		setSnapshotReady(snap, snapFailed(sandboxv1.ReasonCaptureFailed, fmt.Sprintf("Vercel reports snapshot %s as failed", id)))
		return ctrl.Result{}, nil
	}
	r.markReady(snap, remote)
	return ctrl.Result{RequeueAfter: r.nextObservation(remote)}, nil
}

// nextObservation polls at the usual interval, or right after the snapshot
// expires, whichever comes first.
func (r *SandboxSnapshotReconciler) nextObservation(s *vercel.Snapshot) time.Duration {
	d := r.pollInterval()
	if s.ExpiresAt > 0 {
		if until := time.Until(time.UnixMilli(s.ExpiresAt)) + time.Second; until < d {
			d = max(until, time.Second)
		}
	}
	return d
}

func (r *SandboxSnapshotReconciler) markReady(snap *sandboxv1.SandboxSnapshot, remote *vercel.Snapshot) {
	st := &snap.Status
	wasReady := st.ReadyToUse && st.SnapshotID == remote.ID
	st.SnapshotID = remote.ID
	st.SizeBytes = remote.SizeBytes
	st.CreatedAt = msTime(remote.CreatedAt)
	st.ExpiresAt = msTime(remote.ExpiresAt)
	st.Provenance = provenance(snap, remote)
	setSnapshotReady(snap, snapReadiness{sandboxv1.SnapshotReady, metav1.ConditionTrue, sandboxv1.ReasonSnapshotReady,
		fmt.Sprintf("Vercel snapshot %s is ready to use", remote.ID)})
	if !wasReady {
		r.Recorder.Eventf(snap, nil, corev1.EventTypeNormal, "Ready", "Observe", "Vercel snapshot %s (%d bytes) is ready to use", remote.ID, remote.SizeBytes)
	}
}

// provenance says who made the snapshot remote and from which session; a
// sandbox name recorded before is kept when status no longer holds it.
func provenance(snap *sandboxv1.SandboxSnapshot, remote *vercel.Snapshot) *sandboxv1.SnapshotProvenance {
	st := &snap.Status
	p := &sandboxv1.SnapshotProvenance{Origin: sandboxv1.SnapshotImported, SourceSessionID: remote.SourceSessionID}
	switch src := snap.Spec.Source; {
	case src.SandboxRef != nil:
		p.Origin = sandboxv1.SnapshotCaptured
		if st.Capture != nil {
			p.SourceVercelName = st.Capture.VercelName
		}
	case src.Recipe != nil:
		p.Origin = sandboxv1.SnapshotBuilt
		if st.Build != nil {
			p.SourceVercelName = st.Build.BuilderName
		}
	}
	if old := st.Provenance; p.SourceVercelName == "" && old != nil && old.SourceSessionID == p.SourceSessionID {
		p.SourceVercelName = old.SourceVercelName
	}
	return p
}

func (r *SandboxSnapshotReconciler) markExpired(snap *sandboxv1.SandboxSnapshot, id string) {
	st := &snap.Status
	if st.Phase != sandboxv1.SnapshotExpired {
		r.Recorder.Eventf(snap, nil, corev1.EventTypeWarning, sandboxv1.ReasonExpired, "Observe",
			"Vercel snapshot %s expired or was deleted outside the operator", id)
	}
	st.SnapshotID = id
	st.ExpiresAt = nil
	setSnapshotReady(snap, snapReadiness{sandboxv1.SnapshotExpired, metav1.ConditionFalse, sandboxv1.ReasonExpired,
		fmt.Sprintf("Vercel snapshot %s expired or was deleted; sandboxes can no longer boot from it", id)})
}

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

func (r *SandboxSnapshotReconciler) namespaceSnapshots(ctx context.Context, ns string) ([]sandboxv1.SandboxSnapshot, error) {
	list := &sandboxv1.SandboxSnapshotList{}
	if err := r.List(ctx, list, client.InNamespace(ns)); err != nil {
		return nil, fmt.Errorf("list SandboxSnapshots: %w", err)
	}
	sort.Slice(list.Items, func(i, j int) bool { return olderFirst(&list.Items[i], &list.Items[j]) })
	return list.Items, nil
}

// olderFirst orders objects by creation, then name: the first is the one
// that drives a shared build.
func olderFirst(a, b *sandboxv1.SandboxSnapshot) bool {
	if !a.CreationTimestamp.Equal(&b.CreationTimestamp) {
		return a.CreationTimestamp.Before(&b.CreationTimestamp)
	}
	return a.Name < b.Name
}

// snapshotExpiration is spec.expirationSeconds for CreateSnapshot: nil keeps
// Vercel's default, 0 never expires.
func snapshotExpiration(snap *sandboxv1.SandboxSnapshot) *time.Duration {
	if snap.Spec.ExpirationSeconds == nil {
		return nil
	}
	d := time.Duration(*snap.Spec.ExpirationSeconds) * time.Second
	return &d
}

func (r *SandboxSnapshotReconciler) now() time.Time {
	if r.Now != nil {
		return r.Now()
	}
	return time.Now()
}

func (r *SandboxSnapshotReconciler) pollInterval() time.Duration {
	if r.PollInterval <= 0 {
		return time.Minute
	}
	return r.PollInterval
}

// SetupWithManager registers the reconciler. Besides its own objects'
// spec, label and annotation changes, it is woken by: other SandboxSnapshots
// sharing a content hash (a shared build finishing or its driver going away),
// a base snapshot changing (its layers wait for it), and a Sandbox changing
// (a capture waits for it to run).
func (r *SandboxSnapshotReconciler) SetupWithManager(mgr ctrl.Manager) error {
	if err := indexSnapshots(context.Background(), mgr); err != nil {
		return err
	}
	if len(r.DigestKey) == 0 {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		key, err := LoadDigestKey(ctx, mgr.GetClient(), mgr.GetAPIReader(), r.DigestKeySecret)
		if err != nil {
			return err
		}
		r.DigestKey = key
	}
	r.proofKey = newProofKey(r.DigestKey)
	return ctrl.NewControllerManagedBy(mgr).
		For(&sandboxv1.SandboxSnapshot{}, builder.WithPredicates(r.Shard.predicate(), predicate.Or(
			predicate.GenerationChangedPredicate{},
			predicate.LabelChangedPredicate{},
			predicate.AnnotationChangedPredicate{},
		))).
		Watches(&sandboxv1.SandboxSnapshot{}, handler.EnqueueRequestsFromMapFunc(r.relatedSnapshots)).
		Watches(&sandboxv1.Sandbox{}, handler.EnqueueRequestsFromMapFunc(r.capturesOf)).
		Watches(&sandboxv1.SandboxQuota{}, handler.EnqueueRequestsFromMapFunc(r.quotaWaiters)).
		WithOptions(controllerOptions(r.MaxConcurrentReconciles, r.BackoffCap)).
		Named("sandboxsnapshot").
		Complete(r.Shard.guard(r))
}

// relatedSnapshots maps a SandboxSnapshot to the others that depend on it:
// those with the same content-hash label, and recipes layered on it.
func (r *SandboxSnapshotReconciler) relatedSnapshots(ctx context.Context, obj client.Object) []reconcile.Request {
	keys := []string{"base:" + obj.GetName()}
	if label := obj.GetLabels()[sandboxv1.LabelContentHash]; label != "" {
		keys = append(keys, "hash:"+label)
	}
	var related []sandboxv1.SandboxSnapshot
	for _, k := range keys {
		list := &sandboxv1.SandboxSnapshotList{}
		if err := r.List(ctx, list, client.InNamespace(obj.GetNamespace()), client.MatchingFields{indexDependsOn: k}); err != nil {
			return nil
		}
		related = append(related, list.Items...)
	}
	return requestsFor(related, func(o *sandboxv1.SandboxSnapshot) bool { return o.Name != obj.GetName() })
}

// capturesOf maps a Sandbox to the SandboxSnapshots waiting to capture it.
// One whose capture is under way (intent recorded) or done needs no Sandbox
// event: the capture annotates the Sandbox before its own result is written,
// so waking it then would run it again from a stale cached copy.
func (r *SandboxSnapshotReconciler) capturesOf(ctx context.Context, obj client.Object) []reconcile.Request {
	list := &sandboxv1.SandboxSnapshotList{}
	if err := r.List(ctx, list, client.InNamespace(obj.GetNamespace()), client.MatchingFields{indexSandboxRef: obj.GetName()}); err != nil {
		return nil
	}
	return requestsFor(list.Items, func(o *sandboxv1.SandboxSnapshot) bool {
		return o.Status.SnapshotID == "" && o.Status.Capture == nil
	})
}

// findSandbox reads a Sandbox of the namespace; nil when it does not exist.
func findSandbox(ctx context.Context, c client.Reader, ns, name string) (*sandboxv1.Sandbox, error) {
	sbx := &sandboxv1.Sandbox{}
	if err := c.Get(ctx, types.NamespacedName{Namespace: ns, Name: name}, sbx); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, nil
		}
		return nil, err
	}
	return sbx, nil
}
