package controllers_test

import (
	"context"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	sandboxv1 "github.com/getsentry/sandbox-controller/api/v1alpha1"
)

// A class Secret is spelt as the manager's own (token, team-id,
// project-id); the first spelling (teamId, projectId) still works, with a
// Warning event naming the keys to rename, and a missing key is reported as
// a missing key.
var _ = Describe("A SandboxClass's Secret keys", func() {
	ctx := context.Background()

	classWithSecret := func(name string, data map[string]string) {
		GinkgoHelper()
		ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: classSecretNamespace}}
		_ = k8sClient.Create(ctx, ns)
		sec := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: classSecretNamespace, Name: name + "-credentials"}, StringData: data}
		Expect(k8sClient.Create(ctx, sec)).To(Succeed())
		cl := &sandboxv1.SandboxClass{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec:       sandboxv1.SandboxClassSpec{CredentialsSecretRef: sandboxv1.ClassSecretReference{Namespace: classSecretNamespace, Name: sec.Name}},
		}
		Expect(k8sClient.Create(ctx, cl)).To(Succeed())
		DeferCleanup(func() {
			Expect(k8sClient.Delete(ctx, cl)).To(Succeed())
			Expect(k8sClient.Delete(ctx, sec)).To(Succeed())
		})
	}

	It("reads the deprecated spelling and warns once to rename it", func() {
		classWithSecret("old-keys", map[string]string{"token": "tok_keys", "teamId": "team_keys", "projectId": "prj_keys"})
		Eventually(classCondition("old-keys", sandboxv1.ConditionCredentialsValid)).Should(And(Not(BeNil()), HaveField("Status", metav1.ConditionTrue)))
		expectEvent(types.NamespacedName{Namespace: metav1.NamespaceDefault, Name: "old-keys"},
			`Warning DeprecatedSecretKey: Secret sandbox-classes/old-keys-credentials spells keys the deprecated way; rename "teamId" to "team-id" and "projectId" to "project-id"`)
	})

	It("reports a key found under neither spelling as that key missing", func() {
		classWithSecret("no-project", map[string]string{"token": "tok_keys", "team-id": "team_keys"})
		Eventually(classCondition("no-project", sandboxv1.ConditionCredentialsValid)).Should(And(
			withStatus(sandboxv1.ReasonSecretKeyNotFound),
			HaveField("Message", ContainSubstring(`key "project-id" not found in Secret sandbox-classes/no-project-credentials`))))
	})
})
