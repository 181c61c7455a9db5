package controllers_test

import (
	"context"
	"strings"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	sandboxv1 "github.com/getsentry/sandbox-controller/api/v1alpha1"
)

// A Sandbox that cannot start for want of a Secret says so where a user
// looks first, in Ready: the reason, the Secret, the key and the field that
// needs it — not "Creating" for ever.
var _ = Describe("A Sandbox waiting for a Secret", func() {
	ctx := context.Background()

	It("names the Secret, the key and the environment variable in Ready, and starts once the key exists", func() {
		ns := newNamespace()
		sbx := newSandbox(ns, "needs-db", sandboxv1.SandboxSpec{
			Source: runtimeSource("node24"),
			Env: []sandboxv1.EnvVar{{Name: "DB_PASSWORD", ValueFrom: &sandboxv1.EnvVarSource{
				SecretKeyRef: sandboxv1.SecretKeySelector{Name: "db", Key: "password"},
			}}},
		})
		key := client.ObjectKeyFromObject(sbx)

		Eventually(readyCondition(key)).Should(And(
			HaveField("Status", metav1.ConditionFalse),
			HaveField("Reason", sandboxv1.ReasonSecretNotFound),
			HaveField("Message", And(ContainSubstring(`Secret "db" not found`), ContainSubstring("DB_PASSWORD")))))

		// The Secret exists, but without the key.
		sec := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "db"}, Data: map[string][]byte{"user": []byte("app")}}
		Expect(k8sClient.Create(ctx, sec)).To(Succeed())
		Eventually(readyCondition(key)).Should(And(
			HaveField("Status", metav1.ConditionFalse),
			HaveField("Reason", sandboxv1.ReasonSecretKeyNotFound),
			HaveField("Message", And(ContainSubstring(`key "password" not found in Secret "db"`), ContainSubstring("DB_PASSWORD")))))
		Expect(getSandbox(key).Status.Phase).NotTo(Equal(sandboxv1.SandboxRunning))

		sec.Data["password"] = []byte("s3cr3t-value-never-shown")
		Expect(k8sClient.Update(ctx, sec)).To(Succeed())
		got := waitReady(key)
		Expect(got.Status.Phase).To(Equal(sandboxv1.SandboxRunning))
		for _, c := range got.Status.Conditions {
			Expect(strings.Contains(c.Message, "s3cr3t-value-never-shown")).To(BeFalse(), "condition %s shows the Secret's value", c.Type)
		}
	})
})
