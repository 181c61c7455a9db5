package controllers_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	sandboxv1 "github.com/getsentry/sandbox-controller/api/v1alpha1"
	"github.com/getsentry/sandbox-controller/controllers"
	"github.com/getsentry/sandbox-controller/internal/vercel"
)

// Exec readiness probes run detached: a probe command is started and polled
// on later reconciles, so no reconcile (and no Vercel in-flight slot) waits
// for it. A probe waited for inside the reconcile once held one of the
// manager's shared Vercel slots for up to the call timeout: six probing
// Sandboxes made other tenants' Sandboxes take up to 28.8 s to become Ready,
// and a probe longer than the call timeout could never pass.
var _ = Describe("Exec readiness probes, detached", func() {
	ctx := context.Background()

	// wiredManager runs the spec on a manager wired as cmd/manager wires it
	// (startWiredManager), with the given Vercel call timeout (0: the
	// default).
	wiredManager := func(o controllers.Options, callTimeout time.Duration, namespaces ...string) {
		GinkgoHelper()
		vcfg := classBase
		vcfg.CallTimeout = callTimeout
		o.ClusterID, o.PollInterval, o.BackoffCap = clusterID, pollInterval, 10*time.Second
		startWiredManager(vcfg, o, namespaces...)
	}
	// deleteAll deletes the Sandboxes of the namespaces and waits for them
	// to go; registered after wiredManager, it runs while that manager does.
	deleteAll := func(namespaces ...string) {
		for _, ns := range namespaces {
			Expect(k8sClient.DeleteAllOf(context.Background(), &sandboxv1.Sandbox{}, client.InNamespace(ns))).To(Succeed())
		}
		for _, ns := range namespaces {
			Eventually(func(g Gomega) {
				list := &sandboxv1.SandboxList{}
				g.Expect(k8sClient.List(context.Background(), list, client.InNamespace(ns))).To(Succeed())
				g.Expect(list.Items).To(BeEmpty())
			}, 2*time.Minute).Should(Succeed())
		}
	}
	// probeCommands lists the commands of a session that run the probe
	// script, and how many of them still run.
	probeCommands := func(session, script string) (started, running int) {
		GinkgoHelper()
		cmds, err := vc.ListCommands(ctx, session)
		Expect(err).NotTo(HaveOccurred())
		for _, c := range cmds {
			if strings.Contains(strings.Join(c.Args, " "), script) {
				started++
				if c.ExitCode == nil {
					running++
				}
			}
		}
		return started, running
	}

	// liveSession is the id of the session Vercel runs for the Sandbox, ""
	// before it has one: status may name it only once a reconcile ends.
	liveSession := func(key types.NamespacedName) string {
		GinkgoHelper()
		sbx := getSandbox(key)
		resp, err := vc.GetSandbox(ctx, controllers.VercelName(key.Namespace, key.Name, sbx.UID), false)
		if vercel.IsNotFound(err) || err == nil && resp.Session == nil {
			return ""
		}
		Expect(err).NotTo(HaveOccurred())
		return resp.Session.ID
	}

	It("passes a probe whose command takes longer than the Vercel call timeout", func() {
		ns := newNamespace()
		// Calls time out after 2 s here; the probe takes 4.
		wiredManager(controllers.Options{MaxConcurrentReconciles: 16, VercelInFlight: 4, VercelReservedInFlight: 1}, 2*time.Second, ns)
		DeferCleanup(func() { deleteAll(ns) })
		key := types.NamespacedName{Namespace: ns, Name: "slow"}
		newSandbox(ns, key.Name, sandboxv1.SandboxSpec{
			Source: runtimeSource("node24"),
			ReadinessProbe: &sandboxv1.ReadinessProbe{
				Exec:           &sandboxv1.ExecProbe{Command: "sh", Args: []string{"-c", "sleep 4; echo slow-probe-done"}},
				PeriodSeconds:  ptr.To[int32](1),
				TimeoutSeconds: ptr.To[int32](10),
			},
		})
		Eventually(readyCondition(key), 40*time.Second).Should(And(Not(BeNil()),
			HaveField("Status", metav1.ConditionTrue), HaveField("Reason", sandboxv1.ReasonRunning)))
		sbx := getSandbox(key)
		started, running := probeCommands(sbx.Status.SessionID, "slow-probe-done")
		Expect(running).To(BeNumerically("<=", 1), "one probe command at a time")
		Expect(started).To(BeNumerically(">=", 1))
	})

	It("keeps another namespace's Sandbox quick to become Ready while one namespace runs slow probes, and bounds that namespace's running probes", func() {
		const probing, bound = 6, 2
		slow, other := newNamespace(), newNamespace()
		// The production defaults of the shared slots and the call timeout.
		wiredManager(controllers.Options{MaxConcurrentReconciles: 16, VercelInFlight: 4, VercelReservedInFlight: 1, MaxProbesPerNamespace: bound}, 0, slow, other)
		DeferCleanup(func() { deleteAll(slow, other) })

		readyIn := func(name string) time.Duration {
			GinkgoHelper()
			key := types.NamespacedName{Namespace: other, Name: name}
			start := time.Now()
			newSandbox(other, name, sandboxv1.SandboxSpec{Source: runtimeSource("node24")})
			// Measured with a generous limit, asserted below.
			Eventually(readyCondition(key), 90*time.Second, 50*time.Millisecond).Should(And(Not(BeNil()), HaveField("Status", metav1.ConditionTrue)))
			return time.Since(start)
		}
		quiet := readyIn("before")
		GinkgoWriter.Printf("A Sandbox with no probing neighbours was Ready after %s\n", quiet.Round(10*time.Millisecond))

		const script = "sleep 25; echo probe-25"
		for i := range probing {
			newSandbox(slow, fmt.Sprintf("probe-%d", i), sandboxv1.SandboxSpec{
				Source: runtimeSource("node24"),
				ReadinessProbe: &sandboxv1.ReadinessProbe{
					Exec:           &sandboxv1.ExecProbe{Command: "sh", Args: []string{"-c", script}},
					PeriodSeconds:  ptr.To[int32](1),
					TimeoutSeconds: ptr.To[int32](30),
				},
			})
		}
		sessions := func() []string {
			var ids []string
			for i := range probing {
				if id := liveSession(types.NamespacedName{Namespace: slow, Name: fmt.Sprintf("probe-%d", i)}); id != "" {
					ids = append(ids, id)
				}
			}
			return ids
		}
		Eventually(sessions, time.Minute).Should(HaveLen(probing))
		ids := sessions()
		// Sample how many probe commands run in the namespace at once.
		var mu sync.Mutex
		most := 0
		sample := func() {
			total := 0
			for _, id := range ids {
				_, running := probeCommands(id, "probe-25")
				total += running
			}
			mu.Lock()
			most = max(most, total)
			mu.Unlock()
		}
		stop := make(chan struct{})
		sampled := make(chan struct{})
		go func() {
			defer GinkgoRecover()
			defer close(sampled)
			for {
				select {
				case <-stop:
					return
				case <-time.After(200 * time.Millisecond):
					sample()
				}
			}
		}()
		// The probes are under way: as many as may run at once.
		Eventually(func() int { mu.Lock(); defer mu.Unlock(); return most }, 30*time.Second).Should(BeNumerically(">=", bound))
		time.Sleep(2 * time.Second)

		busy := readyIn("during")
		GinkgoWriter.Printf("A Sandbox in another namespace while %d Sandboxes probe for 25 s was Ready after %s (%s without them)\n",
			probing, busy.Round(10*time.Millisecond), quiet.Round(10*time.Millisecond))
		time.Sleep(3 * time.Second)
		close(stop)
		<-sampled
		GinkgoWriter.Printf("At most %d probe commands ran at once in the probing namespace (bound %d)\n", most, bound)
		Expect(busy).To(BeNumerically("<", 10*time.Second), "Ready time with probing neighbours")
		Expect(most).To(Equal(bound), "probe commands running at once in one namespace")
	})

	It("neither loses nor repeats a probe command across a manager restart", func() {
		ns := newNamespace()
		key := types.NamespacedName{Namespace: ns, Name: "restart"}
		// A long period: a second command within it would be a duplicate.
		const script = "sleep 6; echo probe-restart"
		newSandbox(ns, key.Name, sandboxv1.SandboxSpec{
			Source: runtimeSource("node24"),
			ReadinessProbe: &sandboxv1.ReadinessProbe{
				Exec:           &sandboxv1.ExecProbe{Command: "sh", Args: []string{"-c", script}},
				PeriodSeconds:  ptr.To[int32](60),
				TimeoutSeconds: ptr.To[int32](20),
			},
		})
		DeferCleanup(func() { deleteAll(ns) })
		var session string
		Eventually(func(g Gomega) {
			session = liveSession(key)
			g.Expect(session).NotTo(BeEmpty())
			_, running := probeCommands(session, "probe-restart")
			g.Expect(running).To(Equal(1))
		}, time.Minute).Should(Succeed())
		restartManager()
		Eventually(readyCondition(key), 30*time.Second).Should(And(Not(BeNil()), HaveField("Status", metav1.ConditionTrue)))
		Expect(getSandbox(key).Status.SessionID).To(Equal(session))
		started, _ := probeCommands(session, "probe-restart")
		Expect(started).To(Equal(1), "probe commands started in the first period, across the restart")
	})
})
