package controllers_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	sandboxv1 "github.com/getsentry/sandbox-controller/api/v1alpha1"
	"github.com/getsentry/sandbox-controller/controllers"
)

// notificationOutboxLabel marks the outbox's ConfigMaps (notify.OutboxLabel),
// spelled out as docs/clients.md names it.
const notificationOutboxLabel = "sandbox.sentry.io/notification-outbox"

// outboxHolds reports whether the manager's notification outbox holds a
// message with id.
func outboxHolds(id string) bool {
	var list corev1.ConfigMapList
	Expect(k8sClient.List(context.Background(), &list, client.InNamespace(controllers.ManagerNamespace()),
		client.MatchingLabels{notificationOutboxLabel: controllers.NotificationOutboxName})).To(Succeed())
	for _, cm := range list.Items {
		for _, v := range cm.Data {
			if strings.Contains(v, `"id":"`+id+`"`) {
				return true
			}
		}
	}
	return false
}

var _ = Describe("Notifications across a restart", func() {
	It("deliver what was queued while the receiver was down after the manager restarted, with the webhook-id it had", func() {
		ns := newNamespace()
		hook := &webhook{key: []byte("durable-namespace-signing-key-0123456789")}
		var up atomic.Bool
		var mu sync.Mutex
		var downIDs []string
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if !up.Load() {
				mu.Lock()
				downIDs = append(downIDs, r.Header.Get("webhook-id"))
				mu.Unlock()
				w.WriteHeader(http.StatusServiceUnavailable)
				return
			}
			hook.ServeHTTP(w, r)
		}))
		DeferCleanup(srv.Close)
		configureNotifications(ns, srv.URL, hook.key)

		By("a Sandbox turning Ready while its namespace's receiver answers 503")
		key := types.NamespacedName{Namespace: ns, Name: "survivor"}
		newSandbox(ns, key.Name, sandboxv1.SandboxSpec{Source: runtimeSource("node24")})
		waitReady(key)
		firstAttempt := func() string {
			mu.Lock()
			defer mu.Unlock()
			if len(downIDs) == 0 {
				return ""
			}
			return downIDs[0]
		}
		Eventually(firstAttempt, 10*time.Second).ShouldNot(BeEmpty())
		id := firstAttempt()
		Expect(outboxHolds(id)).To(BeTrue(), "the attempted notification is in the outbox")

		By("restarting the manager, then bringing the receiver up")
		restartManager()
		up.Store(true)
		Eventually(func() []receivedEvent { return hook.received("io.sentry.sandbox.sandbox.ready", key.Name) }, 30*time.Second).Should(HaveLen(1))
		for _, e := range hook.all() {
			if e.Subject == key.Name {
				Expect(e.ID).To(Equal(id), "the CloudEvent id")
				Expect(e.webhookID).To(Equal(id), "the webhook-id of the delivery after the restart")
			}
		}
		Eventually(func() bool { return outboxHolds(id) }, 10*time.Second).Should(BeFalse(), "removed from the outbox after the 2xx")
		hook.mu.Lock()
		Expect(hook.bad).To(BeZero())
		hook.mu.Unlock()
	})
})
