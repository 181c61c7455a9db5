package controllers_test

import (
	"context"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	sandboxv1 "github.com/getsentry/sandbox-controller/api/v1alpha1"
	"github.com/getsentry/sandbox-controller/internal/vercel"
)

// These specs run in real time against the emulator: short idle windows, and
// the shortest deleteObjectAfterSeconds the API allows (60).
var _ = Describe("Sandbox end of life", func() {
	var ns string
	BeforeEach(func() { ns = newNamespace() })

	gone := func(key types.NamespacedName) func() bool {
		return func() bool {
			return apierrors.IsNotFound(k8sClient.Get(context.Background(), key, &sandboxv1.Sandbox{}))
		}
	}

	Context("spec.idle", func() {
		It("deletes the Sandbox, and its Vercel sandbox, when the idle window passes under action Delete", func() {
			key := types.NamespacedName{Namespace: ns, Name: "throwaway"}
			newSandbox(ns, key.Name, sandboxv1.SandboxSpec{
				Source:         runtimeSource("node24"),
				TimeoutSeconds: ptr.To[int64](4),
				Idle:           &sandboxv1.IdlePolicy{Action: sandboxv1.IdleDelete},
			})
			sbx := waitReady(key)
			name := sbx.Status.VercelName

			Eventually(gone(key), 30*time.Second).Should(BeTrue())
			expectEvent(key, "Normal IdleTimeout")
			expectEvent(key, "Normal IdleDelete")
			_, exists := emu.Sandbox(name)
			Expect(exists).To(BeFalse(), "deletionPolicy Delete deletes the Vercel sandbox with the object")
		})

		It("warns, then deletes a Sandbox that rested deleteObjectAfterSeconds, keeping its Vercel sandbox under Retain", func() {
			key := types.NamespacedName{Namespace: ns, Name: "forgotten"}
			newSandbox(ns, key.Name, sandboxv1.SandboxSpec{
				Source:         runtimeSource("node24"),
				TimeoutSeconds: ptr.To[int64](4),
				DeletionPolicy: sandboxv1.DeletionPolicyRetain,
				Idle:           &sandboxv1.IdlePolicy{DeleteObjectAfterSeconds: ptr.To[int64](60)},
			})
			name := waitReady(key).Status.VercelName

			By("going Idle as under action Stop")
			Eventually(readyCondition(key), 30*time.Second).Should(HaveField("Reason", sandboxv1.ReasonIdleTimeout))
			sbx := getSandbox(key)
			Expect(sbx.Status.Phase).To(Equal(sandboxv1.SandboxIdle))
			stoppedAt := sbx.Status.StoppedAt.Time

			By("warning 6 s (10% of 60 s) before the deletion")
			expectEventWithin(key, "Warning IdleDeletionSoon", 75*time.Second)
			Expect(time.Now()).To(BeTemporally(">=", stoppedAt.Add(54*time.Second-time.Second)), "the warning comes 10%% before, not earlier")
			Expect(gone(key)()).To(BeFalse())

			By("deleting the object 60 s after the stop")
			Eventually(gone(key), 20*time.Second).Should(BeTrue())
			Expect(time.Now()).To(BeTemporally(">=", stoppedAt.Add(60*time.Second-time.Second)))
			expectEvent(key, "Normal IdleDelete")
			remote, exists := emu.Sandbox(name)
			Expect(exists).To(BeTrue(), "deletionPolicy Retain keeps the Vercel sandbox")
			Expect(remote.Status).To(Equal(vercel.SessionStopped))
		})
	})
})

// expectEventWithin waits up to timeout for an event about key containing want.
func expectEventWithin(key types.NamespacedName, want string, timeout time.Duration) {
	GinkgoHelper()
	Eventually(func() []string { return eventsFor(key) }, timeout).Should(ContainElement(ContainSubstring(want)))
}
