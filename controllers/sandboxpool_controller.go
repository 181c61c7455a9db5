package controllers

// The SandboxPool controller keeps a number of warm member Sandboxes that a
// Sandbox with spec.poolRef takes instead of creating its own
// (sandbox_claim.go). Members are ordinary Sandboxes the pool owns, so
// quotas, classes, metrics and deletion apply to them as to any other.

import (
	"context"
	"fmt"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	sandboxv1 "github.com/getsentry/sandbox-controller/api/v1alpha1"
	"github.com/getsentry/sandbox-controller/internal/metrics"
)

// poolRecheck is how often a pool with a demand policy recomputes its
// target (the claim rate decays without any event).
const poolRecheck = 30 * time.Second

// SandboxPoolReconciler keeps each SandboxPool's members.
type SandboxPoolReconciler struct {
	client.Client
	// APIReader reads claimants uncached before a claimed member whose
	// claimant seems gone is deleted: the cache may not show a claimant
	// created a moment ago.
	APIReader               client.Reader
	Recorder                events.EventRecorder
	MaxConcurrentReconciles int
	BackoffCap              time.Duration
	Shard                   Shard
	// Now is the clock of the claim rate; time.Now when nil.
	Now func() time.Time

	// creating holds, per pool, the members created but not yet seen in
	// the cache, so a reconcile on a stale cache does not create them again.
	creating sync.Map // types.NamespacedName -> *pendingCreates
}

// pendingCreates are a pool's members created and not yet seen.
type pendingCreates struct {
	mu    sync.Mutex
	names map[string]time.Time
}

// pendingCreateTTL bounds how long a created member not seen in the cache
// counts: a create whose object never shows up (deleted at once) is forgotten.
const pendingCreateTTL = 30 * time.Second

// +kubebuilder:rbac:groups=sandbox.sentry.io,resources=sandboxpools,verbs=get;list;watch;update;patch
// +kubebuilder:rbac:groups=sandbox.sentry.io,resources=sandboxpools/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=sandbox.sentry.io,resources=sandboxpools/finalizers,verbs=update
// +kubebuilder:rbac:groups=sandbox.sentry.io,resources=sandboxes,verbs=get;list;watch;create;update;patch;delete

// Reconcile brings a pool's members to its target.
func (r *SandboxPoolReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	return skeleton[*sandboxv1.SandboxPool]{
		client:    r.Client,
		recorder:  r.Recorder,
		finalizer: sandboxv1.SandboxPoolFinalizer,
		pausable:  true,
		forget:    r.forget,
		finalize:  r.finalize,
		reconcile: r.reconcilePool,
	}.run(ctx, req.NamespacedName, &sandboxv1.SandboxPool{})
}

func (r *SandboxPoolReconciler) reconcilePool(ctx context.Context, pool *sandboxv1.SandboxPool) (ctrl.Result, error) {
	st := &pool.Status
	st.Selector = sandboxv1.LabelPool + "=" + labelValue(pool.Name)
	snapshotID, waiting, err := r.templateSnapshot(ctx, pool)
	if err != nil {
		return ctrl.Result{}, err
	}
	members, err := r.members(ctx, pool)
	if err != nil {
		return ctrl.Result{}, err
	}
	claimants, err := r.claimants(ctx, pool)
	if err != nil {
		return ctrl.Result{}, err
	}
	stats := poolClaimStats(claimants, r.now())
	st.Hits, st.Misses, st.ClaimsPerMinute = stats.hits, stats.misses, formatRate(stats.perMinute)
	st.ReplenishSeconds = replenishSeconds(members, st.ReplenishSeconds)
	st.TargetReplicas = poolTarget(&pool.Spec, stats.perMinute, st.ReplenishSeconds)
	if waiting != "" {
		st.ObservedGeneration = pool.Generation
		setCondition(&st.Conditions, pool.Generation, sandboxv1.ConditionReady, metav1.ConditionFalse, sandboxv1.ReasonPoolWaitingForSnapshot, waiting)
		return ctrl.Result{RequeueAfter: snapshotRefPoll}, nil
	}
	st.SnapshotID = snapshotID
	if err := r.keepMembers(ctx, pool, members, claimants); err != nil {
		return ctrl.Result{}, err
	}
	st.ObservedGeneration = pool.Generation
	r.recordMetrics(pool)
	if pool.Spec.Policy != nil {
		return ctrl.Result{RequeueAfter: poolRecheck}, nil
	}
	return ctrl.Result{}, nil
}

