package controllers_test

import (
	"context"
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
	"github.com/getsentry/sandbox-controller/localstack"
)

// Which credentials an object uses is decided once, on its first reconcile,
// and recorded in the class label; never inferred from what a tenant can
// produce. The red-team review reached the manager's own credentials past a
// default class that excludes the namespace: a pause (Paused=True) or the
// refusal itself (ClassNotAllowed) gave the object a condition, and an
// object with conditions but no label counted as "reconciled before classes
// existed".
var _ = Describe("The class of an object", func() {
	ctx := context.Background()

	// defaultClassFor creates a default class that allows only namespaces
	// labelled tier=allowed, and a namespace it excludes.
	excludedByDefault := func() string {
		newClass("default", "tok_default", "team_default", "prj_default", map[string]string{"tier": "allowed"},
			map[string]string{sandboxv1.AnnotationDefaultClass: "true"})
		return newNamespace()
	}

	// stillRefused checks that the object stays refused by the default class
	// and reaches no Vercel project, across a reconcile it asks for.
	stillRefused := func(key types.NamespacedName, uid types.UID) {
		GinkgoHelper()
		Eventually(readyCondition(key)).Should(withStatus(sandboxv1.ReasonClassNotAllowed))
		annotate(key, sandboxv1.AnnotationReconcileRequestedAt, time.Now().Format(time.RFC3339Nano))
		Consistently(func(g Gomega) {
			g.Expect(readyCondition(key)(g)).To(withStatus(sandboxv1.ReasonClassNotAllowed))
			g.Expect(remoteWithUID(uid)).To(BeFalse(), "a Vercel sandbox was created for a refused object")
		}, 3*time.Second, 200*time.Millisecond).Should(Succeed())
		Expect(getSandbox(key).Labels).To(HaveKeyWithValue(sandboxv1.LabelClass, "default"))
		Expect(remoteNames(localstack.TeamID, localstack.ProjectID)).NotTo(ContainElement(controllers.VercelName(key.Namespace, key.Name, uid)))
	}

	It("stays refused after its refusal wrote a condition", func() {
		ns := excludedByDefault()
		sbx := newSandbox(ns, "refused", sandboxv1.SandboxSpec{Source: runtimeSource("node24")})
		stillRefused(client.ObjectKeyFromObject(sbx), sbx.UID)
		Expect(k8sClient.Delete(ctx, sbx)).To(Succeed())
	})

	It("pins the class before a pause, so resuming does not reach the manager's credentials", func() {
		ns := excludedByDefault()
		sbx := &sandboxv1.Sandbox{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "paused-first", Annotations: map[string]string{sandboxv1.AnnotationPaused: "true"}},
			Spec:       sandboxv1.SandboxSpec{Source: runtimeSource("node24")},
		}
		Expect(k8sClient.Create(ctx, sbx)).To(Succeed())
		key := client.ObjectKeyFromObject(sbx)
		Eventually(sandboxCondition(key, sandboxv1.ConditionPaused)).Should(And(Not(BeNil()), HaveField("Status", metav1.ConditionTrue)))
		Expect(getSandbox(key).Labels).To(HaveKeyWithValue(sandboxv1.LabelClass, "default"), "pinned while paused")
		annotate(key, sandboxv1.AnnotationPaused, "")
		stillRefused(key, sbx.UID)
		Expect(k8sClient.Delete(ctx, sbx)).To(Succeed())
	})

	It("keeps an object created before the default class on the manager's credentials, and makes its fork say why it cannot follow", func() {
		ns := newNamespace()
		old := newSandbox(ns, "old", sandboxv1.SandboxSpec{Source: runtimeSource("node24")})
		oldSt := waitReady(client.ObjectKeyFromObject(old))
		// Timestamps have a resolution of one second, and an object created
		// in the same second as the default class counts as newer.
		time.Sleep(time.Until(old.CreationTimestamp.Add(1100 * time.Millisecond)))
		newClass("default", "tok_default", "team_default", "prj_default", nil, map[string]string{sandboxv1.AnnotationDefaultClass: "true"})
		annotate(client.ObjectKeyFromObject(old), sandboxv1.AnnotationReconcileRequestedAt, time.Now().Format(time.RFC3339Nano))
		Eventually(func() map[string]string { return getSandbox(client.ObjectKeyFromObject(old)).Labels }).Should(
			HaveKeyWithValue(sandboxv1.LabelClass, ""), "no class is pinned as explicitly as a class once classes exist")

		fork := &sandboxv1.SandboxFork{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "of-old"},
			Spec: sandboxv1.SandboxForkSpec{
				Source:   sandboxv1.SandboxForkSource{SandboxRef: &sandboxv1.LocalObjectReference{Name: "old"}},
				Replicas: ptr.To[int32](1),
			},
		}
		Expect(k8sClient.Create(ctx, fork)).To(Succeed())
		Eventually(func(g Gomega) *metav1.Condition {
			f := &sandboxv1.SandboxFork{}
			g.Expect(k8sClient.Get(ctx, client.ObjectKeyFromObject(fork), f)).To(Succeed())
			return meta.FindStatusCondition(f.Status.Conditions, sandboxv1.ConditionReady)
		}).Should(And(withStatus(sandboxv1.ReasonClassMismatch),
			HaveField("Message", ContainSubstring("none (the manager's own credentials)"))))
		Expect(remoteNames("team_default", "prj_default")).To(BeEmpty())
		Expect(remoteNames(localstack.TeamID, localstack.ProjectID)).To(ContainElement(oldSt.Status.VercelName))

		Expect(k8sClient.Delete(ctx, fork)).To(Succeed())
		Expect(k8sClient.Delete(ctx, old)).To(Succeed())
		Eventually(func() bool { return remoteWithUID(old.UID) }).Should(BeFalse())
	})
})

