package notify

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/goleak"

	"github.com/getsentry/sandbox-controller/internal/metrics"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var key = []byte("0123456789abcdef0123456789abcdef")

func TestSignAndVerify(t *testing.T) {
	body := []byte(`{"id":"x"}`)
	now := time.Unix(1_800_000_000, 0)
	ts := strconv.FormatInt(now.Unix(), 10)
	sig := Sign(key, ts, body)
	if err := Verify(key, sig, ts, body, now, time.Minute); err != nil {
		t.Fatalf("a valid signature was refused: %v", err)
	}
	for name, c := range map[string]struct {
		sig, ts string
		body    []byte
		now     time.Time
		key     []byte
	}{
		"body changed":        {sig, ts, []byte(`{"id":"y"}`), now, key},
		"timestamp changed":   {sig, strconv.FormatInt(now.Unix()+1, 10), body, now, key},
		"other key":           {sig, ts, body, now, []byte("another key of sixteen+")},
		"replayed later":      {sig, ts, body, now.Add(6 * time.Minute), key},
		"no sha256= prefix":   {sig[len("sha256="):], ts, body, now, key},
		"timestamp not a num": {Sign(key, "soon", body), "soon", body, now, key},
	} {
		if err := Verify(c.key, c.sig, c.ts, c.body, c.now, 5*time.Minute); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

// receiver records the deliveries it verified; fail answers 503 to the
// first n attempts.
type receiver struct {
	mu       sync.Mutex
	attempts int
	fail     int
	got      []map[string]any
	bad      int
}

func (r *receiver) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	body, _ := io.ReadAll(req.Body)
	r.mu.Lock()
	defer r.mu.Unlock()
	r.attempts++
	if err := Verify(key, req.Header.Get(HeaderSignature), req.Header.Get(HeaderTimestamp), body, time.Now(), time.Minute); err != nil || req.Header.Get("Content-Type") != ContentType {
		r.bad++
		w.WriteHeader(http.StatusUnauthorized)
		return
	}
	if r.attempts <= r.fail {
		w.WriteHeader(http.StatusServiceUnavailable)
		return
	}
	var ev map[string]any
	_ = json.Unmarshal(body, &ev)
	r.got = append(r.got, ev)
}

func (r *receiver) ids() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var ids []string
	for _, e := range r.got {
		ids = append(ids, e["id"].(string))
	}
	return ids
}

func resolverFor(urls map[string]string) Resolver {
	return func(_ context.Context, ns string) (Endpoint, bool, error) {
		u, ok := urls[ns]
		return Endpoint{URL: u, Key: key}, ok, nil
	}
}

func start(t *testing.T, n *Notifier) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = n.Start(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
}

func event(ns, id string) Event {
	return Event{Namespace: ns, ID: id, Type: "io.sentry.sandbox.sandbox.ready", Source: "/namespaces/" + ns + "/sandboxes/a", Subject: "a", Time: time.Now(), Data: map[string]string{"phase": "Running"}}
}

