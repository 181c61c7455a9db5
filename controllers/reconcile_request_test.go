package controllers_test

import (
	"context"
	"net/http"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	sandboxv1 "github.com/getsentry/sandbox-controller/api/v1alpha1"
)

// The reconcile-requested-at annotation works on every kind as on a Sandbox:
// each new value makes the object reconcile, and status records the value
// handled; a paused object handles none.
var _ = Describe("The reconcile-requested-at annotation", func() {
	ctx := context.Background()

	// request sets the annotation with kubectl, as an operator would, and
	// returns the value.
	request := func(resource, ns string) string {
		GinkgoHelper()
		v := time.Now().UTC().Format(time.RFC3339Nano)
		out, err := kubectl("annotate", "--overwrite", "-n", ns, resource, sandboxv1.AnnotationReconcileRequestedAt+"="+v)
		Expect(err).NotTo(HaveOccurred(), out)
		return v
	}
	handled := func(resource, ns string) func() string {
		return func() string {
			out, err := kubectl("get", "-n", ns, resource, "-o", "jsonpath={.status.lastHandledReconcileAt}")
			Expect(err).NotTo(HaveOccurred(), out)
			return strings.TrimSpace(out)
		}
	}

	It("makes a SandboxSnapshot look at Vercel again, and records it", func() {
		ns := newNamespace()
		// An imported snapshot that Vercel does not have is Expired and no
		// longer polled: only a request makes it look again.
		gone := "snap_" + strings.Repeat("r", 28)
		newSnapshot(ns, "gone", sandboxv1.SandboxSnapshotSpec{Source: sandboxv1.SandboxSnapshotSource{SnapshotID: &gone}})
		key := types.NamespacedName{Namespace: ns, Name: "gone"}
		Eventually(func() sandboxv1.SandboxSnapshotPhase { return getSnapshotObj(key).Status.Phase }).Should(Equal(sandboxv1.SnapshotExpired))
		gets := func() int { return len(recorder.requests(http.MethodGet, "/snapshots/"+gone)) }
		before := gets()
		Consistently(gets, 2*pollInterval).Should(Equal(before))

		v := request("sbxsnap/gone", ns)
		Eventually(handled("sbxsnap/gone", ns)).Should(Equal(v))
		Expect(gets()).To(BeNumerically(">", before), "the request looked at Vercel")

		By("handling nothing while paused, and the request once unpaused")
		annotateObj(&sandboxv1.SandboxSnapshot{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "gone"}}, sandboxv1.AnnotationPaused, "true")
		Eventually(func() bool {
			return hasPaused(getSnapshotObj(key).Status.Conditions)
		}).Should(BeTrue())
		v2 := request("sbxsnap/gone", ns)
		Consistently(handled("sbxsnap/gone", ns), 2*pollInterval).Should(Equal(v))
		annotateObj(&sandboxv1.SandboxSnapshot{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "gone"}}, sandboxv1.AnnotationPaused, "")
		Eventually(handled("sbxsnap/gone", ns)).Should(Equal(v2))
	})

	It("makes a SandboxFork reconcile, and records it", func() {
		ns := newNamespace()
		Expect(k8sClient.Create(ctx, &sandboxv1.SandboxFork{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "idle"},
			Spec: sandboxv1.SandboxForkSpec{
				Source:                 sandboxv1.SandboxForkSource{SnapshotRef: &sandboxv1.LocalObjectReference{Name: "not-yet"}},
				Replicas:               ptr.To[int32](1),
				FailureDeadlineSeconds: ptr.To[int64](1),
			},
		})).To(Succeed())
		// Failed is final: nothing wakes the fork but a request.
		key := types.NamespacedName{Namespace: ns, Name: "idle"}
		Eventually(func() sandboxv1.SandboxForkPhase {
			f := &sandboxv1.SandboxFork{}
			Expect(k8sClient.Get(ctx, key, f)).To(Succeed())
			return f.Status.Phase
		}, 15*time.Second).Should(Equal(sandboxv1.ForkFailed))
		Expect(handled("sbxfork/idle", ns)()).To(BeEmpty())

		v := request("sbxfork/idle", ns)
		Eventually(handled("sbxfork/idle", ns)).Should(Equal(v))
		v2 := request("sbxfork/idle", ns)
		Eventually(handled("sbxfork/idle", ns)).Should(Equal(v2))
	})
})

func hasPaused(conds []metav1.Condition) bool {
	for _, c := range conds {
		if c.Type == sandboxv1.ConditionPaused && c.Status == metav1.ConditionTrue {
			return true
		}
	}
	return false
}
