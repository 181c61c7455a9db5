package controllers

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
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
	// MaxConcurrentReconciles bounds parallel reconciles (default 1).
	MaxConcurrentReconciles int
	// BackoffCap caps the retry delay after errors (default one minute).
	BackoffCap time.Duration
	// Now is the clock for failure deadlines (time.Now when nil).
	Now func() time.Time
}

// +kubebuilder:rbac:groups=sandbox.sentry.io,resources=sandboxforks,verbs=get;list;watch;update;patch
// +kubebuilder:rbac:groups=sandbox.sentry.io,resources=sandboxforks/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=sandbox.sentry.io,resources=sandboxforks/finalizers,verbs=update
// +kubebuilder:rbac:groups=sandbox.sentry.io,resources=sandboxes,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups=sandbox.sentry.io,resources=sandboxsnapshots,verbs=get;list;watch;create;update;patch;delete

// Reconcile brings a fork's snapshot and children to its spec.
func (r *SandboxForkReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	return skeleton[*sandboxv1.SandboxFork]{
		client:    r.Client,
		recorder:  r.Recorder,
		finalizer: sandboxv1.SandboxForkFinalizer,
		pausable:  true,
		finalize:  r.finalize,
		reconcile: r.reconcileFork,
	}.run(ctx, req.NamespacedName, &sandboxv1.SandboxFork{})
}

func (r *SandboxForkReconciler) reconcileFork(ctx context.Context, fork *sandboxv1.SandboxFork) (ctrl.Result, error) {
	st := &fork.Status
	st.Selector = sandboxv1.LabelFork + "=" + fork.Name
	if st.Phase == sandboxv1.ForkFailed {
		// Failure is final: the source is immutable, so nothing would change.
		return ctrl.Result{}, nil
	}
	snap, source, res, err := r.snapshot(ctx, fork)
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
			return r.fail(fork, fmt.Sprintf("SandboxSnapshot %q was not ready within %ds: %s", snap.Name, *fork.Spec.FailureDeadlineSeconds, readyMessage(snap.Status.Conditions))), nil
		}
		st.Phase = phase
		setCondition(&st.Conditions, fork.Generation, sandboxv1.ConditionReady, metav1.ConditionFalse, reason,
			fmt.Sprintf("Waiting for SandboxSnapshot %q: %s", snap.Name, readyMessage(snap.Status.Conditions)))
		return ctrl.Result{RequeueAfter: r.untilDeadline(fork)}, nil
	}
	if err := r.scale(ctx, fork, snap, source); err != nil {
		return ctrl.Result{}, err
	}
	st.ObservedGeneration = fork.Generation
	return ctrl.Result{}, nil
}

