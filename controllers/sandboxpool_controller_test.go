package controllers_test

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	sandboxv1 "github.com/getsentry/sandbox-controller/api/v1alpha1"
	"github.com/getsentry/sandbox-controller/controllers"
	"github.com/getsentry/sandbox-controller/internal/vercel"
)

// poolTemplate is the member spec the pool specs use.
func poolTemplate() sandboxv1.SandboxSpec {
	return sandboxv1.SandboxSpec{Source: runtimeSource("node24")}
}

func newPool(ns, name string, replicas int32, spec sandboxv1.SandboxSpec) types.NamespacedName {
	GinkgoHelper()
	pool := &sandboxv1.SandboxPool{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec:       sandboxv1.SandboxPoolSpec{Replicas: ptr.To(replicas), Template: sandboxv1.SandboxPoolTemplate{Spec: spec}},
	}
	Expect(k8sClient.Create(context.Background(), pool)).To(Succeed())
	return client.ObjectKeyFromObject(pool)
}

func getPool(key types.NamespacedName) *sandboxv1.SandboxPool {
	GinkgoHelper()
	p := &sandboxv1.SandboxPool{}
	Expect(k8sClient.Get(context.Background(), key, p)).To(Succeed())
	return p
}

// poolMembers lists the Sandboxes labelled as the pool's members.
func poolMembers(key types.NamespacedName) []sandboxv1.Sandbox {
	GinkgoHelper()
	list := &sandboxv1.SandboxList{}
	Expect(k8sClient.List(context.Background(), list, client.InNamespace(key.Namespace), client.MatchingLabels{sandboxv1.LabelPool: key.Name})).To(Succeed())
	return list.Items
}

// waitPoolReady waits until n members are ready to claim, and returns them.
func waitPoolReady(key types.NamespacedName, n int32) []sandboxv1.Sandbox {
	GinkgoHelper()
	Eventually(func(g Gomega) {
		p := getPool(key)
		g.Expect(p.Status.ReadyReplicas).To(Equal(n), "%+v", p.Status)
		g.Expect(p.Status.TargetReplicas).To(Equal(n))
		ready := 0
		for _, m := range poolMembers(key) {
			if m.DeletionTimestamp.IsZero() && meta.IsStatusConditionTrue(m.Status.Conditions, sandboxv1.ConditionReady) {
				ready++
			}
		}
		g.Expect(ready).To(BeEquivalentTo(n))
	}, 60*time.Second).Should(Succeed())
	return poolMembers(key)
}

// claimant creates a Sandbox that claims from pool with spec.
func claimant(ns, name, pool string, spec sandboxv1.SandboxSpec) types.NamespacedName {
	GinkgoHelper()
	spec.PoolRef = &sandboxv1.PoolRef{Name: pool}
	return client.ObjectKeyFromObject(newSandbox(ns, name, spec))
}

func claimedCondition(key types.NamespacedName) *metav1.Condition {
	return meta.FindStatusCondition(getSandbox(key).Status.Conditions, sandboxv1.ConditionClaimed)
}

// ownerUID is the UID the Vercel sandbox's owner tag names.
func ownerUID(vercelName string) string {
	GinkgoHelper()
	sb, ok := emu.Sandbox(vercelName)
	Expect(ok).To(BeTrue(), "Vercel sandbox %s does not exist", vercelName)
	return sb.Tags["k8s-uid"]
}

func vercelExists(name string) bool {
	_, ok := emu.Sandbox(name)
	return ok
}

