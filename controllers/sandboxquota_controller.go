package controllers

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	sandboxv1 "github.com/getsentry/sandbox-controller/api/v1alpha1"
	"github.com/getsentry/sandbox-controller/internal/metrics"
)

// SandboxQuotaReconciler keeps each SandboxQuota's status.used current, from
// the quota ledger (what the Sandboxes hold, counted as the Sandbox
// controller enforces it) and the SandboxSnapshots' sizes. It enforces
// nothing itself; the Sandbox and SandboxSnapshot reconcilers do.
type SandboxQuotaReconciler struct {
	client.Client
	// APIReader reads the quota itself uncached: the ledger changes faster
	// than the cache shows this reconciler's own status writes, and a status
	// compared with a stale copy could be left unwritten.
	APIReader client.Reader
	Recorder  events.EventRecorder
	Quota     *QuotaLedger
	// Shard is the part of the cluster this manager reconciles: the
	// quotas of its own namespaces, whose Sandboxes its ledger counts.
	Shard Shard
	// Notifier announces budget warnings to the namespace's webhook; nil
	// sends none.
	Notifier Notifier
	// PollInterval is how often budgets are counted: the Sandboxes' poll,
	// which is how often their usage changes (10s when 0).
	PollInterval time.Duration

	trackerOnce sync.Once
	tracker     *budgetTracker
}

// +kubebuilder:rbac:groups=sandbox.sentry.io,resources=sandboxquotas,verbs=get;list;watch
// +kubebuilder:rbac:groups=sandbox.sentry.io,resources=sandboxquotas/status,verbs=get;update;patch

