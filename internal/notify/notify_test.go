package notify

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr/funcr"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/goleak"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/getsentry/sandbox-controller/internal/metrics"
)

// TestMain stops the outbox tests' kube-apiserver, then checks that no
// goroutine leaked (the API client's idle connections excepted).
func TestMain(m *testing.M) {
	code := m.Run()
	if apiServer.cp != nil {
		if err := apiServer.cp.Stop(); err != nil {
			fmt.Fprintln(os.Stderr, "stop kube-apiserver:", err)
			code = 1
		}
	}
	if code == 0 {
		if err := goleak.Find(
			goleak.IgnoreTopFunction("net/http.(*persistConn).readLoop"),
			goleak.IgnoreTopFunction("net/http.(*persistConn).writeLoop"),
			goleak.IgnoreAnyFunction("k8s.io/klog/v2.(*flushDaemon).run"),
		); err != nil {
			fmt.Fprintln(os.Stderr, err)
			code = 1
		}
	}
	os.Exit(code)
}

var key = []byte("0123456789abcdef0123456789abcdef")

// loopback allows the test receivers (httptest listens on 127.0.0.1), as the
// envtest suite and make dev do.
var loopback = func() AllowList {
	a, err := ParseAllowList([]string{"127.0.0.0/8", "::1"})
	if err != nil {
		panic(err)
	}
	return a
}()

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
	// webhookIDs is the webhook-id of every attempt.
	webhookIDs []string
}

func (r *receiver) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	body, _ := io.ReadAll(req.Body)
	r.mu.Lock()
	defer r.mu.Unlock()
	r.attempts++
	r.webhookIDs = append(r.webhookIDs, req.Header.Get(HeaderWebhookID))
	// Both signatures, while the deprecated one is still sent.
	if err := VerifyStandard(ReceiverSecret(key), req.Header, body, time.Now(), time.Minute); err != nil {
		r.bad++
		w.WriteHeader(http.StatusUnauthorized)
		return
	}
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
	n := New(Options{Resolve: resolverFor(map[string]string{"a": srv.URL}), Allow: loopback, MinBackoff: 20 * time.Millisecond})
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
	// webhook-id is the event's id on every attempt, retries included.
	if want := []string{"1", "1", "1", "2"}; !slices.Equal(rec.webhookIDs, want) {
		t.Errorf("webhook-id of the attempts %v, want %v", rec.webhookIDs, want)
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
		Allow:   loopback,
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
	n := New(Options{Resolve: resolverFor(map[string]string{"a": srv.URL}), Allow: loopback, MaxAge: 200 * time.Millisecond, MinBackoff: 20 * time.Millisecond})
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

// A notifier wired as the manager's default (no allow-list) refuses a
// receiver on loopback when it dials: nothing reaches it, the attempt counts
// as refused, and the log says why without the URL's query or the key.
// "localhost" is a name, which only a check of the resolved address catches.
func TestRefusesLoopbackWithoutAnAllowList(t *testing.T) {
	var mu sync.Mutex
	reached := 0
	srv := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { mu.Lock(); reached++; mu.Unlock() }))
	defer srv.Close()
	_, port, _ := net.SplitHostPort(srv.Listener.Addr().String())
	n := New(Options{
		Resolve: resolverFor(map[string]string{
			"refused-ip":   srv.URL + "/hook?token=query-token",
			"refused-name": "http://localhost:" + port + "/hook?token=query-token",
		}),
		MinBackoff: 10 * time.Millisecond,
	})
	logs := startLogged(t, n)
	n.Enqueue(event("refused-ip", "1"))
	n.Enqueue(event("refused-name", "1"))
	eventually(t, 5*time.Second, func() bool {
		return testutil.ToFloat64(metrics.NotifyFailed.WithLabelValues("refused-ip", "refused")) >= 2 &&
			testutil.ToFloat64(metrics.NotifyFailed.WithLabelValues("refused-name", "refused")) >= 2
	}, "both receivers refused, and refused again on retry")
	mu.Lock()
	if reached != 0 {
		t.Errorf("the loopback receiver was reached %d times", reached)
	}
	mu.Unlock()
	lines := logs.all()
	found := false
	for _, l := range lines {
		if strings.Contains(l, "query-token") || strings.Contains(l, string(key)) {
			t.Errorf("a log line carries the URL's query or the key: %s", l)
		}
		found = found || (strings.Contains(l, "http://127.0.0.1:"+port) && strings.Contains(l, "is loopback"))
	}
	if !found {
		t.Errorf("no log line names the refused receiver and why: %q", lines)
	}
}

