package controllers

import (
	"context"
	"slices"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/client"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	sandboxv1 "github.com/getsentry/sandbox-controller/api/v1alpha1"
)

// VercelHealth notices when Vercel answers again after an outage. During an
// outage every object that needed Vercel fails and waits out a per-object
// backoff of up to --backoff-cap; on recovery the controllers requeue those
// objects at once, so they are Synced again within seconds rather than up to
// a whole backoff cap later. Feed it every request's outcome through
// vercel.Config.OnRequest (ObserveRequest). A nil *VercelHealth does nothing.
//
// It also knows whether Vercel accepts the manager's credentials and knows its
// team and project (credentials.go): /readyz and two gauges report it.
type VercelHealth struct {
	mu        sync.Mutex
	failures  int // consecutive attempts without an answer or with a 5xx
	listeners []chan struct{}
	// rejected is the status (401, 403) of the last answer when Vercel
	// rejected the credentials, else 0.
	rejected int
	// project is why the team and project are not verified (nil once they
	// are); see verifyProject.
	project error
	// gauges: this is the manager's own credential, which the two
	// credential gauges report (a class's health is on its status).
	gauges bool
	// onCredentials, when set, is called (under the lock; it must not
	// block) when Vercel starts or stops rejecting the credentials.
	onCredentials func()
}

// outageFailures consecutive failures make an outage; fewer are a blip that
// the client's retries and the backoff deal with.
const outageFailures = 5

// ObserveRequest records one HTTP attempt; it has vercel.Config.OnRequest's
// signature.
func (h *VercelHealth) ObserveRequest(_ string, status int, _ time.Duration) {
	if h == nil {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.observeCredentialsLocked(status)
	if status == 0 || status >= 500 {
		h.failures++
		return
	}
	if h.failures >= outageFailures {
		for _, ch := range h.listeners {
			select {
			case ch <- struct{}{}:
			default: // a requeue is already pending
			}
		}
	}
	h.failures = 0
}

func (h *VercelHealth) subscribe() chan struct{} {
	ch := make(chan struct{}, 1)
	h.mu.Lock()
	h.listeners = append(h.listeners, ch)
	h.mu.Unlock()
	return ch
}

func (h *VercelHealth) unsubscribe(ch chan struct{}) {
	h.mu.Lock()
	h.listeners = slices.DeleteFunc(h.listeners, func(c chan struct{}) bool { return c == ch })
	h.mu.Unlock()
}

// sandboxRetrySource requeues, whenever Vercel recovers from an outage, every
// Sandbox whose last reconcile failed for want of an answer from Vercel.
func (h *VercelHealth) sandboxRetrySource(cache client.Reader) source.Source {
	return source.Func(func(ctx context.Context, q workqueue.TypedRateLimitingInterface[reconcile.Request]) error {
		if h == nil {
			return nil
		}
		recovered := h.subscribe()
		go func() {
			defer h.unsubscribe(recovered)
			for {
				select {
				case <-ctx.Done():
					return
				case <-recovered:
				}
				list := &sandboxv1.SandboxList{}
				if err := cache.List(ctx, list); err != nil {
					continue
				}
				n := 0
				for i := range list.Items {
					s := &list.Items[i]
					if c := meta.FindStatusCondition(s.Status.Conditions, sandboxv1.ConditionSynced); c != nil &&
						c.Status == "False" && c.Reason == sandboxv1.ReasonTransient {
						q.Add(reconcile.Request{NamespacedName: client.ObjectKeyFromObject(s)})
						n++
					}
				}
				logf.FromContext(ctx).Info("Requeued Sandboxes after Vercel recovered from an outage", "sandboxes", n)
			}
		}()
		return nil
	})
}
