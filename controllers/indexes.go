package controllers

import (
	"context"

	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	sandboxv1 "github.com/getsentry/sandbox-controller/api/v1alpha1"
)

// Field indexes on the manager's cache. The watch mappings look up the few
// objects an event concerns through them, instead of listing — and deep
// copying — the whole namespace on every event, which made N captures in one
// namespace cost N² (docs/dev/performance.md).
const (
	// indexSandboxRef: a SandboxSnapshot by spec.source.sandboxRef.name.
	indexSandboxRef = "sandbox.sentry.io/sandboxRef"
	// indexSnapshotRef: a Sandbox or SandboxFork by spec.source.snapshotRef.name.
	indexSnapshotRef = "sandbox.sentry.io/snapshotRef"
	// indexDependsOn: a SandboxSnapshot by what its recipe depends on:
	// "hash:<content-hash label>" (peers sharing a build) and
	// "base:<baseSnapshotRef name>" (a layered recipe).
	indexDependsOn = "sandbox.sentry.io/dependsOn"
	// indexSecretRef: a Sandbox by the name of each Secret its spec
	// references (env, injected headers, git credentials).
	indexSecretRef = "sandbox.sentry.io/secretRef"
)

func indexForks(ctx context.Context, mgr ctrl.Manager) error {
	return indexRef(ctx, mgr, &sandboxv1.SandboxFork{}, indexSnapshotRef, func(o client.Object) *sandboxv1.LocalObjectReference {
		return o.(*sandboxv1.SandboxFork).Spec.Source.SnapshotRef
	})
}

func indexSnapshots(ctx context.Context, mgr ctrl.Manager) error {
	if err := indexRef(ctx, mgr, &sandboxv1.SandboxSnapshot{}, indexSandboxRef, func(o client.Object) *sandboxv1.LocalObjectReference {
		return o.(*sandboxv1.SandboxSnapshot).Spec.Source.SandboxRef
	}); err != nil {
		return err
	}
	return mgr.GetFieldIndexer().IndexField(ctx, &sandboxv1.SandboxSnapshot{}, indexDependsOn, func(o client.Object) []string {
		s := o.(*sandboxv1.SandboxSnapshot)
		var keys []string
		if h := s.Labels[sandboxv1.LabelContentHash]; h != "" {
			keys = append(keys, "hash:"+h)
		}
		if rcp := s.Spec.Source.Recipe; rcp != nil && rcp.BaseSnapshotRef != nil {
			keys = append(keys, "base:"+rcp.BaseSnapshotRef.Name)
		}
		return keys
	})
}

// indexRef indexes the objects of obj's kind under field by the name of the
// reference ref returns, if any.
func indexRef(ctx context.Context, mgr ctrl.Manager, obj client.Object, field string, ref func(client.Object) *sandboxv1.LocalObjectReference) error {
	return mgr.GetFieldIndexer().IndexField(ctx, obj, field, func(o client.Object) []string {
		if r := ref(o); r != nil {
			return []string{r.Name}
		}
		return nil
	})
}

// requestsFor turns the listed objects that pass keep into reconcile
// requests, each once.
func requestsFor[T any, PT interface {
	*T
	client.Object
}](items []T, keep func(PT) bool) []reconcile.Request {
	var out []reconcile.Request
	seen := map[types.NamespacedName]bool{}
	for i := range items {
		o := PT(&items[i])
		key := client.ObjectKeyFromObject(o)
		if seen[key] || !keep(o) {
			continue
		}
		seen[key] = true
		out = append(out, reconcile.Request{NamespacedName: key})
	}
	return out
}
