package controllers_test

import (
	"context"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	sandboxv1 "github.com/getsentry/sandbox-controller/api/v1alpha1"
	"github.com/getsentry/sandbox-controller/internal/metrics"
	"github.com/getsentry/sandbox-controller/internal/vercel"
)

// newPoolWith creates a pool of one member with template spec, shaped by
// change.
func newPoolWith(ns, name string, spec sandboxv1.SandboxSpec, change func(*sandboxv1.SandboxPoolSpec)) types.NamespacedName {
	GinkgoHelper()
	pool := &sandboxv1.SandboxPool{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec:       sandboxv1.SandboxPoolSpec{Replicas: ptr.To[int32](1), Template: sandboxv1.SandboxPoolTemplate{Spec: spec}},
	}
	change(&pool.Spec)
	Expect(k8sClient.Create(context.Background(), pool)).To(Succeed())
	return client.ObjectKeyFromObject(pool)
}

// poolReady is the pool's Ready condition.
func poolReady(key types.NamespacedName) func(Gomega) *metav1.Condition {
	return func(g Gomega) *metav1.Condition {
		p := &sandboxv1.SandboxPool{}
		g.Expect(k8sClient.Get(context.Background(), key, p)).To(Succeed())
		return meta.FindStatusCondition(p.Status.Conditions, sandboxv1.ConditionReady)
	}
}

// vercelStatus is the status of the Vercel sandbox's current session.
func vercelStatus(name string) vercel.SessionStatus {
	GinkgoHelper()
	sb, ok := emu.Sandbox(name)
	Expect(ok).To(BeTrue(), "Vercel sandbox %s does not exist", name)
	return sb.Status
}

// histogramCount is the number of observations of one histogram series.
func histogramCount(o prometheus.Observer) uint64 {
	GinkgoHelper()
	m := &dto.Metric{}
	Expect(o.(prometheus.Metric).Write(m)).To(Succeed())
	return m.GetHistogram().GetSampleCount()
}

// poolSeries counts the series of c whose namespace label is ns.
func poolSeries(c prometheus.Collector, ns string) int {
	GinkgoHelper()
	ch := make(chan prometheus.Metric, 64)
	go func() { c.Collect(ch); close(ch) }()
	n := 0
	for m := range ch {
		d := &dto.Metric{}
		Expect(m.Write(d)).To(Succeed())
		for _, l := range d.GetLabel() {
			if l.GetName() == "namespace" && l.GetValue() == ns {
				n++
			}
		}
	}
	return n
}

