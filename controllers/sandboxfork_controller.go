package controllers

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	sandboxv1 "github.com/getsentry/sandbox-controller/api/v1alpha1"
)

// forkWaitPoll is how often a fork re-checks a source it waits for.
const forkWaitPoll = 2 * time.Second

// SandboxForkReconciler makes a SandboxFork's children: ordinary Sandboxes
// booting from one SandboxSnapshot. It never calls Vercel itself; the
// Sandbox and SandboxSnapshot reconcilers do.
type SandboxForkReconciler struct {
	client.Client
	Recorder events.EventRecorder
	// Notifier, when set, announces Ready and Failed transitions to
	// the namespace's webhook.
	Notifier Notifier
	// MaxConcurrentReconciles bounds parallel reconciles (default 1).
	MaxConcurrentReconciles int
	// BackoffCap caps the retry delay after errors (default one minute).
	BackoffCap time.Duration
	// Now is the clock for failure deadlines (time.Now when nil).
	Now func() time.Time
	// Classes, when set, checks the fork's SandboxClass; its children and
	// its snapshot are of the same class.
	Classes *ClassClients
	// Shard is the part of the cluster this manager reconciles; the zero
	// value is all of it.
	Shard Shard
}

// +kubebuilder:rbac:groups=sandbox.sentry.io,resources=sandboxforks,verbs=get;list;watch;update;patch
// +kubebuilder:rbac:groups=sandbox.sentry.io,resources=sandboxforks/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=sandbox.sentry.io,resources=sandboxforks/finalizers,verbs=update
// +kubebuilder:rbac:groups=sandbox.sentry.io,resources=sandboxes,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups=sandbox.sentry.io,resources=sandboxsnapshots,verbs=get;list;watch;create;update;patch;delete

// Reconcile brings a fork's snapshot and children to its spec.
func (r *SandboxForkReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	return skeleton[*sandboxv1.SandboxFork]{
		classes:   r.Classes,
		client:    r.Client,
		recorder:  r.Recorder,
		notifier:  r.Notifier,
		finalizer: sandboxv1.SandboxForkFinalizer,
		pausable:  true,
		finalize:  r.finalize,
		reconcile: r.reconcileFork,
	}.run(ctx, req.NamespacedName, &sandboxv1.SandboxFork{})
}

func (r *SandboxForkReconciler) reconcileFork(ctx context.Context, fork *sandboxv1.SandboxFork) (ctrl.Result, error) {
	st := &fork.Status
	st.Selector = sandboxv1.LabelFork + "=" + labelValue(fork.Name)
	if st.Phase == sandboxv1.ForkFailed {
		// Failure is final: the source is immutable, so nothing would change.
		return ctrl.Result{}, nil
	}
	snap, res, err := r.snapshot(ctx, fork)
	if snap == nil || err != nil {
		return res, err
	}
	st.SnapshotRef = &sandboxv1.LocalObjectReference{Name: snap.Name}
	if !snap.Status.ReadyToUse {
		if snap.Status.Phase == sandboxv1.SnapshotFailed || snap.Status.Phase == sandboxv1.SnapshotExpired {
			return r.fail(fork, fmt.Sprintf("SandboxSnapshot %q is %s: %s", snap.Name, snap.Status.Phase, readyMessage(snap.Status.Conditions))), nil
		}
		phase, reason := sandboxv1.ForkPending, sandboxv1.ReasonWaitingForSource
		if fork.Spec.Source.SandboxRef != nil {
			phase, reason = sandboxv1.ForkCapturing, sandboxv1.ReasonCapturingSource
		}
		if r.pastDeadline(fork) {
			return r.fail(fork, fmt.Sprintf("SandboxSnapshot %q was not ready within %ds: %s", snap.Name, failureDeadline(fork), readyMessage(snap.Status.Conditions))), nil
		}
		st.Phase = phase
		setCondition(&st.Conditions, fork.Generation, sandboxv1.ConditionReady, metav1.ConditionFalse, reason,
			fmt.Sprintf("Waiting for SandboxSnapshot %q: %s", snap.Name, readyMessage(snap.Status.Conditions)))
		return ctrl.Result{RequeueAfter: r.untilDeadline(fork)}, nil
	}
	st.WaitingSince = nil
	inherited, unknown := inheritedSpec(fork, snap)
	if unknown != "" {
		r.refuseUnknownSpec(fork, snap, unknown)
		// Only a change of spec.template.inherit can help; it wakes the fork.
		return ctrl.Result{}, nil
	}
	refused, err := r.scale(ctx, fork, snap, inherited)
	if err != nil {
		return ctrl.Result{}, err
	}
	st.ObservedGeneration = fork.Generation
	if refused {
		// A grant of the Secrets to the creator wakes nothing: look again.
		return ctrl.Result{RequeueAfter: forkSecretRecheck}, nil
	}
	return ctrl.Result{}, nil
}

