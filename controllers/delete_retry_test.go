package controllers_test

import (
	"context"
	"net/http"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	sandboxv1 "github.com/getsentry/sandbox-controller/api/v1alpha1"
)

// A finalizer never gives up: answers that are terminal for a spec (400,
// 422) are retried with backoff on the delete path, reported in Synced.
var _ = Describe("Sandbox delete", func() {
	ctx := context.Background()

	It("retries a delete Vercel refuses as invalid, and says so while it does", func() {
		ns := newNamespace()
		key := types.NamespacedName{Namespace: ns, Name: "refused"}
		newSandbox(ns, "refused", sandboxv1.SandboxSpec{Source: runtimeSource("node24")})
		sbx := waitReady(key)
		emu.Faults().FailNext("deleteSandbox", 2, http.StatusBadRequest)
		Expect(k8sClient.Delete(ctx, sbx)).To(Succeed())
		Eventually(func(g Gomega) *metav1.Condition {
			return meta.FindStatusCondition(getSandbox(key).Status.Conditions, sandboxv1.ConditionSynced)
		}).Should(And(Not(BeNil()), HaveField("Status", metav1.ConditionFalse)))
		Eventually(func() bool { return apierrors.IsNotFound(k8sClient.Get(ctx, key, &sandboxv1.Sandbox{})) }).Should(BeTrue())
		_, stillThere := emu.Sandbox(sbx.Status.VercelName)
		Expect(stillThere).To(BeFalse())
	})
})