var _ = Describe("SandboxPool members", func() {
	var ns string
	ctx := context.Background()
	BeforeEach(func() { ns = newNamespace() })

	It("keeps memberState Stopped members paused after their setup, and a claim resumes one, Running and Ready on the member's Vercel sandbox", func() {
		spec := poolTemplate()
		spec.Setup = []sandboxv1.SetupCommand{{Name: "warm", Command: "sh", Args: []string{"-c", "echo warmed > /vercel/sandbox/warmed"}}}
		key := newPoolWith(ns, "cold-storage", spec, func(p *sandboxv1.SandboxPoolSpec) { p.MemberState = sandboxv1.SandboxStateStopped })

		var member sandboxv1.Sandbox
		Eventually(func(g Gomega) {
			ms := poolMembers(key)
			g.Expect(ms).To(HaveLen(1))
			member = ms[0]
			g.Expect(member.Spec.State).To(Equal(sandboxv1.SandboxStateStopped), "paused by the pool")
			g.Expect(member.Status.Phase).To(Equal(sandboxv1.SandboxStopped))
			g.Expect(member.Status.Setup).NotTo(BeNil())
			g.Expect(member.Status.Setup.State).To(Equal(sandboxv1.SetupSucceeded), "paused only after its setup")
			// Read after the member stopped: a pool status written while
			// the member was still stopping counts it as not yet ready.
			pool := getPool(key)
			g.Expect(pool.Status.ReadyReplicas).To(Equal(int32(1)))
			g.Expect(meta.IsStatusConditionTrue(pool.Status.Conditions, sandboxv1.ConditionReady)).To(BeTrue())
		}, 60*time.Second).Should(Succeed())
		Expect(vercelStatus(member.Status.VercelName)).To(Equal(vercel.SessionStopped), "nothing runs while it waits")

		c := claimant(ns, "conversation", "cold-storage", spec)
		sbx := waitReady(c)
		Expect(claimedCondition(c)).To(And(Not(BeNil()), HaveField("Status", metav1.ConditionTrue)))
		Expect(sbx.Status.Phase).To(Equal(sandboxv1.SandboxRunning))
		Expect(sbx.Status.VercelName).To(Equal(member.Status.VercelName), "the member's Vercel sandbox")
		Expect(sbx.Status.SessionID).NotTo(BeEmpty())
		Expect(sbx.Status.SessionID).NotTo(Equal(member.Status.SessionID), "a resumed session")
		Expect(vercelStatus(sbx.Status.VercelName)).To(Equal(vercel.SessionRunning))
		Expect(ownerUID(sbx.Status.VercelName)).To(Equal(string(sbx.UID)))
		Expect(sbx.Status.Setup).NotTo(BeNil())
		Expect(sbx.Status.Setup.State).To(Equal(sandboxv1.SetupSucceeded), "setup is not run again on the resumed filesystem")
	})

	It("stops (action Stop) or replaces (action Delete) members nobody claimed for spec.idle.afterSeconds", longSpec, func() {
		// 60 s is the least spec.idle.afterSeconds allows; both pools wait
		// it out at once.
		idle := func(action sandboxv1.PoolIdleAction) func(*sandboxv1.SandboxPoolSpec) {
			return func(p *sandboxv1.SandboxPoolSpec) {
				p.Idle = &sandboxv1.PoolIdle{AfterSeconds: ptr.To[int64](60), Action: action}
			}
		}
		stopKey := newPoolWith(ns, "stopper", poolTemplate(), idle(sandboxv1.PoolIdleStop))
		delKey := newPoolWith(ns, "deleter", poolTemplate(), idle(sandboxv1.PoolIdleDelete))
		stopping, deleting := waitPoolReady(stopKey, 1)[0], waitPoolReady(delKey, 1)[0]
		Expect(stopping.Spec.TimeoutSeconds).To(HaveValue(BeEquivalentTo(60)), "the idle window is the member's session window")
		readyAt := meta.FindStatusCondition(stopping.Status.Conditions, sandboxv1.ConditionReady).LastTransitionTime.Time

		By("action Stop: the member's session stops; it stays in the pool and claimable")
		Eventually(func() sandboxv1.SandboxPhase {
			return getSandbox(client.ObjectKeyFromObject(&stopping)).Status.Phase
		}, 90*time.Second).Should(Equal(sandboxv1.SandboxIdle))
		Expect(time.Since(readyAt)).To(BeNumerically(">=", 55*time.Second), "stopped before its idle window passed")
		Expect(vercelStatus(stopping.Status.VercelName)).To(Equal(vercel.SessionStopped))
		Eventually(func() int32 { return getPool(stopKey).Status.ReadyReplicas }).Should(Equal(int32(1)))
		Expect(poolMembers(stopKey)).To(HaveLen(1), "an idle member is not replaced")

		By("action Delete: the member and its Vercel sandbox are deleted and a fresh one replaces it")
		Eventually(func() bool {
			return apierrors.IsNotFound(k8sClient.Get(ctx, client.ObjectKeyFromObject(&deleting), &sandboxv1.Sandbox{}))
		}, 30*time.Second).Should(BeTrue())
		Eventually(func() bool { return vercelExists(deleting.Status.VercelName) }).Should(BeFalse())
		fresh := waitPoolReady(delKey, 1)
		Expect(fresh[0].Name).NotTo(Equal(deleting.Name))

		By("a claim resumes the stopped member")
		c := claimant(ns, "conversation", "stopper", poolTemplate())
		sbx := waitReady(c)
		Expect(claimedCondition(c)).To(HaveField("Status", metav1.ConditionTrue))
		Expect(sbx.Status.VercelName).To(Equal(stopping.Status.VercelName))
		Expect(vercelStatus(sbx.Status.VercelName)).To(Equal(vercel.SessionRunning))
	})

	It("counts members against a SandboxQuota: the quota caps the pool, which says so instead of creating more", func() {
		newQuota(ns, "two", sandboxv1.SandboxQuotaResources{Sandboxes: ptr.To[int64](2)})
		key := newPool(ns, "warm", 3, poolTemplate())
		Eventually(poolReady(key), 60*time.Second).Should(And(Not(BeNil()),
			HaveField("Status", metav1.ConditionFalse),
			HaveField("Reason", sandboxv1.ReasonQuotaExceeded),
			HaveField("Message", And(ContainSubstring("2 of 3 members are ready"), ContainSubstring("SandboxQuota two allows sandboxes 2")))))
		writesBefore := writes.get(key)
		Consistently(func(g Gomega) {
			g.Expect(poolMembers(key)).To(HaveLen(3), "the pool creates no member beyond its target while one waits")
			g.Expect(getPool(key).Status.ReadyReplicas).To(Equal(int32(2)))
		}, 4*time.Second).Should(Succeed())
		Expect(writes.get(key)-writesBefore).To(BeNumerically("<=", 1), "the pool spins on the waiting member")
		var vercelSandboxes []string
		for _, m := range poolMembers(key) {
			if vercelExists(m.Status.VercelName) {
				vercelSandboxes = append(vercelSandboxes, m.Status.VercelName)
			}
		}
		Expect(vercelSandboxes).To(HaveLen(2))

		By("scaled to what the quota allows, the waiting member goes first and the pool is filled")
		out, err := kubectl("scale", "-n", ns, "sandboxpool/warm", "--replicas=2")
		Expect(err).NotTo(HaveOccurred(), out)
		Eventually(poolReady(key)).Should(HaveField("Reason", sandboxv1.ReasonPoolFilled))
		for _, name := range vercelSandboxes {
			Expect(vercelExists(name)).To(BeTrue(), "a ready member was scaled down before the waiting one")
		}
	})

	It("publishes its size, claim outcomes, claim latency and member idle time as metrics, and forgets them when deleted", func() {
		key := newPool(ns, "warm", 1, poolTemplate())
		waitPoolReady(key, 1)
		Eventually(func() float64 { return testutil.ToFloat64(metrics.PoolMembers.WithLabelValues(ns, "warm", "ready")) }).Should(Equal(1.0))
		Expect(testutil.ToFloat64(metrics.PoolMembers.WithLabelValues(ns, "warm", "target"))).To(Equal(1.0))
		Expect(testutil.ToFloat64(metrics.PoolMembers.WithLabelValues(ns, "warm", "unclaimed"))).To(Equal(1.0))
		// The member waits a moment, so its idle time is above zero.
		time.Sleep(time.Second)

		hit := claimant(ns, "hit", "warm", poolTemplate())
		waitReady(hit)
		Expect(claimedCondition(hit)).To(HaveField("Status", metav1.ConditionTrue))
		Expect(testutil.ToFloat64(metrics.PoolClaims.WithLabelValues(ns, "warm", "hit"))).To(Equal(1.0))
		Expect(histogramCount(metrics.PoolClaimSeconds.WithLabelValues(ns, "warm"))).To(Equal(uint64(1)))
		Expect(histogramCount(metrics.PoolMemberIdleSeconds.WithLabelValues(ns, "warm"))).To(Equal(uint64(1)))
		idle := &dto.Metric{}
		Expect(metrics.PoolMemberIdleSeconds.WithLabelValues(ns, "warm").(prometheus.Metric).Write(idle)).To(Succeed())
		Expect(idle.GetHistogram().GetSampleSum()).To(BeNumerically(">=", 1), "the member waited ready for at least a second")

		By("a claim the pool cannot serve counts by its reason")
		big := poolTemplate()
		big.Resources = &sandboxv1.SandboxResources{VCPUs: ptr.To[int32](4)}
		mismatch := claimant(ns, "mismatch", "warm", big)
		Eventually(func() *metav1.Condition { return claimedCondition(mismatch) }).Should(HaveField("Reason", sandboxv1.ReasonSpecMismatch))
		Expect(testutil.ToFloat64(metrics.PoolClaims.WithLabelValues(ns, "warm", sandboxv1.ReasonSpecMismatch))).To(Equal(1.0))
		Expect(histogramCount(metrics.PoolClaimSeconds.WithLabelValues(ns, "warm"))).To(Equal(uint64(1)), "only hits have a claim latency")

		By("the pool's series go with it")
		waitPoolReady(key, 1)
		Expect(k8sClient.Delete(ctx, getPool(key))).To(Succeed())
		Eventually(func() bool { return apierrors.IsNotFound(k8sClient.Get(ctx, key, &sandboxv1.SandboxPool{})) }, 30*time.Second).Should(BeTrue())
		for _, c := range []prometheus.Collector{metrics.PoolMembers, metrics.PoolClaims, metrics.PoolClaimSeconds, metrics.PoolMemberIdleSeconds} {
			Eventually(func() int { return poolSeries(c, ns) }).Should(BeZero())
		}
	})
})
