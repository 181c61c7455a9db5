package controllers_test

import (
	"context"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	sandboxv1 "github.com/getsentry/sandbox-controller/api/v1alpha1"
)

// Input the API server cannot judge, because it depends on other objects or
// on the time: the controllers refuse it with a condition that says why, wait
// a bounded time (--reference-deadline, referenceDeadline here) for it to
// change, and never create anything in Vercel for it.
var _ = Describe("Input the controllers refuse", func() {
	ctx := context.Background()
	var ns string
	BeforeEach(func() { ns = newNamespace() })

	conditionOf := func(conds []metav1.Condition, typ string) metav1.Condition {
		if c := meta.FindStatusCondition(conds, typ); c != nil {
			return *c
		}
		return metav1.Condition{}
	}
	sandboxCond := func(key types.NamespacedName, typ string) func() metav1.Condition {
		return func() metav1.Condition { return conditionOf(getSandbox(key).Status.Conditions, typ) }
	}
	snapshotCond := func(key types.NamespacedName, typ string) func() metav1.Condition {
		return func() metav1.Condition { return conditionOf(getSnapshotObj(key).Status.Conditions, typ) }
	}
	withReason := func(status metav1.ConditionStatus, reason string, msg ...string) OmegaMatcher {
		m := []OmegaMatcher{HaveField("Status", status), HaveField("Reason", reason)}
		for _, s := range msg {
			m = append(m, HaveField("Message", ContainSubstring(s)))
		}
		return And(m...)
	}
	importSnapshot := func(name string) {
		id := snapshotWithFile("/vercel/sandbox/"+name+".txt", name+"\n")
		newSnapshot(ns, name, sandboxv1.SandboxSnapshotSpec{Source: sandboxv1.SandboxSnapshotSource{SnapshotID: &id}})
	}
	layered := func(name, base string) {
		newSnapshot(ns, name, sandboxv1.SandboxSnapshotSpec{Source: sandboxv1.SandboxSnapshotSource{Recipe: &sandboxv1.SnapshotRecipe{
			BaseSnapshotRef: &sandboxv1.LocalObjectReference{Name: base},
			Setup:           []sandboxv1.RecipeCommand{{Name: "mark", Command: "sh", Args: []string{"-c", "echo " + name + " > /vercel/sandbox/" + name + ".txt"}}},
		}}})
	}
	buildersOf := func() []string {
		var out []string
		for _, s := range emu.LiveSandboxes() {
			if strings.HasPrefix(s.Name, ns+"-build-") {
				out = append(out, s.Name)
			}
		}
		return out
	}

	Context("a Sandbox's snapshotRef to a SandboxSnapshot that does not exist", func() {
		It("is reported with reason SnapshotRefNotFound and a deadline, and recovers when the SandboxSnapshot appears", func() {
			key := types.NamespacedName{Namespace: ns, Name: "early"}
			newSandbox(ns, key.Name, sandboxv1.SandboxSpec{Source: sandboxv1.SandboxSource{SnapshotRef: &sandboxv1.LocalObjectReference{Name: "later"}}})
			Eventually(sandboxCond(key, sandboxv1.ConditionResolvedRefs)).Should(withReason(metav1.ConditionFalse, sandboxv1.ReasonSnapshotRefNotFound, `"later"`))
			Expect(sandboxCond(key, sandboxv1.ConditionReady)()).To(withReason(metav1.ConditionFalse, sandboxv1.ReasonSnapshotRefNotFound, `"later"`, "fails at"))
			Expect(getSandbox(key).Status.Phase).To(Equal(sandboxv1.SandboxPending))

			importSnapshot("later")
			sbx := waitReady(key)
			Expect(sandboxCond(key, sandboxv1.ConditionResolvedRefs)()).To(withReason(metav1.ConditionTrue, sandboxv1.ReasonResolved))
			Expect(sbx.Status.BootedFrom).NotTo(BeNil())
			Expect(sbx.Status.BootedFrom.SnapshotName).To(Equal("later"))
		})

		It("fails the Sandbox past the deadline, for good, without creating anything in Vercel", func() {
			key := types.NamespacedName{Namespace: ns, Name: "orphan"}
			newSandbox(ns, key.Name, sandboxv1.SandboxSpec{Source: sandboxv1.SandboxSource{SnapshotRef: &sandboxv1.LocalObjectReference{Name: "never"}}})
			Eventually(func(g Gomega) {
				sbx := getSandbox(key)
				g.Expect(sbx.Status.Phase).To(Equal(sandboxv1.SandboxFailed))
				g.Expect(conditionOf(sbx.Status.Conditions, sandboxv1.ConditionReady)).To(
					withReason(metav1.ConditionFalse, sandboxv1.ReasonSnapshotRefNotFound, `"never"`, "for longer than 10s"))
			}, referenceDeadline+30*time.Second).Should(Succeed())
			expectEvent(key, "Warning SnapshotRefNotFound")
			name := getSandbox(key).Status.VercelName
			Expect(createsFor(name)).To(BeEmpty())

			By("staying Failed when the SandboxSnapshot appears after the deadline")
			importSnapshot("never")
			waitSnapshotReady(types.NamespacedName{Namespace: ns, Name: "never"})
			Consistently(func() sandboxv1.SandboxPhase { return getSandbox(key).Status.Phase }, 3*time.Second).Should(Equal(sandboxv1.SandboxFailed))
			Expect(createsFor(name)).To(BeEmpty())
		})
	})

	Context("a recipe's baseSnapshotRef", func() {
		It("to a SandboxSnapshot that does not exist is reported with reason BaseSnapshotNotFound, and recovers when it appears", func() {
			key := types.NamespacedName{Namespace: ns, Name: "top"}
			layered(key.Name, "bottom")
			Eventually(snapshotCond(key, sandboxv1.ConditionResolvedRefs)).Should(withReason(metav1.ConditionFalse, sandboxv1.ReasonBaseSnapshotNotFound, `"bottom"`))
			Expect(snapshotCond(key, sandboxv1.ConditionReady)()).To(withReason(metav1.ConditionFalse, sandboxv1.ReasonBaseSnapshotNotFound, "fails at"))
			Expect(getSnapshotObj(key).Status.Phase).To(Equal(sandboxv1.SnapshotPending))

			importSnapshot("bottom")
			waitSnapshotReady(key, 90*time.Second)
			Expect(snapshotCond(key, sandboxv1.ConditionResolvedRefs)()).To(withReason(metav1.ConditionTrue, sandboxv1.ReasonResolved))
		})

		It("in a cycle is reported with reason BaseSnapshotCycle and fails both past the deadline, building nothing", func() {
			a, b := types.NamespacedName{Namespace: ns, Name: "a"}, types.NamespacedName{Namespace: ns, Name: "b"}
			layered(a.Name, b.Name)
			layered(b.Name, a.Name)
			d := types.NamespacedName{Namespace: ns, Name: "d"}
			layered(d.Name, "nothing")
			Eventually(snapshotCond(a, sandboxv1.ConditionResolvedRefs)).Should(withReason(metav1.ConditionFalse, sandboxv1.ReasonBaseSnapshotCycle, "a -> b -> a"))
			Eventually(snapshotCond(b, sandboxv1.ConditionResolvedRefs)).Should(withReason(metav1.ConditionFalse, sandboxv1.ReasonBaseSnapshotCycle, "b -> a -> b"))
			for _, key := range []types.NamespacedName{a, b} {
				Eventually(func(g Gomega) {
					s := getSnapshotObj(key)
					g.Expect(s.Status.Phase).To(Equal(sandboxv1.SnapshotFailed))
					g.Expect(conditionOf(s.Status.Conditions, sandboxv1.ConditionReady)).To(
						withReason(metav1.ConditionFalse, sandboxv1.ReasonBaseSnapshotCycle, "is a cycle", "for longer than 10s"))
				}, referenceDeadline+30*time.Second).Should(Succeed())
				expectEvent(key, "Warning BaseSnapshotCycle")
			}
			Eventually(func() sandboxv1.SandboxSnapshotPhase { return getSnapshotObj(d).Status.Phase }).Should(Equal(sandboxv1.SnapshotFailed))
			Expect(buildersOf()).To(BeEmpty())

			By("reporting a recipe layered on the cycle, and one layered on a Failed base")
			layered("c", a.Name)
			Eventually(snapshotCond(types.NamespacedName{Namespace: ns, Name: "c"}, sandboxv1.ConditionReady)).Should(
				withReason(metav1.ConditionFalse, sandboxv1.ReasonBaseSnapshotCycle, "c -> a -> b -> a"))
			layered("e", d.Name)
			Eventually(snapshotCond(types.NamespacedName{Namespace: ns, Name: "e"}, sandboxv1.ConditionReady)).Should(
				withReason(metav1.ConditionFalse, sandboxv1.ReasonBaseSnapshotFailed, `"d" is Failed`))
			Expect(buildersOf()).To(BeEmpty())
		})
	})

	Context("a shutdownTime that has already passed", func() {
		It("creates nothing in Vercel and reports ShutdownTimePassed, until the time is moved", func() {
			key := types.NamespacedName{Namespace: ns, Name: "late"}
			newSandbox(ns, key.Name, sandboxv1.SandboxSpec{Source: runtimeSource("node24"), ShutdownTime: &metav1.Time{Time: time.Now().Add(-time.Hour)}})
			Eventually(func(g Gomega) {
				sbx := getSandbox(key)
				g.Expect(sbx.Status.Phase).To(Equal(sandboxv1.SandboxFailed))
				g.Expect(conditionOf(sbx.Status.Conditions, sandboxv1.ConditionReady)).To(
					withReason(metav1.ConditionFalse, sandboxv1.ReasonShutdownTimePassed, "spec.shutdownTime had passed"))
			}).Should(Succeed())
			expectEvent(key, "Warning ShutdownTimePassed")
			name := getSandbox(key).Status.VercelName
			Consistently(func() int { return len(createsFor(name)) }, 2*pollInterval).Should(BeZero())

			By("moving shutdownTime into the future")
			sbx := getSandbox(key)
			patch := client.MergeFrom(sbx.DeepCopy())
			sbx.Spec.ShutdownTime = &metav1.Time{Time: time.Now().Add(time.Hour)}
			Expect(k8sClient.Patch(ctx, sbx, patch)).To(Succeed())
			waitReady(key)
			Expect(createsFor(name)).To(HaveLen(1))
		})

		It("under shutdownPolicy Delete deletes the Sandbox, creating nothing in Vercel", func() {
			key := types.NamespacedName{Namespace: ns, Name: "gone"}
			sbx := newSandbox(ns, key.Name, sandboxv1.SandboxSpec{Source: runtimeSource("node24"),
				ShutdownTime: &metav1.Time{Time: time.Now().Add(-time.Hour)}, ShutdownPolicy: sandboxv1.ShutdownDelete})
			Eventually(func() error { return k8sClient.Get(ctx, key, &sandboxv1.Sandbox{}) }).Should(MatchError(ContainSubstring("not found")))
			for _, r := range recorder.requests("POST", "/sandboxes") {
				Expect(string(r.Body)).NotTo(ContainSubstring(string(sbx.UID)), "a create for the Sandbox reached Vercel")
			}
		})
	})

	Context("a heartbeat in the far future", func() {
		It("is recorded as the time it was seen, so the sandbox still goes Idle", func() {
			key := types.NamespacedName{Namespace: ns, Name: "clock-skew"}
			newSandbox(ns, key.Name, sandboxv1.SandboxSpec{Source: runtimeSource("node24"), TimeoutSeconds: ptr.To[int64](5)})
			waitReady(key)
			sent := time.Now().Add(100 * 365 * 24 * time.Hour)
			heartbeat(key, sent)
			Eventually(func(g Gomega) {
				v := getSandbox(key).Annotations[sandboxv1.AnnotationLastActivity]
				t, err := time.Parse(time.RFC3339, v)
				g.Expect(err).NotTo(HaveOccurred())
				g.Expect(t).To(BeTemporally("~", time.Now(), 10*time.Second), "rewritten to the time it was seen")
			}).Should(Succeed())
			expectEvent(key, "Warning HeartbeatInFuture")
			Eventually(readyCondition(key), 30*time.Second).Should(HaveField("Reason", sandboxv1.ReasonIdleTimeout))
			Expect(getSandbox(key).Status.Phase).To(Equal(sandboxv1.SandboxIdle))
			Consistently(func() sandboxv1.SandboxPhase { return getSandbox(key).Status.Phase }, 2*pollInterval).Should(Equal(sandboxv1.SandboxIdle),
				"the rewritten heartbeat is older than the stop: it does not wake the sandbox")
		})
	})
})
