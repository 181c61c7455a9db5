package metrics

import "github.com/prometheus/client_golang/prometheus"

// The SandboxPool metrics. Series grow with the number of pools, not with
// the number of members or claims.
var (
	// PoolMembers is each pool's size: unclaimed members, claimable ones and
	// the target.
	PoolMembers = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Namespace: namespace,
		Name:      "pool_members",
		Help:      "Members of a SandboxPool, by namespace, pool and state (unclaimed, ready, target).",
	}, []string{"namespace", "pool", "state"})

	// PoolClaims counts claims by outcome: hit (took a member) or the
	// reason a claim was created cold (PoolEmpty, SpecMismatch,
	// PoolNotFound).
	PoolClaims = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: namespace,
		Name:      "pool_claims_total",
		Help:      "Claims of Sandboxes naming a SandboxPool, by namespace, pool and outcome (hit, PoolEmpty, SpecMismatch, PoolNotFound).",
	}, []string{"namespace", "pool", "outcome"})

	// PoolClaimSeconds is how long a claim took, from the reconcile that
	// took the member to its Vercel sandbox being the claimant's. Not from
	// the claimant's creation: creationTimestamp has a resolution of one
	// second, coarser than a claim.
	PoolClaimSeconds = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Namespace: namespace,
		Name:      "pool_claim_seconds",
		Help:      "Seconds from the reconcile that took a pool member for a claiming Sandbox until the member's Vercel sandbox was its own, by namespace and pool.",
		Buckets:   []float64{0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30},
	}, []string{"namespace", "pool"})

	// PoolMemberIdleSeconds is how long each claimed member waited ready:
	// what the pool paid for the claim's speed.
	PoolMemberIdleSeconds = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Namespace: namespace,
		Name:      "pool_member_idle_seconds",
		Help:      "Seconds a claimed member waited ready before its claim, by namespace and pool.",
		Buckets:   prometheus.ExponentialBuckets(1, 4, 9),
	}, []string{"namespace", "pool"})
)

// SetPoolSize records a pool's unclaimed, ready and target member counts.
func SetPoolSize(ns, pool string, unclaimed, ready, target int32) {
	PoolMembers.WithLabelValues(ns, pool, "unclaimed").Set(float64(unclaimed))
	PoolMembers.WithLabelValues(ns, pool, "ready").Set(float64(ready))
	PoolMembers.WithLabelValues(ns, pool, "target").Set(float64(target))
}

// ObserveClaim records one claim's outcome, and for a hit its latency
// (negative: not known, as for a claim a restart finished without its
// recorded time) and the member's idle time.
func ObserveClaim(ns, pool, outcome string, seconds, idleSeconds float64) {
	PoolClaims.WithLabelValues(ns, pool, outcome).Inc()
	if outcome != "hit" {
		return
	}
	if seconds >= 0 {
		PoolClaimSeconds.WithLabelValues(ns, pool).Observe(seconds)
	}
	PoolMemberIdleSeconds.WithLabelValues(ns, pool).Observe(idleSeconds)
}

// ForgetPool drops the series of a pool that is gone.
func ForgetPool(ns, pool string) {
	l := prometheus.Labels{"namespace": ns, "pool": pool}
	PoolMembers.DeletePartialMatch(l)
	PoolClaims.DeletePartialMatch(l)
	PoolClaimSeconds.DeletePartialMatch(l)
	PoolMemberIdleSeconds.DeletePartialMatch(l)
}