var _ = Describe("SandboxPool", func() {
	var ns string
	BeforeEach(func() { ns = newNamespace() })

	It("fills to its size, scales through /scale, and deletes its members' Vercel sandboxes when scaled down or deleted", func() {
		key := newPool(ns, "warm", 2, poolTemplate())
		members := waitPoolReady(key, 2)
		p := getPool(key)
		Expect(p.Status.Selector).To(Equal(sandboxv1.LabelPool + "=warm"))
		for _, m := range members {
			Expect(metav1.IsControlledBy(&m, p)).To(BeTrue())
			Expect(ownerUID(m.Status.VercelName)).To(Equal(string(m.UID)))
		}

		out, err := kubectl("scale", "-n", ns, "sandboxpool/warm", "--replicas=3")
		Expect(err).NotTo(HaveOccurred(), out)
		waitPoolReady(key, 3)

		out, err = kubectl("scale", "-n", ns, "sandboxpool/warm", "--replicas=1")
		Expect(err).NotTo(HaveOccurred(), out)
		Eventually(func() int { return len(poolMembers(key)) }, 30*time.Second).Should(Equal(1))
		left := poolMembers(key)[0].Status.VercelName
		var gone []string
		for _, m := range members {
			if m.Status.VercelName != left {
				gone = append(gone, m.Status.VercelName)
			}
		}
		for _, name := range gone {
			Eventually(func() bool { return vercelExists(name) }).Should(BeFalse(), name)
		}

		Expect(k8sClient.Delete(context.Background(), getPool(key))).To(Succeed())
		Eventually(func() bool {
			return apierrors.IsNotFound(k8sClient.Get(context.Background(), key, &sandboxv1.SandboxPool{}))
		}, 30*time.Second).Should(BeTrue())
		Expect(poolMembers(key)).To(BeEmpty())
		Eventually(func() bool { return vercelExists(left) }).Should(BeFalse())
	})

	It("hands a ready member's Vercel sandbox to a claim, re-tagged and with the claim's network policy, and replenishes", func() {
		key := newPool(ns, "warm", 1, poolTemplate())
		member := waitPoolReady(key, 1)[0]
		spec := poolTemplate()
		spec.NetworkPolicy = &sandboxv1.NetworkPolicy{Mode: sandboxv1.NetworkDenyAll}
		c := claimant(ns, "conversation", "warm", spec)
		sbx := waitReady(c)
		Expect(claimedCondition(c)).To(And(Not(BeNil()), HaveField("Status", metav1.ConditionTrue)))
		Expect(sbx.Status.VercelName).To(Equal(member.Status.VercelName), "the same Vercel sandbox")
		Expect(sbx.Status.SessionID).To(Equal(member.Status.SessionID), "the same session")
		Expect(sbx.Status.Claim).NotTo(BeNil())
		Expect(sbx.Status.Claim.Member).To(Equal(member.Name))
		Expect(ownerUID(sbx.Status.VercelName)).To(Equal(string(sbx.UID)))
		pol, ok := emu.SandboxPolicyRequest(sbx.Status.VercelName)
		Expect(ok).To(BeTrue())
		Expect(string(pol.Mode)).To(Equal("deny-all"))
		// The session the claim took, not only the sessions after it, runs
		// with the claimant's policy (nil: none was ever sent, allow-all).
		pol, ok = emu.SessionPolicyRequest(sbx.Status.SessionID)
		Expect(ok).To(BeTrue())
		Expect(pol).NotTo(BeNil(), "the running session kept the member's allow-all policy")
		Expect(string(pol.Mode)).To(Equal("deny-all"))
		Eventually(func() bool {
			return apierrors.IsNotFound(k8sClient.Get(context.Background(), client.ObjectKeyFromObject(&member), &sandboxv1.Sandbox{}))
		}).Should(BeTrue(), "the member object is gone")
		Expect(vercelExists(sbx.Status.VercelName)).To(BeTrue(), "the member's deletion left the claimed sandbox alone")

		replenished := waitPoolReady(key, 1)
		Expect(replenished[0].Name).NotTo(Equal(member.Name))
		Eventually(func() int32 { return getPool(key).Status.Hits }).Should(Equal(int32(1)))

		// An ordinary Sandbox from now on: deleting it deletes the sandbox.
		Expect(k8sClient.Delete(context.Background(), sbx)).To(Succeed())
		Eventually(func() bool { return vercelExists(sbx.Status.VercelName) }, 30*time.Second).Should(BeFalse())
	})

	It("creates a claim whose spec the pool cannot serve cold, and says why", func() {
		key := newPool(ns, "warm", 1, poolTemplate())
		member := waitPoolReady(key, 1)[0]
		spec := poolTemplate()
		spec.Resources = &sandboxv1.SandboxResources{VCPUs: ptr.To[int32](2)}
		c := claimant(ns, "big", "warm", spec)
		sbx := waitReady(c)
		cond := claimedCondition(c)
		Expect(cond).NotTo(BeNil())
		Expect(cond.Status).To(Equal(metav1.ConditionFalse))
		Expect(cond.Reason).To(Equal(sandboxv1.ReasonSpecMismatch))
		Expect(cond.Message).To(ContainSubstring("spec.resources"))
		Expect(sbx.Status.VercelName).NotTo(Equal(member.Status.VercelName))
		Expect(ownerUID(sbx.Status.VercelName)).To(Equal(string(sbx.UID)))
		Expect(getSandbox(client.ObjectKeyFromObject(&member)).Labels).NotTo(HaveKey(sandboxv1.LabelClaimedBy))
	})

	It("gives each member to exactly one of 20 concurrent claims and creates the rest cold, leaking nothing", longSpec, func() {
		key := newPool(ns, "warm", 5, poolTemplate())
		members := waitPoolReady(key, 5)
		memberNames := map[string]bool{}
		for _, m := range members {
			memberNames[m.Status.VercelName] = true
		}
		// Paused, the pool does not replenish during the race: exactly its
		// five members can be handed out.
		p := getPool(key)
		p.Annotations = map[string]string{sandboxv1.AnnotationPaused: "true"}
		Expect(k8sClient.Update(context.Background(), p)).To(Succeed())

		var wg sync.WaitGroup
		keys := make([]types.NamespacedName, 20)
		for i := range keys {
			wg.Add(1)
			go func() {
				defer GinkgoRecover()
				defer wg.Done()
				keys[i] = claimant(ns, fmt.Sprintf("c%02d", i), "warm", poolTemplate())
			}()
		}
		wg.Wait()
		hits, cold := 0, 0
		owners := map[string]string{}
		for _, k := range keys {
			sbx := waitReady(k)
			cond := claimedCondition(k)
			Expect(cond).NotTo(BeNil())
			switch cond.Status {
			case metav1.ConditionTrue:
				hits++
				Expect(memberNames).To(HaveKey(sbx.Status.VercelName))
			default:
				cold++
				Expect(cond.Reason).To(Equal(sandboxv1.ReasonPoolEmpty))
				Expect(memberNames).NotTo(HaveKey(sbx.Status.VercelName))
			}
			Expect(owners).NotTo(HaveKey(sbx.Status.VercelName), "two claims hold one Vercel sandbox")
			owners[sbx.Status.VercelName] = k.Name
			Expect(ownerUID(sbx.Status.VercelName)).To(Equal(string(sbx.UID)))
		}
		Expect(hits).To(Equal(5))
		Expect(cold).To(Equal(15))
		Eventually(func() []sandboxv1.Sandbox { return poolMembers(key) }).Should(BeEmpty())
		// Every Vercel sandbox of the namespace is one claim's: none leaked.
		sbxs, err := vc.ListAllSandboxes(context.Background(), vercel.ListSandboxesOptions{SortBy: "name", NamePrefix: ns + "-"})
		Expect(err).NotTo(HaveOccurred())
		var live []string
		for _, s := range sbxs {
			live = append(live, s.Name)
		}
		Expect(live).To(HaveLen(20), "%v", live)
		for _, n := range live {
			Expect(owners).To(HaveKey(n))
		}
	})

	It("finishes a claim after a manager restart between the re-tag and its answer", func() {
		key := newPool(ns, "warm", 1, poolTemplate())
		member := waitPoolReady(key, 1)[0]
		committed := recorder.stallAfterCommit(func(r recordedRequest) bool {
			return r.Method == http.MethodPatch && strings.HasSuffix(r.Path, "/"+member.Status.VercelName) && bytes.Contains(r.Body, []byte("k8s-uid"))
		})
		c := claimant(ns, "conversation", "warm", poolTemplate())
		Eventually(committed, 30*time.Second).Should(BeClosed())
		restartManager()
		sbx := waitReady(c)
		Expect(claimedCondition(c)).To(And(Not(BeNil()), HaveField("Status", metav1.ConditionTrue)))
		Expect(sbx.Status.VercelName).To(Equal(member.Status.VercelName))
		Expect(ownerUID(sbx.Status.VercelName)).To(Equal(string(sbx.UID)))
		Eventually(func() bool {
			return apierrors.IsNotFound(k8sClient.Get(context.Background(), client.ObjectKeyFromObject(&member), &sandboxv1.Sandbox{}))
		}).Should(BeTrue())
		Expect(vercelExists(member.Status.VercelName)).To(BeTrue())
	})

	It("stops handing out members of a rebuilt snapshot and replaces them", longSpec, func() {
		snapKey := types.NamespacedName{Namespace: ns, Name: "workspace"}
		rt := sandboxv1.Runtime("node24")
		newSnapshot(ns, snapKey.Name, sandboxv1.SandboxSnapshotSpec{
			Source:        sandboxv1.SandboxSnapshotSource{Recipe: &sandboxv1.SnapshotRecipe{Runtime: &rt, Setup: []sandboxv1.RecipeCommand{{Name: "stamp", Command: "sh", Args: []string{"-c", "date > /vercel/sandbox/built-at"}}}}},
			MaxAgeSeconds: ptr.To[int64](3600),
		})
		first := waitSnapshotReady(snapKey, 90*time.Second).Status
		spec := sandboxv1.SandboxSpec{Source: sandboxv1.SandboxSource{SnapshotRef: &sandboxv1.LocalObjectReference{Name: snapKey.Name}}}
		key := newPool(ns, "warm", 2, spec)
		old := waitPoolReady(key, 2)
		for _, m := range old {
			Expect(m.Status.BootedFrom.SnapshotID).To(Equal(first.SnapshotID))
		}
		agePast(first.CreatedAt.Add(time.Hour))
		Eventually(func() string { return getSnapshotObj(snapKey).Status.SnapshotID }, 60*time.Second).ShouldNot(Equal(first.SnapshotID))
		snapshotClock.Set(0)
		rebuilt := getSnapshotObj(snapKey).Status.SnapshotID
		Eventually(func(g Gomega) {
			ms := poolMembers(key)
			g.Expect(ms).To(HaveLen(2))
			for _, m := range ms {
				g.Expect(m.Status.BootedFrom).NotTo(BeNil())
				g.Expect(m.Status.BootedFrom.SnapshotID).To(Equal(rebuilt))
				g.Expect(meta.IsStatusConditionTrue(m.Status.Conditions, sandboxv1.ConditionReady)).To(BeTrue())
			}
		}, 60*time.Second).Should(Succeed())
		for _, m := range old {
			Eventually(func() bool { return vercelExists(m.Status.VercelName) }).Should(BeFalse())
		}
		c := claimant(ns, "conversation", "warm", spec)
		waitReady(c)
		Expect(getSandbox(c).Status.BootedFrom.SnapshotID).To(Equal(rebuilt))
	})

	It("takes the member an interrupted earlier claim of the same Sandbox marked, not another", func() {
		key := newPool(ns, "warm", 2, poolTemplate())
		members := waitPoolReady(key, 2)
		// The claimant's finalizer is on before the pause stops it (prepare
		// runs first), so the reconcile after the pause is not the one that
		// added it and must look for a mark left by an earlier attempt.
		spec := poolTemplate()
		spec.PoolRef = &sandboxv1.PoolRef{Name: "warm"}
		sbx := &sandboxv1.Sandbox{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "resumed-claim", Annotations: map[string]string{sandboxv1.AnnotationPaused: "true"}},
			Spec:       spec,
		}
		Expect(k8sClient.Create(context.Background(), sbx)).To(Succeed())
		Eventually(func() []string { return getSandbox(client.ObjectKeyFromObject(sbx)).Finalizers }).Should(ContainElement(sandboxv1.SandboxFinalizer))
		// The earlier attempt marked the second member, then was interrupted
		// before recording it.
		marked := members[1].DeepCopy()
		won, err := controllers.MarkMember(k8sClient, sbx.Name, sbx.UID, marked, "")
		Expect(err).NotTo(HaveOccurred())
		Expect(won).To(BeTrue())
		Expect(k8sClient.Get(context.Background(), client.ObjectKeyFromObject(sbx), sbx)).To(Succeed())
		delete(sbx.Annotations, sandboxv1.AnnotationPaused)
		Expect(k8sClient.Update(context.Background(), sbx)).To(Succeed())

		got := waitReady(client.ObjectKeyFromObject(sbx))
		Expect(got.Status.Claim).NotTo(BeNil())
		Expect(got.Status.Claim.Member).To(Equal(members[1].Name), "the member its earlier attempt marked")
		Expect(got.Status.VercelName).To(Equal(members[1].Status.VercelName))
		Expect(getSandbox(client.ObjectKeyFromObject(&members[0])).Labels).NotTo(HaveKey(sandboxv1.LabelClaimedBy), "no second member is marked")
	})

	It("lets exactly one of two claimants holding the same view of a member mark it", func() {
		key := newPool(ns, "warm", 1, poolTemplate())
		member := waitPoolReady(key, 1)[0]
		a, b := member.DeepCopy(), member.DeepCopy()
		wonA, err := controllers.MarkMember(k8sClient, "a", "uid-a", a, "")
		Expect(err).NotTo(HaveOccurred())
		wonB, err := controllers.MarkMember(k8sClient, "b", "uid-b", b, "")
		Expect(err).NotTo(HaveOccurred())
		Expect(wonA).To(BeTrue())
		Expect(wonB).To(BeFalse(), "the second claimant's update at the same resourceVersion must conflict")
		Expect(getSandbox(client.ObjectKeyFromObject(&member)).Labels[sandboxv1.LabelClaimedBy]).To(Equal("uid-a"))
	})
})
