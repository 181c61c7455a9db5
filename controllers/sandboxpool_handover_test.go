package controllers_test

import (
	"context"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	sandboxv1 "github.com/getsentry/sandbox-controller/api/v1alpha1"
	"github.com/getsentry/sandbox-controller/controllers"
	"github.com/getsentry/sandbox-controller/internal/vercel"
)

// A claim ends with the member object deleted while its Vercel sandbox
// carries the claimant's owner tags: the member's finalizer leaves it with a
// Normal HandedOver event. Every other sandbox tagged for someone else still
// gets the OwnedElsewhere warning.
var _ = Describe("SandboxPool hand-over", func() {
	var ns string
	ctx := context.Background()
	BeforeEach(func() { ns = newNamespace() })

	// retag gives the Vercel sandbox name the owner tags of uid.
	retag := func(name string, uid types.UID) {
		GinkgoHelper()
		_, err := vc.UpdateSandbox(ctx, name, vercel.UpdateSandboxRequest{Tags: controllers.OwnerTags(clusterID, uid)}, false)
		Expect(err).NotTo(HaveOccurred())
	}
	gone := func(key types.NamespacedName) func() bool {
		return func() bool { return apierrors.IsNotFound(k8sClient.Get(ctx, key, &sandboxv1.Sandbox{})) }
	}
	warnings := func(key types.NamespacedName) func() []string {
		return func() []string {
			var out []string
			for _, e := range eventsFor(key) {
				if strings.HasPrefix(e, "Warning ") {
					out = append(out, e)
				}
			}
			return out
		}
	}

	It("deletes a claimed member quietly: a Normal HandedOver event and no warning", func() {
		key := newPool(ns, "warm", 1, poolTemplate())
		member := waitPoolReady(key, 1)[0]
		mkey := client.ObjectKeyFromObject(&member)
		c := claimant(ns, "conversation", "warm", poolTemplate())
		sbx := waitReady(c)
		Eventually(gone(mkey)).Should(BeTrue())
		expectEvent(mkey, "Normal HandedOver: Left Vercel sandbox "+member.Status.VercelName+" to Sandbox conversation, which claimed this member")
		Consistently(warnings(mkey), 2*time.Second).Should(BeEmpty())
		Expect(vercelExists(sbx.Status.VercelName)).To(BeTrue())
	})

	It("still warns when a member's sandbox is tagged for anyone but the claimant that marked it, and for a non-member", func() {
		key := newPool(ns, "warm", 2, poolTemplate())
		members := waitPoolReady(key, 2)
		// Paused, the pool neither deletes the marked members as orphans
		// nor replaces them: the spec deletes them itself.
		p := getPool(key)
		p.Annotations = map[string]string{sandboxv1.AnnotationPaused: "true"}
		Expect(k8sClient.Update(ctx, p)).To(Succeed())

		By("a member marked for uid-a whose sandbox is tagged for uid-a was handed over")
		handed := members[0].DeepCopy()
		won, err := controllers.MarkMember(k8sClient, "a", "uid-a", handed, "")
		Expect(err).NotTo(HaveOccurred())
		Expect(won).To(BeTrue())
		retag(handed.Status.VercelName, "uid-a")
		Expect(k8sClient.Delete(ctx, handed)).To(Succeed())
		Eventually(gone(client.ObjectKeyFromObject(handed))).Should(BeTrue())
		expectEvent(client.ObjectKeyFromObject(handed), "Normal HandedOver: Left Vercel sandbox "+handed.Status.VercelName+" to Sandbox a")

		By("a member marked for uid-a whose sandbox is tagged for uid-b was not")
		stray := members[1].DeepCopy()
		won, err = controllers.MarkMember(k8sClient, "a", "uid-a", stray, "")
		Expect(err).NotTo(HaveOccurred())
		Expect(won).To(BeTrue())
		retag(stray.Status.VercelName, "uid-b")
		Expect(k8sClient.Delete(ctx, stray)).To(Succeed())
		Eventually(gone(client.ObjectKeyFromObject(stray))).Should(BeTrue())
		expectEvent(client.ObjectKeyFromObject(stray), "Warning OwnedElsewhere: Left Vercel sandbox "+stray.Status.VercelName+" alone: it is owned by the object with UID uid-b")
		Expect(eventsFor(client.ObjectKeyFromObject(stray))).NotTo(ContainElement(ContainSubstring("HandedOver")))

		By("a Sandbox outside any pool, labelled as if marked, whose sandbox is tagged for that UID")
		plain := newSandbox(ns, "plain", poolTemplate())
		pkey := client.ObjectKeyFromObject(plain)
		plain = waitReady(pkey)
		plain.Labels = map[string]string{sandboxv1.LabelClaimedBy: "uid-c", sandboxv1.LabelPool: "warm"}
		Expect(k8sClient.Update(ctx, plain)).To(Succeed())
		retag(plain.Status.VercelName, "uid-c")
		Expect(k8sClient.Delete(ctx, plain)).To(Succeed())
		Eventually(gone(pkey)).Should(BeTrue())
		expectEvent(pkey, "Warning OwnedElsewhere: Left Vercel sandbox "+plain.Status.VercelName+" alone")
		Expect(eventsFor(pkey)).NotTo(ContainElement(ContainSubstring("HandedOver")))
		for _, name := range []string{handed.Status.VercelName, stray.Status.VercelName, plain.Status.VercelName} {
			Expect(vercelExists(name)).To(BeTrue(), "a sandbox tagged for another object was deleted")
		}
	})
})
