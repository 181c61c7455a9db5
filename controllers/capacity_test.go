package controllers_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	sandboxv1 "github.com/getsentry/sandbox-controller/api/v1alpha1"
	"github.com/getsentry/sandbox-controller/controllers"
	"github.com/getsentry/sandbox-controller/internal/vercel"
	"github.com/getsentry/sandbox-controller/localstack"
	"github.com/getsentry/sandbox-controller/localstack/emulator"
)

// arrivals records when each request reached the Vercel emulator.
type arrivals struct {
	mu  sync.Mutex
	all []arrival
}

type arrival struct {
	at           time.Time
	method, path string
}

func (a *arrivals) add(r *http.Request) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.all = append(a.all, arrival{at: time.Now(), method: r.Method, path: r.URL.Path})
}

// between counts the requests that arrived in [from, to), in all and by
// kind ("GET /v2/sandboxes/*": names and ids are starred).
func (a *arrivals) between(from, to time.Time) (total int, kinds map[string]int) {
	a.mu.Lock()
	defer a.mu.Unlock()
	kinds = map[string]int{}
	for _, r := range a.all {
		if r.at.Before(from) || !r.at.Before(to) {
			continue
		}
		total++
		parts := strings.Split(r.path, "/")
		for i, p := range parts {
			if i >= 3 && p != "sessions" && p != "cmd" && p != "snapshots" && p != "stop" && p != "extend-timeout" {
				parts[i] = "*"
			}
		}
		kinds[r.method+" "+strings.Join(parts, "/")]++
	}
	return total, kinds
}

// Vercel's concurrency limit answers creates 429 without Retry-After until a
// session ends. With 50 Sandboxes and room for one, the operator must neither
// hammer Vercel (each waiting object used to cost about a request a second)
// nor starve the delete that frees the room, and the next Sandbox must start
// soon after it.
var _ = Describe("Vercel's concurrency limit", func() {
	It("keeps Vercel requests bounded with 50 Sandboxes and room for one, and starts the next soon after a delete", longSpec, func(ctx SpecContext) {
		const sandboxes = 50
		ns := newNamespace()

		// A Vercel of its own that lets one session run, behind a recorder
		// of arrival times.
		e, err := emulator.New(emulator.Options{DataDir: GinkgoT().TempDir()})
		Expect(err).NotTo(HaveOccurred())
		DeferCleanup(e.Close)
		e.Faults().SetMaxRunning(1)
		log := &arrivals{}
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			log.add(r)
			e.Handler().ServeHTTP(w, r)
		}))
		DeferCleanup(srv.Close)

		// The suite's manager makes way for one wired as cmd/manager wires
		// it, watching this namespace only.
		startWiredManager(vercel.Config{BaseURL: srv.URL, Token: e.Token(), TeamID: localstack.TeamID, ProjectID: localstack.ProjectID},
			controllers.Options{
				MaxConcurrentReconciles: 16,
				VercelInFlight:          4,
				VercelReservedInFlight:  1,
				PollInterval:            pollInterval,
				BackoffCap:              time.Minute,
			}, ns)
		// Runs before the manager stops: the finalizers need it.
		DeferCleanup(func() {
			for i := range sandboxes {
				_ = k8sClient.Delete(context.Background(), &sandboxv1.Sandbox{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: fmt.Sprintf("box-%d", i)}})
			}
			Eventually(func() int {
				list := &sandboxv1.SandboxList{}
				Expect(k8sClient.List(context.Background(), list, client.InNamespace(ns))).To(Succeed())
				return len(list.Items)
			}, 2*time.Minute).Should(BeZero())
		})

		start := time.Now()
		for i := range sandboxes {
			newSandbox(ns, fmt.Sprintf("box-%d", i), sandboxv1.SandboxSpec{Source: runtimeSource("node24")})
		}
		ready := func() []string {
			list := &sandboxv1.SandboxList{}
			Expect(k8sClient.List(context.Background(), list, client.InNamespace(ns))).To(Succeed())
			var names []string
			for _, s := range list.Items {
				if meta.IsStatusConditionTrue(s.Status.Conditions, sandboxv1.ConditionReady) {
					names = append(names, s.Name)
				}
			}
			return names
		}
		Eventually(ready).Should(HaveLen(1))
		first := ready()[0]
		GinkgoWriter.Printf("The first Sandbox was Ready after %s\n", time.Since(start).Round(100*time.Millisecond))

		// At the limit: one running, 49 waiting. The waiting ones back off
		// (the Vercel client's credential backoff, 1 s doubling to 30 s);
		// after 30 s of that, a minute is measured.
		Consistently(ready, 30*time.Second, time.Second).Should(HaveLen(1))
		const window = time.Minute
		from := time.Now()
		Consistently(ready, window, time.Second).Should(HaveLen(1))
		total, kinds := log.between(from, time.Now())
		creates := kinds["POST /v2/sandboxes"]
		GinkgoWriter.Printf("%d Sandboxes waiting for %s: %d Vercel requests %v\n", sandboxes-1, window, total, kinds)
		// The bound: a create probe per backoff step (30 s) plus jitter, and
		// per waiting Sandbox at most two reads a minute; the running one is
		// polled every pollInterval (2 s here). Before the client's 429
		// gates, the same minute cost 3191 requests, 2383 of them creates.
		Expect(creates).To(BeNumerically("<=", 6), "creates in a minute at the limit")
		Expect(total).To(BeNumerically("<=", 6+2*(sandboxes-1)+int(window/pollInterval)+10), "Vercel requests in a minute at the limit")

		// Deleting the running one lets the next start soon.
		deleted := time.Now()
		Expect(k8sClient.Delete(ctx, &sandboxv1.Sandbox{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: first}})).To(Succeed())
		Eventually(func() bool {
			err := k8sClient.Get(ctx, types.NamespacedName{Namespace: ns, Name: first}, &sandboxv1.Sandbox{})
			return apierrors.IsNotFound(err)
		}).Should(BeTrue())
		Eventually(ready, 30*time.Second, 100*time.Millisecond).Should(HaveLen(1))
		GinkgoWriter.Printf("The next Sandbox was Ready %s after the delete\n", time.Since(deleted).Round(100*time.Millisecond))
		Expect(time.Since(deleted)).To(BeNumerically("<", 15*time.Second))
	})
})
