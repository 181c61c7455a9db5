package controllers_test

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	sandboxv1 "github.com/getsentry/sandbox-controller/api/v1alpha1"
	"github.com/getsentry/sandbox-controller/internal/metrics"
	"github.com/getsentry/sandbox-controller/internal/vercel"
)

// The quota specs count from the emulator's side: every session the emulator
// started for a namespace's Sandboxes, from its creation until it stopped.
var _ = Describe("SandboxQuota", func() {
	ctx := context.Background()

	It("never lets more than runningSandboxes run, and starts the waiters in creation order as others stop", func() {
		ns := newNamespace()
		newQuota(ns, "running", sandboxv1.SandboxQuotaResources{RunningSandboxes: ptr.To[int64](5)})
		const total, limit = 50, 5
		names := make([]string, total)
		for i := range names {
			// Names sort in creation order, which breaks ties between
			// creation timestamps (they have one-second precision).
			names[i] = fmt.Sprintf("sbx-%02d", i)
			newSandbox(ns, names[i], sandboxv1.SandboxSpec{Source: runtimeSource("node24")})
		}
		for round := 0; round < total/limit; round++ {
			batch := names[round*limit : (round+1)*limit]
			By(fmt.Sprintf("round %d: %v run, the later ones wait", round, batch))
			for _, n := range batch {
				waitReady(types.NamespacedName{Namespace: ns, Name: n})
			}
			for _, n := range names[(round+1)*limit:] {
				Eventually(readyCondition(types.NamespacedName{Namespace: ns, Name: n})).Should(
					HaveField("Reason", sandboxv1.ReasonQuotaExceeded))
			}
			Expect(runningSessions(ns)).To(Equal(limit))
			Eventually(quotaUsed(ns, "running")).Should(HaveField("RunningSandboxes", HaveValue(BeEquivalentTo(limit))))
			for _, n := range batch {
				sbx := getSandbox(types.NamespacedName{Namespace: ns, Name: n})
				patch := client.MergeFrom(sbx.DeepCopy())
				sbx.Spec.State = sandboxv1.SandboxStateStopped
				Expect(k8sClient.Patch(ctx, sbx, patch)).To(Succeed())
			}
		}
		Eventually(func() int { return runningSessions(ns) }).Should(BeZero())
		Expect(peakRunning(ns)).To(Equal(limit), "the emulator ran more sessions at once than the quota allows")
		Expect(namespaceSessions(ns)).To(HaveLen(total))

		By("one QuotaExceeded event per waiter, not one per wake-up")
		key := types.NamespacedName{Namespace: ns, Name: names[total-1]}
		var quotaEvents []string
		for _, e := range eventsFor(key) {
			if strings.Contains(e, sandboxv1.ReasonQuotaExceeded) {
				quotaEvents = append(quotaEvents, e)
			}
		}
		Expect(quotaEvents).To(HaveLen(1))
		Expect(quotaEvents[0]).To(ContainSubstring("SandboxQuota running allows runningSandboxes 5"))
	})

	It("counts vCPUs, waits for them, and honours every quota of the namespace", func() {
		ns := newNamespace()
		newQuota(ns, "vcpus", sandboxv1.SandboxQuotaResources{RunningVCPUs: ptr.To[int64](8)})
		newQuota(ns, "generous", sandboxv1.SandboxQuotaResources{RunningSandboxes: ptr.To[int64](10)})
		spec := func(v int32) sandboxv1.SandboxSpec {
			return sandboxv1.SandboxSpec{Source: runtimeSource("node24"), Resources: &sandboxv1.SandboxResources{VCPUs: ptr.To(v)}}
		}
		a := newSandbox(ns, "a", spec(4))
		newSandbox(ns, "b", spec(4))
		newSandbox(ns, "c", spec(2))
		waitReady(types.NamespacedName{Namespace: ns, Name: "a"})
		waitReady(types.NamespacedName{Namespace: ns, Name: "b"})
		cKey := types.NamespacedName{Namespace: ns, Name: "c"}
		Eventually(readyCondition(cKey)).Should(And(HaveField("Reason", sandboxv1.ReasonQuotaExceeded),
			HaveField("Message", ContainSubstring("SandboxQuota vcpus allows runningVCPUs 8"))))
		Eventually(quotaUsed(ns, "vcpus")).Should(HaveField("RunningVCPUs", HaveValue(BeEquivalentTo(8))))
		Eventually(quotaUsed(ns, "generous")).Should(HaveField("RunningSandboxes", HaveValue(BeEquivalentTo(2))))
		Consistently(func() int { return runningSessions(ns) }, 2*time.Second).Should(Equal(2))

		By("deleting a frees its vCPUs for c")
		Expect(k8sClient.Delete(ctx, a)).To(Succeed())
		waitReady(cKey)
		Eventually(quotaUsed(ns, "vcpus")).Should(HaveField("RunningVCPUs", HaveValue(BeEquivalentTo(6))))
		Expect(peakVCPUs(ns)).To(BeNumerically("<=", 8))

		By("the quota metrics show used and hard per namespace, quota and resource")
		Eventually(func() float64 {
			return testutil.ToFloat64(metrics.QuotaUsed.WithLabelValues(ns, "vcpus", sandboxv1.QuotaRunningVCPUs))
		}).Should(Equal(6.0))
		Expect(testutil.ToFloat64(metrics.QuotaHard.WithLabelValues(ns, "vcpus", sandboxv1.QuotaRunningVCPUs))).To(Equal(8.0))
		Expect(testutil.ToFloat64(metrics.QuotaHard.WithLabelValues(ns, "generous", sandboxv1.QuotaRunningSandboxes))).To(Equal(10.0))
	})

	It("refuses new snapshots once snapshotBytes is used up, and takes them once bytes are freed", func() {
		ns := newNamespace()
		newQuota(ns, "bytes", sandboxv1.SandboxQuotaResources{SnapshotBytes: ptr.To[int64](1)})
		newSandbox(ns, "src", sandboxv1.SandboxSpec{Source: runtimeSource("node24")})
		waitReady(types.NamespacedName{Namespace: ns, Name: "src"})
		capture := sandboxv1.SandboxSnapshotSpec{KeepSourceRunning: true,
			Source: sandboxv1.SandboxSnapshotSource{SandboxRef: &sandboxv1.LocalObjectReference{Name: "src"}}}
		first := newSnapshot(ns, "first", capture)
		Eventually(func(g Gomega) {
			g.Expect(k8sClient.Get(ctx, client.ObjectKeyFromObject(first), first)).To(Succeed())
			g.Expect(first.Status.ReadyToUse).To(BeTrue())
		}).Should(Succeed())
		Expect(first.Status.SizeBytes).To(BeNumerically(">", 0))
		Eventually(quotaUsed(ns, "bytes")).Should(HaveField("SnapshotBytes", HaveValue(Equal(first.Status.SizeBytes))))
		waitReady(types.NamespacedName{Namespace: ns, Name: "src"})
		snapshotsBefore := len(namespaceSnapshots(ns))

		second := newSnapshot(ns, "second", capture)
		Eventually(func(g Gomega) *metav1.Condition {
			g.Expect(k8sClient.Get(ctx, client.ObjectKeyFromObject(second), second)).To(Succeed())
			return meta.FindStatusCondition(second.Status.Conditions, sandboxv1.ConditionReady)
		}).Should(And(Not(BeNil()), HaveField("Reason", sandboxv1.ReasonQuotaExceeded)))
		Consistently(func() int { return len(namespaceSnapshots(ns)) }, 2*time.Second).Should(Equal(snapshotsBefore), "a snapshot was taken beyond the quota")
		expectEvent(client.ObjectKeyFromObject(second), "SandboxQuota bytes allows snapshotBytes 1")

		By("deleting the first snapshot frees its bytes")
		Expect(k8sClient.Delete(ctx, first)).To(Succeed())
		Eventually(func(g Gomega) {
			g.Expect(k8sClient.Get(ctx, client.ObjectKeyFromObject(second), second)).To(Succeed())
			g.Expect(second.Status.ReadyToUse).To(BeTrue())
		}, time.Minute).Should(Succeed())
	})

	It("counts the same after a manager restart, and keeps the waiter waiting", func() {
		ns := newNamespace()
		q := newQuota(ns, "two", sandboxv1.SandboxQuotaResources{RunningSandboxes: ptr.To[int64](2), Sandboxes: ptr.To[int64](3)})
		for _, n := range []string{"r0", "r1", "r2"} {
			newSandbox(ns, n, sandboxv1.SandboxSpec{Source: runtimeSource("node24")})
		}
		waitReady(types.NamespacedName{Namespace: ns, Name: "r0"})
		waitReady(types.NamespacedName{Namespace: ns, Name: "r1"})
		r2 := types.NamespacedName{Namespace: ns, Name: "r2"}
		Eventually(readyCondition(r2)).Should(HaveField("Reason", sandboxv1.ReasonQuotaExceeded))
		Eventually(quotaUsed(ns, "two")).Should(And(
			HaveField("RunningSandboxes", HaveValue(BeEquivalentTo(2))), HaveField("Sandboxes", HaveValue(BeEquivalentTo(2)))))

		By("a restarted manager counts from the Sandboxes' status, not from the quota's")
		stopManager()
		Expect(k8sClient.Get(ctx, client.ObjectKeyFromObject(q), q)).To(Succeed())
		patch := client.MergeFrom(q.DeepCopy())
		q.Status.Used = &sandboxv1.SandboxQuotaResources{RunningSandboxes: ptr.To[int64](0), Sandboxes: ptr.To[int64](0)}
		Expect(k8sClient.Status().Patch(ctx, q, patch)).To(Succeed())
		startManager(k8sClient.Scheme())
		Eventually(quotaUsed(ns, "two")).Should(And(
			HaveField("RunningSandboxes", HaveValue(BeEquivalentTo(2))), HaveField("Sandboxes", HaveValue(BeEquivalentTo(2)))))
		Consistently(func() int { return runningSessions(ns) }, 3*time.Second).Should(Equal(2))
		Expect(readyCondition(r2)(Default)).To(HaveField("Reason", sandboxv1.ReasonQuotaExceeded))

		By("stopping one lets the waiter start")
		r0 := getSandbox(types.NamespacedName{Namespace: ns, Name: "r0"})
		p := client.MergeFrom(r0.DeepCopy())
		r0.Spec.State = sandboxv1.SandboxStateStopped
		Expect(k8sClient.Patch(ctx, r0, p)).To(Succeed())
		waitReady(r2)
		Eventually(quotaUsed(ns, "two")).Should(And(
			HaveField("RunningSandboxes", HaveValue(BeEquivalentTo(2))), HaveField("Sandboxes", HaveValue(BeEquivalentTo(3)))))

		By("a stopped Sandbox beyond runningSandboxes waits to resume; one beyond sandboxes waits to be created")
		newSandbox(ns, "r3", sandboxv1.SandboxSpec{Source: runtimeSource("node24")})
		Eventually(readyCondition(types.NamespacedName{Namespace: ns, Name: "r3"})).Should(And(
			HaveField("Reason", sandboxv1.ReasonQuotaExceeded), HaveField("Message", ContainSubstring("allows sandboxes 3"))))
		r0 = getSandbox(client.ObjectKeyFromObject(r0))
		p = client.MergeFrom(r0.DeepCopy())
		r0.Spec.State = sandboxv1.SandboxStateRunning
		Expect(k8sClient.Patch(ctx, r0, p)).To(Succeed())
		Eventually(readyCondition(client.ObjectKeyFromObject(r0))).Should(HaveField("Reason", sandboxv1.ReasonQuotaExceeded))
		Expect(getSandbox(client.ObjectKeyFromObject(r0)).Status.Phase).To(Equal(sandboxv1.SandboxStopped))
		Consistently(func() int { return runningSessions(ns) }, 2*time.Second).Should(Equal(2))
		Expect(k8sClient.Delete(ctx, &sandboxv1.Sandbox{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "r1"}})).To(Succeed())
		waitReady(client.ObjectKeyFromObject(r0))
		Expect(peakRunning(ns)).To(Equal(2))
	})

	// A lowered spec.resources.vcpus applies to the next session: the running
	// one keeps its vCPUs, and the quota counts what runs.
	It("counts a running session's vCPUs, not a lowered spec's, until the session stops (also after a restart)", func() {
		ns := newNamespace()
		newQuota(ns, "vcpus", sandboxv1.SandboxQuotaResources{RunningVCPUs: ptr.To[int64](8)})
		spec := func(v int32) sandboxv1.SandboxSpec {
			return sandboxv1.SandboxSpec{Source: runtimeSource("node24"), Resources: &sandboxv1.SandboxResources{VCPUs: ptr.To(v)}}
		}
		aKey := types.NamespacedName{Namespace: ns, Name: "a"}
		newSandbox(ns, "a", spec(4))
		newSandbox(ns, "b", spec(4))
		waitReady(aKey)
		waitReady(types.NamespacedName{Namespace: ns, Name: "b"})

		By("lowering a's vCPUs to 1 while it runs")
		a := getSandbox(aKey)
		session := a.Status.SessionID
		patch := client.MergeFrom(a.DeepCopy())
		a.Spec.Resources.VCPUs = ptr.To[int32](1)
		Expect(k8sClient.Patch(ctx, a, patch)).To(Succeed())
		Eventually(func(g Gomega) {
			s := getSandbox(aKey)
			g.Expect(s.Status.ObservedGeneration).To(Equal(s.Generation))
		}).Should(Succeed())
		Expect(getSandbox(aKey).Status.SessionID).To(Equal(session), "the session goes on")
		for _, s := range namespaceSessions(ns) {
			if s.ID == session {
				Expect(s.VCPUs).To(BeEquivalentTo(4), "Vercel's running session keeps its vCPUs")
			}
		}
		Consistently(quotaUsed(ns, "vcpus"), 2*time.Second).Should(HaveField("RunningVCPUs", HaveValue(BeEquivalentTo(8))))

		By("a new 2-vCPU Sandbox waits: 4 + 4 + 2 would exceed 8")
		cKey := types.NamespacedName{Namespace: ns, Name: "c"}
		newSandbox(ns, "c", spec(2))
		Eventually(readyCondition(cKey)).Should(And(HaveField("Reason", sandboxv1.ReasonQuotaExceeded),
			HaveField("Message", ContainSubstring("SandboxQuota vcpus allows runningVCPUs 8"))))
		Consistently(func() int { return runningSessions(ns) }, 2*time.Second).Should(Equal(2))
		Expect(getSandbox(aKey).Status.SessionVCPUs).To(BeEquivalentTo(4), "status records what the session runs with")

		By("a restarted manager counts the session's vCPUs too")
		restartManager()
		Consistently(readyCondition(cKey), 3*time.Second).Should(HaveField("Reason", sandboxv1.ReasonQuotaExceeded))
		Expect(quotaUsed(ns, "vcpus")(Default)).To(HaveField("RunningVCPUs", HaveValue(BeEquivalentTo(8))))

		By("a's session stopping frees its 4 vCPUs; its next session has 1")
		a = getSandbox(aKey)
		patch = client.MergeFrom(a.DeepCopy())
		a.Spec.State = sandboxv1.SandboxStateStopped
		Expect(k8sClient.Patch(ctx, a, patch)).To(Succeed())
		waitReady(cKey)
		Eventually(quotaUsed(ns, "vcpus")).Should(HaveField("RunningVCPUs", HaveValue(BeEquivalentTo(6))))
		a = getSandbox(aKey)
		patch = client.MergeFrom(a.DeepCopy())
		a.Spec.State = sandboxv1.SandboxStateRunning
		Expect(k8sClient.Patch(ctx, a, patch)).To(Succeed())
		waitReady(aKey)
		Expect(getSandbox(aKey).Status.SessionVCPUs).To(BeEquivalentTo(1))
		Eventually(quotaUsed(ns, "vcpus")).Should(HaveField("RunningVCPUs", HaveValue(BeEquivalentTo(7))))
		Expect(peakVCPUs(ns)).To(BeNumerically("<=", 8), "the emulator ran more vCPUs at once than the quota allows")
	})

	// deletionPolicy Retain leaves the Vercel sandbox; under a quota that
	// counts running sessions, its session must not run on uncounted.
	It("stops the session of a retained Sandbox before its slot is released", func() {
		ns := newNamespace()
		newQuota(ns, "one", sandboxv1.SandboxQuotaResources{RunningSandboxes: ptr.To[int64](1)})
		keptKey := types.NamespacedName{Namespace: ns, Name: "kept"}
		newSandbox(ns, "kept", sandboxv1.SandboxSpec{Source: runtimeSource("node24"), DeletionPolicy: sandboxv1.DeletionPolicyRetain})
		kept := waitReady(keptKey)
		nextKey := types.NamespacedName{Namespace: ns, Name: "next"}
		newSandbox(ns, "next", sandboxv1.SandboxSpec{Source: runtimeSource("node24")})
		Eventually(readyCondition(nextKey)).Should(HaveField("Reason", sandboxv1.ReasonQuotaExceeded))

		Expect(k8sClient.Delete(ctx, kept)).To(Succeed())
		waitReady(nextKey)
		Eventually(func() bool { return apierrors.IsNotFound(k8sClient.Get(ctx, keptKey, &sandboxv1.Sandbox{})) }).Should(BeTrue())
		remote, ok := emu.Sandbox(kept.Status.VercelName)
		Expect(ok).To(BeTrue(), "retained")
		Expect(remote.Tags).To(BeEmpty(), "released")
		Expect(remote.Status.Terminal()).To(BeTrue(), "the retained sandbox's session was left running (%s)", remote.Status)
		Expect(runningSessions(ns)).To(Equal(1))
		Expect(peakRunning(ns)).To(Equal(1), "the emulator ran more sessions at once than the quota allows")
		expectEvent(keptKey, "Stopped session "+kept.Status.SessionID)
	})

	// A recipe's builder is a Vercel sandbox running the tenant's setup
	// commands: it costs what a Sandbox costs while it runs.
	It("counts recipe builders, and makes a build wait like a Sandbox", func() {
		ns := newNamespace()
		newQuota(ns, "one", sandboxv1.SandboxQuotaResources{RunningSandboxes: ptr.To[int64](1), RunningVCPUs: ptr.To[int64](8)})
		firstKey := types.NamespacedName{Namespace: ns, Name: "first"}
		newSandbox(ns, "first", sandboxv1.SandboxSpec{Source: runtimeSource("node24")})
		waitReady(firstKey)

		By("a build with the running limit used up waits, and says why")
		rt := sandboxv1.Runtime("node24")
		snapKey := types.NamespacedName{Namespace: ns, Name: "workspace"}
		newSnapshot(ns, snapKey.Name, sandboxv1.SandboxSnapshotSpec{Source: sandboxv1.SandboxSnapshotSource{Recipe: &sandboxv1.SnapshotRecipe{
			Runtime:   &rt,
			Resources: &sandboxv1.SandboxResources{VCPUs: ptr.To[int32](4)},
			Setup:     []sandboxv1.RecipeCommand{{Name: "slow", Command: "sh", Args: []string{"-c", "sleep 4; echo built > /vercel/sandbox/built.txt"}}},
		}}})
		snapReady := func(g Gomega) *metav1.Condition {
			s := &sandboxv1.SandboxSnapshot{}
			g.Expect(k8sClient.Get(ctx, snapKey, s)).To(Succeed())
			return meta.FindStatusCondition(s.Status.Conditions, sandboxv1.ConditionReady)
		}
		Eventually(snapReady).Should(And(Not(BeNil()), HaveField("Reason", sandboxv1.ReasonQuotaExceeded),
			HaveField("Message", ContainSubstring("SandboxQuota one allows runningSandboxes 1"))))
		Consistently(func() int { return runningSessions(ns) }, 2*time.Second).Should(Equal(1), "a builder started beyond the quota")
		expectEvent(snapKey, "SandboxQuota one allows runningSandboxes 1")

		By("stopping the Sandbox lets the build start; while the builder runs it counts, and a Sandbox waits for it")
		first := getSandbox(firstKey)
		patch := client.MergeFrom(first.DeepCopy())
		first.Spec.State = sandboxv1.SandboxStateStopped
		Expect(k8sClient.Patch(ctx, first, patch)).To(Succeed())
		Eventually(snapReady).Should(HaveField("Reason", sandboxv1.ReasonBuilding))
		Eventually(quotaUsed(ns, "one")).Should(And(HaveField("RunningSandboxes", HaveValue(BeEquivalentTo(1))),
			HaveField("RunningVCPUs", HaveValue(BeEquivalentTo(4)))))
		laterKey := types.NamespacedName{Namespace: ns, Name: "later"}
		newSandbox(ns, "later", sandboxv1.SandboxSpec{Source: runtimeSource("node24")})
		Eventually(readyCondition(laterKey)).Should(HaveField("Reason", sandboxv1.ReasonQuotaExceeded))

		By("the builder gone, the waiting Sandbox starts")
		waitSnapshotReady(snapKey)
		waitReady(laterKey)
		Expect(peakRunning(ns)).To(Equal(1), "the emulator ran more sessions at once than the quota allows")
		Expect(peakVCPUs(ns)).To(BeNumerically("<=", 8))
	})
})

