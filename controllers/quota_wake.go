package controllers

// Waking what waits for quota: when a namespace's usage falls (a Sandbox
// stops or goes, a builder is released, a quota changes), its waiting
// Sandboxes and builds are requeued in creation order, and its SandboxQuotas
// recount.

import (
	"context"
	"sort"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	sandboxv1 "github.com/getsentry/sandbox-controller/api/v1alpha1"
)

// Wake requeues the Sandboxes of ns that wait for quota: its quotas changed.
func (l *QuotaLedger) Wake(ns string) {
	n := l.namespace(ns)
	n.mu.Lock()
	names := waiterNames(n)
	n.mu.Unlock()
	l.wakeSandboxes(ns, names)
}

// wakeBatch bounds how many waiters one change wakes: the earliest, which
// are served first. Each grant wakes the next ones, so a burst of freed
// capacity is handed on down the line; a later, smaller waiter that could
// pass the earlier ones waits at most quotaRecheck when it is beyond the
// batch.
const wakeBatch = 32

// waiterNames lists the first wakeBatch waiting Sandboxes in creation
// order. (A waiting build is woken by the change of its quotas' status that
// freed capacity brings: sandboxsnapshot_controller.go watches them.) Called
// with n.mu held.
func waiterNames(n *nsLedger) []string {
	ws := make([]waiter, 0, len(n.waiters))
	for _, w := range n.waiters {
		if !w.build {
			ws = append(ws, w)
		}
	}
	sort.Slice(ws, func(i, j int) bool {
		if !ws[i].created.Equal(ws[j].created) {
			return ws[i].created.Before(ws[j].created)
		}
		return ws[i].name < ws[j].name
	})
	names := make([]string, 0, min(len(ws), wakeBatch))
	for _, w := range ws[:min(len(ws), wakeBatch)] {
		names = append(names, w.name)
	}
	return names
}

func (l *QuotaLedger) wakeSandboxes(ns string, names []string) {
	l.mu.Lock()
	q := l.sandboxQ
	l.mu.Unlock()
	if q == nil {
		return
	}
	for _, name := range names {
		q.Add(reconcile.Request{NamespacedName: types.NamespacedName{Namespace: ns, Name: name}})
	}
}

func (l *QuotaLedger) wakeQuotas(ctx context.Context, ns string) {
	l.mu.Lock()
	q := l.quotaQ
	l.mu.Unlock()
	if q == nil {
		return
	}
	quotas := &sandboxv1.SandboxQuotaList{}
	if err := l.reader.List(ctx, quotas, client.InNamespace(ns)); err != nil {
		return
	}
	for i := range quotas.Items {
		q.Add(reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&quotas.Items[i])})
	}
}

// sandboxSource hands the ledger the Sandbox controller's queue, to wake
// waiters with.
func (l *QuotaLedger) sandboxSource() source.Source {
	return source.Func(func(_ context.Context, q workqueue.TypedRateLimitingInterface[reconcile.Request]) error {
		if l != nil {
			l.mu.Lock()
			l.sandboxQ = q
			l.mu.Unlock()
		}
		return nil
	})
}

// quotaSource hands the ledger the SandboxQuota controller's queue.
func (l *QuotaLedger) quotaSource() source.Source {
	return source.Func(func(_ context.Context, q workqueue.TypedRateLimitingInterface[reconcile.Request]) error {
		l.mu.Lock()
		l.quotaQ = q
		l.mu.Unlock()
		return nil
	})
}

// quotaRecheck is how long a Sandbox waiting for quota waits before it asks
// again on its own. Freed capacity wakes the waiters at once; this only
// bounds the wait should a wake-up be lost.
const quotaRecheck = time.Minute