// The operator's allow-list admits an internal receiver by range or by
// name, and only that one: 127.0.0.2 is loopback too and stays refused.
func TestAllowListAdmitsOnlyWhatItNames(t *testing.T) {
	rec := &receiver{}
	srv := httptest.NewServer(rec)
	defer srv.Close()
	_, port, _ := net.SplitHostPort(srv.Listener.Addr().String())
	other, err := net.Listen("tcp", "127.0.0.2:0")
	if err != nil {
		t.Fatal(err)
	}
	otherRec := &receiver{}
	otherSrv := httptest.NewUnstartedServer(otherRec)
	_ = otherSrv.Listener.Close()
	otherSrv.Listener = other
	otherSrv.Start()
	defer otherSrv.Close()
	for _, c := range []struct {
		name  string
		allow []string
		url   string
	}{
		{"allowed-cidr", []string{"127.0.0.1/32"}, srv.URL},
		{"allowed-ip", []string{"127.0.0.1"}, srv.URL},
		{"allowed-name", []string{"LocalHost."}, "http://localhost:" + port},
	} {
		allow, err := ParseAllowList(c.allow)
		if err != nil {
			t.Fatal(err)
		}
		n := New(Options{Resolve: resolverFor(map[string]string{c.name: c.url, c.name + "-other": otherSrv.URL}), Allow: allow, MinBackoff: 10 * time.Millisecond})
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { _ = n.Start(ctx); close(done) }()
		before := len(rec.ids())
		n.Enqueue(event(c.name, c.name))
		n.Enqueue(event(c.name+"-other", c.name))
		eventually(t, 5*time.Second, func() bool { return len(rec.ids()) == before+1 }, c.name+": the allowed receiver got the message")
		eventually(t, 5*time.Second, func() bool {
			return testutil.ToFloat64(metrics.NotifyFailed.WithLabelValues(c.name+"-other", "refused")) >= 1
		}, c.name+": 127.0.0.2 refused")
		cancel()
		<-done
	}
	otherRec.mu.Lock()
	defer otherRec.mu.Unlock()
	if otherRec.attempts != 0 {
		t.Errorf("127.0.0.2, which no list allowed, was reached %d times", otherRec.attempts)
	}
}

func TestInternalRange(t *testing.T) {
	for addr, want := range map[string]string{
		"8.8.8.8":              "",
		"2606:4700:4700::1111": "",
		"64:ff9b::808:808":     "", // NAT64 to a public address
		"127.0.0.1":            "loopback",
		"127.1.2.3":            "loopback",
		"::1":                  "loopback",
		"::ffff:127.0.0.1":     "loopback",
		"169.254.169.254":      "link-local",
		"fe80::1":              "link-local",
		"10.0.0.1":             "private",
		"172.16.0.1":           "private",
		"172.31.255.255":       "private",
		"192.168.1.1":          "private",
		"fd00:ec2::254":        "private",
		"::ffff:10.1.2.3":      "private",
		"64:ff9b::a9fe:a9fe":   "link-local (through NAT64)",
		"100.64.0.1":           "shared address space (100.64.0.0/10)",
		"100.127.255.255":      "shared address space (100.64.0.0/10)",
		"0.0.0.0":              "unspecified",
		"::":                   "unspecified",
		"0.1.2.3":              "reserved",
		"224.0.0.1":            "multicast",
		"ff02::1":              "multicast",
		"255.255.255.255":      "reserved",
		"240.0.0.1":            "reserved",
		"192.0.0.170":          "reserved",
		"198.18.0.1":           "reserved",
		"::10.0.0.1":           "reserved",
		"fec0::1":              "reserved",
		"100.128.0.1":          "",
		"172.32.0.1":           "",
		"169.253.255.255":      "",
	} {
		if got := internalRange(netip.MustParseAddr(addr)); got != want {
			t.Errorf("%s: %q, want %q", addr, got, want)
		}
	}
}