// The built-in way to refuse Sandbox objects themselves, which a SandboxQuota
// cannot do without a webhook: a ResourceQuota on the object count, enforced
// by the API server's ResourceQuota admission with kube-controller-manager's
// quota controller keeping its status (both run here, as on a cluster).
var _ = Describe("ResourceQuota on count/sandboxes.sandbox.sentry.io", func() {
	It("refuses Sandboxes beyond the count at admission", func() {
		ctx := context.Background()
		ns := newNamespace()
		rq := &corev1.ResourceQuota{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "sandbox-count"},
			Spec: corev1.ResourceQuotaSpec{Hard: corev1.ResourceList{"count/sandboxes.sandbox.sentry.io": resource.MustParse("1")}}}
		Expect(k8sClient.Create(ctx, rq)).To(Succeed())
		Eventually(func(g Gomega) {
			g.Expect(k8sClient.Get(ctx, client.ObjectKeyFromObject(rq), rq)).To(Succeed())
			g.Expect(rq.Status.Hard).To(HaveKey(corev1.ResourceName("count/sandboxes.sandbox.sentry.io")))
		}).Should(Succeed())
		newSandbox(ns, "first", sandboxv1.SandboxSpec{Source: runtimeSource("node24")})
		// The quota admission works from its own watch of ResourceQuotas: a
		// Sandbox created before it saw this one is counted only once the
		// quota controller recounts (status.used), so wait for that.
		Eventually(func(g Gomega) {
			g.Expect(k8sClient.Get(ctx, client.ObjectKeyFromObject(rq), rq)).To(Succeed())
			used := rq.Status.Used[corev1.ResourceName("count/sandboxes.sandbox.sentry.io")]
			g.Expect(used.Value()).To(Equal(int64(1)))
		}).Should(Succeed())
		// Its watch may still lag the recount by a moment: a second Sandbox
		// admitted meanwhile is deleted and the create tried again.
		Eventually(func() error {
			second := &sandboxv1.Sandbox{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "second"},
				Spec: sandboxv1.SandboxSpec{Source: runtimeSource("node24")}}
			err := k8sClient.Create(ctx, second)
			if err == nil {
				Expect(k8sClient.Delete(ctx, second)).To(Succeed())
				Eventually(func() bool {
					return apierrors.IsNotFound(k8sClient.Get(ctx, client.ObjectKeyFromObject(second), &sandboxv1.Sandbox{}))
				}).Should(BeTrue())
				return fmt.Errorf("admitted a second Sandbox")
			}
			return err
		}).Should(MatchError(And(ContainSubstring("exceeded quota: sandbox-count"), ContainSubstring("count/sandboxes.sandbox.sentry.io"))))
	})
})

