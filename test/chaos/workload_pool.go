package chaos

// The workload's SandboxPools: small pools (1–3 members, Running or
// Stopped, from a runtime or a snapshot the namespace has), claims (a
// Sandbox with spec.poolRef whose spec is the template's, so the pool can
// serve it), scaling and deleting pools.
//
// Pool operations draw from two streams of their own: poolOps decides, with
// one draw per step, whether the step is a pool operation and which one, so
// the sequence of pool operations of a seed depends on nothing else; a pool
// step's choices (and the pause after it) come from poolPicks, so the other
// steps roll the same dice as before pools existed (what they find differs:
// pools count as objects, claims are among the Sandboxes).

import (
	"context"
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	sandboxv1 "github.com/getsentry/sandbox-controller/api/v1alpha1"
)

// Pool operations, as named in the report.
const (
	opCreatePool = "create SandboxPool"
	opClaim      = "claim (Sandbox with poolRef)"
	opScalePool  = "scale SandboxPool"
	opDeletePool = "delete SandboxPool"
)

// poolOp maps a draw in [0, 1000) to a pool operation, "" for none: 6 % of
// the steps, in the short run and the long one alike (a member is a Vercel
// sandbox, and make test's time is counted).
func poolOp(k int) string {
	switch {
	case k < 18:
		return opCreatePool
	case k < 39:
		return opClaim
	case k < 49:
		return opScalePool
	case k < 60:
		return opDeletePool
	}
	return ""
}

// poolStep performs pool operation op in a random namespace.
func (w *workload) poolStep(ctx context.Context, op string) error {
	// The helpers (env, networkPolicy, timeout, pick) draw from w.rng; the
	// workload runs one step at a time, so swapping the stream for the step
	// keeps the other operations' stream untouched.
	main := w.rng
	w.rng = w.poolPicks
	defer func() { w.rng = main }()
	ns := w.nss[w.rng.IntN(len(w.nss))]
	// Claims, scales and deletions go to a namespace that has a pool, so
	// that each kind happens in the short run too.
	withPool := w.nsWithPool()
	if op != opCreatePool && withPool == nil {
		if op != opClaim {
			w.count(opSkipped)
			return nil
		}
		op = opCreatePool
	}
	full := w.liveObjects() >= w.h.cfg.Objects
	switch {
	case op == opCreatePool && !full:
		return w.createPool(ctx, ns)
	case op == opScalePool:
		return w.scalePool(ctx, withPool)
	case op == opClaim && !full:
		return w.claim(ctx, withPool)
	case withPool != nil:
		return w.deletePool(ctx, withPool)
	}
	w.count(opSkipped)
	return nil
}

// nsWithPool is a random namespace that has a pool (nil when none has).
func (w *workload) nsWithPool() *nsState {
	var with []*nsState
	for _, ns := range w.nss {
		if len(ns.pools) > 0 {
			with = append(with, ns)
		}
	}
	if len(with) == 0 {
		return nil
	}
	return with[w.rng.IntN(len(with))]
}

// createPool creates a pool of 1–3 members from a runtime (sometimes with
// a setup command) or from a SandboxSnapshot of ns.
func (w *workload) createPool(ctx context.Context, ns *nsState) error {
	p := &sandboxv1.SandboxPool{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns.name, Name: w.name("pool")},
		Spec:       sandboxv1.SandboxPoolSpec{Replicas: ptr.To(int32(1 + w.rng.IntN(3)))},
	}
	t := &p.Spec.Template.Spec
	if snap := pick(w.rng, ns.snapshots); snap != "" && w.rng.IntN(2) == 0 {
		t.Source.SnapshotRef = &sandboxv1.LocalObjectReference{Name: snap}
	} else {
		t.Source.Runtime = ptr.To(sandboxv1.Runtime([]string{"node22", "node24", "python3.13"}[w.rng.IntN(3)]))
		if w.rng.IntN(3) == 0 {
			t.Setup = []sandboxv1.SetupCommand{{Name: "warm", Command: "sh", Args: []string{"-c", "echo warm > warm.txt"}}}
		}
	}
	if w.rng.IntN(2) == 0 {
		t.Env = w.env(ns)
	}
	t.NetworkPolicy = w.networkPolicy(ns)
	if w.rng.IntN(3) == 0 {
		p.Spec.MemberState = sandboxv1.SandboxStateStopped
	}
	if err := w.c.Create(ctx, p); err != nil {
		return w.refusal(opCreatePool, p.Name, err)
	}
	ns.pools[p.Name] = true
	w.did(opCreatePool, fmt.Sprintf("%s/%s replicas %d memberState %q", ns.name, p.Name, *p.Spec.Replicas, p.Spec.MemberState))
	return nil
}