// snapshot returns the SandboxSnapshot the children boot from, creating the
// fork's own capture for a sandboxRef source, and the source Sandbox if any.
// A nil snapshot means "waiting", described in status.
func (r *SandboxForkReconciler) snapshot(ctx context.Context, fork *sandboxv1.SandboxFork) (*sandboxv1.SandboxSnapshot, *sandboxv1.Sandbox, ctrl.Result, error) {
	st := &fork.Status
	src := fork.Spec.Source
	if ref := src.SnapshotRef; ref != nil {
		snap := &sandboxv1.SandboxSnapshot{}
		if err := r.Get(ctx, types.NamespacedName{Namespace: fork.Namespace, Name: ref.Name}, snap); err != nil {
			if !apierrors.IsNotFound(err) {
				return nil, nil, ctrl.Result{}, err
			}
			return nil, nil, r.waitForSource(fork, fmt.Sprintf("SandboxSnapshot %q does not exist", ref.Name)), nil
		}
		return snap, nil, ctrl.Result{}, nil
	}

	source, err := findSandbox(ctx, r, fork.Namespace, src.SandboxRef.Name)
	if err != nil {
		return nil, nil, ctrl.Result{}, err
	}
	snap := &sandboxv1.SandboxSnapshot{}
	key := types.NamespacedName{Namespace: fork.Namespace, Name: captureName(fork)}
	err = r.Get(ctx, key, snap)
	switch {
	case err == nil:
		return snap, source, ctrl.Result{}, nil
	case !apierrors.IsNotFound(err):
		return nil, nil, ctrl.Result{}, err
	case source == nil:
		return nil, nil, r.waitForSource(fork, fmt.Sprintf("Sandbox %q does not exist", src.SandboxRef.Name)), nil
	}
	snap = &sandboxv1.SandboxSnapshot{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: fork.Namespace,
			Name:      key.Name,
			Labels:    map[string]string{sandboxv1.LabelFork: fork.Name, sandboxv1.LabelSourceSandbox: source.Name},
		},
		Spec: sandboxv1.SandboxSnapshotSpec{
			Source:            sandboxv1.SandboxSnapshotSource{SandboxRef: &sandboxv1.LocalObjectReference{Name: source.Name}},
			KeepSourceRunning: fork.Spec.KeepSourceRunning,
			DeletionPolicy:    fork.Spec.DeletionPolicy,
		},
	}
	if err := controllerutil.SetControllerReference(fork, snap, r.Scheme()); err != nil {
		return nil, nil, ctrl.Result{}, err
	}
	if err := r.Create(ctx, snap); err != nil && !apierrors.IsAlreadyExists(err) {
		return nil, nil, ctrl.Result{}, fmt.Errorf("create SandboxSnapshot %s: %w", key.Name, err)
	}
	r.Recorder.Eventf(fork, snap, corev1.EventTypeNormal, "CaptureRequested", "Create", "Created SandboxSnapshot %s of Sandbox %s", key.Name, source.Name)
	st.Phase = sandboxv1.ForkCapturing
	setCondition(&st.Conditions, fork.Generation, sandboxv1.ConditionReady, metav1.ConditionFalse, sandboxv1.ReasonCapturingSource,
		fmt.Sprintf("Capturing Sandbox %q into SandboxSnapshot %q", source.Name, key.Name))
	return nil, nil, ctrl.Result{}, nil
}