var _ = Describe("A class Sandbox deleted between its create and the status write", func() {
	ctx := context.Background()

	It("has its sandbox deleted in the class's project, not looked for in the manager's", func() {
		newClass("crash", "tok_crash", "team_crash", "prj_crash", nil, nil)
		ns := newNamespace()
		sbx := &sandboxv1.Sandbox{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "unrecorded", Annotations: map[string]string{sandboxv1.AnnotationPaused: "true"}},
			Spec:       sandboxv1.SandboxSpec{Source: runtimeSource("node24"), ClassName: ptr.To("crash")},
		}
		Expect(k8sClient.Create(ctx, sbx)).To(Succeed())
		key := client.ObjectKeyFromObject(sbx)
		Eventually(sandboxCondition(key, sandboxv1.ConditionPaused)).ShouldNot(BeNil())
		// What the operator's create would have made in the class's project
		// before its status write was lost.
		api, err := vercel.New(vercel.Config{BaseURL: emu.URL(), Token: "tok_crash", TeamID: "team_crash", ProjectID: "prj_crash", MaxRetries: -1})
		Expect(err).NotTo(HaveOccurred())
		vname := controllers.VercelName(ns, sbx.Name, sbx.UID)
		_, err = api.CreateSandbox(ctx, vercel.CreateSandboxRequest{Name: vname, Runtime: "node24", Tags: controllers.OwnerTags(clusterID, sbx.UID)})
		Expect(err).NotTo(HaveOccurred())
		Expect(remoteNames("team_crash", "prj_crash")).To(ContainElement(vname))
		Expect(getSandbox(key).Status.VercelName).To(BeEmpty())

		Expect(k8sClient.Delete(ctx, sbx)).To(Succeed())
		Eventually(func() bool { return apierrors.IsNotFound(k8sClient.Get(ctx, key, &sandboxv1.Sandbox{})) }).Should(BeTrue())
		Expect(remoteNames("team_crash", "prj_crash")).NotTo(ContainElement(vname), "the class's sandbox leaked")
	})
})