var _ = Describe("SandboxQuota validation", func() {
	It("refuses negative limits, naming the field", func() {
		ns := newNamespace()
		for field, hard := range map[string]sandboxv1.SandboxQuotaResources{
			"sandboxes":        {Sandboxes: ptr.To[int64](-1)},
			"runningSandboxes": {RunningSandboxes: ptr.To[int64](-1)},
			"runningVCPUs":     {RunningVCPUs: ptr.To[int64](-2)},
			"snapshotBytes":    {SnapshotBytes: ptr.To[int64](-1)},
		} {
			q := &sandboxv1.SandboxQuota{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: strings.ToLower(field)}, Spec: sandboxv1.SandboxQuotaSpec{Hard: hard}}
			err := k8sClient.Create(context.Background(), q)
			Expect(err).To(HaveOccurred(), field)
			Expect(err.Error()).To(ContainSubstring("spec.hard." + field + " must not be negative"))
		}
		newQuota(ns, "zero", sandboxv1.SandboxQuotaResources{RunningSandboxes: ptr.To[int64](0)})
	})
})

func newQuota(ns, name string, hard sandboxv1.SandboxQuotaResources) *sandboxv1.SandboxQuota {
	q := &sandboxv1.SandboxQuota{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Spec: sandboxv1.SandboxQuotaSpec{Hard: hard}}
	Expect(k8sClient.Create(context.Background(), q)).To(Succeed())
	return q
}

