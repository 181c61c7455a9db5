package httplimit

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

func TestClientBoundsRequestsInFlight(t *testing.T) {
	var cur, peak atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := cur.Add(1)
		for {
			p := peak.Load()
			if n <= p || peak.CompareAndSwap(p, n) {
				break
			}
		}
		time.Sleep(20 * time.Millisecond)
		cur.Add(-1)
	}))
	defer srv.Close()

	c := Client(3)
	var wg sync.WaitGroup
	for i := 0; i < 12; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			resp, err := c.Get(srv.URL)
			if err != nil {
				t.Error(err)
				return
			}
			resp.Body.Close()
		}()
	}
	wg.Wait()
	if p := peak.Load(); p != 3 {
		t.Errorf("peak requests in flight = %d, want 3", p)
	}
}

func TestWaitEndsWithContext(t *testing.T) {
	block := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { <-block }))
	defer srv.Close()
	defer close(block)
	c := Client(1)
	go func() { _, _ = c.Get(srv.URL) }() // takes the only slot
	time.Sleep(20 * time.Millisecond)
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL, nil)
	start := time.Now()
	if _, err := c.Do(req); err == nil {
		t.Fatal("request without a slot succeeded")
	}
	if d := time.Since(start); d > time.Second {
		t.Errorf("waited %s for a slot after the context ended", d)
	}
}

func TestUnbounded(t *testing.T) {
	if _, ok := New(http.DefaultTransport, 0).(*Transport); ok {
		t.Error("n=0 wrapped the transport")
	}
}

// blockingServer answers /fast at once and holds /slow until the test ends.
func blockingServer(t *testing.T) *httptest.Server {
	t.Helper()
	done := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/slow" {
			select {
			case <-done:
			case <-r.Context().Done():
			}
		}
	}))
	t.Cleanup(srv.Close)
	t.Cleanup(func() { close(done) }) // runs first: unblocks the handlers
	return srv
}

func get(ctx context.Context, c *http.Client, url string) error {
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	resp, err := c.Do(req)
	if err != nil {
		return err
	}
	resp.Body.Close()
	return nil
}

// With every regular slot held by slow requests, a priority request (a
// delete) still goes at once on the reserved lane, and an ordinary one waits.
func TestReservedLaneForPriority(t *testing.T) {
	srv := blockingServer(t)
	c, tr := NewClient(Options{MaxInFlight: 2, Reserved: 1})
	for range 2 {
		go func() { _ = get(context.Background(), c, srv.URL+"/slow") }()
	}
	waitHeld(t, tr, 2)

	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	if err := get(ctx, c, srv.URL+"/fast"); err == nil {
		t.Fatal("an ordinary request got through with both regular slots held")
	}
	start := time.Now()
	ctx, cancel = context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := get(WithPriority(ctx), c, srv.URL+"/fast"); err != nil {
		t.Fatalf("priority request: %v", err)
	}
	if d := time.Since(start); d > time.Second {
		t.Errorf("priority request took %s with the regular slots held", d)
	}
	// The reserved lane is only one wide: a priority request on it that
	// stalls makes the next priority request wait too.
	go func() { _ = get(WithPriority(context.Background()), c, srv.URL+"/slow") }()
	time.Sleep(50 * time.Millisecond)
	ctx, cancel = context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	if err := get(WithPriority(ctx), c, srv.URL+"/fast"); err == nil {
		t.Error("a second priority request got a slot beyond the reserved one")
	}
}

