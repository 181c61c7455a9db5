package controllers_test

import (
	"context"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	sandboxv1 "github.com/getsentry/sandbox-controller/api/v1alpha1"
)

// The paused annotation works on every kind: a paused SandboxSnapshot
// captures nothing and a paused SandboxFork creates no child until the
// annotation goes.
var _ = Describe("The paused annotation", func() {
	ctx := context.Background()

	pausedCondition := func(o client.Object, conds func() []metav1.Condition) func(Gomega) *metav1.Condition {
		return func(g Gomega) *metav1.Condition {
			g.Expect(k8sClient.Get(ctx, client.ObjectKeyFromObject(o), o)).To(Succeed())
			return meta.FindStatusCondition(conds(), sandboxv1.ConditionPaused)
		}
	}
	unpause := func(o client.Object) {
		Expect(k8sClient.Patch(ctx, o, client.RawPatch(types.MergePatchType,
			[]byte(`{"metadata":{"annotations":{"`+sandboxv1.AnnotationPaused+`":null}}}`)))).To(Succeed())
	}

	It("holds a SandboxSnapshot and a SandboxFork until it is removed", func() {
		ns := newNamespace()
		newSandbox(ns, "source", sandboxv1.SandboxSpec{Source: runtimeSource("node24")})
		waitReady(types.NamespacedName{Namespace: ns, Name: "source"})
		paused := map[string]string{sandboxv1.AnnotationPaused: "true"}

		snap := &sandboxv1.SandboxSnapshot{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "capture", Annotations: paused},
			Spec: sandboxv1.SandboxSnapshotSpec{
				Source:            sandboxv1.SandboxSnapshotSource{SandboxRef: &sandboxv1.LocalObjectReference{Name: "source"}},
				KeepSourceRunning: true,
			},
		}
		Expect(k8sClient.Create(ctx, snap)).To(Succeed())
		Eventually(pausedCondition(snap, func() []metav1.Condition { return snap.Status.Conditions })).Should(
			And(Not(BeNil()), HaveField("Status", metav1.ConditionTrue), HaveField("Reason", sandboxv1.ReasonReconcilePaused)))
		// Nothing captured: no snapshot id, and the source's session is the
		// one it had (a capture stops it).
		session := getSandbox(types.NamespacedName{Namespace: ns, Name: "source"}).Status.SessionID
		Consistently(func(g Gomega) {
			g.Expect(getSnapshotObj(client.ObjectKeyFromObject(snap)).Status.SnapshotID).To(BeEmpty())
			g.Expect(getSandbox(types.NamespacedName{Namespace: ns, Name: "source"}).Status.SessionID).To(Equal(session))
		}, 2*pollInterval).Should(Succeed())

		unpause(snap)
		waitSnapshotReady(client.ObjectKeyFromObject(snap))
		Expect(meta.FindStatusCondition(getSnapshotObj(client.ObjectKeyFromObject(snap)).Status.Conditions, sandboxv1.ConditionPaused)).To(BeNil())

		fork := &sandboxv1.SandboxFork{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "fork", Annotations: paused},
			Spec: sandboxv1.SandboxForkSpec{
				Source:   sandboxv1.SandboxForkSource{SnapshotRef: &sandboxv1.LocalObjectReference{Name: "capture"}},
				Replicas: ptr.To[int32](2),
			},
		}
		Expect(k8sClient.Create(ctx, fork)).To(Succeed())
		Eventually(pausedCondition(fork, func() []metav1.Condition { return fork.Status.Conditions })).Should(
			And(Not(BeNil()), HaveField("Status", metav1.ConditionTrue)))
		children := func() int {
			var list sandboxv1.SandboxList
			Expect(k8sClient.List(ctx, &list, client.InNamespace(ns), client.MatchingLabels{sandboxv1.LabelFork: "fork"})).To(Succeed())
			return len(list.Items)
		}
		Consistently(children, pollInterval).Should(BeZero())

		unpause(fork)
		Eventually(children).Should(Equal(2))
		Eventually(func(g Gomega) int32 {
			g.Expect(k8sClient.Get(ctx, client.ObjectKeyFromObject(fork), fork)).To(Succeed())
			return fork.Status.ReadyReplicas
		}, "60s").Should(Equal(int32(2)))
	})
})
