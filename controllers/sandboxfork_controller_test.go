package controllers_test

import (
	"context"
	"fmt"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	sandboxv1 "github.com/getsentry/sandbox-controller/api/v1alpha1"
	"github.com/getsentry/sandbox-controller/internal/vercel"
)

var _ = Describe("SandboxFork", func() {
	ctx := context.Background()
	var ns string
	BeforeEach(func() { ns = newNamespace() })

	getFork := func(name string) *sandboxv1.SandboxFork {
		f := &sandboxv1.SandboxFork{}
		Expect(k8sClient.Get(ctx, types.NamespacedName{Namespace: ns, Name: name}, f)).To(Succeed())
		return f
	}
	children := func(fork string) []sandboxv1.Sandbox {
		list := &sandboxv1.SandboxList{}
		Expect(k8sClient.List(ctx, list, client.InNamespace(ns), client.MatchingLabels{sandboxv1.LabelFork: fork})).To(Succeed())
		return list.Items
	}
	childNames := func(fork string) func() []string {
		return func() []string {
			var names []string
			for _, c := range children(fork) {
				if c.DeletionTimestamp.IsZero() {
					names = append(names, c.Name)
				}
			}
			return names
		}
	}
	forkReady := func(name string, want int32) {
		Eventually(func(g Gomega) {
			f := &sandboxv1.SandboxFork{}
			g.Expect(k8sClient.Get(ctx, types.NamespacedName{Namespace: ns, Name: name}, f)).To(Succeed())
			g.Expect(f.Status.Phase).To(Equal(sandboxv1.ForkReady))
			g.Expect(f.Status.ReadyReplicas).To(Equal(want))
			g.Expect(meta.IsStatusConditionTrue(f.Status.Conditions, sandboxv1.ConditionReady)).To(BeTrue())
		}, 60*time.Second).Should(Succeed())
	}
	// importSnapshot makes a SandboxSnapshot of a Vercel snapshot holding one file.
	importSnapshot := func(name, file, content string) {
		id := snapshotWithFile(file, content)
		Expect(k8sClient.Create(ctx, &sandboxv1.SandboxSnapshot{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
			Spec:       sandboxv1.SandboxSnapshotSpec{Source: sandboxv1.SandboxSnapshotSource{SnapshotID: &id}},
		})).To(Succeed())
	}

	It("forks 3 children from a Sandbox, including a file written after its last snapshot, and keeps the source running", func() {
		srcKey := types.NamespacedName{Namespace: ns, Name: "source"}
		newSandbox(ns, "source", sandboxv1.SandboxSpec{Source: runtimeSource("node24"), Ports: []int32{3000}})
		src := waitReady(srcKey)
		Expect(vc.WriteFiles(ctx, src.Status.SessionID, []vercel.File{{Path: "work/notes.txt", Content: []byte("written after boot\n")}})).To(Succeed())

		Expect(k8sClient.Create(ctx, &sandboxv1.SandboxFork{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "try"},
			Spec: sandboxv1.SandboxForkSpec{
				Source:            sandboxv1.SandboxForkSource{SandboxRef: &sandboxv1.LocalObjectReference{Name: "source"}},
				Replicas:          ptr.To[int32](3),
				KeepSourceRunning: true,
				Template: sandboxv1.SandboxForkTemplate{
					Metadata: sandboxv1.ForkChildMetadata{Labels: map[string]string{"approach": "parallel"}},
					Spec:     sandboxv1.SandboxOverrides{TimeoutSeconds: ptr.To[int64](900)},
				},
			},
		})).To(Succeed())
		forkReady("try", 3)

		fork := getFork("try")
		Expect(fork.Status.SnapshotRef).To(Equal(&sandboxv1.LocalObjectReference{Name: "try-capture"}))
		Expect(fork.Status.Children).To(HaveLen(3))
		kids := children("try")
		Expect(kids).To(HaveLen(3))
		for _, c := range kids {
			Expect(c.Name).To(MatchRegexp(`^try-[0-2]$`))
			Expect(c.Labels).To(HaveKeyWithValue(sandboxv1.LabelSourceSandbox, "source"))
			Expect(c.Labels).To(HaveKeyWithValue("approach", "parallel"))
			Expect(metav1.IsControlledBy(&c, fork)).To(BeTrue())
			Expect(*c.Spec.TimeoutSeconds).To(Equal(int64(900)))
			Expect(c.Spec.Ports).To(Equal([]int32{3000}), "copied from the source")
			data, err := vc.ReadFile(ctx, c.Status.SessionID, "work/notes.txt", "")
			Expect(err).NotTo(HaveOccurred(), "child %s", c.Name)
			Expect(string(data)).To(Equal("written after boot\n"))
		}
		Eventually(func(g Gomega) {
			s := &sandboxv1.Sandbox{}
			g.Expect(k8sClient.Get(ctx, srcKey, s)).To(Succeed())
			g.Expect(meta.IsStatusConditionTrue(s.Status.Conditions, sandboxv1.ConditionReady)).To(BeTrue())
			g.Expect(s.Status.SessionID).NotTo(Equal(src.Status.SessionID), "the source resumed in a new session")
		}, 30*time.Second).Should(Succeed())

		By("deleting the fork, which deletes every child's Vercel sandbox")
		var vercelNames []string
		for _, c := range kids {
			vercelNames = append(vercelNames, c.Status.VercelName)
		}
		Expect(k8sClient.Delete(ctx, fork)).To(Succeed())
		Eventually(func() bool {
			return apierrors.IsNotFound(k8sClient.Get(ctx, types.NamespacedName{Namespace: ns, Name: "try"}, &sandboxv1.SandboxFork{}))
		}, 60*time.Second).Should(BeTrue())
		Expect(children("try")).To(BeEmpty())
		for _, n := range vercelNames {
			_, ok := emu.Sandbox(n)
			Expect(ok).To(BeFalse(), "Vercel sandbox %s left behind", n)
		}
		Expect(apierrors.IsNotFound(k8sClient.Get(ctx, types.NamespacedName{Namespace: ns, Name: "try-capture"}, &sandboxv1.SandboxSnapshot{}))).To(BeTrue())
	})

	It("forks from a SandboxSnapshot and scales 3 → 5 → 2 with kubectl scale, highest indexes first", func() {
		importSnapshot("base", "base.txt", "base\n")
		Expect(k8sClient.Create(ctx, &sandboxv1.SandboxFork{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "wide"},
			Spec: sandboxv1.SandboxForkSpec{
				Source:   sandboxv1.SandboxForkSource{SnapshotRef: &sandboxv1.LocalObjectReference{Name: "base"}},
				Replicas: ptr.To[int32](3),
				Template: sandboxv1.SandboxForkTemplate{Inherit: sandboxv1.InheritNone},
			},
		})).To(Succeed())
		forkReady("wide", 3)
		for _, c := range children("wide") {
			Expect(c.Labels).To(HaveKeyWithValue(sandboxv1.LabelSourceSnapshot, "base"))
			data, err := vc.ReadFile(ctx, c.Status.SessionID, "base.txt", "")
			Expect(err).NotTo(HaveOccurred())
			Expect(string(data)).To(Equal("base\n"))
		}

		out, err := kubectl("scale", "-n", ns, "sbxfork/wide", "--replicas=5")
		Expect(err).NotTo(HaveOccurred(), out)
		forkReady("wide", 5)
		Expect(childNames("wide")()).To(ConsistOf("wide-0", "wide-1", "wide-2", "wide-3", "wide-4"))

		out, err = kubectl("scale", "-n", ns, "sbxfork/wide", "--replicas=2")
		Expect(err).NotTo(HaveOccurred(), out)
		Eventually(childNames("wide"), 30*time.Second).Should(ConsistOf("wide-0", "wide-1"))
		forkReady("wide", 2)

		out, err = kubectl("get", "sbxfork", "-n", ns)
		Expect(err).NotTo(HaveOccurred(), out)
		Expect(out).To(MatchRegexp(`(?m)^NAME\s+PHASE\s+READY\s+SOURCE\s+AGE`))
		Expect(out).To(MatchRegexp(`(?m)^wide\s+Ready\s+2/2\s+base\s`))
	})

	It("releases its children with deletionPolicy Retain", func() {
		importSnapshot("base", "base.txt", "base\n")
		Expect(k8sClient.Create(ctx, &sandboxv1.SandboxFork{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "keep"},
			Spec: sandboxv1.SandboxForkSpec{
				Source:         sandboxv1.SandboxForkSource{SnapshotRef: &sandboxv1.LocalObjectReference{Name: "base"}},
				Replicas:       ptr.To[int32](2),
				DeletionPolicy: sandboxv1.DeletionPolicyRetain,
				Template:       sandboxv1.SandboxForkTemplate{Inherit: sandboxv1.InheritNone},
			},
		})).To(Succeed())
		forkReady("keep", 2)
		Expect(k8sClient.Delete(ctx, getFork("keep"))).To(Succeed())
		Eventually(func() bool {
			return apierrors.IsNotFound(k8sClient.Get(ctx, types.NamespacedName{Namespace: ns, Name: "keep"}, &sandboxv1.SandboxFork{}))
		}).Should(BeTrue())
		Consistently(childNames("keep"), 2*time.Second).Should(ConsistOf("keep-0", "keep-1"))
		for _, c := range children("keep") {
			Expect(c.OwnerReferences).To(BeEmpty())
			_, ok := emu.Sandbox(c.Status.VercelName)
			Expect(ok).To(BeTrue())
			Expect(k8sClient.Delete(ctx, &c)).To(Succeed())
		}
	})

	It("fails with a reason when its source is missing past the failure deadline", func() {
		start := time.Now()
		Expect(k8sClient.Create(ctx, &sandboxv1.SandboxFork{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "orphan"},
			Spec: sandboxv1.SandboxForkSpec{
				Source:                 sandboxv1.SandboxForkSource{SandboxRef: &sandboxv1.LocalObjectReference{Name: "nope"}},
				FailureDeadlineSeconds: ptr.To[int64](3),
			},
		})).To(Succeed())
		Eventually(func() sandboxv1.SandboxForkPhase { return getFork("orphan").Status.Phase }).Should(Equal(sandboxv1.ForkPending))
		Eventually(func() sandboxv1.SandboxForkPhase { return getFork("orphan").Status.Phase }, 15*time.Second).Should(Equal(sandboxv1.ForkFailed))
		Expect(time.Since(start)).To(BeNumerically(">=", 2*time.Second), "not before the deadline")
		cond := meta.FindStatusCondition(getFork("orphan").Status.Conditions, sandboxv1.ConditionReady)
		Expect(cond.Reason).To(Equal(sandboxv1.ReasonSourceFailed))
		Expect(cond.Message).To(ContainSubstring(`Sandbox "nope" does not exist`))
		expectEvent(types.NamespacedName{Namespace: ns, Name: "orphan"}, "Warning SourceFailed")
	})

	It("gives a Ready fork whose SandboxSnapshot goes away the whole failure deadline again, counted from the new wait", func() {
		id := snapshotWithFile("/vercel/sandbox/base.txt", "base\n")
		snapKey := types.NamespacedName{Namespace: ns, Name: "replaced"}
		newSnapshot(ns, snapKey.Name, sandboxv1.SandboxSnapshotSpec{Source: sandboxv1.SandboxSnapshotSource{SnapshotID: &id}})
		waitSnapshotReady(snapKey)
		created := time.Now()
		Expect(k8sClient.Create(ctx, &sandboxv1.SandboxFork{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "steady"},
			Spec: sandboxv1.SandboxForkSpec{
				Source:                 sandboxv1.SandboxForkSource{SnapshotRef: &sandboxv1.LocalObjectReference{Name: snapKey.Name}},
				Template:               sandboxv1.SandboxForkTemplate{Inherit: sandboxv1.InheritNone},
				FailureDeadlineSeconds: ptr.To[int64](8),
			},
		})).To(Succeed())
		forkReady("steady", 1)
		Expect(getFork("steady").Status.WaitingSince).To(BeNil())
		// Past the deadline counted from the fork's creation; the
		// replacement below takes far less than the deadline itself.
		time.Sleep(time.Until(created.Add(9 * time.Second)))

		By("deleting the SandboxSnapshot: the fork waits for it")
		deleteAndWait(snapKey)
		Eventually(func() *metav1.Time { return getFork("steady").Status.WaitingSince }).ShouldNot(BeNil())
		Expect(getFork("steady").Status.Phase).NotTo(Equal(sandboxv1.ForkFailed))

		By("creating it again within the new deadline: the fork is Ready again, never Failed")
		newSnapshot(ns, snapKey.Name, sandboxv1.SandboxSnapshotSpec{Source: sandboxv1.SandboxSnapshotSource{SnapshotID: &id}})
		forkReady("steady", 1)
		Expect(getFork("steady").Status.WaitingSince).To(BeNil())
		Expect(eventsFor(types.NamespacedName{Namespace: ns, Name: "steady"})).NotTo(ContainElement(HavePrefix("Warning SourceFailed")))
	})

	It("fails with SourceFailed, not as an error, when its snapshotRef names a snapshot that expired", func() {
		gone := "snap_" + strings.Repeat("z", 28) // never existed in Vercel
		Expect(k8sClient.Create(ctx, &sandboxv1.SandboxSnapshot{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "gone"},
			Spec:       sandboxv1.SandboxSnapshotSpec{Source: sandboxv1.SandboxSnapshotSource{SnapshotID: &gone}},
		})).To(Succeed())
		Expect(k8sClient.Create(ctx, &sandboxv1.SandboxFork{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "late"},
			Spec:       sandboxv1.SandboxForkSpec{Source: sandboxv1.SandboxForkSource{SnapshotRef: &sandboxv1.LocalObjectReference{Name: "gone"}}},
		})).To(Succeed())
		Eventually(func() sandboxv1.SandboxForkPhase { return getFork("late").Status.Phase }).Should(Equal(sandboxv1.ForkFailed))
		fork := getFork("late")
		ready := meta.FindStatusCondition(fork.Status.Conditions, sandboxv1.ConditionReady)
		Expect(ready.Reason).To(Equal(sandboxv1.ReasonSourceFailed))
		Expect(ready.Message).To(ContainSubstring(`SandboxSnapshot "gone" is Expired`))
		Expect(meta.IsStatusConditionTrue(fork.Status.Conditions, sandboxv1.ConditionSynced)).To(BeTrue(), "a failed source is reported in Ready; the reconcile itself succeeded")
		Expect(fork.Status.LastError).To(BeNil())
		expectEvent(types.NamespacedName{Namespace: ns, Name: "late"}, "Warning SourceFailed")
		Expect(children("late")).To(BeEmpty())
	})

	It("reports a child the API server refuses in Synced, lastError and a Warning event, and recovers", func() {
		importSnapshot("base", "base.txt", "base\n")
		quota := &corev1.ResourceQuota{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "no-sandboxes"},
			Spec:       corev1.ResourceQuotaSpec{Hard: corev1.ResourceList{"count/sandboxes.sandbox.sentry.io": resource.MustParse("0")}},
		}
		Expect(k8sClient.Create(ctx, quota)).To(Succeed())
		// The API server's quota admission reads quotas from its own cache:
		// wait until it refuses a Sandbox, or the child could slip through.
		Eventually(func() error {
			probe := &sandboxv1.Sandbox{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "quota-probe"},
				Spec: sandboxv1.SandboxSpec{Source: runtimeSource("node24")}}
			return k8sClient.Create(ctx, probe, client.DryRunAll)
		}).Should(MatchError(ContainSubstring("quota")))
		Expect(k8sClient.Create(ctx, &sandboxv1.SandboxFork{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "capped"},
			Spec: sandboxv1.SandboxForkSpec{
				Source:   sandboxv1.SandboxForkSource{SnapshotRef: &sandboxv1.LocalObjectReference{Name: "base"}},
				Template: sandboxv1.SandboxForkTemplate{Inherit: sandboxv1.InheritNone},
			},
		})).To(Succeed())
		key := types.NamespacedName{Namespace: ns, Name: "capped"}
		// Refused with "exceeded quota", or "status unknown for quota" until
		// kube-controller-manager has counted: a refusal either way.
		Eventually(func(g Gomega) {
			f := getFork("capped")
			synced := meta.FindStatusCondition(f.Status.Conditions, sandboxv1.ConditionSynced)
			g.Expect(synced).NotTo(BeNil())
			g.Expect(synced.Status).To(Equal(metav1.ConditionFalse))
			g.Expect(synced.Reason).To(Equal(sandboxv1.ReasonReconcileError))
			g.Expect(synced.Message).To(And(ContainSubstring("create child capped-0"), ContainSubstring("quota")))
			g.Expect(f.Status.LastError).NotTo(BeNil())
			g.Expect(f.Status.LastError.Reason).To(Equal(sandboxv1.ReasonReconcileError))
			g.Expect(f.Status.LastError.Message).To(ContainSubstring("quota"))
		}).Should(Succeed())
		expectEvent(key, "Warning ReconcileError: create child capped-0")
		Expect(children("capped")).To(BeEmpty())

		Expect(k8sClient.Delete(ctx, quota)).To(Succeed())
		forkReady("capped", 1)
		fork := getFork("capped")
		Expect(fork.Status.LastError).To(BeNil())
		Expect(meta.IsStatusConditionTrue(fork.Status.Conditions, sandboxv1.ConditionSynced)).To(BeTrue())
	})

	It("refuses a fork with two sources or too many replicas", func() {
		for spec, want := range map[string]string{
			"  source: {sandboxRef: {name: a}, snapshotRef: {name: b}}\n": "spec.source: exactly one of sandboxRef or snapshotRef",
			"  source: {sandboxRef: {name: a}}\n  replicas: 101\n":        "spec.replicas",
		} {
			out, err := kubectlApply(fmt.Sprintf("apiVersion: sandbox.sentry.io/v1alpha1\nkind: SandboxFork\nmetadata:\n  name: bad\n  namespace: %s\nspec:\n%s", ns, spec))
			Expect(err).To(HaveOccurred(), out)
			Expect(out).To(ContainSubstring(want))
		}
	})
})