// quotaUsed reads a SandboxQuota's status.used.
func quotaUsed(ns, name string) func(Gomega) sandboxv1.SandboxQuotaResources {
	return func(g Gomega) sandboxv1.SandboxQuotaResources {
		q := &sandboxv1.SandboxQuota{}
		g.Expect(k8sClient.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: name}, q)).To(Succeed())
		g.Expect(q.Status.Used).NotTo(BeNil())
		return *q.Status.Used
	}
}

// namespaceSessions lists the emulator's sessions of the Vercel sandboxes of
// namespace ns (their names start with it).
func namespaceSessions(ns string) []vercel.Session {
	var out []vercel.Session
	for _, s := range emu.Sessions() {
		if strings.HasPrefix(s.SourceSandboxName, ns+"-") {
			out = append(out, s)
		}
	}
	return out
}

// namespaceSnapshots lists the emulator's snapshots of sessions of ns.
func namespaceSnapshots(ns string) []vercel.Snapshot {
	sessions := map[string]bool{}
	for _, s := range namespaceSessions(ns) {
		sessions[s.ID] = true
	}
	var out []vercel.Snapshot
	for _, s := range emu.Snapshots() {
		if sessions[s.SourceSessionID] {
			out = append(out, s)
		}
	}
	return out
}

// runningSessions counts the sessions of ns that have not stopped.
func runningSessions(ns string) int {
	n := 0
	for _, s := range namespaceSessions(ns) {
		if !s.Status.Terminal() {
			n++
		}
	}
	return n
}