// claim creates a Sandbox with spec.poolRef naming a pool of ns, its spec
// the pool's template (what a running member cannot change) with its own
// timeout, network policy and ports. One in eight asks for other env: the
// pool cannot serve it and it is created cold (SpecMismatch).
func (w *workload) claim(ctx context.Context, ns *nsState) error {
	pool, err := w.claimablePool(ctx, ns)
	if err != nil || pool == nil {
		return err
	}
	name := pool.Name
	sbx := &sandboxv1.Sandbox{ObjectMeta: metav1.ObjectMeta{Namespace: ns.name, Name: w.name("claim")}}
	sbx.Spec = *pool.Spec.Template.Spec.DeepCopy()
	sbx.Spec.PoolRef = &sandboxv1.PoolRef{Name: name}
	sbx.Spec.TimeoutSeconds = w.timeout()
	sbx.Spec.NetworkPolicy = w.networkPolicy(ns)
	if w.rng.IntN(4) == 0 {
		sbx.Spec.Ports = []int32{3000}
	}
	what := "of " + name
	if w.rng.IntN(8) == 0 {
		sbx.Spec.Env = append(w.env(ns), sandboxv1.EnvVar{Name: "MISMATCH", Value: ptr.To("cold")})
		what += " (env differs: cold)"
	}
	if err := w.c.Create(ctx, sbx); err != nil {
		return w.refusal(opClaim, sbx.Name, err)
	}
	ns.sandboxes[sbx.Name] = true
	w.did(opClaim, ns.name+"/"+sbx.Name+" "+what)
	return nil
}

// claimablePool picks the pool of ns a claim names: three times in four one
// that reports a ready member, if any (a hit takes the hand-over path, the
// one the pool checks are about), otherwise any pool of ns.
func (w *workload) claimablePool(ctx context.Context, ns *nsState) (*sandboxv1.SandboxPool, error) {
	list := &sandboxv1.SandboxPoolList{}
	if err := w.c.List(ctx, list, client.InNamespace(ns.name)); err != nil {
		return nil, err
	}
	ready, all := map[string]bool{}, map[string]bool{}
	byName := map[string]*sandboxv1.SandboxPool{}
	for i := range list.Items {
		p := &list.Items[i]
		if !ns.pools[p.Name] || !p.DeletionTimestamp.IsZero() {
			continue
		}
		byName[p.Name], all[p.Name] = p, true
		if p.Status.ReadyReplicas > 0 {
			ready[p.Name] = true
		}
	}
	name := pick(w.rng, all)
	if w.rng.IntN(4) != 0 && len(ready) > 0 {
		name = pick(w.rng, ready)
	}
	if name == "" {
		w.count(opSkipped)
		return nil, nil
	}
	return byName[name], nil
}

// scalePool sets a pool's spec.replicas to 0–3.
func (w *workload) scalePool(ctx context.Context, ns *nsState) error {
	name := pick(w.rng, ns.pools)
	if name == "" {
		w.count(opSkipped)
		return nil
	}
	replicas := int32(w.rng.IntN(4))
	patch := fmt.Sprintf(`{"spec":{"replicas":%d}}`, replicas)
	p := &sandboxv1.SandboxPool{ObjectMeta: metav1.ObjectMeta{Namespace: ns.name, Name: name}}
	if err := w.c.Patch(ctx, p, client.RawPatch(types.MergePatchType, []byte(patch))); err != nil {
		return w.refusal(opScalePool, name, err)
	}
	w.did(opScalePool, fmt.Sprintf("%s/%s to %d", ns.name, name, replicas))
	return nil
}

// deletePool deletes a pool of ns and records it with the members it had:
// once settled, the pool, its members and their Vercel sandboxes are gone,
// except a sandbox handed over to a claimant (check_pool.go).
func (w *workload) deletePool(ctx context.Context, ns *nsState) error {
	name := pick(w.rng, ns.pools)
	if name == "" {
		w.count(opSkipped)
		return nil
	}
	pool := &sandboxv1.SandboxPool{}
	if err := w.c.Get(ctx, types.NamespacedName{Namespace: ns.name, Name: name}, pool); err != nil {
		return w.refusal(opDeletePool, name, err)
	}
	recs, err := w.memberRecords(ctx, pool)
	if err != nil {
		return err
	}
	recs = append(recs, recordOf(pool))
	if err := w.c.Delete(ctx, pool, client.Preconditions{UID: ptr.To(pool.UID)}); err != nil {
		return w.refusal(opDeletePool, name, err)
	}
	delete(ns.pools, name)
	w.deleted = append(w.deleted, recs...)
	w.did(opDeletePool, fmt.Sprintf("%s/%s (%d members)", ns.name, name, len(recs)-1))
	return nil
}

// memberRecords are deletion records of pool's members as they are now.
func (w *workload) memberRecords(ctx context.Context, pool *sandboxv1.SandboxPool) ([]deletedObject, error) {
	list := &sandboxv1.SandboxList{}
	if err := w.c.List(ctx, list, client.InNamespace(pool.Namespace)); err != nil {
		return nil, err
	}
	var recs []deletedObject
	for i := range list.Items {
		if metav1.IsControlledBy(&list.Items[i], pool) {
			recs = append(recs, recordOf(&list.Items[i]))
		}
	}
	return recs, nil
}
