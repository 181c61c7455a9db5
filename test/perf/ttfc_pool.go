package perf

import (
	"context"
	"fmt"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	sandboxv1 "github.com/getsentry/sandbox-controller/api/v1alpha1"
)

// TTFCArmPool is arm (c) of the phase: each conversation's Sandbox claims a
// member of a SandboxPool kept from the same snapshot (spec.poolRef), so its
// session is already running when the conversation starts.
const TTFCArmPool = "pool"

// ttfcPoolName is the arm's pool in the source's namespace.
const ttfcPoolName = "workspace-pool"

func init() { ttfcArms[TTFCArmPool] = (*harness).preparePoolArm }

// preparePoolArm fills a pool of TTFCConfig.PoolSize Running members
// (untimed, like the source snapshot), then runs conversations as the
// operator arm does with spec.poolRef set. A conversation that finds the
// pool empty is created cold (Claimed=False, PoolEmpty) and counts with its
// cold time: a claim never fails because the pool was empty.
func (h *harness) preparePoolArm(ctx context.Context, src ttfcSource) (*ttfcArm, error) {
	size := h.ttfcPoolSize
	pool := &sandboxv1.SandboxPool{
		ObjectMeta: metav1.ObjectMeta{Namespace: src.namespace, Name: ttfcPoolName},
		Spec: sandboxv1.SandboxPoolSpec{
			Template: sandboxv1.SandboxPoolTemplate{Spec: ttfcSandboxSpec(src)},
			Replicas: ptr.To(size),
		},
	}
	if err := h.kube.Create(ctx, pool); err != nil {
		return nil, fmt.Errorf("create SandboxPool: %w", err)
	}
	start := time.Now()
	deadline := start.Add(h.cfg.ReadyTimeout)
	for {
		if err := h.kube.Get(ctx, client.ObjectKeyFromObject(pool), pool); err != nil {
			return nil, err
		}
		if pool.Status.ReadyReplicas >= size {
			break
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("SandboxPool %d of %d members ready after %s", pool.Status.ReadyReplicas, size, h.cfg.ReadyTimeout)
		}
		time.Sleep(200 * time.Millisecond)
	}
	h.logf("  ttfc pool: %d members ready in %s", size, time.Since(start).Round(100*time.Millisecond))
	arm, err := h.sandboxArm(ctx, src, func(sb *sandboxv1.Sandbox) {
		sb.Spec.PoolRef = &sandboxv1.PoolRef{Name: ttfcPoolName}
	})
	if err != nil {
		return nil, err
	}
	closeSandboxes := arm.close
	arm.close = func() {
		closeSandboxes()
		if err := h.kube.Delete(ctx, pool); client.IgnoreNotFound(err) != nil {
			h.logf("  ttfc pool arm: delete the pool: %v", err)
		}
	}
	return arm, nil
}
