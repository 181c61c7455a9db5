package controllers_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	sandboxv1 "github.com/getsentry/sandbox-controller/api/v1alpha1"
	"github.com/getsentry/sandbox-controller/internal/metrics"
	"github.com/getsentry/sandbox-controller/internal/notify"
)

// webhook is a receiver as a client would write one: it verifies every
// delivery's Standard Webhooks signature and timestamp with the secret
// docs/clients.md tells a receiver to use (whsec_ and the base64 of the
// Secret's value, spelled out here), and records the CloudEvents it accepted.
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
	// webhookID is the delivery's webhook-id header.
	webhookID string
	Data      struct {
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
	if err := notify.VerifyStandard("whsec_"+base64.StdEncoding.EncodeToString(h.key), r.Header, body, time.Now(), 5*time.Minute); err != nil {
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
	ev.at, ev.webhookID = time.Now(), r.Header.Get("webhook-id")
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

// notificationKeyLabel marks a Secret made to sign notifications
// (notify.KeyLabel); spelled out so that a change of the documented label
// fails these specs.
const notificationKeyLabel = "sandbox.sentry.io/notification-key"

// configureNotifications turns notifications on in ns: the ConfigMap and its
// signing Secret, labelled as one.
func configureNotifications(ns, url string, key []byte) {
	ctx := context.Background()
	Expect(k8sClient.Create(ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "webhook-key", Labels: map[string]string{notificationKeyLabel: "true"}},
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
		// The writer learns why, on the ConfigMap, by the key to fix.
		expectEvent(types.NamespacedName{Namespace: ns, Name: notify.ConfigMapName}, "Warning NotificationConfigInvalid: secretName: required")
	})

	// The suite's manager allows 127.0.0.1 only (--notify-allow-destinations,
	// as make dev allows loopback). 127.0.0.2 is loopback too — Linux routes
	// all of 127/8 to lo — and not on the list: it stands for every address a
	// ConfigMap writer must not make the manager reach (the node, metadata
	// services, cluster-internal services).
	It("refuse at dial time a receiver outside the allow-list, deliver nothing to it, and say so on the ConfigMap", func() {
		ns := newNamespace()
		var hits atomic.Int32
		l, err := net.Listen("tcp", "127.0.0.2:0")
		Expect(err).NotTo(HaveOccurred())
		srv := httptest.NewUnstartedServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { hits.Add(1) }))
		Expect(srv.Listener.Close()).To(Succeed())
		srv.Listener = l
		srv.Start()
		DeferCleanup(srv.Close)
		signingKey := []byte("internal-receiver-signing-key-0123456789")
		configureNotifications(ns, srv.URL+"/hook?token=query-token-never-shown", signingKey)
		refusedBefore := testutil.ToFloat64(metrics.NotifyFailed.WithLabelValues(ns, "refused"))

		key := types.NamespacedName{Namespace: ns, Name: "aimed-inside"}
		id := vercelSnapshot(ctx, ns+"-notify", nil)
		newSnapshot(ns, key.Name, sandboxv1.SandboxSnapshotSpec{Source: sandboxv1.SandboxSnapshotSource{SnapshotID: &id}})
		waitSnapshotReady(key)

		// Attempts and their retries are refused: nothing reaches the receiver.
		Consistently(hits.Load, 3*time.Second).Should(BeZero(), "a message reached the receiver on 127.0.0.2")
		cm := types.NamespacedName{Namespace: ns, Name: notify.ConfigMapName}
		expectEvent(cm, "Warning NotificationDestinationRefused")
		for _, e := range eventsFor(cm) {
			// The receiver and the range, not the URL's path or query (which
			// may carry a token) and never the key.
			Expect(e).To(ContainSubstring("http://" + l.Addr().String()))
			Expect(e).To(ContainSubstring("loopback"))
			Expect(e).NotTo(ContainSubstring("query-token-never-shown"))
			Expect(e).NotTo(ContainSubstring(string(signingKey)))
		}
		Expect(testutil.ToFloat64(metrics.NotifyFailed.WithLabelValues(ns, "refused")) - refusedBefore).To(BeNumerically(">=", 1))
		Expect(hits.Load()).To(BeZero())
	})

	// A ConfigMap writer without Secret access must not get messages signed
	// with a Secret they cannot read: each is an HMAC they can test guesses of
	// the value against offline.
	It("sign nothing with a Secret not labelled as a notification key, so a ConfigMap writer gets no oracle for another Secret's value", func() {
		ns := newNamespace()
		victim := []byte("database-password-the-writer-cannot-read")
		Expect(k8sClient.Create(ctx, &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "db-credentials"},
			Data:       map[string][]byte{"password": victim},
		})).To(Succeed())
		// The attacker's receiver, which would verify with the guessed value.
		hook := &webhook{key: victim}
		var hits atomic.Int32
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { hits.Add(1); hook.ServeHTTP(w, r) }))
		DeferCleanup(srv.Close)
		Expect(k8sClient.Create(ctx, &corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: notify.ConfigMapName},
			Data:       map[string]string{"url": srv.URL, "secretName": "db-credentials", "secretKey": "password"},
		})).To(Succeed())

		key := types.NamespacedName{Namespace: ns, Name: "oracle"}
		id := vercelSnapshot(ctx, ns+"-notify", nil)
		newSnapshot(ns, key.Name, sandboxv1.SandboxSnapshotSpec{Source: sandboxv1.SandboxSnapshotSource{SnapshotID: &id}})
		waitSnapshotReady(key)

		Consistently(hits.Load, 3*time.Second).Should(BeZero(), "a message signed with the ordinary Secret's value reached the receiver")
		cm := types.NamespacedName{Namespace: ns, Name: notify.ConfigMapName}
		expectEvent(cm, `Warning NotificationKeyRefused: secretName "db-credentials"`)
		expectEvent(cm, notificationKeyLabel+"=true")
		Expect(hits.Load()).To(BeZero())
		list := &eventsv1.EventList{}
		Expect(k8sClient.List(ctx, list, client.InNamespace(ns))).To(Succeed())
		for _, e := range list.Items {
			Expect(e.Note).NotTo(ContainSubstring(string(victim)))
		}

		By("the same Secret, once labelled by someone who may write it, signs the messages")
		sec := &corev1.Secret{}
		Expect(k8sClient.Get(ctx, types.NamespacedName{Namespace: ns, Name: "db-credentials"}, sec)).To(Succeed())
		sec.Labels = map[string]string{notificationKeyLabel: "true"}
		Expect(k8sClient.Update(ctx, sec)).To(Succeed())
		second := types.NamespacedName{Namespace: ns, Name: "labelled"}
		id2 := vercelSnapshot(ctx, ns+"-notify-2", nil)
		newSnapshot(ns, second.Name, sandboxv1.SandboxSnapshotSpec{Source: sandboxv1.SandboxSnapshotSource{SnapshotID: &id2}})
		waitSnapshotReady(second)
		// Behind the first message, whose retries back off (doubling, capped
		// at a minute), so allow a few of its backoff steps.
		Eventually(func() []receivedEvent { return hook.received("io.sentry.sandbox.sandboxsnapshot.ready", second.Name) }, 45*time.Second).Should(HaveLen(1))
	})
})
