// Package leaderfence keeps a manager replica that may have lost its leader
// election Lease from acting on Vercel or writing to Kubernetes.
//
// client-go's leader election only notices a lost Lease when a renewal
// fails, and gives up leadership (controller-runtime then exits the process)
// only once renewals have failed for the whole renew deadline. A leader that
// was stopped (SIGSTOP, a frozen VM, a long pause) and resumes after the
// other replica took over keeps reconciling from its stale cache until then:
// in the leader-cut test (test/chaos/leader_cut_test.go) a resumed leader
// sent 20 Vercel mutations and stale status writes in the 3 s before it
// exited. The Fence closes that window: it records when each successful
// write of the Lease by this replica started, and refuses mutating requests
// once the last one is older than the renew deadline. The other replica
// takes over no earlier than a lease duration after that write started, so
// a request that passes the fence leaves at least lease duration minus
// renew deadline before a takeover (a request already sent cannot be called
// back: the margin is for its transit).
package leaderfence

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"time"

	"k8s.io/client-go/tools/leaderelection/resourcelock"
)

// Fence tells whether this replica still holds its leader election Lease as
// far as it can know without asking.
type Fence struct {
	renewDeadline time.Duration
	now           func() time.Time

	mu      sync.Mutex
	renewed time.Time // start of the last successful Lease write by this replica; zero: never elected
}

// New returns a fence that closes renewDeadline after the last renewal.
func New(renewDeadline time.Duration) *Fence {
	return &Fence{renewDeadline: renewDeadline, now: time.Now}
}

// Lock wraps the leader election lock so that the fence learns of every
// successful acquisition or renewal by this replica.
func (f *Fence) Lock(l resourcelock.Interface) resourcelock.Interface {
	return &fencedLock{Interface: l, f: f}
}

// Held reports nil while the last renewal is younger than the renew
// deadline. neverElected is what it reports before the first acquisition.
func (f *Fence) Held(neverElected error) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.renewed.IsZero() {
		return neverElected
	}
	if age := f.now().Sub(f.renewed); age >= f.renewDeadline {
		return fmt.Errorf("%w: the lease was last renewed %s ago (renew deadline %s)", ErrNotLeader, age.Round(time.Millisecond), f.renewDeadline)
	}
	return nil
}

// ErrNotLeader is what a fenced request fails with.
var ErrNotLeader = fmt.Errorf("leader election lease not held")

func (f *Fence) renewedAt(t time.Time) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if t.After(f.renewed) {
		f.renewed = t
	}
}

type fencedLock struct {
	resourcelock.Interface
	f *Fence
}

func (l *fencedLock) Create(ctx context.Context, r resourcelock.LeaderElectionRecord) error {
	start := l.f.now()
	err := l.Interface.Create(ctx, r)
	if err == nil && r.HolderIdentity == l.Identity() {
		l.f.renewedAt(start)
	}
	return err
}

func (l *fencedLock) Update(ctx context.Context, r resourcelock.LeaderElectionRecord) error {
	start := l.f.now()
	err := l.Interface.Update(ctx, r)
	if err == nil && r.HolderIdentity == l.Identity() {
		l.f.renewedAt(start)
	}
	return err
}

// Mutating is true for requests that change something: every method but
// GET, HEAD and OPTIONS.
func Mutating(r *http.Request) bool {
	switch r.Method {
	case http.MethodGet, http.MethodHead, http.MethodOptions:
		return false
	}
	return true
}

// VercelGuard refuses Vercel mutations unless the Lease is held: a replica
// that was never elected runs no reconciler and has no mutation to send.
func (f *Fence) VercelGuard(r *http.Request) error {
	if !Mutating(r) {
		return nil
	}
	if err := f.Held(fmt.Errorf("%w: this replica was never elected", ErrNotLeader)); err != nil {
		return fmt.Errorf("not sending %s %s to Vercel: %w", r.Method, r.URL.Path, err)
	}
	return nil
}

// KubernetesTransport refuses Kubernetes writes once this replica has been
// elected and its Lease is stale. Before the first election writes pass:
// a standby's own setup (token and access reviews, its startup writes) is
// not the leader's work. The Lease itself must be written through a
// client that does not use this transport.
func (f *Fence) KubernetesTransport(rt http.RoundTripper) http.RoundTripper {
	return roundTripperFunc(func(r *http.Request) (*http.Response, error) {
		if Mutating(r) {
			if err := f.Held(nil); err != nil {
				if r.Body != nil {
					_ = r.Body.Close() // a RoundTripper closes the body, even on error
				}
				return nil, fmt.Errorf("not sending %s %s to the API server: %w", r.Method, r.URL.Path, err)
			}
		}
		return rt.RoundTrip(r)
	})
}

type roundTripperFunc func(*http.Request) (*http.Response, error)

func (f roundTripperFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }
