package controllers_test

import (
	"context"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	sandboxv1 "github.com/getsentry/sandbox-controller/api/v1alpha1"
	"github.com/getsentry/sandbox-controller/internal/vercel"
)

// Issue 34 items 1 and 3: where a Sandbox's sessions run and how long its
// snapshots are kept, sent to Vercel explicitly and shown in status.
var _ = Describe("Sandbox placement and snapshot retention", func() {
	It("sends the region, failover regions and retention, shows where the session runs, and moves the next session after a change", func() {
		ns := newNamespace()
		key := types.NamespacedName{Namespace: ns, Name: "placed"}
		newSandbox(ns, key.Name, sandboxv1.SandboxSpec{
			Source:            runtimeSource("node24"),
			Region:            "fra1",
			FailoverRegions:   []sandboxv1.VercelRegion{"cdg1"},
			SnapshotRetention: &sandboxv1.SnapshotRetention{KeepLast: ptr.To[int32](3), ExpireAfterSeconds: ptr.To[int64](86400)},
		})
		sbx := waitReady(key)
		Expect(sbx.Status.Region).To(Equal("fra1"))
		Expect(sbx.Status.SnapshotRetention).To(Equal(&sandboxv1.SnapshotRetention{KeepLast: ptr.To[int32](3), ExpireAfterSeconds: ptr.To[int64](86400)}))
		remote, ok := emu.Sandbox(sbx.Status.VercelName)
		Expect(ok).To(BeTrue())
		Expect(remote.Region).To(Equal("fra1"))
		Expect(remote.FailoverRegions).To(Equal([]string{"cdg1"}))
		Expect(remote.SnapshotExpiration).To(Equal(ptr.To[int64](86_400_000)))
		Expect(remote.KeepLastSnapshots).To(Equal(&vercel.KeepLastSnapshots{Count: 3, Expiration: ptr.To[int64](86_400_000), DeleteEvicted: ptr.To(true)}))
		first := sbx.Status.SessionID

		By("changing the region: Vercel gets it for the next session; the running one stays")
		patch := client.MergeFrom(sbx.DeepCopy())
		sbx.Spec.Region, sbx.Spec.FailoverRegions = "cdg1", nil
		Expect(k8sClient.Patch(context.Background(), sbx, patch)).To(Succeed())
		Eventually(func(g Gomega) {
			remote, _ := emu.Sandbox(sbx.Status.VercelName)
			g.Expect(remote.Region).To(Equal("cdg1"))
			g.Expect(remote.FailoverRegions).To(BeEmpty())
		}).Should(Succeed())
		Expect(getSandbox(key).Status).To(And(HaveField("SessionID", first), HaveField("Region", "fra1")))

		By("pausing and resuming: the new session runs in cdg1")
		setState(key, sandboxv1.SandboxStateStopped)
		Eventually(func() sandboxv1.SandboxPhase { return getSandbox(key).Status.Phase }).Should(Equal(sandboxv1.SandboxStopped))
		setState(key, sandboxv1.SandboxStateRunning)
		Eventually(func(g Gomega) {
			st := getSandbox(key).Status
			g.Expect(st.Phase).To(Equal(sandboxv1.SandboxRunning))
			g.Expect(st.SessionID).NotTo(Equal(first))
			g.Expect(st.Region).To(Equal("cdg1"))
		}).Should(Succeed())
	})

	It("sends the operator's retention when the spec sets none, and none for a non-persistent Sandbox", func() {
		ns := newNamespace()
		kept := waitReady(client.ObjectKeyFromObject(newSandbox(ns, "kept", sandboxv1.SandboxSpec{Source: runtimeSource("node24")})))
		Expect(kept.Status.SnapshotRetention).To(Equal(&sandboxv1.SnapshotRetention{
			KeepLast: ptr.To(sandboxv1.DefaultKeepLastSnapshots), ExpireAfterSeconds: ptr.To(sandboxv1.DefaultSnapshotExpireAfterSeconds)}))
		remote, _ := emu.Sandbox(kept.Status.VercelName)
		Expect(remote.KeepLastSnapshots).To(Equal(&vercel.KeepLastSnapshots{Count: int64(sandboxv1.DefaultKeepLastSnapshots),
			Expiration: ptr.To(sandboxv1.DefaultSnapshotExpireAfterSeconds * 1000), DeleteEvicted: ptr.To(true)}))
		Expect(remote.Region).To(Equal(vercel.DefaultRegion))

		once := waitReady(client.ObjectKeyFromObject(newSandbox(ns, "once", sandboxv1.SandboxSpec{Source: runtimeSource("node24"), Persistent: ptr.To(false)})))
		Expect(once.Status.SnapshotRetention).To(BeNil())
		remote, _ = emu.Sandbox(once.Status.VercelName)
		Expect(remote.KeepLastSnapshots).To(BeNil())
	})
})