func TestParseAllowList(t *testing.T) {
	a, err := ParseAllowList([]string{"10.0.0.0/8", " fd00::/8 ", "192.168.1.7", "", "Receiver.Team-A.svc.cluster.local.", "*.svc.cluster.local", "10.1.2.3/16"})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := a.String(), "10.0.0.0/8,fd00::/8,192.168.1.7/32,10.1.0.0/16,receiver.team-a.svc.cluster.local,*.svc.cluster.local"; got != want {
		t.Errorf("parsed %s, want %s", got, want)
	}
	for addr, want := range map[string]bool{"10.9.9.9": true, "fd12::1": true, "192.168.1.7": true, "192.168.1.8": false, "127.0.0.1": false, "::ffff:10.0.0.1": true} {
		ip := netip.MustParseAddr(addr).Unmap()
		if got := a.allowsAddr(ip); got != want {
			t.Errorf("allowsAddr(%s) = %v, want %v", addr, got, want)
		}
	}
	for host, want := range map[string]bool{
		"receiver.team-a.svc.cluster.local":  true,
		"RECEIVER.team-a.svc.cluster.local.": true,
		"other.team-b.svc.cluster.local":     true,
		"svc.cluster.local":                  false,
		"evilsvc.cluster.local":              false,
		"receiver.team-a.svc":                false,
	} {
		if got := a.allowsHost(host); got != want {
			t.Errorf("allowsHost(%s) = %v, want %v", host, got, want)
		}
	}
	for _, bad := range []string{"10.0.0.0/33", "not a host", "-bad.example.com", "http://x", "a..b"} {
		if _, err := ParseAllowList([]string{bad}); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
	if err := a.checkAddr("10.2.3.4:80"); err != nil {
		t.Errorf("an allowed address refused: %v", err)
	}
	if err := a.checkAddr("[::ffff:169.254.169.254]:80"); refused(err) == nil || refused(err).Range != "link-local" {
		t.Errorf("the metadata address as IPv4-mapped IPv6: %v", err)
	}
	if err := a.checkAddr("[fe80::1%eth0]:80"); refused(err) == nil || refused(err).Range != "link-local" {
		t.Errorf("a link-local address with a zone: %v", err)
	}
	if fe80, _ := ParseAllowList([]string{"fe80::/10"}); fe80.checkAddr("[fe80::1%eth0]:80") != nil {
		t.Errorf("an allowed range missed an address with a zone")
	}
	if err := a.checkAddr("93.184.216.34:443"); err != nil {
		t.Errorf("a public address refused: %v", err)
	}
}

// logSink collects the notifier's log lines, V(1) included.
type logSink struct {
	mu    sync.Mutex
	lines []string
}

func (s *logSink) all() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.lines...)
}

// startLogged runs n with a context whose logger writes to the returned sink.
func startLogged(t *testing.T, n *Notifier) *logSink {
	sink := &logSink{}
	logger := funcr.New(func(prefix, args string) {
		sink.mu.Lock()
		defer sink.mu.Unlock()
		sink.lines = append(sink.lines, prefix+" "+args)
	}, funcr.Options{Verbosity: 4})
	ctx, cancel := context.WithCancel(log.IntoContext(context.Background(), logger))
	done := make(chan struct{})
	go func() { _ = n.Start(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	return sink
}