// peakRunning is the largest number of sessions of ns that ever ran at the
// same time, from the emulator's record of when each was created and stopped.
func peakRunning(ns string) int {
	return int(peak(ns, func(vercel.Session) int64 { return 1 }))
}

// peakVCPUs is the largest sum of vCPUs of sessions of ns running at once.
func peakVCPUs(ns string) int64 {
	return peak(ns, func(s vercel.Session) int64 { return s.VCPUs })
}

func peak(ns string, weight func(vercel.Session) int64) int64 {
	type edge struct {
		at    int64
		delta int64
	}
	var edges []edge
	for _, s := range namespaceSessions(ns) {
		edges = append(edges, edge{s.CreatedAt, weight(s)})
		if end := max(s.StoppedAt, s.AbortedAt); end > 0 {
			edges = append(edges, edge{end, -weight(s)})
		}
	}
	// A session stopping in the same millisecond another starts is counted
	// as gone first: the controller starts the next only once the stop was
	// answered.
	sort.Slice(edges, func(i, j int) bool {
		if edges[i].at != edges[j].at {
			return edges[i].at < edges[j].at
		}
		return edges[i].delta < edges[j].delta
	})
	var cur, top int64
	for _, e := range edges {
		cur += e.delta
		top = max(top, cur)
	}
	return top
}
