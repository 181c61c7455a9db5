package controllers

import (
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

// backoffJitter is how much longer than the exponential delay a retry may
// wait, as a fraction of it: objects that failed together (a Vercel outage,
// a 429 for everyone) then come back spread out instead of in one burst.
const backoffJitter = 0.2

// jitteredBackoff is per-object exponential backoff from base to limit, each
// delay stretched by up to backoffJitter at random.
type jitteredBackoff struct {
	workqueue.TypedRateLimiter[reconcile.Request]
}

func newJitteredBackoff(base, limit time.Duration) workqueue.TypedRateLimiter[reconcile.Request] {
	return jitteredBackoff{workqueue.NewTypedItemExponentialFailureRateLimiter[reconcile.Request](base, limit)}
}

func (j jitteredBackoff) When(item reconcile.Request) time.Duration {
	return wait.Jitter(j.TypedRateLimiter.When(item), backoffJitter)
}