func waitHeld(t *testing.T, tr *Transport, n int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		tr.mu.Lock()
		held := len(tr.held)
		tr.mu.Unlock()
		if held == n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d slots held, want %d", held, n)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// A peer that never answers is cut off at ResponseHeaderTimeout, which frees
// the slot for the next request.
func TestResponseHeaderTimeoutFreesTheSlot(t *testing.T) {
	srv := blockingServer(t)
	c, tr := NewClient(Options{MaxInFlight: 1, ResponseHeaderTimeout: 200 * time.Millisecond})
	start := time.Now()
	err := get(context.Background(), c, srv.URL+"/slow")
	if err == nil || !strings.Contains(err.Error(), "timeout awaiting response headers") {
		t.Fatalf("err = %v, want the response header timeout", err)
	}
	if d := time.Since(start); d < 200*time.Millisecond || d > 2*time.Second {
		t.Errorf("failed after %s, want at the 200ms header timeout", d)
	}
	if err := get(context.Background(), c, srv.URL+"/fast"); err != nil {
		t.Errorf("next request: %v", err)
	}
	if err := tr.Stalled(time.Nanosecond); err != nil {
		t.Errorf("Stalled after the slot was freed: %v", err)
	}
}

// Stalled reports only when every regular slot has been held past the limit.
func TestStalled(t *testing.T) {
	srv := blockingServer(t)
	c, tr := NewClient(Options{MaxInFlight: 2, Reserved: 1, ResponseHeaderTimeout: -1})
	now := time.Now()
	tr.now = func() time.Time { return now }
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { _ = get(ctx, c, srv.URL+"/slow") }()
	waitHeld(t, tr, 1)
	now = now.Add(time.Hour)
	if err := tr.Stalled(time.Minute); err != nil {
		t.Errorf("one of two slots held: %v", err)
	}
	go func() { _ = get(ctx, c, srv.URL+"/slow") }()
	waitHeld(t, tr, 2)
	if err := tr.Stalled(time.Minute); err != nil {
		t.Errorf("the second slot was just taken: %v", err)
	}
	now = now.Add(2 * time.Minute)
	err := tr.Stalled(time.Minute)
	if err == nil || !strings.Contains(err.Error(), "all 2 in-flight slots have been held for more than 1m0s") {
		t.Errorf("Stalled = %v", err)
	}
	cancel()
	waitHeld(t, tr, 0)
	if err := tr.Stalled(time.Minute); err != nil {
		t.Errorf("after the requests ended: %v", err)
	}
	var nilT *Transport
	if nilT.Stalled(time.Second) != nil {
		t.Error("a nil Transport stalled")
	}
}

func TestTransportDefaults(t *testing.T) {
	tr := NewTransport(Options{MaxInFlight: 100, Reserved: 2})
	if tr.ResponseHeaderTimeout != 30*time.Second || tr.TLSHandshakeTimeout != 10*time.Second ||
		tr.IdleConnTimeout != 90*time.Second || tr.MaxIdleConnsPerHost != 102 || !tr.ForceAttemptHTTP2 {
		t.Errorf("transport %+v", tr)
	}
	if tr.HTTP2 == nil || tr.HTTP2.SendPingTimeout != 30*time.Second || tr.HTTP2.PingTimeout != 15*time.Second {
		t.Errorf("HTTP/2 health pings: %+v", tr.HTTP2)
	}
	if tr.Proxy == nil {
		t.Error("the proxy from the environment is not honoured")
	}
	off := NewTransport(Options{ResponseHeaderTimeout: -1, HTTP2ReadIdleTimeout: -1})
	if off.ResponseHeaderTimeout != 0 || off.HTTP2.SendPingTimeout != 0 {
		t.Errorf("negative durations did not turn the deadlines off: %s, %s", off.ResponseHeaderTimeout, off.HTTP2.SendPingTimeout)
	}
}

// blackHoleProxy forwards TCP both ways until blackHole is set; from then on
// it reads and drops everything, keeping the connections open, as a peer
// that vanished behind a stateful firewall does.
type blackHoleProxy struct {
	ln        net.Listener
	target    string
	blackHole atomic.Bool
}

func newBlackHoleProxy(t *testing.T, target string) *blackHoleProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &blackHoleProxy{ln: ln, target: target}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s, err := net.Dial("tcp", target)
			if err != nil {
				c.Close()
				continue
			}
			t.Cleanup(func() { c.Close(); s.Close() })
			go p.pipe(c, s)
			go p.pipe(s, c)
		}
	}()
	return p
}

func (p *blackHoleProxy) pipe(from, to net.Conn) {
	buf := make([]byte, 32<<10)
	for {
		n, err := from.Read(buf)
		if err != nil {
			return
		}
		if !p.blackHole.Load() {
			if _, err := to.Write(buf[:n]); err != nil {
				return
			}
		}
	}
}

// HTTP/2 multiplexes every request on one connection; when the peer goes
// silent without closing it, only the health ping notices: the connection is
// closed and the request waiting on it fails. Without pings it waits on.
func TestHTTP2PingClosesSilentConnection(t *testing.T) {
	done := make(chan struct{})
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/slow" {
			select {
			case <-done:
			case <-r.Context().Done():
			}
		}
	}))
	srv.EnableHTTP2 = true
	srv.StartTLS()
	t.Cleanup(srv.Close)
	t.Cleanup(func() { close(done) })
	tlsConf := srv.Client().Transport.(*http.Transport).TLSClientConfig

	for _, pings := range []bool{true, false} {
		proxy := newBlackHoleProxy(t, srv.Listener.Addr().String())
		o := Options{MaxInFlight: 4, ResponseHeaderTimeout: -1, HTTP2ReadIdleTimeout: 200 * time.Millisecond, HTTP2PingTimeout: 200 * time.Millisecond}
		if !pings {
			o.HTTP2ReadIdleTimeout = -1
		}
		base := NewTransport(o)
		base.TLSClientConfig = tlsConf.Clone()
		c := &http.Client{Transport: newTransport(base, o.MaxInFlight, 0)}
		url := "https://" + proxy.ln.Addr().String()
		resp, err := c.Get(url + "/fast")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.ProtoMajor != 2 {
			t.Fatalf("protocol %s, want HTTP/2", resp.Proto)
		}
		errc := make(chan error, 1)
		ctx, cancel := context.WithCancel(context.Background())
		go func() { errc <- get(ctx, c, url+"/slow") }()
		time.Sleep(100 * time.Millisecond)
		proxy.blackHole.Store(true)
		start := time.Now()
		select {
		case err := <-errc:
			if !pings {
				t.Errorf("without pings the request ended after %s: %v", time.Since(start), err)
			} else if err == nil {
				t.Error("the request on a dead connection succeeded")
			}
		case <-time.After(3 * time.Second):
			if pings {
				t.Error("the ping did not close the silent connection within 3s")
			}
		}
		cancel()
		base.CloseIdleConnections()
	}
}
