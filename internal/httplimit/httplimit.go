// Package httplimit is the HTTP client of one API host: it bounds how many
// requests are in flight, keeps a reserved lane for requests that must not
// queue behind the others, and gives every connection deadlines.
//
// The manager gives its Vercel client such a client (--vercel-max-in-flight)
// so that the number of concurrent Vercel calls is a setting of its own,
// apart from the number of reconciles: reconciles beyond the bound do their
// Kubernetes work (finalizers, status writes) while others wait on Vercel,
// instead of Vercel calls waiting behind Kubernetes writes.
//
// A stalled peer must never hold a slot for good: the transport times out
// dials, TLS handshakes and response headers, and pings idle HTTP/2
// connections so that a dead one is closed and its requests fail. Stalled
// reports when every slot has been held for long anyway, for a liveness
// probe.
package httplimit

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"sync"
	"time"
)

// Defaults applied by NewClient to zero Options fields.
const (
	DefaultDialTimeout           = 10 * time.Second
	DefaultTLSHandshakeTimeout   = 10 * time.Second
	DefaultResponseHeaderTimeout = 30 * time.Second
	// DefaultHTTP2ReadIdleTimeout is how long an HTTP/2 connection may stay
	// silent before the transport pings it.
	DefaultHTTP2ReadIdleTimeout = 30 * time.Second
	// DefaultHTTP2PingTimeout is how long the transport waits for the ping's
	// answer before it closes the connection, failing its requests.
	DefaultHTTP2PingTimeout = 15 * time.Second
	DefaultIdleConnTimeout  = 90 * time.Second
)

// Options configure NewClient. Durations: 0 takes the default, negative
// means none.
type Options struct {
	// MaxInFlight bounds the requests waiting for their response headers at
	// once; <= 0 means no bound.
	MaxInFlight int
	// Reserved slots are added to MaxInFlight for requests whose context
	// carries WithPriority only: when every regular slot is held (say by
	// slow creates), a priority request (a delete) still goes at once.
	// Priority requests take a regular slot first when one is free.
	Reserved int

	DialTimeout           time.Duration
	TLSHandshakeTimeout   time.Duration
	ResponseHeaderTimeout time.Duration
	HTTP2ReadIdleTimeout  time.Duration
	HTTP2PingTimeout      time.Duration
	IdleConnTimeout       time.Duration

	// Guard, when set, is asked right before each request is sent (after
	// it got its slot); a non-nil error fails the request unsent. The
	// manager refuses Vercel mutations with it once its leader election
	// Lease may have passed to another replica (internal/leaderfence).
	Guard func(*http.Request) error
}

func orDefault(d, def time.Duration) time.Duration {
	switch {
	case d == 0:
		return def
	case d < 0:
		return 0
	}
	return d
}

// NewTransport returns http.DefaultTransport's settings (proxy from the
// environment, HTTP/2 when TLS offers it) with o's deadlines, HTTP/2 health
// pings, and enough idle connections kept for o's slots: the default keeps
// only two per host, so a client with more concurrent requests would open and
// close a connection for most of them.
func NewTransport(o Options) *http.Transport {
	t := http.DefaultTransport.(*http.Transport).Clone()
	d := &net.Dialer{Timeout: orDefault(o.DialTimeout, DefaultDialTimeout), KeepAlive: 30 * time.Second}
	t.DialContext = d.DialContext
	t.TLSHandshakeTimeout = orDefault(o.TLSHandshakeTimeout, DefaultTLSHandshakeTimeout)
	t.ResponseHeaderTimeout = orDefault(o.ResponseHeaderTimeout, DefaultResponseHeaderTimeout)
	t.IdleConnTimeout = orDefault(o.IdleConnTimeout, DefaultIdleConnTimeout)
	t.MaxIdleConnsPerHost = max(o.MaxInFlight+o.Reserved, 64)
	t.MaxIdleConns = max(t.MaxIdleConns, t.MaxIdleConnsPerHost)
	// Go's own HTTP/2 configuration (no golang.org/x/net needed): a
	// connection silent for ReadIdleTimeout is pinged, and closed when the
	// ping is not answered within PingTimeout — otherwise a peer that
	// vanished without a FIN or RST holds every request multiplexed on that
	// connection until the kernel gives up, minutes later.
	t.ForceAttemptHTTP2 = true
	t.HTTP2 = &http.HTTP2Config{
		SendPingTimeout: orDefault(o.HTTP2ReadIdleTimeout, DefaultHTTP2ReadIdleTimeout),
		PingTimeout:     orDefault(o.HTTP2PingTimeout, DefaultHTTP2PingTimeout),
	}
	return t
}

