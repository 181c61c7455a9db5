package vercel

import (
	"context"
	"net/http"
	"sync/atomic"
	"testing"
)

// In an outage the client stops retrying after a few failures, so that each
// call costs one request and the caller's backoff paces the load; answers
// earn the retries back.
func TestRetriesAreThrottledInAnOutage(t *testing.T) {
	var down atomic.Bool
	down.Store(true)
	f := newFakeAPI(t, func(w http.ResponseWriter, r *http.Request, n int, body []byte) {
		if down.Load() {
			writeError(w, 503, "", "down")
			return
		}
		writeJSON(w, 200, SandboxResponse{Sandbox: Sandbox{Name: "a"}})
	})
	c, _ := newTestClient(t, f, nil)
	get := func() (requests int) {
		before := f.count()
		_, _ = c.GetSandbox(context.Background(), "a", false)
		return f.count() - before
	}
	// 10 tokens, retries while more than 5 remain: the first call is
	// retried twice, the second twice, then one retry, then none.
	var got []int
	for i := 0; i < 5; i++ {
		got = append(got, get())
	}
	if want := []int{3, 2, 1, 1, 1}; !equalInts(got, want) {
		t.Errorf("requests per call during the outage = %v, want %v", got, want)
	}
	// Each answer earns a tenth of a token back: 60 of them refill the
	// budget from 2 to 8 tokens.
	down.Store(false)
	for i := 0; i < 60; i++ {
		if n := get(); n != 1 {
			t.Fatalf("call %d after recovery sent %d requests", i, n)
		}
	}
	// Recovered tokens allow retries again for a new blip.
	down.Store(true)
	if n := get(); n != 3 {
		t.Errorf("a blip after recovery got %d requests, want 3 (retried)", n)
	}
}

func equalInts(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