func eventually(t *testing.T, within time.Duration, cond func() bool, what string) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("not within %s: %s", within, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestRetriesUntilAcceptedInOrder(t *testing.T) {
	rec := &receiver{fail: 2}
	srv := httptest.NewServer(rec)
	defer srv.Close()
	n := New(Options{Resolve: resolverFor(map[string]string{"a": srv.URL}), MinBackoff: 20 * time.Millisecond})
	start(t, n)
	n.Enqueue(event("a", "1"))
	n.Enqueue(event("a", "2"))
	eventually(t, 5*time.Second, func() bool { return len(rec.ids()) == 2 }, "both messages delivered")
	if got := rec.ids(); got[0] != "1" || got[1] != "2" {
		t.Errorf("delivered %v, want [1 2]: a namespace's messages keep their order across retries", got)
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if rec.attempts != 4 || rec.bad != 0 {
		t.Errorf("attempts %d (bad signatures %d), want 4 and 0", rec.attempts, rec.bad)
	}
	ev := rec.got[0]
	for _, f := range []string{"specversion", "id", "source", "type", "subject", "time", "data"} {
		if ev[f] == nil {
			t.Errorf("the CloudEvent has no %q: %v", f, ev)
		}
	}
	if ev["specversion"] != "1.0" {
		t.Errorf("specversion %v", ev["specversion"])
	}
}

func TestHangingReceiverDelaysNoOtherNamespace(t *testing.T) {
	hang := make(chan struct{})
	slow := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-hang:
		case <-r.Context().Done():
		}
	}))
	defer slow.Close()
	defer close(hang)
	rec := &receiver{}
	good := httptest.NewServer(rec)
	defer good.Close()
	n := New(Options{
		Resolve: resolverFor(map[string]string{"slow": slow.URL, "good": good.URL}),
		Workers: 2, Timeout: 300 * time.Millisecond, MinBackoff: 10 * time.Millisecond,
	})
	start(t, n)
	before := testutil.ToFloat64(metrics.NotifyFailed.WithLabelValues("slow", "timeout"))
	for i := range 20 {
		n.Enqueue(event("slow", "s"+strconv.Itoa(i)))
	}
	began := time.Now()
	for i := range 5 {
		n.Enqueue(event("good", "g"+strconv.Itoa(i)))
	}
	eventually(t, 2*time.Second, func() bool { return len(rec.ids()) == 5 }, "the good namespace's messages delivered")
	// One worker at most is held by the hanging receiver, so the good
	// namespace's five messages need no more than one request timeout.
	if d := time.Since(began); d > time.Second {
		t.Errorf("the good namespace waited %s behind a hanging receiver", d)
	}
	eventually(t, 2*time.Second, func() bool {
		return testutil.ToFloat64(metrics.NotifyFailed.WithLabelValues("slow", "timeout")) >= before+2
	}, "timeouts counted and retried")
}

func TestFullQueueDropsOldest(t *testing.T) {
	n := New(Options{Resolve: resolverFor(nil), QueueSize: 3})
	before := testutil.ToFloat64(metrics.NotifyDropped.WithLabelValues("queue_full"))
	for i := range 5 {
		n.Enqueue(event("a", strconv.Itoa(i)))
	}
	if n.Len() != 3 {
		t.Fatalf("queue holds %d, want 3", n.Len())
	}
	if got := n.queue[0].id; got != "2" {
		t.Errorf("oldest kept is %s, want 2", got)
	}
	if d := testutil.ToFloat64(metrics.NotifyDropped.WithLabelValues("queue_full")) - before; d != 2 {
		t.Errorf("dropped counted %v, want 2", d)
	}
	if testutil.ToFloat64(metrics.NotifyQueueDepth) != 3 {
		t.Errorf("queue depth gauge %v, want 3", testutil.ToFloat64(metrics.NotifyQueueDepth))
	}
}

func TestExpiresAfterMaxAge(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusInternalServerError) }))
	defer srv.Close()
	n := New(Options{Resolve: resolverFor(map[string]string{"a": srv.URL}), MaxAge: 200 * time.Millisecond, MinBackoff: 20 * time.Millisecond})
	before := testutil.ToFloat64(metrics.NotifyDropped.WithLabelValues("expired"))
	start(t, n)
	n.Enqueue(event("a", "1"))
	eventually(t, 3*time.Second, func() bool { return n.Len() == 0 }, "the message given up")
	if d := testutil.ToFloat64(metrics.NotifyDropped.WithLabelValues("expired")) - before; d != 1 {
		t.Errorf("expired counted %v, want 1", d)
	}
}

func TestUnconfiguredNamespaceIsNotQueuedAgain(t *testing.T) {
	calls := 0
	n := New(Options{Resolve: func(context.Context, string) (Endpoint, bool, error) { calls++; return Endpoint{}, false, nil }})
	start(t, n)
	n.Enqueue(event("a", "1"))
	eventually(t, time.Second, func() bool { return n.Len() == 0 }, "the message discarded")
	n.Enqueue(event("a", "2"))
	if n.Len() != 0 {
		t.Errorf("a message queued for a namespace known to have no webhook")
	}
	time.Sleep(50 * time.Millisecond)
	if calls != 1 {
		t.Errorf("resolved %d times within the TTL, want 1", calls)
	}
}

func TestBackoffDoublesToTheCap(t *testing.T) {
	n := New(Options{Resolve: resolverFor(nil), MinBackoff: time.Second, MaxBackoff: 5 * time.Second})
	var got []time.Duration
	for a := 1; a <= 5; a++ {
		got = append(got, n.backoff(a))
	}
	want := []time.Duration{time.Second, 2 * time.Second, 4 * time.Second, 5 * time.Second, 5 * time.Second}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("backoff %v, want %v", got, want)
		}
	}
}
