package notify

import (
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/getsentry/sandbox-controller/localstack/controlplane"
)

// apiServer is one kube-apiserver for the outbox tests, started by the first
// that needs it (KUBEBUILDER_ASSETS, as `make test` sets it).
var apiServer struct {
	once sync.Once
	cp   *controlplane.ControlPlane
	c    client.Client
	err  error
	n    atomic.Int32
}

func outboxClient(t *testing.T) (client.Client, string) {
	t.Helper()
	if testing.Short() {
		t.Skip("starts kube-apiserver")
	}
	if os.Getenv("KUBEBUILDER_ASSETS") == "" {
		t.Fatal("KUBEBUILDER_ASSETS is not set: run with KUBEBUILDER_ASSETS=\"$(./hack/envtest.sh)\"")
	}
	apiServer.once.Do(func() {
		apiServer.cp, apiServer.err = controlplane.Start(context.Background(), controlplane.Options{})
		if apiServer.err != nil {
			return
		}
		scheme := runtime.NewScheme()
		_ = clientgoscheme.AddToScheme(scheme)
		apiServer.c, apiServer.err = client.New(apiServer.cp.Config, client.Options{Scheme: scheme})
	})
	if apiServer.err != nil {
		t.Fatal(apiServer.err)
	}
	ns := "outbox-" + strconv.Itoa(int(apiServer.n.Add(1)))
	if err := apiServer.c.Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		t.Fatal(err)
	}
	return apiServer.c, ns
}

// countingWriter counts the outbox's API requests.
type countingWriter struct {
	client.Client
	writes atomic.Int32
}

func (c *countingWriter) Create(ctx context.Context, obj client.Object, opts ...client.CreateOption) error {
	c.writes.Add(1)
	return c.Client.Create(ctx, obj, opts...)
}

func (c *countingWriter) Patch(ctx context.Context, obj client.Object, p client.Patch, opts ...client.PatchOption) error {
	c.writes.Add(1)
	return c.Client.Patch(ctx, obj, p, opts...)
}

func (c *countingWriter) Delete(ctx context.Context, obj client.Object, opts ...client.DeleteOption) error {
	c.writes.Add(1)
	return c.Client.Delete(ctx, obj, opts...)
}

// stored is the outbox's messages as the API server holds them: key → value,
// over every segment.
func stored(t *testing.T, c client.Client, ns string) (map[string]string, int) {
	t.Helper()
	var list corev1.ConfigMapList
	if err := c.List(context.Background(), &list, client.InNamespace(ns), client.MatchingLabels{OutboxLabel: "outbox"}); err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, cm := range list.Items {
		for k, v := range cm.Data {
			out[k] = v
		}
	}
	return out, len(list.Items)
}

// run starts n until the returned stop is called, which waits for it.
func run(n *Notifier) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = n.Start(ctx); close(done) }()
	return func() { cancel(); <-done }
}

