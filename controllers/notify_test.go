package controllers_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	sandboxv1 "github.com/getsentry/sandbox-controller/api/v1alpha1"
	"github.com/getsentry/sandbox-controller/internal/metrics"
	"github.com/getsentry/sandbox-controller/internal/notify"
)

// webhook is a receiver as a client would write one: it verifies every
// delivery's signature and timestamp, and records the CloudEvents it accepted.
type webhook struct {
	key []byte

	mu     sync.Mutex
	events []receivedEvent
	bad    int
}

type receivedEvent struct {
	SpecVersion string `json:"specversion"`
	ID          string `json:"id"`
	Source      string `json:"source"`
	Type        string `json:"type"`
	Subject     string `json:"subject"`
	Time        string `json:"time"`
	Data        struct {
		Phase      string                   `json:"phase"`
		Reason     string                   `json:"reason"`
		SessionID  string                   `json:"sessionID"`
		Routes     []sandboxv1.SandboxRoute `json:"routes"`
		SnapshotID string                   `json:"snapshotID"`
	} `json:"data"`
	at time.Time
}

func (h *webhook) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	h.mu.Lock()
	defer h.mu.Unlock()
	if err := notify.Verify(h.key, r.Header.Get(notify.HeaderSignature), r.Header.Get(notify.HeaderTimestamp), body, time.Now(), 5*time.Minute); err != nil {
		h.bad++
		w.WriteHeader(http.StatusUnauthorized)
		return
	}
	var ev receivedEvent
	if err := json.Unmarshal(body, &ev); err != nil {
		h.bad++
		w.WriteHeader(http.StatusBadRequest)
		return
	}
	ev.at = time.Now()
	h.events = append(h.events, ev)
}

// received returns the events of one type about one object, duplicates
// (the same id) removed as a receiver would.
func (h *webhook) received(typ, subject string) []receivedEvent {
	h.mu.Lock()
	defer h.mu.Unlock()
	seen := map[string]bool{}
	var out []receivedEvent
	for _, e := range h.events {
		if e.Type == typ && e.Subject == subject && !seen[e.ID] {
			seen[e.ID] = true
			out = append(out, e)
		}
	}
	return out
}

func (h *webhook) all() []receivedEvent {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]receivedEvent(nil), h.events...)
}

// configureNotifications turns notifications on in ns: the ConfigMap and its
// signing Secret.
func configureNotifications(ns, url string, key []byte) {
	ctx := context.Background()
	Expect(k8sClient.Create(ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "webhook-key"},
		Data:       map[string][]byte{"key": key},
	})).To(Succeed())
	Expect(k8sClient.Create(ctx, &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: notify.ConfigMapName},
		Data:       map[string]string{"url": url, "secretName": "webhook-key"},
	})).To(Succeed())
}

