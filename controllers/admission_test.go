package controllers_test

import (
	"context"
	"path/filepath"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	sandboxv1 "github.com/getsentry/sandbox-controller/api/v1alpha1"
	"github.com/getsentry/sandbox-controller/localstack/admissionpolicy"
)

// The suite installs config/admission, as `make install` does. These specs
// check what it adds, and that the controllers do without it.
var _ = Describe("The finalizer admission policy", func() {
	ctx := context.Background()
	var ns string
	BeforeEach(func() { ns = newNamespace() })

	// aChain creates a Sandbox, a capture of it and a fork of one child from
	// the capture: one object of each kind, each of which becomes Ready.
	aChain := func() (*sandboxv1.Sandbox, *sandboxv1.SandboxSnapshot, *sandboxv1.SandboxFork) {
		sbx := newSandbox(ns, "source", sandboxv1.SandboxSpec{Source: runtimeSource("node24")})
		snap := newSnapshot(ns, "capture", sandboxv1.SandboxSnapshotSpec{
			Source:            sandboxv1.SandboxSnapshotSource{SandboxRef: &sandboxv1.LocalObjectReference{Name: "source"}},
			KeepSourceRunning: true, // so the source is Ready again after the capture
		})
		fork := &sandboxv1.SandboxFork{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "fork"},
			Spec: sandboxv1.SandboxForkSpec{
				Source:   sandboxv1.SandboxForkSource{SnapshotRef: &sandboxv1.LocalObjectReference{Name: "capture"}},
				Replicas: ptr.To[int32](1),
			},
		}
		Expect(k8sClient.Create(ctx, fork)).To(Succeed())
		return sbx, snap, fork
	}
	expectReadyAndDeleted := func(objs ...client.Object) {
		for _, o := range objs {
			Eventually(func(g Gomega) {
				g.Expect(k8sClient.Get(ctx, client.ObjectKeyFromObject(o), o)).To(Succeed())
				var conds []metav1.Condition
				switch t := o.(type) {
				case *sandboxv1.Sandbox:
					conds = t.Status.Conditions
				case *sandboxv1.SandboxSnapshot:
					conds = t.Status.Conditions
				case *sandboxv1.SandboxFork:
					conds = t.Status.Conditions
				}
				g.Expect(meta.IsStatusConditionTrue(conds, sandboxv1.ConditionReady)).To(BeTrue(), "%T %s", o, o.GetName())
			}, 60*time.Second).Should(Succeed())
		}
		for _, o := range objs {
			Expect(k8sClient.Delete(ctx, o)).To(Succeed())
		}
		for _, o := range objs {
			Eventually(func() bool {
				return apierrors.IsNotFound(k8sClient.Get(ctx, client.ObjectKeyFromObject(o), o))
			}, 60*time.Second).Should(BeTrue(), "%T %s deleted", o, o.GetName())
		}
	}

	It("adds each kind's finalizer at create, next to the client's own", func() {
		sbx, snap, fork := aChain()
		Expect(sbx.Finalizers).To(ConsistOf(sandboxv1.SandboxFinalizer))
		Expect(snap.Finalizers).To(ConsistOf(sandboxv1.SandboxSnapshotFinalizer))
		Expect(fork.Finalizers).To(ConsistOf(sandboxv1.SandboxForkFinalizer))
		own := &sandboxv1.Sandbox{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "own", Finalizers: []string{"example.com/mine"}},
			Spec:       sandboxv1.SandboxSpec{Source: runtimeSource("node24")},
		}
		Expect(k8sClient.Create(ctx, own, client.DryRunAll)).To(Succeed())
		Expect(own.Finalizers).To(ConsistOf("example.com/mine", sandboxv1.SandboxFinalizer))
		expectReadyAndDeleted(fork, snap, sbx)
	})

	It("is optional: without it the controllers add the finalizers themselves", func() {
		binding := &admissionregistrationv1.MutatingAdmissionPolicyBinding{}
		Expect(k8sClient.Get(ctx, types.NamespacedName{Name: "finalizers.sandbox.sentry.io"}, binding)).To(Succeed())
		Expect(k8sClient.Delete(ctx, binding)).To(Succeed())
		DeferCleanup(func() {
			Expect(admissionpolicy.Install(ctx, cfg, filepath.Join(repoRoot, "config", "admission"), "default")).To(Succeed())
		})
		// The API server drops the binding asynchronously.
		Eventually(func(g Gomega) []string {
			probe := &sandboxv1.Sandbox{
				ObjectMeta: metav1.ObjectMeta{Namespace: ns, GenerateName: "probe-"},
				Spec:       sandboxv1.SandboxSpec{Source: runtimeSource("node24")},
			}
			g.Expect(k8sClient.Create(ctx, probe, client.DryRunAll)).To(Succeed())
			return probe.Finalizers
		}).Should(BeEmpty())

		sbx, snap, fork := aChain()
		Expect(sbx.Finalizers).To(BeEmpty())
		Expect(snap.Finalizers).To(BeEmpty())
		Expect(fork.Finalizers).To(BeEmpty())
		for _, o := range []client.Object{sbx, snap, fork} {
			Eventually(func(g Gomega) []string {
				g.Expect(k8sClient.Get(ctx, client.ObjectKeyFromObject(o), o)).To(Succeed())
				return o.GetFinalizers()
			}).Should(HaveLen(1), "%T %s", o, o.GetName())
		}
		expectReadyAndDeleted(fork, snap, sbx)
	})
})
