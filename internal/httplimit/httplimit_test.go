package httplimit

import (
	"context"
	"net/http"
	"net/http/httptest"
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