// NewClient returns a client on NewTransport(o) bounded by o's slots, and
// the bounding Transport (for Stalled). Its Timeout is 0: streaming calls last
// as long as their caller wants; every call is bounded by its context.
func NewClient(o Options) (*http.Client, *Transport) {
	var base http.RoundTripper = NewTransport(o)
	if o.Guard != nil {
		base = guarded{base: base, guard: o.Guard}
	}
	t := newTransport(base, o.MaxInFlight, o.Reserved)
	return &http.Client{Transport: t}, t
}

// guarded sends a request only when its guard allows it.
type guarded struct {
	base  http.RoundTripper
	guard func(*http.Request) error
}

func (g guarded) RoundTrip(r *http.Request) (*http.Response, error) {
	if err := g.guard(r); err != nil {
		if r.Body != nil {
			_ = r.Body.Close() // a RoundTripper closes the body, even on error
		}
		return nil, err
	}
	return g.base.RoundTrip(r)
}

// Client returns NewClient's client with the default deadlines and at most n
// requests in flight (n <= 0: unbounded).
func Client(n int) *http.Client {
	c, _ := NewClient(Options{MaxInFlight: n})
	return c
}

// Transport lets at most a fixed number of requests wait for their response
// headers at once. A slot is released when RoundTrip returns, so a streamed
// body (command output) does not hold one while it is read.
type Transport struct {
	base     http.RoundTripper
	regular  chan struct{} // nil: unbounded
	reserved chan struct{} // nil: no reserved lane

	mu   sync.Mutex
	held map[*hold]struct{} // regular slots held, with the time each was taken
	now  func() time.Time
}

type hold struct{ since time.Time }

// New bounds base to n requests in flight; n <= 0 means no bound.
func New(base http.RoundTripper, n int) http.RoundTripper {
	if n <= 0 {
		return base
	}
	return newTransport(base, n, 0)
}

func newTransport(base http.RoundTripper, n, reserved int) *Transport {
	t := &Transport{base: base, held: map[*hold]struct{}{}, now: time.Now}
	if n > 0 {
		t.regular = make(chan struct{}, n)
		if reserved > 0 {
			t.reserved = make(chan struct{}, reserved)
		}
	}
	return t
}

type priorityKey struct{}

// WithPriority marks the requests made with ctx as allowed to use the
// reserved slots: requests that free capacity or keep work alive (deletes,
// stops, session extensions) and so must not queue behind the requests that
// are waiting for that capacity.
func WithPriority(ctx context.Context) context.Context {
	return context.WithValue(ctx, priorityKey{}, true)
}

// IsPriority reports whether ctx carries WithPriority.
func IsPriority(ctx context.Context) bool {
	p, _ := ctx.Value(priorityKey{}).(bool)
	return p
}

// RoundTrip waits for a slot (or the request's context) and sends r.
func (t *Transport) RoundTrip(r *http.Request) (*http.Response, error) {
	if t.regular == nil {
		return t.base.RoundTrip(r)
	}
	ctx := r.Context()
	var release func()
	select {
	case t.regular <- struct{}{}:
		release = t.holdRegular()
	default:
		reserved := t.reserved
		if !IsPriority(ctx) {
			reserved = nil // a nil channel is never ready
		}
		select {
		case t.regular <- struct{}{}:
			release = t.holdRegular()
		case reserved <- struct{}{}:
			release = func() { <-t.reserved }
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	defer release()
	return t.base.RoundTrip(r)
}

func (t *Transport) holdRegular() func() {
	h := &hold{since: t.now()}
	t.mu.Lock()
	t.held[h] = struct{}{}
	t.mu.Unlock()
	return func() {
		t.mu.Lock()
		delete(t.held, h)
		t.mu.Unlock()
		<-t.regular
	}
}

// Stalled returns an error when every regular slot has been held for longer
// than d: no new request can have been sent for that long, whatever the
// deadlines should have done. A nil or unbounded Transport never stalls.
// Its signature is controller-runtime's healthz.Checker once bound to d, e.g.
// func(*http.Request) error { return t.Stalled(d) }.
func (t *Transport) Stalled(d time.Duration) error {
	if t == nil || t.regular == nil || d <= 0 {
		return nil
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(t.held) < cap(t.regular) {
		return nil
	}
	now := t.now()
	var newest time.Duration = -1
	for h := range t.held {
		age := now.Sub(h.since)
		if age <= d {
			return nil
		}
		if newest < 0 || age < newest {
			newest = age
		}
	}
	return fmt.Errorf("all %d in-flight slots have been held for more than %s (the most recent for %s)",
		cap(t.regular), d, newest.Round(time.Second))
}
