package controllers_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	sandboxv1 "github.com/getsentry/sandbox-controller/api/v1alpha1"
)

// Vercel rejecting the manager's token is said on every object it touches,
// without the token, and retried with backoff until a good token works.
var _ = Describe("Rejected credentials", func() {
	ctx := context.Background()

	It("reports them on Ready, Synced, lastError and an event, backs off, and recovers", func() {
		ns := newNamespace()
		key := types.NamespacedName{Namespace: ns, Name: "creds"}
		newSandbox(ns, "creds", sandboxv1.SandboxSpec{Source: runtimeSource("node24")})
		waitReady(key)

		good := emu.Token()
		emu.SetToken("tok_issued_after_revocation")
		DeferCleanup(func() { emu.SetToken(good) })
		requestReconcile(key, "revoked")

		rejected := And(Not(BeNil()), HaveField("Status", metav1.ConditionFalse), HaveField("Reason", sandboxv1.ReasonUnauthorized),
			HaveField("Message", HavePrefix("Vercel rejected the credentials (403 Forbidden)")))
		Eventually(readyCondition(key)).Should(rejected)
		sbx := getSandbox(key)
		Expect(meta.FindStatusCondition(sbx.Status.Conditions, sandboxv1.ConditionSynced)).To(rejected)
		Expect(sbx.Status.LastError).To(And(Not(BeNil()), HaveField("Reason", sandboxv1.ReasonUnauthorized),
			HaveField("Message", HavePrefix("Vercel rejected the credentials (403 Forbidden)"))))
		expectEvent(key, "Warning Unauthorized: Vercel rejected the credentials (403 Forbidden)")
		Expect(sbx.Status.LastError.Message).NotTo(ContainSubstring(good))

		// No hot loop: the per-object backoff (1 s, 2 s, 4 s, …) leaves a
		// handful of calls in eight seconds, and one event.
		path := "/v2/sandboxes/" + sbx.Status.VercelName
		before := len(recorder.requests(http.MethodGet, path))
		time.Sleep(8 * time.Second)
		Expect(len(recorder.requests(http.MethodGet, path)) - before).To(BeNumerically("<=", 5))
		n := 0
		for _, e := range eventsFor(key) {
			if strings.HasPrefix(e, "Warning Unauthorized") {
				n++
			}
		}
		Expect(n).To(Equal(1))

		// A deleted Sandbox is kept while the token is rejected, and says why:
		// the refused delete itself (phase Deleting), not the Synced condition
		// the reconciles before the delete left.
		Expect(k8sClient.Delete(ctx, sbx)).To(Succeed())
		Eventually(func(g Gomega) {
			got := &sandboxv1.Sandbox{}
			g.Expect(k8sClient.Get(ctx, key, got)).To(Succeed())
			g.Expect(got.Status.Phase).To(Equal(sandboxv1.SandboxDeleting))
			g.Expect(meta.FindStatusCondition(got.Status.Conditions, sandboxv1.ConditionSynced)).To(rejected)
		}).Should(Succeed())
		_, stillThere := emu.Sandbox(sbx.Status.VercelName)
		Expect(stillThere).To(BeTrue())

		emu.SetToken(good)
		// A Sandbox being deleted may finish before the request reaches it:
		// gone is what the request is for.
		Eventually(func() error {
			if err := requestReconcileOnce(key, "restored"); !apierrors.IsNotFound(err) {
				return err
			}
			return nil
		}).Should(Succeed())
		// Said as an error, so that a timeout shows what held the object.
		Eventually(func() error {
			got := &sandboxv1.Sandbox{}
			if err := k8sClient.Get(ctx, key, got); err != nil {
				return client.IgnoreNotFound(err)
			}
			return fmt.Errorf("still there: phase %s, finalizers %v, Synced %+v, lastError %+v",
				got.Status.Phase, got.Finalizers, meta.FindStatusCondition(got.Status.Conditions, sandboxv1.ConditionSynced), got.Status.LastError)
		}).Should(Succeed())
		_, stillThere = emu.Sandbox(sbx.Status.VercelName)
		Expect(stillThere).To(BeFalse())
	})
})