// Reconcile counts what the quota's namespace uses and records it.
func (r *SandboxQuotaReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	q := &sandboxv1.SandboxQuota{}
	if err := r.APIReader.Get(ctx, req.NamespacedName, q); err != nil {
		if apierrors.IsNotFound(err) {
			metrics.ForgetQuota(req.Namespace, req.Name)
			metrics.ForgetQuotaBudgets(req.Namespace, req.Name)
			r.budgetTracker().forget(req.NamespacedName)
			r.Quota.forgetBudgetRefusal(req.NamespacedName)
			// Its limits no longer hold anyone back.
			r.Quota.Wake(req.Namespace)
		}
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	u, err := r.Quota.Usage(ctx, q.Namespace)
	if err != nil {
		return ctrl.Result{}, err
	}
	bytes, err := r.Quota.SnapshotBytes(ctx, q.Namespace)
	if err != nil {
		return ctrl.Result{}, err
	}
	before := q.DeepCopy()
	if q.Status.Hard == nil || !apiequality.Semantic.DeepEqual(*q.Status.Hard, q.Spec.Hard) {
		// New limits: waiters may fit now.
		r.Quota.Wake(q.Namespace)
	}
	hard, used := quotaAmounts(q.Spec.Hard, u, bytes)
	st := &q.Status
	st.Hard = q.Spec.Hard.DeepCopy()
	st.Used = usedResources(q.Spec.Hard, u, bytes)
	st.ObservedGeneration = q.Generation
	setCondition(&st.Conditions, q.Generation, sandboxv1.ConditionReady, metav1.ConditionTrue, sandboxv1.ReasonCounted,
		"status.used is current: "+describeUsage(u)+fmt.Sprintf(", %s %d", sandboxv1.QuotaSnapshotBytes, bytes))
	if full := exhausted(hard, used); len(full) > 0 {
		msg := "At the hard limit: " + strings.Join(full, ", ") + "; what needs more waits (reason QuotaExceeded)"
		if !hasCondition(st.Conditions, sandboxv1.ConditionExhausted, sandboxv1.ReasonAtLimit) {
			r.Recorder.Eventf(q, nil, corev1.EventTypeNormal, "Exhausted", "Count", "%s", msg)
		}
		setCondition(&st.Conditions, q.Generation, sandboxv1.ConditionExhausted, metav1.ConditionTrue, sandboxv1.ReasonAtLimit, msg)
	} else {
		if hasCondition(st.Conditions, sandboxv1.ConditionExhausted, sandboxv1.ReasonAtLimit) {
			r.Recorder.Eventf(q, nil, corev1.EventTypeNormal, "CapacityFreed", "Count", "Every resource is below its hard limit again")
		}
		setCondition(&st.Conditions, q.Generation, sandboxv1.ConditionExhausted, metav1.ConditionFalse, sandboxv1.ReasonWithinLimits,
			"Every resource is below its hard limit")
	}
	metrics.SetQuota(q.Namespace, q.Name, hard, used)
	next, err := r.reconcileBudgets(ctx, q, &before.Status)
	if err != nil {
		return ctrl.Result{}, err
	}
	if apiequality.Semantic.DeepEqual(before.Status, q.Status) {
		return ctrl.Result{RequeueAfter: next}, nil
	}
	if err := r.Status().Patch(ctx, q, client.MergeFrom(before)); err != nil {
		return ctrl.Result{}, err
	}
	return ctrl.Result{RequeueAfter: next}, nil
}

// quotaAmounts are the limits of hard and what is used of each, by resource
// name; only limited resources appear.
func quotaAmounts(hard sandboxv1.SandboxQuotaResources, u Usage, bytes int64) (h, used map[string]int64) {
	h, used = map[string]int64{}, map[string]int64{}
	for _, c := range []struct {
		name string
		hard *int64
		used int64
	}{
		{sandboxv1.QuotaSandboxes, hard.Sandboxes, u.Sandboxes},
		{sandboxv1.QuotaRunningSandboxes, hard.RunningSandboxes, u.RunningSandboxes},
		{sandboxv1.QuotaRunningVCPUs, hard.RunningVCPUs, u.RunningVCPUs},
		{sandboxv1.QuotaSnapshotBytes, hard.SnapshotBytes, bytes},
	} {
		if c.hard != nil {
			h[c.name], used[c.name] = *c.hard, c.used
		}
	}
	return h, used
}

// usedResources is status.used: the keys of spec.hard, like a ResourceQuota.
func usedResources(hard sandboxv1.SandboxQuotaResources, u Usage, bytes int64) *sandboxv1.SandboxQuotaResources {
	out := &sandboxv1.SandboxQuotaResources{}
	if hard.Sandboxes != nil {
		out.Sandboxes = &u.Sandboxes
	}
	if hard.RunningSandboxes != nil {
		out.RunningSandboxes = &u.RunningSandboxes
	}
	if hard.RunningVCPUs != nil {
		out.RunningVCPUs = &u.RunningVCPUs
	}
	if hard.SnapshotBytes != nil {
		out.SnapshotBytes = &bytes
	}
	return out
}

// exhausted lists the resources used up to their limit, as "name used/hard".
func exhausted(hard, used map[string]int64) []string {
	var out []string
	for name, h := range hard {
		if used[name] >= h {
			out = append(out, fmt.Sprintf("%s %d/%d", name, used[name], h))
		}
	}
	sort.Strings(out)
	return out
}

// SetupWithManager registers the reconciler: woken by its own spec changes,
// by the ledger whenever what the Sandboxes hold changes, and by the
// namespace's SandboxSnapshots (their sizes).
func (r *SandboxQuotaReconciler) SetupWithManager(mgr ctrl.Manager) error {
	return ctrl.NewControllerManagedBy(mgr).
		For(&sandboxv1.SandboxQuota{}, builder.WithPredicates(r.Shard.predicate(), predicate.GenerationChangedPredicate{})).
		Watches(&sandboxv1.SandboxSnapshot{}, handler.EnqueueRequestsFromMapFunc(r.quotasOf), builder.WithPredicates(r.Shard.predicate())).
		WatchesRawSource(r.Quota.quotaSource()).
		Named("sandboxquota").
		Complete(r.Shard.guard(r))
}

// quotasOf maps an object to the SandboxQuotas of its namespace.
func (r *SandboxQuotaReconciler) quotasOf(ctx context.Context, obj client.Object) []reconcile.Request {
	list := &sandboxv1.SandboxQuotaList{}
	if err := r.List(ctx, list, client.InNamespace(obj.GetNamespace())); err != nil {
		return nil
	}
	out := make([]reconcile.Request, 0, len(list.Items))
	for i := range list.Items {
		out = append(out, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&list.Items[i])})
	}
	return out
}
