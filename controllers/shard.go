package controllers

// Sharding: N managers, each the leader of its own shard, split the
// namespaces between them by a stable hash, so that each Sandbox,
// SandboxSnapshot and SandboxFork is reconciled — and its Vercel sandbox
// called — by exactly one of them.

import (
	"context"
	"fmt"
	"hash/fnv"

	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

// Shard is the part of the cluster one manager reconciles: the namespaces
// whose ShardOf is Index, out of Count shards. The zero value (and Count 1)
// is the whole cluster.
type Shard struct {
	Index, Count int
}

// ShardOf is the shard of a namespace among count: FNV-1a (32 bits) of its
// name modulo count. It depends on nothing but the name, so every replica,
// in every version, agrees on it; a namespace's objects (and the Vercel
// sandboxes they stand for) never split between shards.
func ShardOf(namespace string, count int) int {
	if count <= 1 {
		return 0
	}
	h := fnv.New32a()
	_, _ = h.Write([]byte(namespace))
	return int(h.Sum32() % uint32(count))
}

// Validate refuses a shard that no namespace could belong to.
func (s Shard) Validate() error {
	switch {
	case s.Count < 0:
		return fmt.Errorf("shard count %d: must be at least 1", s.Count)
	case s.Index < 0 || s.Index >= max(1, s.Count):
		return fmt.Errorf("shard index %d: must be in [0, %d)", s.Index, max(1, s.Count))
	}
	return nil
}

// Sharded reports whether the cluster is split between managers.
func (s Shard) Sharded() bool { return s.Count > 1 }

// Owns reports whether objects in namespace are this shard's.
func (s Shard) Owns(namespace string) bool {
	return !s.Sharded() || ShardOf(namespace, s.Count) == s.Index
}

// String names the shard in logs and lease names: "shard-1-of-3".
func (s Shard) String() string {
	if !s.Sharded() {
		return "all"
	}
	return fmt.Sprintf("shard-%d-of-%d", s.Index, s.Count)
}

// predicate passes the events of this shard's objects only, so that the
// other shards' objects are never queued.
func (s Shard) predicate() predicate.Predicate {
	return predicate.NewPredicateFuncs(func(o client.Object) bool { return s.Owns(o.GetNamespace()) })
}

// guard wraps a reconciler so that it returns at once for another shard's
// object, whatever queued it: a watch mapping (fork to children, snapshot to
// Sandboxes, a Secret), a retry source, a timer set before a reshard. It is
// what guarantees that a shard never calls Vercel for another's object; the
// predicate only saves the queueing.
func (s Shard) guard(r reconcile.Reconciler) reconcile.Reconciler {
	if !s.Sharded() {
		return r
	}
	return reconcile.Func(func(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
		if !s.Owns(req.Namespace) {
			return ctrl.Result{}, nil
		}
		return r.Reconcile(ctx, req)
	})
}

// LeaderElectionID is the name of the leader election Lease of a shard's
// replicas: one Lease per shard, so that each shard has its own leader. An
// unsharded manager keeps the name it always had.
func LeaderElectionID(s Shard) string {
	if !s.Sharded() {
		return "sandbox-controller.sandbox.sentry.io"
	}
	return "sandbox-controller-" + s.String() + ".sandbox.sentry.io"
}
