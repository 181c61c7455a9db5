package perf

import (
	"context"
	"fmt"
	"strings"
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

// TTFCPoolStats is what the pool arm's claims did during one row, from the
// manager's pool metrics (sandbox_controller_pool_*) before and after it.
type TTFCPoolStats struct {
	// Hits took a member; Misses counts the cold creates by reason
	// (PoolEmpty, SpecMismatch, ...).
	Hits   int            `json:"hits"`
	Misses map[string]int `json:"misses,omitempty"`
	// ClaimMeanMs is a hit's mean time from the claimant's creation until
	// the member's Vercel sandbox was its own.
	ClaimMeanMs float64 `json:"claimMeanMs"`
	// IdleMeanSeconds is how long a claimed member had waited ready, on
	// average: what the pool paid per claim.
	IdleMeanSeconds float64 `json:"memberIdleMeanSeconds"`
}

// Cold is the number of claims created cold.
func (p *TTFCPoolStats) Cold() int {
	n := 0
	for _, v := range p.Misses {
		n += v
	}
	return n
}

// poolStats is the difference of the pool arm's series between two scrapes
// of the manager's metrics.
func poolStats(ns string, before, after map[string]float64) *TTFCPoolStats {
	st := &TTFCPoolStats{Misses: map[string]int{}}
	var claimSum, claimN, idleSum, idleN float64
	for key, v := range after {
		name, labels := splitSeries(key)
		if labels["namespace"] != ns || labels["pool"] != ttfcPoolName {
			continue
		}
		d := v - before[key]
		switch name {
		case "sandbox_controller_pool_claims_total":
			if n := int(d); n > 0 && labels["outcome"] == "hit" {
				st.Hits = n
			} else if n > 0 {
				st.Misses[labels["outcome"]] = n
			}
		case "sandbox_controller_pool_claim_seconds_sum":
			claimSum = d
		case "sandbox_controller_pool_claim_seconds_count":
			claimN = d
		case "sandbox_controller_pool_member_idle_seconds_sum":
			idleSum = d
		case "sandbox_controller_pool_member_idle_seconds_count":
			idleN = d
		}
	}
	if claimN > 0 {
		st.ClaimMeanMs = 1000 * claimSum / claimN
	}
	if idleN > 0 {
		st.IdleMeanSeconds = idleSum / idleN
	}
	return st
}

// splitSeries splits a key of scrapeManagerMetrics, name{k=v,...}suffix,
// into the name with its suffix (_count, _sum) and the labels.
func splitSeries(key string) (string, map[string]string) {
	name, rest, ok := strings.Cut(key, "{")
	if !ok {
		return key, nil
	}
	body, suffix, _ := strings.Cut(rest, "}")
	labels := map[string]string{}
	for _, kv := range strings.Split(body, ",") {
		if k, v, ok := strings.Cut(kv, "="); ok {
			labels[k] = v
		}
	}
	return name + suffix, labels
}