// templateSnapshot is the Vercel snapshot the template's snapshotRef boots
// from now ("" for another source); waiting says why members cannot be made
// yet.
func (r *SandboxPoolReconciler) templateSnapshot(ctx context.Context, pool *sandboxv1.SandboxPool) (id, waiting string, err error) {
	ref := pool.Spec.Template.Spec.Source.SnapshotRef
	if ref == nil {
		return "", "", nil
	}
	snap := &sandboxv1.SandboxSnapshot{}
	switch err := r.Get(ctx, types.NamespacedName{Namespace: pool.Namespace, Name: ref.Name}, snap); {
	case apierrors.IsNotFound(err):
		return "", fmt.Sprintf("SandboxSnapshot %q of spec.template.spec.source.snapshotRef does not exist", ref.Name), nil
	case err != nil:
		return "", "", err
	}
	if !snap.Status.ReadyToUse || snap.Status.SnapshotID == "" {
		return "", fmt.Sprintf("Waiting for SandboxSnapshot %q: %s", ref.Name, readyMessage(snap.Status.Conditions)), nil
	}
	return snap.Status.SnapshotID, "", nil
}

// members are the Sandboxes the pool controls.
func (r *SandboxPoolReconciler) members(ctx context.Context, pool *sandboxv1.SandboxPool) ([]sandboxv1.Sandbox, error) {
	list := &sandboxv1.SandboxList{}
	if err := r.List(ctx, list, client.InNamespace(pool.Namespace), client.MatchingLabels{sandboxv1.LabelPool: labelValue(pool.Name)}); err != nil {
		return nil, fmt.Errorf("list members: %w", err)
	}
	out := list.Items[:0]
	for i := range list.Items {
		if metav1.IsControlledBy(&list.Items[i], pool) {
			out = append(out, list.Items[i])
		}
	}
	return out, nil
}

// claimants are the Sandboxes whose spec.poolRef names the pool.
func (r *SandboxPoolReconciler) claimants(ctx context.Context, pool *sandboxv1.SandboxPool) ([]sandboxv1.Sandbox, error) {
	list := &sandboxv1.SandboxList{}
	if err := r.List(ctx, list, client.InNamespace(pool.Namespace), client.MatchingFields{indexPoolRef: pool.Name}); err != nil {
		return nil, fmt.Errorf("list claimants: %w", err)
	}
	return list.Items, nil
}

// finalize deletes the unclaimed members, whose finalizers delete their
// Vercel sandboxes, and lets the pool go once none is left. A member a
// claimant marked is the claimant's: it finishes the claim (or, gone, the
// member is deleted as an orphan) and deletes the member itself.
func (r *SandboxPoolReconciler) finalize(ctx context.Context, pool *sandboxv1.SandboxPool) (bool, ctrl.Result, error) {
	members, err := r.members(ctx, pool)
	if err != nil {
		return false, ctrl.Result{}, err
	}
	if len(members) == 0 {
		return true, ctrl.Result{}, nil
	}
	claimants, err := r.claimants(ctx, pool)
	if err != nil {
		return false, ctrl.Result{}, err
	}
	for i := range members {
		m := &members[i]
		if !m.DeletionTimestamp.IsZero() {
			continue
		}
		if m.Labels[sandboxv1.LabelClaimedBy] != "" {
			if err := r.deleteOrphan(ctx, pool, m, claimants); err != nil {
				return false, ctrl.Result{}, err
			}
			continue
		}
		if err := r.deleteMember(ctx, pool, m, "PoolDeleted", "the pool is being deleted"); err != nil {
			return false, ctrl.Result{}, err
		}
	}
	// Members' deletions wake the pool through Owns().
	return false, ctrl.Result{RequeueAfter: forkWaitPoll}, nil
}

