// Package httplimit bounds how many HTTP requests a client has in flight.
//
// The manager gives its Vercel client such a transport (--vercel-max-in-flight)
// so that the number of concurrent Vercel calls is a setting of its own,
// apart from the number of reconciles: reconciles beyond the bound do their
// Kubernetes work (finalizers, status writes) while others wait on Vercel,
// instead of Vercel calls waiting behind Kubernetes writes.
package httplimit

import (
	"net/http"
)

// Transport lets at most a fixed number of requests wait for their response
// headers at once. A slot is released when RoundTrip returns, so a streamed
// body (command output) does not hold one while it is read.
type Transport struct {
	base http.RoundTripper
	sem  chan struct{}
}

// New bounds base to n requests in flight; n <= 0 means no bound.
func New(base http.RoundTripper, n int) http.RoundTripper {
	if n <= 0 {
		return base
	}
	return &Transport{base: base, sem: make(chan struct{}, n)}
}

// RoundTrip waits for a slot (or the request's context) and sends r.
func (t *Transport) RoundTrip(r *http.Request) (*http.Response, error) {
	select {
	case t.sem <- struct{}{}:
	case <-r.Context().Done():
		return nil, r.Context().Err()
	}
	defer func() { <-t.sem }()
	return t.base.RoundTrip(r)
}

// Client returns an HTTP client for one API host with at most n requests in
// flight (n <= 0: unbounded) that keeps enough idle connections for them:
// http.DefaultTransport keeps only two per host, so a client with more
// concurrent requests would open and close a connection for most of them.
func Client(n int) *http.Client {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.MaxIdleConnsPerHost = max(n, 64)
	t.MaxIdleConns = max(t.MaxIdleConns, t.MaxIdleConnsPerHost)
	return &http.Client{Transport: New(t, n)}
}