// forkSecretRecheck is how often a fork refused for its inherited Secrets
// asks again whether its creator may read them.
const forkSecretRecheck = time.Minute

// inheritedSpec is what the children inherit besides spec.template.spec: the
// source Sandbox's spec as the snapshot recorded it at capture time, never
// the live Sandbox, which may have changed (a shutdownTime now past) or be
// gone. A recipe has no source Sandbox, so nothing. When the snapshot should
// have a source spec but does not record one, unknown says why and the
// children must not be created: guessing would give them full internet access
// and no env.
func inheritedSpec(fork *sandboxv1.SandboxFork, snap *sandboxv1.SandboxSnapshot) (spec *sandboxv1.SourceSandboxSpec, unknown string) {
	switch src := snap.Spec.Source; {
	case fork.Spec.Template.Inherit == sandboxv1.InheritNone:
		return nil, ""
	case snap.Status.SourceSpec != nil:
		return snap.Status.SourceSpec, ""
	case src.Recipe != nil:
		return nil, ""
	case src.SnapshotID != nil:
		return nil, "it was imported by id"
	default:
		return nil, "its capture did not record it"
	}
}

// refuseUnknownSpec reports a source spec the fork cannot know, with one
// Warning event when the refusal starts.
func (r *SandboxForkReconciler) refuseUnknownSpec(fork *sandboxv1.SandboxFork, snap *sandboxv1.SandboxSnapshot, why string) {
	st := &fork.Status
	msg := fmt.Sprintf("SandboxSnapshot %q does not record the spec of the Sandbox it was taken from (%s), so the children's env and network policy are unknown; "+
		"set spec.template.inherit to None to create them from spec.template.spec alone", snap.Name, why)
	if !hasCondition(st.Conditions, sandboxv1.ConditionReady, sandboxv1.ReasonSourceSpecUnknown) {
		r.Recorder.Eventf(fork, snap, corev1.EventTypeWarning, sandboxv1.ReasonSourceSpecUnknown, "Fork", "%s", msg)
	}
	st.Phase = sandboxv1.ForkPending
	setCondition(&st.Conditions, fork.Generation, sandboxv1.ConditionReady, metav1.ConditionFalse, sandboxv1.ReasonSourceSpecUnknown, msg)
	st.ObservedGeneration = fork.Generation
}

// snapshot returns the SandboxSnapshot the children boot from, creating the
// fork's own capture for a sandboxRef source. A nil snapshot means
// "waiting", described in status.
func (r *SandboxForkReconciler) snapshot(ctx context.Context, fork *sandboxv1.SandboxFork) (*sandboxv1.SandboxSnapshot, ctrl.Result, error) {
	st := &fork.Status
	src := fork.Spec.Source
	if ref := src.SnapshotRef; ref != nil {
		snap := &sandboxv1.SandboxSnapshot{}
		if err := r.Get(ctx, types.NamespacedName{Namespace: fork.Namespace, Name: ref.Name}, snap); err != nil {
			if !apierrors.IsNotFound(err) {
				return nil, ctrl.Result{}, err
			}
			return nil, r.waitForSource(fork, fmt.Sprintf("SandboxSnapshot %q does not exist", ref.Name)), nil
		}
		if msg := classMismatch(ctx, snap, "SandboxSnapshot", "spec.source.snapshotRef"); msg != "" {
			return nil, r.classMismatch(fork, msg), nil
		}
		return snap, ctrl.Result{}, nil
	}

	snap := &sandboxv1.SandboxSnapshot{}
	key := types.NamespacedName{Namespace: fork.Namespace, Name: captureName(fork)}
	err := r.Get(ctx, key, snap)
	switch {
	case err == nil:
		return snap, ctrl.Result{}, nil
	case !apierrors.IsNotFound(err):
		return nil, ctrl.Result{}, err
	}
	source, err := findSandbox(ctx, r, fork.Namespace, src.SandboxRef.Name)
	if err != nil {
		return nil, ctrl.Result{}, err
	}
	if source == nil {
		return nil, r.waitForSource(fork, fmt.Sprintf("Sandbox %q does not exist", src.SandboxRef.Name)), nil
	}
	if msg := classMismatch(ctx, source, "Sandbox", "spec.source.sandboxRef"); msg != "" {
		return nil, r.classMismatch(fork, msg), nil
	}
	snap = &sandboxv1.SandboxSnapshot{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: fork.Namespace,
			Name:      key.Name,
			Labels:    map[string]string{sandboxv1.LabelFork: labelValue(fork.Name), sandboxv1.LabelSourceSandbox: labelValue(source.Name)},
		},
		Spec: sandboxv1.SandboxSnapshotSpec{
			Source:            sandboxv1.SandboxSnapshotSource{SandboxRef: &sandboxv1.LocalObjectReference{Name: source.Name}},
			KeepSourceRunning: fork.Spec.KeepSourceRunning,
			DeletionPolicy:    fork.Spec.DeletionPolicy,
		},
	}
	if err := controllerutil.SetControllerReference(fork, snap, r.Scheme()); err != nil {
		return nil, ctrl.Result{}, err
	}
	r.inheritClass(ctx, snap)
	if err := r.Create(ctx, snap); err != nil && !apierrors.IsAlreadyExists(err) {
		return nil, ctrl.Result{}, fmt.Errorf("create SandboxSnapshot %s: %w", key.Name, err)
	}
	r.Recorder.Eventf(fork, snap, corev1.EventTypeNormal, "CaptureRequested", "Create", "Created SandboxSnapshot %s of Sandbox %s", key.Name, source.Name)
	st.Phase = sandboxv1.ForkCapturing
	setCondition(&st.Conditions, fork.Generation, sandboxv1.ConditionReady, metav1.ConditionFalse, sandboxv1.ReasonCapturingSource,
		fmt.Sprintf("Capturing Sandbox %q into SandboxSnapshot %q", source.Name, key.Name))
	return nil, ctrl.Result{}, nil
}

// waitForSource reports a missing source, failing the fork past its deadline.
func (r *SandboxForkReconciler) waitForSource(fork *sandboxv1.SandboxFork, why string) ctrl.Result {
	if r.pastDeadline(fork) {
		return r.fail(fork, fmt.Sprintf("%s after %ds", why, failureDeadline(fork)))
	}
	fork.Status.Phase = sandboxv1.ForkPending
	setCondition(&fork.Status.Conditions, fork.Generation, sandboxv1.ConditionReady, metav1.ConditionFalse, sandboxv1.ReasonWaitingForSource, why)
	return ctrl.Result{RequeueAfter: min(forkWaitPoll, r.untilDeadline(fork))}
}

func (r *SandboxForkReconciler) fail(fork *sandboxv1.SandboxFork, msg string) ctrl.Result {
	fork.Status.Phase = sandboxv1.ForkFailed
	setCondition(&fork.Status.Conditions, fork.Generation, sandboxv1.ConditionReady, metav1.ConditionFalse, sandboxv1.ReasonSourceFailed, msg)
	r.Recorder.Eventf(fork, nil, corev1.EventTypeWarning, sandboxv1.ReasonSourceFailed, "Fork", "%s", msg)
	return ctrl.Result{}
}

func (r *SandboxForkReconciler) now() time.Time {
	if r.Now != nil {
		return r.Now()
	}
	return time.Now()
}

// failureDeadline is spec.failureDeadlineSeconds, defaulted.
func failureDeadline(fork *sandboxv1.SandboxFork) int64 {
	if fork.Spec.FailureDeadlineSeconds != nil {
		return *fork.Spec.FailureDeadlineSeconds
	}
	return 600
}

// deadline is when the current wait for the source fails the fork: the
// failure deadline after the wait began, not after the fork was created — a
// Ready fork whose SandboxSnapshot is rebuilt waits again for as long as a
// new one would. The first call of a wait starts it (status.waitingSince,
// written with the status).
func (r *SandboxForkReconciler) deadline(fork *sandboxv1.SandboxFork) time.Time {
	if fork.Status.WaitingSince == nil {
		fork.Status.WaitingSince = &metav1.Time{Time: r.now()}
	}
	return fork.Status.WaitingSince.Add(time.Duration(failureDeadline(fork)) * time.Second)
}

// pastDeadline reports whether the wait for the source has lasted the
// failure deadline.
func (r *SandboxForkReconciler) pastDeadline(fork *sandboxv1.SandboxFork) bool {
	return !r.now().Before(r.deadline(fork))
}

// untilDeadline is the requeue delay that re-checks a wait at its deadline.
func (r *SandboxForkReconciler) untilDeadline(fork *sandboxv1.SandboxFork) time.Duration {
	return max(time.Second, r.deadline(fork).Sub(r.now())+time.Second)
}

// captureName is <fork>-capture, shortened and hashed like childName.
func captureName(fork *sandboxv1.SandboxFork) string { return derivedName(fork.Name, "-capture") }