// A receiver that is down while the leader has messages queued, a leader that
// stops, a new one that starts: every message arrives, in order per
// namespace, with the webhook-id it had, and the outbox is emptied.
func TestOutboxSurvivesAChangeOfLeader(t *testing.T) {
	c, ns := outboxClient(t)
	var up atomic.Bool
	var unwritten atomic.Int32
	rec := &receiver{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// Every attempt is of a message the outbox holds: written before
		// the first attempt, removed only after a 2xx.
		if !storedID(t, c, ns, r.Header.Get(HeaderWebhookID)) {
			unwritten.Add(1)
		}
		if !up.Load() {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		rec.ServeHTTP(w, r)
	}))
	defer srv.Close()
	box := &Outbox{Client: c, Reader: c, Namespace: ns, Name: "outbox", Linger: 50 * time.Millisecond}
	opts := Options{Resolve: resolverFor(map[string]string{"a": srv.URL, "b": srv.URL}), Allow: loopback, MinBackoff: 20 * time.Millisecond, MaxBackoff: 50 * time.Millisecond, Outbox: box}

	first := New(opts)
	stop := run(first)
	for i := range 3 {
		first.Enqueue(event("a", "a"+strconv.Itoa(i)))
		first.Enqueue(event("b", "b"+strconv.Itoa(i)))
	}
	eventually(t, 10*time.Second, func() bool { m, _ := stored(t, c, ns); return len(m) == 6 }, "the six messages written to the outbox")
	stop()

	up.Store(true)
	second := New(opts)
	defer run(second)()
	eventually(t, 10*time.Second, func() bool {
		distinct := map[string]bool{}
		for _, id := range rec.ids() {
			distinct[id] = true
		}
		return len(distinct) == 6
	}, "the new leader delivered the six messages")
	// At least once: a message the old leader was still sending as it
	// stopped may arrive twice, with its id, which receivers drop; the
	// first arrivals are in order per namespace.
	var a, b []string
	seen := map[string]bool{}
	for _, id := range rec.ids() {
		if seen[id] {
			continue
		}
		seen[id] = true
		if id[0] == 'a' {
			a = append(a, id)
		} else {
			b = append(b, id)
		}
	}
	if len(a) != 3 || a[0] != "a0" || a[1] != "a1" || a[2] != "a2" || len(b) != 3 || b[0] != "b0" || b[2] != "b2" {
		t.Errorf("delivered %v and %v, want each namespace's three in order", a, b)
	}
	rec.mu.Lock()
	for i, ev := range rec.got {
		// The receiver accepted only attempts whose webhook-id it recorded;
		// the accepted ones are the last len(got) attempts of each id.
		if ev["id"] == nil {
			t.Errorf("delivery %d has no id", i)
		}
	}
	for _, id := range rec.webhookIDs {
		if id == "" {
			t.Errorf("an attempt without webhook-id")
		}
	}
	rec.mu.Unlock()
	eventually(t, 10*time.Second, func() bool { m, _ := stored(t, c, ns); return len(m) == 0 }, "the outbox emptied after the 2xx answers")
	if u := unwritten.Load(); u > 0 {
		t.Errorf("%d attempts were of a message not in the outbox", u)
	}
}

// storedID reports whether the outbox in ns holds a message with id.
func storedID(t *testing.T, c client.Client, ns, id string) bool {
	m, _ := stored(t, c, ns)
	for _, v := range m {
		if e, ok := loadedEntry("k", v, 0); ok && e.id == id {
			return true
		}
	}
	return false
}

// A manager that stops cleanly right after enqueueing writes what it had not
// written yet before it returns, so the next leader delivers it.
func TestOutboxWritesQueuedMessagesWhenStopping(t *testing.T) {
	c, ns := outboxClient(t)
	box := &Outbox{Client: c, Reader: c, Namespace: ns, Name: "outbox"}
	unreachable := Options{Resolve: resolverFor(map[string]string{"a": "http://127.0.0.1:1"}), Allow: loopback, Outbox: box}
	n := New(unreachable)
	// Enqueued before Start (the controllers may enqueue while the outbox is
	// still being read) and right before the stop.
	n.Enqueue(event("a", "early"))
	stop := run(n)
	n.Enqueue(event("a", "late"))
	stop()
	m, _ := stored(t, c, ns)
	ids := map[string]bool{}
	for _, v := range m {
		e, ok := loadedEntry("k", v, 0)
		if !ok {
			t.Fatalf("a stored value is not a message: %s", v)
		}
		ids[e.id] = true
	}
	if !ids["early"] || !ids["late"] || len(ids) != 2 {
		t.Errorf("stored %v, want early and late", ids)
	}
}

