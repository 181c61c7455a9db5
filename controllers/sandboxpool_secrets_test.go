package controllers_test

import (
	"context"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	sandboxv1 "github.com/getsentry/sandbox-controller/api/v1alpha1"
)

// A claim takes a running session whose env was read from Secrets when the
// member was created. Vercel cannot change a running session's environment,
// so a claimant must not report the Secrets current when they changed since.
var _ = Describe("SandboxPool claim with Secret env", func() {
	It("reports the claimed session stale when the Secret rotated while the member waited", func() {
		ctx := context.Background()
		ns := newNamespace()
		const oldValue, newValue = "key-PoolOldEnv1", "key-PoolNewEnv2"
		Expect(k8sClient.Create(ctx, &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "api"},
			Data:       map[string][]byte{"key": []byte(oldValue)},
		})).To(Succeed())
		spec := poolTemplate()
		spec.Env = []sandboxv1.EnvVar{{Name: "API_KEY", ValueFrom: &sandboxv1.EnvVarSource{SecretKeyRef: sandboxv1.SecretKeySelector{Name: "api", Key: "key"}}}}
		key := newPool(ns, "warm", 2, spec)
		waitPoolReady(key, 2)
		secretsCurrent := func(k types.NamespacedName) *metav1.Condition {
			return meta.FindStatusCondition(getSandbox(k).Status.Conditions, sandboxv1.ConditionSecretsCurrent)
		}

		By("a claim before any rotation has the current values")
		early := claimant(ns, "early", "warm", spec)
		waitReady(early)
		Expect(claimedCondition(early)).To(HaveField("Status", metav1.ConditionTrue))
		Expect(envIs(ctx, getSandbox(early).Status.SessionID, "API_KEY", oldValue)).To(BeTrue())
		Consistently(func() *metav1.Condition { return secretsCurrent(early) }, 2*time.Second).Should(And(
			Not(BeNil()), HaveField("Status", metav1.ConditionTrue)))

		By("rotating the Secret while the members wait")
		members := waitPoolReady(key, 2)
		sec := &corev1.Secret{}
		Expect(k8sClient.Get(ctx, types.NamespacedName{Namespace: ns, Name: "api"}, sec)).To(Succeed())
		sec.Data["key"] = []byte(newValue)
		Expect(k8sClient.Update(ctx, sec)).To(Succeed())
		for _, m := range members {
			Eventually(func() *metav1.Condition { return secretsCurrent(client.ObjectKeyFromObject(&m)) }).Should(
				HaveField("Reason", sandboxv1.ReasonSecretRotated), "the member sees its own session go stale")
		}

		c := claimant(ns, "conversation", "warm", spec)
		sbx := waitReady(c)
		Expect(claimedCondition(c)).To(HaveField("Status", metav1.ConditionTrue))
		session := sbx.Status.SessionID
		Expect(sbx.Status.Claim.Member).To(BeElementOf(members[0].Name, members[1].Name))
		Expect(envIs(ctx, session, "API_KEY", oldValue)).To(BeTrue(), "the claimed session runs with the value the member started with")
		Eventually(func(g Gomega) {
			s := getSandbox(c)
			cond := meta.FindStatusCondition(s.Status.Conditions, sandboxv1.ConditionSecretsCurrent)
			g.Expect(cond).NotTo(BeNil())
			g.Expect(cond.Status).To(Equal(metav1.ConditionFalse), "%s: %s", cond.Reason, cond.Message)
			g.Expect(cond.Reason).To(Equal(sandboxv1.ReasonSecretRotated))
			g.Expect(s.Status.Secrets.StaleSession).To(Equal(session))
		}).Should(Succeed())
	})
})