// An object whose Vercel side is unreachable for good is released by an
// operator allowed to leave the Vercel sandbox behind, and by no one else.
var _ = Describe("Releasing a Sandbox whose Vercel side is unreachable", func() {
	ctx := context.Background()

	It("finishes the finalizer without the delete when the annotation is set, only by those allowed", func() {
		ns := newNamespace()
		key := types.NamespacedName{Namespace: ns, Name: "stranded"}
		newSandbox(ns, "stranded", sandboxv1.SandboxSpec{Source: runtimeSource("node24")})
		sbx := waitReady(key)
		emu.Faults().FailNext("deleteSandbox", 1_000_000, http.StatusServiceUnavailable)
		DeferCleanup(emu.Faults().Reset)
		Expect(k8sClient.Delete(ctx, sbx)).To(Succeed())
		Eventually(func() string {
			c := meta.FindStatusCondition(getSandbox(key).Status.Conditions, sandboxv1.ConditionSynced)
			if c == nil {
				return ""
			}
			return c.Reason
		}).Should(Equal(sandboxv1.ReasonTransient))

		// An editor of the namespace may not.
		out, err := kubectl("create", "role", "sandbox-editor", "-n", ns, "--verb=get,list,update,patch", "--resource=sandboxes.sandbox.sentry.io")
		Expect(err).NotTo(HaveOccurred(), out)
		out, err = kubectl("create", "rolebinding", "alice-edits", "-n", ns, "--role=sandbox-editor", "--user=alice")
		Expect(err).NotTo(HaveOccurred(), out)
		Eventually(func() string {
			out, _ := kubectl("annotate", "--as=alice", "-n", ns, "sandbox", "stranded", sandboxv1.AnnotationAbandonRemote+"=true")
			return out
		}).Should(ContainSubstring("needs update on sandboxes/abandon"))
		Consistently(func() bool {
			return apierrors.IsNotFound(k8sClient.Get(ctx, key, &sandboxv1.Sandbox{}))
		}, 2*time.Second).Should(BeFalse())

		// Bound to the abandoner role, she may.
		out, err = kubectl("create", "role", "abandoner", "-n", ns, "--verb=update", "--resource=sandboxes.sandbox.sentry.io/abandon")
		Expect(err).NotTo(HaveOccurred(), out)
		out, err = kubectl("create", "rolebinding", "alice-abandons", "-n", ns, "--role=abandoner", "--user=alice")
		Expect(err).NotTo(HaveOccurred(), out)
		Eventually(func() error {
			_, err := kubectl("annotate", "--as=alice", "-n", ns, "sandbox", "stranded", sandboxv1.AnnotationAbandonRemote+"=true")
			return err
		}).Should(Succeed())
		Eventually(func() bool { return apierrors.IsNotFound(k8sClient.Get(ctx, key, &sandboxv1.Sandbox{})) }).Should(BeTrue())
		expectEvent(key, "Warning AbandonedRemote: Released without deleting Vercel sandbox "+sbx.Status.VercelName)
		_, leftBehind := emu.Sandbox(sbx.Status.VercelName)
		Expect(leftBehind).To(BeTrue())
	})
})

// requestReconcile sets the reconcile-requested-at annotation, which makes
// the controller look at Vercel at once.
func requestReconcile(key types.NamespacedName, value string) {
	GinkgoHelper()
	Eventually(func() error { return requestReconcileOnce(key, value) }).Should(Succeed())
}

// requestReconcileOnce is one attempt of requestReconcile: a conflict or a
// NotFound is the caller's to handle.
func requestReconcileOnce(key types.NamespacedName, value string) error {
	sbx := &sandboxv1.Sandbox{}
	if err := k8sClient.Get(context.Background(), key, sbx); err != nil {
		return err
	}
	if sbx.Annotations == nil {
		sbx.Annotations = map[string]string{}
	}
	sbx.Annotations[sandboxv1.AnnotationReconcileRequestedAt] = value
	return k8sClient.Update(context.Background(), sbx)
}