// Segments stay small: a full one is followed by the next, the queue bound
// drops the oldest from the outbox too, and emptied segments are deleted.
// The writes are batched: messages enqueued together share one write.
func TestOutboxSegmentsAreBoundedAndBatched(t *testing.T) {
	c, ns := outboxClient(t)
	counting := &countingWriter{Client: c}
	var up atomic.Bool
	rec := &receiver{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !up.Load() {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		rec.ServeHTTP(w, r)
	}))
	defer srv.Close()
	box := &Outbox{Client: counting, Reader: c, Namespace: ns, Name: "outbox", SegmentBytes: 2048, Linger: 50 * time.Millisecond}
	n := New(Options{Resolve: resolverFor(map[string]string{"a": srv.URL}), Allow: loopback, QueueSize: 20, MinBackoff: 20 * time.Millisecond, MaxBackoff: 50 * time.Millisecond, Outbox: box})
	for i := range 25 {
		n.Enqueue(event("a", strconv.Itoa(i)))
	}
	defer run(n)()
	eventually(t, 10*time.Second, func() bool { m, _ := stored(t, c, ns); return len(m) == 20 }, "the 20 newest messages written")
	m, segs := stored(t, c, ns)
	if segs < 3 {
		t.Errorf("%d segments for 20 messages of ~450 bytes in segments of 2 KiB", segs)
	}
	for _, v := range m {
		if e, _ := loadedEntry("k", v, 0); e.id == "0" || e.id == "4" {
			t.Errorf("message %s, among the oldest dropped by the queue bound, is in the outbox", e.id)
		}
	}
	// One create per segment (plus nothing else): 25 enqueues, one batch.
	if w := int(counting.writes.Load()); w != segs {
		t.Errorf("%d writes to store 20 messages in %d segments, want one per segment", w, segs)
	}
	before := counting.writes.Load()
	up.Store(true)
	eventually(t, 10*time.Second, func() bool { return len(rec.ids()) == 20 }, "the 20 messages delivered")
	eventually(t, 10*time.Second, func() bool { _, s := stored(t, c, ns); return s == 1 }, "the emptied segments deleted, the active one kept")
	if m, _ := stored(t, c, ns); len(m) != 0 {
		t.Errorf("%d messages left in the outbox", len(m))
	}
	t.Logf("outbox writes: %d to add 20 messages, %d to remove them after delivery (including deleting emptied segments)", before, counting.writes.Load()-before)
	if w := counting.writes.Load() - before; w > 20+int32(segs) {
		t.Errorf("%d writes to remove 20 messages", w)
	}
}

// A signing Secret holding a whsec_ value that is not a Standard Webhooks
// secret is refused naming secretKey (the receiver, given the same string,
// would derive another key), without the value in the message; a genuine one
// is accepted.
func TestResolverChecksAWhsecSigningSecret(t *testing.T) {
	c, ns := outboxClient(t)
	ctx := context.Background()
	for name, value := range map[string]string{"bad": "whsec_Y2FuYXJ5LXNob3J0", "good": "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"} {
		if err := c.Create(ctx, &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{KeyLabel: "true"}},
			Data:       map[string][]byte{"key": []byte(value)},
		}); err != nil {
			t.Fatal(err)
		}
	}
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: ConfigMapName}, Data: map[string]string{"url": "https://receiver.example.com/hook", "secretName": "bad"}}
	if err := c.Create(ctx, cm); err != nil {
		t.Fatal(err)
	}
	resolve := ConfigMapResolver(c)
	_, _, err := resolve(ctx, ns)
	ce, ok := err.(*ConfigError)
	if !ok || ce.Reason != ReasonConfigInvalid || !strings.Contains(ce.Message, `secretKey "key"`) || !strings.Contains(ce.Message, "whsec_") {
		t.Fatalf("a short whsec_ value: %v, want NotificationConfigInvalid naming secretKey", err)
	}
	if strings.Contains(ce.Message, "Y2FuYXJ5") {
		t.Errorf("the message carries the Secret's value: %s", ce.Message)
	}
	cm.Data["secretName"] = "good"
	if err := c.Update(ctx, cm); err != nil {
		t.Fatal(err)
	}
	if ep, ok, err := resolve(ctx, ns); err != nil || !ok || string(ep.Key) != "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw" {
		t.Errorf("a genuine whsec_ value: %v %v", ok, err)
	}
}

// A namespace without a webhook costs no outbox write: its webhook is
// resolved before the message would be written, and the message dropped.
func TestOutboxWritesNothingForANamespaceWithoutWebhook(t *testing.T) {
	c, ns := outboxClient(t)
	counting := &countingWriter{Client: c}
	n := New(Options{Resolve: resolverFor(nil), Outbox: &Outbox{Client: counting, Reader: c, Namespace: ns, Name: "outbox"}})
	defer run(n)()
	n.Enqueue(event("quiet", "1"))
	n.Enqueue(event("quiet", "2"))
	eventually(t, 5*time.Second, func() bool { return n.Len() == 0 }, "the messages dropped")
	time.Sleep(100 * time.Millisecond)
	if w := counting.writes.Load(); w != 0 {
		t.Errorf("%d outbox writes for a namespace without a webhook", w)
	}
}