var _ = Describe("Notifications", func() {
	ctx := context.Background()

	It("deliver every transition, signed, to a namespace's webhook while another namespace's receiver hangs, and slow no reconcile", func() {
		good, slow := newNamespace(), newNamespace()
		hook := &webhook{key: []byte("good-namespace-signing-key-0123456789")}
		goodSrv := httptest.NewServer(hook)
		DeferCleanup(goodSrv.Close)
		hang := make(chan struct{})
		var slowHits atomic.Int32
		slowSrv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			slowHits.Add(1)
			select {
			case <-hang:
			case <-r.Context().Done():
			}
		}))
		DeferCleanup(func() { close(hang); slowSrv.Close() })
		configureNotifications(good, goodSrv.URL, hook.key)
		configureNotifications(slow, slowSrv.URL, []byte("slow-namespace-signing-key-0123456789"))
		timeoutsBefore := testutil.ToFloat64(metrics.NotifyFailed.WithLabelValues(slow, "timeout"))

		By("creating Sandboxes that go Idle after 6 s, first in the namespace whose receiver hangs")
		const idleAfter = 6 * time.Second
		spec := sandboxv1.SandboxSpec{Source: runtimeSource("node24"), TimeoutSeconds: ptr.To(int64(idleAfter / time.Second))}
		slowKey := types.NamespacedName{Namespace: slow, Name: "stuck-receiver"}
		newSandbox(slow, slowKey.Name, spec)
		key := types.NamespacedName{Namespace: good, Name: "watched"}
		created := time.Now()
		newSandbox(good, key.Name, spec)
		missing := types.NamespacedName{Namespace: good, Name: "orphan"}
		newSandbox(good, missing.Name, sandboxv1.SandboxSpec{Source: sandboxv1.SandboxSource{SnapshotRef: &sandboxv1.LocalObjectReference{Name: "absent"}}})
		snapKey := types.NamespacedName{Namespace: good, Name: "imported"}
		id := vercelSnapshot(ctx, good+"-notify", nil)
		newSnapshot(good, snapKey.Name, sandboxv1.SandboxSnapshotSpec{Source: sandboxv1.SandboxSnapshotSource{SnapshotID: &id}})

		sbx := waitReady(key)
		readyAfter := time.Since(created)
		// The same bound as a namespace without notifications: the Ready
		// write does not wait for any receiver.
		Expect(readyAfter).To(BeNumerically("<", 15*time.Second), "Ready took %s", readyAfter)
		readyAt := time.Now()
		Eventually(func() []receivedEvent { return hook.received("io.sentry.sandbox.sandbox.ready", key.Name) }, 5*time.Second).Should(HaveLen(1))
		ready := hook.received("io.sentry.sandbox.sandbox.ready", key.Name)[0]
		Expect(ready.at.Sub(readyAt)).To(BeNumerically("<", 3*time.Second), "the Ready notification waited behind the hanging receiver")
		Expect(ready.SpecVersion).To(Equal("1.0"))
		Expect(ready.Source).To(Equal("/namespaces/" + good + "/sandboxes/" + key.Name))
		Expect(ready.Data.Phase).To(Equal(string(sandboxv1.SandboxRunning)))
		Expect(ready.Data.SessionID).To(Equal(sbx.Status.SessionID))
		Expect(ready.ID).NotTo(BeEmpty())
		Expect(ready.Time).NotTo(BeEmpty())

		By("the namespace whose receiver hangs reconciles on time, too")
		slowSbx := waitReady(slowKey)
		Expect(slowSbx.Status.Phase).To(Equal(sandboxv1.SandboxRunning))

		By("announcing the snapshot Ready, the Sandbox Idle and the missing reference Failed")
		snap := waitSnapshotReady(snapKey)
		Eventually(func() []receivedEvent { return hook.received("io.sentry.sandbox.sandboxsnapshot.ready", snapKey.Name) }, 5*time.Second).Should(HaveLen(1))
		Expect(hook.received("io.sentry.sandbox.sandboxsnapshot.ready", snapKey.Name)[0].Data.SnapshotID).To(Equal(snap.Status.SnapshotID))

		Eventually(func() sandboxv1.SandboxPhase { return getSandbox(key).Status.Phase }, 4*idleAfter).Should(Equal(sandboxv1.SandboxIdle))
		Eventually(func() []receivedEvent { return hook.received("io.sentry.sandbox.sandbox.idle", key.Name) }, 5*time.Second).Should(HaveLen(1))
		Expect(hook.received("io.sentry.sandbox.sandbox.idle", key.Name)[0].Data.Phase).To(Equal(string(sandboxv1.SandboxIdle)))
		// Idle on time although this namespace's receiver hangs.
		Eventually(func() sandboxv1.SandboxPhase { return getSandbox(slowKey).Status.Phase }, 2*idleAfter).Should(Equal(sandboxv1.SandboxIdle))

		Eventually(func() sandboxv1.SandboxPhase { return getSandbox(missing).Status.Phase }, 3*referenceDeadline).Should(Equal(sandboxv1.SandboxFailed))
		Eventually(func() []receivedEvent { return hook.received("io.sentry.sandbox.sandbox.failed", missing.Name) }, 5*time.Second).Should(HaveLen(1))
		Expect(hook.received("io.sentry.sandbox.sandbox.failed", missing.Name)[0].Data.Reason).To(Equal(sandboxv1.ReasonSnapshotRefNotFound))

		By("every delivery carried a valid signature, and only this namespace's objects")
		hook.mu.Lock()
		Expect(hook.bad).To(BeZero())
		hook.mu.Unlock()
		for _, e := range hook.all() {
			Expect(e.Source).To(HavePrefix("/namespaces/" + good + "/"))
		}
		// Exactly the transitions that happened, each once after dropping
		// duplicates by id: no Ready for the failed one, no second Ready.
		Expect(hook.received("io.sentry.sandbox.sandbox.ready", missing.Name)).To(BeEmpty())
		Expect(hook.received("io.sentry.sandbox.sandbox.ready", key.Name)).To(HaveLen(1))

		By("the hanging receiver was tried again after each timeout, and the timeouts counted")
		Expect(slowHits.Load()).To(BeNumerically(">=", 2))
		Expect(testutil.ToFloat64(metrics.NotifyFailed.WithLabelValues(slow, "timeout")) - timeoutsBefore).To(BeNumerically(">=", 2))
	})

	It("send nothing unsigned: a ConfigMap without a signing Secret is counted as a config failure", func() {
		ns := newNamespace()
		var hits atomic.Int32
		srv := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { hits.Add(1) }))
		DeferCleanup(srv.Close)
		Expect(k8sClient.Create(ctx, &corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: notify.ConfigMapName},
			Data:       map[string]string{"url": srv.URL},
		})).To(Succeed())
		before := testutil.ToFloat64(metrics.NotifyFailed.WithLabelValues(ns, "config"))
		key := types.NamespacedName{Namespace: ns, Name: "unsigned"}
		id := vercelSnapshot(ctx, ns+"-notify", nil)
		newSnapshot(ns, key.Name, sandboxv1.SandboxSnapshotSpec{Source: sandboxv1.SandboxSnapshotSource{SnapshotID: &id}})
		waitSnapshotReady(key)
		Eventually(func() float64 { return testutil.ToFloat64(metrics.NotifyFailed.WithLabelValues(ns, "config")) - before }, 5*time.Second).Should(BeNumerically(">=", 1))
		Consistently(hits.Load, time.Second).Should(BeZero())
	})
})