func (r *SandboxPoolReconciler) now() time.Time {
	if r.Now != nil {
		return r.Now()
	}
	return time.Now()
}

func (r *SandboxPoolReconciler) forget(key types.NamespacedName) {
	r.creating.Delete(key)
	metrics.ForgetPool(key.Namespace, key.Name)
}

// recordMetrics publishes the pool's size.
func (r *SandboxPoolReconciler) recordMetrics(pool *sandboxv1.SandboxPool) {
	st := &pool.Status
	metrics.SetPoolSize(pool.Namespace, pool.Name, st.Replicas, st.ReadyReplicas, st.TargetReplicas)
}

// SetupWithManager registers the reconciler: members wake their pool through
// Owns(), claimants through spec.poolRef, and the template's SandboxSnapshot
// (a rebuild) the pools that boot from it.
func (r *SandboxPoolReconciler) SetupWithManager(mgr ctrl.Manager) error {
	if err := indexPools(context.Background(), mgr); err != nil {
		return err
	}
	return ctrl.NewControllerManagedBy(mgr).
		For(&sandboxv1.SandboxPool{}, builder.WithPredicates(r.Shard.predicate())).
		Owns(&sandboxv1.Sandbox{}).
		Watches(&sandboxv1.Sandbox{}, handler.EnqueueRequestsFromMapFunc(claimantPool)).
		Watches(&sandboxv1.SandboxSnapshot{}, handler.EnqueueRequestsFromMapFunc(r.poolsReferencing)).
		WithOptions(controllerOptions(r.MaxConcurrentReconciles, r.BackoffCap)).
		Named("sandboxpool").
		Complete(r.Shard.guard(r))
}

// claimantPool wakes the pool a Sandbox's spec.poolRef names.
func claimantPool(_ context.Context, obj client.Object) []reconcile.Request {
	sbx, ok := obj.(*sandboxv1.Sandbox)
	if !ok || sbx.Spec.PoolRef == nil {
		return nil
	}
	return []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: sbx.Namespace, Name: sbx.Spec.PoolRef.Name}}}
}

func (r *SandboxPoolReconciler) poolsReferencing(ctx context.Context, obj client.Object) []reconcile.Request {
	pools := &sandboxv1.SandboxPoolList{}
	if err := r.List(ctx, pools, client.InNamespace(obj.GetNamespace()), client.MatchingFields{indexSnapshotRef: obj.GetName()}); err != nil {
		return nil
	}
	return requestsFor(pools.Items, func(*sandboxv1.SandboxPool) bool { return true })
}

// indexPools indexes pools by their template's snapshotRef and Sandboxes by
// their spec.poolRef.
func indexPools(ctx context.Context, mgr ctrl.Manager) error {
	if err := indexRef(ctx, mgr, &sandboxv1.SandboxPool{}, indexSnapshotRef, func(o client.Object) *sandboxv1.LocalObjectReference {
		return o.(*sandboxv1.SandboxPool).Spec.Template.Spec.Source.SnapshotRef
	}); err != nil {
		return err
	}
	return mgr.GetFieldIndexer().IndexField(ctx, &sandboxv1.Sandbox{}, indexPoolRef, func(o client.Object) []string {
		if ref := o.(*sandboxv1.Sandbox).Spec.PoolRef; ref != nil {
			return []string{ref.Name}
		}
		return nil
	})
}

// indexPoolRef indexes Sandboxes by the pool their spec.poolRef names.
const indexPoolRef = "spec.poolRef.name"

// eventDeleted is the note of a member deletion event.
func eventDeleted(rec events.EventRecorder, pool *sandboxv1.SandboxPool, m *sandboxv1.Sandbox, reason, why string) {
	rec.Eventf(pool, m, corev1.EventTypeNormal, reason, "Delete", "Deleted member %s: %s", m.Name, why)
}