// finalize deletes (or, with Retain, releases) the children and the fork's
// own snapshot, and is done once they are gone, so a deleted fork leaves no
// Vercel sandbox behind.
func (r *SandboxForkReconciler) finalize(ctx context.Context, fork *sandboxv1.SandboxFork) (bool, ctrl.Result, error) {
	children, owned, err := r.owned(ctx, fork)
	if err != nil {
		return false, ctrl.Result{}, err
	}
	if fork.Spec.DeletionPolicy == sandboxv1.DeletionPolicyRetain {
		if err := r.releaseAll(ctx, fork, owned); err != nil {
			return false, ctrl.Result{}, err
		}
		return true, ctrl.Result{}, nil
	}
	if err := r.deleteOwned(ctx, owned, len(children) > 0); err != nil {
		return false, ctrl.Result{}, err
	}
	if len(owned) > 0 {
		// Owned objects' deletions wake this reconcile through Owns().
		return false, ctrl.Result{RequeueAfter: forkWaitPoll}, nil
	}
	return true, ctrl.Result{}, nil
}

// owned is what the fork controls: its children and, after them, its
// capture snapshot.
func (r *SandboxForkReconciler) owned(ctx context.Context, fork *sandboxv1.SandboxFork) ([]sandboxv1.Sandbox, []client.Object, error) {
	children, err := r.children(ctx, fork)
	if err != nil {
		return nil, nil, err
	}
	owned := make([]client.Object, 0, len(children)+1)
	for i := range children {
		owned = append(owned, &children[i])
	}
	snap := &sandboxv1.SandboxSnapshot{}
	err = r.Get(ctx, types.NamespacedName{Namespace: fork.Namespace, Name: captureName(fork)}, snap)
	switch {
	case err == nil && metav1.IsControlledBy(snap, fork):
		owned = append(owned, snap)
	case err != nil && !apierrors.IsNotFound(err):
		return nil, nil, err
	}
	return children, owned, nil
}

// releaseAll releases every owned object (deletionPolicy Retain), with one
// event for them all.
func (r *SandboxForkReconciler) releaseAll(ctx context.Context, fork *sandboxv1.SandboxFork, owned []client.Object) error {
	for _, obj := range owned {
		if err := r.release(ctx, fork, obj); err != nil {
			return err
		}
	}
	if len(owned) > 0 {
		r.Recorder.Eventf(fork, nil, corev1.EventTypeNormal, "Released", "Delete", "Released %d children and snapshots (deletionPolicy Retain)", len(owned))
	}
	return nil
}

// deleteOwned deletes the owned objects not being deleted yet; the snapshot
// waits while children remain.
func (r *SandboxForkReconciler) deleteOwned(ctx context.Context, owned []client.Object, childrenLeft bool) error {
	for _, obj := range owned {
		// Children go first: their snapshot must outlive them while they boot.
		if _, isSnap := obj.(*sandboxv1.SandboxSnapshot); isSnap && childrenLeft {
			continue
		}
		if obj.GetDeletionTimestamp().IsZero() {
			if err := r.Delete(ctx, obj); client.IgnoreNotFound(err) != nil {
				return err
			}
		}
	}
	return nil
}

// release removes the fork's owner reference, leaving the object in place.
func (r *SandboxForkReconciler) release(ctx context.Context, fork *sandboxv1.SandboxFork, obj client.Object) error {
	before := obj.DeepCopyObject().(client.Object)
	refs := obj.GetOwnerReferences()[:0]
	for _, ref := range obj.GetOwnerReferences() {
		if ref.UID != fork.UID {
			refs = append(refs, ref)
		}
	}
	obj.SetOwnerReferences(refs)
	return client.IgnoreNotFound(r.Patch(ctx, obj, client.MergeFrom(before)))
}

// SetupWithManager registers the reconciler. Child and capture changes wake
// the fork through Owns(); a SandboxSnapshot named by spec.source.snapshotRef
// wakes the forks that reference it.
func (r *SandboxForkReconciler) SetupWithManager(mgr ctrl.Manager) error {
	if err := indexForks(context.Background(), mgr); err != nil {
		return err
	}
	return ctrl.NewControllerManagedBy(mgr).
		For(&sandboxv1.SandboxFork{}, builder.WithPredicates(r.Shard.predicate())).
		Owns(&sandboxv1.Sandbox{}).
		Owns(&sandboxv1.SandboxSnapshot{}).
		Watches(&sandboxv1.SandboxSnapshot{}, handler.EnqueueRequestsFromMapFunc(r.forksReferencing)).
		WithOptions(controllerOptions(r.MaxConcurrentReconciles, r.BackoffCap)).
		Named("sandboxfork").
		Complete(r.Shard.guard(r))
}

func (r *SandboxForkReconciler) forksReferencing(ctx context.Context, obj client.Object) []reconcile.Request {
	forks := &sandboxv1.SandboxForkList{}
	if err := r.List(ctx, forks, client.InNamespace(obj.GetNamespace()), client.MatchingFields{indexSnapshotRef: obj.GetName()}); err != nil {
		return nil
	}
	return requestsFor(forks.Items, func(*sandboxv1.SandboxFork) bool { return true })
}