// waitForSource reports a missing source, failing the fork past its deadline.
func (r *SandboxForkReconciler) waitForSource(fork *sandboxv1.SandboxFork, why string) ctrl.Result {
	if r.pastDeadline(fork) {
		return r.fail(fork, fmt.Sprintf("%s after %ds", why, *fork.Spec.FailureDeadlineSeconds))
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

func (r *SandboxForkReconciler) deadline(fork *sandboxv1.SandboxFork) time.Time {
	secs := int64(600)
	if fork.Spec.FailureDeadlineSeconds != nil {
		secs = *fork.Spec.FailureDeadlineSeconds
	}
	return fork.CreationTimestamp.Add(time.Duration(secs) * time.Second)
}

func (r *SandboxForkReconciler) pastDeadline(fork *sandboxv1.SandboxFork) bool {
	return !r.now().Before(r.deadline(fork))
}

// untilDeadline is the requeue delay that re-checks a wait at its deadline.
func (r *SandboxForkReconciler) untilDeadline(fork *sandboxv1.SandboxFork) time.Duration {
	return max(time.Second, r.deadline(fork).Sub(r.now())+time.Second)
}

// scale creates the missing children, deletes the surplus (highest indexes
// first) and records every child's state.
func (r *SandboxForkReconciler) scale(ctx context.Context, fork *sandboxv1.SandboxFork, snap *sandboxv1.SandboxSnapshot, source *sandboxv1.Sandbox) error {
	want := int32(1)
	if fork.Spec.Replicas != nil {
		want = *fork.Spec.Replicas
	}
	children, err := r.children(ctx, fork)
	if err != nil {
		return err
	}
	have := map[int32]*sandboxv1.Sandbox{}
	for i := range children {
		if idx, ok := childIndex(fork, &children[i]); ok {
			have[idx] = &children[i]
		}
	}
	for idx, child := range have {
		if idx >= want && child.DeletionTimestamp.IsZero() {
			if err := r.Delete(ctx, child); client.IgnoreNotFound(err) != nil {
				return fmt.Errorf("delete child %s: %w", child.Name, err)
			}
			r.Recorder.Eventf(fork, child, corev1.EventTypeNormal, "ScaledDown", "Delete", "Deleted child Sandbox %s", child.Name)
		}
	}
	for idx := int32(0); idx < want; idx++ {
		if _, ok := have[idx]; ok {
			continue
		}
		child := r.newChild(fork, snap, source, idx)
		if err := r.Create(ctx, child); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("create child %s: %w", child.Name, err)
		}
		r.Recorder.Eventf(fork, child, corev1.EventTypeNormal, "ChildCreated", "Create", "Created child Sandbox %s", child.Name)
		have[idx] = child
	}

	st := &fork.Status
	st.Children = st.Children[:0]
	st.Replicas, st.ReadyReplicas = 0, 0
	idxs := make([]int32, 0, len(have))
	for idx := range have {
		idxs = append(idxs, idx)
	}
	sort.Slice(idxs, func(i, j int) bool { return idxs[i] < idxs[j] })
	for _, idx := range idxs {
		child := have[idx]
		if idx >= want {
			continue // being deleted
		}
		ready := meta.IsStatusConditionTrue(child.Status.Conditions, sandboxv1.ConditionReady)
		st.Children = append(st.Children, sandboxv1.ForkChildStatus{Name: child.Name, Phase: child.Status.Phase, Ready: ready})
		st.Replicas++
		if ready {
			st.ReadyReplicas++
		}
	}
	if len(st.Children) == 0 {
		st.Children = nil
	}
	st.ReadyText = fmt.Sprintf("%d/%d", st.ReadyReplicas, want)
	if st.ReadyReplicas == want && st.Replicas == want {
		st.Phase = sandboxv1.ForkReady
		setCondition(&st.Conditions, fork.Generation, sandboxv1.ConditionReady, metav1.ConditionTrue, sandboxv1.ReasonAllReady,
			fmt.Sprintf("%d of %d children are Ready", st.ReadyReplicas, want))
	} else {
		st.Phase = sandboxv1.ForkCreating
		setCondition(&st.Conditions, fork.Generation, sandboxv1.ConditionReady, metav1.ConditionFalse, sandboxv1.ReasonCreatingChildren,
			fmt.Sprintf("%d of %d children are Ready", st.ReadyReplicas, want))
	}
	return nil
}

// newChild builds child number idx: the source Sandbox's spec (if any) with
// the template's overrides, booting from the fork's snapshot. Setup commands
// are not copied: the snapshot already holds their result.
func (r *SandboxForkReconciler) newChild(fork *sandboxv1.SandboxFork, snap *sandboxv1.SandboxSnapshot, source *sandboxv1.Sandbox, idx int32) *sandboxv1.Sandbox {
	var spec sandboxv1.SandboxSpec
	labels := map[string]string{}
	for k, v := range fork.Spec.Template.Metadata.Labels {
		labels[k] = v
	}
	labels[sandboxv1.LabelFork] = fork.Name
	labels[sandboxv1.LabelForkIndex] = strconv.Itoa(int(idx))
	labels[sandboxv1.LabelSourceSnapshot] = snap.Name
	if source != nil {
		spec = *source.Spec.DeepCopy()
		spec.Setup = nil
		labels[sandboxv1.LabelSourceSandbox] = source.Name
	} else if ref := fork.Spec.Source.SandboxRef; ref != nil {
		labels[sandboxv1.LabelSourceSandbox] = ref.Name
	}
	spec.Source = sandboxv1.SandboxSource{SnapshotRef: &sandboxv1.LocalObjectReference{Name: snap.Name}}
	spec.DeletionPolicy = fork.Spec.DeletionPolicy
	o := fork.Spec.Template.Spec
	if o.Resources != nil {
		spec.Resources = o.Resources.DeepCopy()
	}
	if o.Env != nil {
		spec.Env = append([]sandboxv1.EnvVar(nil), o.Env...)
	}
	if o.TimeoutSeconds != nil {
		spec.TimeoutSeconds = o.TimeoutSeconds
	}
	if o.Ports != nil {
		spec.Ports = append([]int32(nil), o.Ports...)
	}
	if o.NetworkPolicy != nil {
		spec.NetworkPolicy = o.NetworkPolicy.DeepCopy()
	}
	if o.State != "" {
		spec.State = o.State
	}
	child := &sandboxv1.Sandbox{
		ObjectMeta: metav1.ObjectMeta{
			Namespace:   fork.Namespace,
			Name:        fmt.Sprintf("%s-%d", fork.Name, idx),
			Labels:      labels,
			Annotations: fork.Spec.Template.Metadata.Annotations,
		},
		Spec: spec,
	}
	// The fork is always the controller owner; the error is impossible for
	// two namespaced objects in one namespace.
	_ = controllerutil.SetControllerReference(fork, child, r.Scheme())
	return child
}

func (r *SandboxForkReconciler) children(ctx context.Context, fork *sandboxv1.SandboxFork) ([]sandboxv1.Sandbox, error) {
	list := &sandboxv1.SandboxList{}
	if err := r.List(ctx, list, client.InNamespace(fork.Namespace), client.MatchingLabels{sandboxv1.LabelFork: fork.Name}); err != nil {
		return nil, err
	}
	out := list.Items[:0]
	for _, c := range list.Items {
		if metav1.IsControlledBy(&c, fork) {
			out = append(out, c)
		}
	}
	return out, nil
}

func childIndex(fork *sandboxv1.SandboxFork, child *sandboxv1.Sandbox) (int32, bool) {
	s, ok := strings.CutPrefix(child.Name, fork.Name+"-")
	if !ok {
		return 0, false
	}
	n, err := strconv.ParseInt(s, 10, 32)
	return int32(n), err == nil && n >= 0
}

func captureName(fork *sandboxv1.SandboxFork) string { return fork.Name + "-capture" }

// finalize deletes (or, with Retain, releases) the children and the fork's
// own snapshot, and is done once they are gone, so a deleted fork leaves no
// Vercel sandbox behind.
func (r *SandboxForkReconciler) finalize(ctx context.Context, fork *sandboxv1.SandboxFork) (bool, ctrl.Result, error) {
	children, err := r.children(ctx, fork)
	if err != nil {
		return false, ctrl.Result{}, err
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
		return false, ctrl.Result{}, err
	}

	if fork.Spec.DeletionPolicy == sandboxv1.DeletionPolicyRetain {
		for _, obj := range owned {
			if err := r.release(ctx, fork, obj); err != nil {
				return false, ctrl.Result{}, err
			}
		}
		if len(owned) > 0 {
			r.Recorder.Eventf(fork, nil, corev1.EventTypeNormal, "Released", "Delete", "Released %d children and snapshots (deletionPolicy Retain)", len(owned))
		}
	} else {
		// Children go first: their snapshot must outlive them while they boot.
		for _, obj := range owned {
			if _, isSnap := obj.(*sandboxv1.SandboxSnapshot); isSnap && len(children) > 0 {
				continue
			}
			if obj.GetDeletionTimestamp().IsZero() {
				if err := r.Delete(ctx, obj); client.IgnoreNotFound(err) != nil {
					return false, ctrl.Result{}, err
				}
			}
		}
		if len(owned) > 0 {
			// Owned objects' deletions wake this reconcile through Owns().
			return false, ctrl.Result{RequeueAfter: forkWaitPoll}, nil
		}
	}
	return true, ctrl.Result{}, nil
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

func readyMessage(conds []metav1.Condition) string {
	if c := meta.FindStatusCondition(conds, sandboxv1.ConditionReady); c != nil {
		return c.Reason + ": " + c.Message
	}
	return "not observed yet"
}

// SetupWithManager registers the reconciler. Child and capture changes wake
// the fork through Owns(); a SandboxSnapshot named by spec.source.snapshotRef
// wakes the forks that reference it.
func (r *SandboxForkReconciler) SetupWithManager(mgr ctrl.Manager) error {
	if err := indexForks(context.Background(), mgr); err != nil {
		return err
	}
	return ctrl.NewControllerManagedBy(mgr).
		For(&sandboxv1.SandboxFork{}).
		Owns(&sandboxv1.Sandbox{}).
		Owns(&sandboxv1.SandboxSnapshot{}).
		Watches(&sandboxv1.SandboxSnapshot{}, handler.EnqueueRequestsFromMapFunc(r.forksReferencing)).
		WithOptions(controllerOptions(r.MaxConcurrentReconciles, r.BackoffCap)).
		Named("sandboxfork").
		Complete(r)
}

func (r *SandboxForkReconciler) forksReferencing(ctx context.Context, obj client.Object) []reconcile.Request {
	forks := &sandboxv1.SandboxForkList{}
	if err := r.List(ctx, forks, client.InNamespace(obj.GetNamespace()), client.MatchingFields{indexSnapshotRef: obj.GetName()}); err != nil {
		return nil
	}
	return requestsFor(forks.Items, func(*sandboxv1.SandboxFork) bool { return true })
}
