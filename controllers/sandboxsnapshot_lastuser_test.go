package controllers_test

import (
	"context"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	sandboxv1 "github.com/getsentry/sandbox-controller/api/v1alpha1"
	"github.com/getsentry/sandbox-controller/internal/vercel"
)

// Issue 36: the long chaos soak leaked Vercel snapshots shared by recipe
// SandboxSnapshots, and the builders and captures around them. Each spec
// here is one cause, made deterministic; each failed before its fix.
var _ = Describe("SandboxSnapshot: the last user deletes", func() {
	ctx := context.Background()
	var ns string
	BeforeEach(func() { ns = newNamespace() })

	node := func(rt string) *sandboxv1.Runtime { r := sandboxv1.Runtime(rt); return &r }
	recipeOf := func(script string) sandboxv1.SandboxSnapshotSpec {
		return sandboxv1.SandboxSnapshotSpec{Source: sandboxv1.SandboxSnapshotSource{Recipe: &sandboxv1.SnapshotRecipe{
			Runtime: node("node24"),
			Setup:   []sandboxv1.RecipeCommand{{Name: "build", Command: "sh", Args: []string{"-c", script}}},
		}}}
	}
	liveBuilders := func() []string {
		var out []string
		for _, sb := range emu.LiveSandboxes() {
			if strings.HasPrefix(sb.Name, ns+"-build-") {
				out = append(out, sb.Name)
			}
		}
		return out
	}
	// hold puts a finalizer of another controller on a SandboxSnapshot, so
	// that once deleted it stays Terminating after its own finalizer is
	// gone; release removes it.
	const holdFinalizer = "example.com/hold"
	editSnapshot := func(key types.NamespacedName, edit func(*sandboxv1.SandboxSnapshot)) {
		GinkgoHelper()
		Eventually(func() error {
			s := &sandboxv1.SandboxSnapshot{}
			if err := k8sClient.Get(ctx, key, s); err != nil {
				return err
			}
			edit(s)
			return k8sClient.Update(ctx, s)
		}).Should(Succeed())
	}
	deleteSnapshotObj := func(key types.NamespacedName) {
		GinkgoHelper()
		Expect(k8sClient.Delete(ctx, &sandboxv1.SandboxSnapshot{ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name}})).To(Succeed())
	}
	gone := func(key types.NamespacedName) func() bool {
		return func() bool { return apierrors.IsNotFound(k8sClient.Get(ctx, key, &sandboxv1.SandboxSnapshot{})) }
	}
	followsDriver := func(key types.NamespacedName, driver string) {
		GinkgoHelper()
		Eventually(func(g Gomega) {
			st := getSnapshotObj(key).Status
			g.Expect(st.ContentHash).NotTo(BeEmpty())
			g.Expect(st.Build).NotTo(BeNil())
			g.Expect(st.Build.SharedWith).To(Equal(driver))
		}, 60*time.Second).Should(Succeed())
	}

	It("deletes a shared snapshot when its last user goes while another user is still terminating", func() {
		a := types.NamespacedName{Namespace: ns, Name: "a"}
		b := types.NamespacedName{Namespace: ns, Name: "b"}
		newSnapshot(ns, a.Name, recipeOf("echo shared > /vercel/sandbox/s.txt"))
		newSnapshot(ns, b.Name, recipeOf("echo shared > /vercel/sandbox/s.txt"))
		id := waitSnapshotReady(a, 90*time.Second).Status.SnapshotID
		Eventually(func() string { return getSnapshotObj(b).Status.SnapshotID }, 60*time.Second).Should(Equal(id))

		By("deleting a, which another controller's finalizer keeps Terminating: b still uses the snapshot")
		editSnapshot(a, func(s *sandboxv1.SandboxSnapshot) { controllerutil.AddFinalizer(s, holdFinalizer) })
		deleteSnapshotObj(a)
		Eventually(func() []string { return getSnapshotObj(a).Finalizers }).Should(Equal([]string{holdFinalizer}))
		expectEvent(a, "Normal Kept")
		Expect(emuSnapshot(id).Status).To(Equal(vercel.SnapshotCreated))

		By("deleting b, the last user, while a is still Terminating: b deletes it")
		deleteSnapshotObj(b)
		Eventually(gone(b)).Should(BeTrue())
		editSnapshot(a, func(s *sandboxv1.SandboxSnapshot) { controllerutil.RemoveFinalizer(s, holdFinalizer) })
		Eventually(gone(a)).Should(BeTrue())
		Expect(emuSnapshot(id).Status).To(Equal(vercel.SnapshotDeleted), "the shared snapshot leaked: each user left it to the other")
		expectEvent(b, "Normal Deleted")
	})

	It("deletes a built snapshot that the user waiting for the shared build never took", func() {
		driver := types.NamespacedName{Namespace: ns, Name: "driver"}
		waiter := types.NamespacedName{Namespace: ns, Name: "waiter"}
		spec := recipeOf("echo built > /vercel/sandbox/b.txt; sleep 3")
		newSnapshot(ns, driver.Name, spec)
		newSnapshot(ns, waiter.Name, spec)
		followsDriver(waiter, driver.Name)

		By("pausing the waiter, which then takes nothing (as a user in backoff or on a killed manager would not)")
		annotateSnapshot(waiter, sandboxv1.AnnotationPaused, "true")
		Eventually(func() *metav1.Condition {
			return meta.FindStatusCondition(getSnapshotObj(waiter).Status.Conditions, sandboxv1.ConditionPaused)
		}).ShouldNot(BeNil())
		id := waitSnapshotReady(driver, 90*time.Second).Status.SnapshotID
		Expect(getSnapshotObj(waiter).Status.SnapshotID).To(BeEmpty())

		By("deleting the driver, then the waiter")
		deleteAndWait(driver)
		deleteAndWait(waiter)
		Expect(emuSnapshot(id).Status).To(Equal(vercel.SnapshotDeleted), "the built snapshot leaked: kept for a user that never recorded it")
		Expect(liveBuilders()).To(BeEmpty())
	})

	It("deletes the builder a deleted driver left to a waiting user that is deleted before taking it over", func() {
		driver := types.NamespacedName{Namespace: ns, Name: "driver"}
		waiter := types.NamespacedName{Namespace: ns, Name: "waiter"}
		spec := recipeOf("sleep 60")
		newSnapshot(ns, driver.Name, spec)
		newSnapshot(ns, waiter.Name, spec)
		followsDriver(waiter, driver.Name)
		Eventually(func(g Gomega) {
			b := getSnapshotObj(driver).Status.Build
			g.Expect(b).NotTo(BeNil())
			g.Expect(b.Step).To(HavePrefix("setup 1/1"))
		}, 60*time.Second).Should(Succeed())
		Expect(liveBuilders()).To(HaveLen(1))
		annotateSnapshot(waiter, sandboxv1.AnnotationPaused, "true")
		Eventually(func() *metav1.Condition {
			return meta.FindStatusCondition(getSnapshotObj(waiter).Status.Conditions, sandboxv1.ConditionPaused)
		}).ShouldNot(BeNil())

		By("deleting the driver mid-build: the waiter is live, so the builder is left for it")
		deleteAndWait(driver)
		Expect(liveBuilders()).To(HaveLen(1))

		By("deleting the waiter before it took the builder over")
		deleteAndWait(waiter)
		Eventually(liveBuilders, 20*time.Second).Should(BeEmpty(), "the builder leaked: nobody is left to finish or delete it")
	})

	It("deletes a capture of a recreated Sandbox after the Sandbox is gone, from the proof recorded at the capture", func() {
		src := types.NamespacedName{Namespace: ns, Name: "phoenix"}
		newSandbox(ns, src.Name, sandboxv1.SandboxSpec{Source: runtimeSource("node24"), RecreatePolicy: sandboxv1.RecreateOnGone})
		first := waitReady(src).Status.VercelName
		_, err := vc.DeleteSandbox(ctx, first, false)
		Expect(err).NotTo(HaveOccurred())
		Eventually(func() string { return getSandbox(src).Status.VercelName }, 30*time.Second).Should(Equal(first + "-r1"))
		waitReady(src)

		key := types.NamespacedName{Namespace: ns, Name: "cap"}
		newSnapshot(ns, key.Name, sandboxv1.SandboxSnapshotSpec{
			Source: sandboxv1.SandboxSnapshotSource{SandboxRef: &sandboxv1.LocalObjectReference{Name: src.Name}},
		})
		snap := waitSnapshotReady(key)
		id := snap.Status.SnapshotID
		Expect(snap.Status.SnapshotProof).To(HavePrefix("hmac-sha256:"), "the proof is recorded while the source can be read")

		By("deleting the Sandbox: its Vercel sandbox, the capture's only other proof, is gone")
		Expect(k8sClient.Delete(ctx, getSandbox(src))).To(Succeed())
		Eventually(func() bool { return apierrors.IsNotFound(k8sClient.Get(ctx, src, &sandboxv1.Sandbox{})) }, 30*time.Second).Should(BeTrue())

		deleteAndWait(key)
		Expect(emuSnapshot(id).Status).To(Equal(vercel.SnapshotDeleted), "the capture leaked: nothing proved it ours once its source was gone")
	})

	It("refuses a proof copied from another SandboxSnapshot", func() {
		src := types.NamespacedName{Namespace: ns, Name: "src"}
		newSandbox(ns, src.Name, sandboxv1.SandboxSpec{Source: runtimeSource("node24")})
		waitReady(src)
		orig := types.NamespacedName{Namespace: ns, Name: "orig"}
		spec := sandboxv1.SandboxSnapshotSpec{
			Source:         sandboxv1.SandboxSnapshotSource{SandboxRef: &sandboxv1.LocalObjectReference{Name: src.Name}},
			DeletionPolicy: sandboxv1.DeletionPolicyRetain,
		}
		newSnapshot(ns, orig.Name, spec)
		o := waitSnapshotReady(orig)
		Expect(o.Status.SnapshotProof).NotTo(BeEmpty())
		deleteAndWait(orig)
		Expect(k8sClient.Delete(ctx, getSandbox(src))).To(Succeed())
		Eventually(func() bool { return apierrors.IsNotFound(k8sClient.Get(ctx, src, &sandboxv1.Sandbox{})) }, 30*time.Second).Should(BeTrue())

		By("a user with status rights copies the retained snapshot's id and proof onto another capture")
		other := types.NamespacedName{Namespace: ns, Name: "other"}
		newSandbox(ns, "other-src", sandboxv1.SandboxSpec{Source: runtimeSource("node24")})
		newSnapshot(ns, other.Name, sandboxv1.SandboxSnapshotSpec{
			Source: sandboxv1.SandboxSnapshotSource{SandboxRef: &sandboxv1.LocalObjectReference{Name: "other-src"}},
		})
		waitSnapshotReady(other)
		annotateSnapshot(other, sandboxv1.AnnotationPaused, "true")
		Eventually(func() *metav1.Condition {
			return meta.FindStatusCondition(getSnapshotObj(other).Status.Conditions, sandboxv1.ConditionPaused)
		}).ShouldNot(BeNil())
		s := getSnapshotObj(other)
		patch := client.MergeFrom(s.DeepCopy())
		s.Status.SnapshotID, s.Status.SnapshotProof = o.Status.SnapshotID, o.Status.SnapshotProof
		Expect(k8sClient.Status().Patch(ctx, s, patch)).To(Succeed())

		deleteAndWait(other)
		Expect(emuSnapshot(o.Status.SnapshotID).Status).To(Equal(vercel.SnapshotCreated), "a copied proof made the operator delete a snapshot it may not")
		expectEvent(other, "Warning OwnedElsewhere")
	})
})
