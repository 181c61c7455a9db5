package controllers_test

import (
	"context"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	sandboxv1 "github.com/getsentry/sandbox-controller/api/v1alpha1"
	"github.com/getsentry/sandbox-controller/internal/vercel"
)

// A capture intent (status.capture) is written by the controller before it
// asks Vercel, so that a restart finds the snapshot instead of taking it
// twice. Status is also writable by users with sandboxsnapshots/status: an
// intent naming another team's Vercel sandbox must make the controller
// neither snapshot that sandbox's session (which stops it) nor record that
// team's snapshot as its own (a Sandbox of the namespace could then boot
// from it through snapshotRef, which needs no permission on raw ids).
var _ = Describe("SandboxSnapshot capture intents in status", func() {
	ctx := context.Background()
	var ns string
	BeforeEach(func() { ns = newNamespace() })

	// forgeIntent writes a capture intent into key's status, as a user with
	// status rights may, and wakes the controller.
	forgeIntent := func(key types.NamespacedName, vercelName, session string) {
		GinkgoHelper()
		s := getSnapshotObj(key)
		patch := client.MergeFrom(s.DeepCopy())
		now := metav1.Now()
		s.Status.Capture = &sandboxv1.SnapshotCaptureStatus{VercelName: vercelName, SessionID: session, RequestedAt: &now}
		Expect(k8sClient.Status().Patch(ctx, s, patch)).To(Succeed())
		annotateSnapshot(key, sandboxv1.AnnotationReconcileRequestedAt, time.Now().Format(time.RFC3339Nano))
	}
	// waitingCapture is a capture of a paused Sandbox: it waits, with no
	// intent of its own.
	waitingCapture := func(name string) types.NamespacedName {
		GinkgoHelper()
		src := types.NamespacedName{Namespace: ns, Name: name + "-src"}
		newSandbox(ns, src.Name, sandboxv1.SandboxSpec{Source: runtimeSource("node24")})
		waitReady(src)
		setState(src, sandboxv1.SandboxStateStopped)
		Eventually(readyCondition(src)).Should(HaveField("Reason", sandboxv1.ReasonStopped))
		key := types.NamespacedName{Namespace: ns, Name: name}
		newSnapshot(ns, key.Name, sandboxv1.SandboxSnapshotSpec{
			Source: sandboxv1.SandboxSnapshotSource{SandboxRef: &sandboxv1.LocalObjectReference{Name: src.Name}},
		})
		Eventually(snapshotReason(key)).Should(Equal(sandboxv1.ReasonSourceNotRunning))
		return key
	}

	It("never snapshots another team's running session that a written intent names", func() {
		foreign, err := vc.CreateSandbox(ctx, vercel.CreateSandboxRequest{Name: ns + "-other-team", Runtime: "node24"})
		Expect(err).NotTo(HaveOccurred())
		session := foreign.Session.ID
		key := waitingCapture("cap")

		forgeIntent(key, ns+"-other-team", session)
		Consistently(func() int { return len(recorder.requests("POST", "/sessions/"+session+"/snapshot")) }, 5*time.Second).Should(BeZero(),
			"the controller snapshotted (and so stopped) a session of a sandbox that is not its source's")
		Expect(sessionStatus(session)).To(Equal(vercel.SessionRunning))
		Expect(getSnapshotObj(key).Status.Capture).To(BeNil(), "the foreign intent is forgotten")
	})

	It("never records another team's snapshot that a written intent leads to", func() {
		foreign, err := vc.CreateSandbox(ctx, vercel.CreateSandboxRequest{Name: ns + "-other-team", Runtime: "node24"})
		Expect(err).NotTo(HaveOccurred())
		theirs, err := vc.CreateSnapshot(ctx, foreign.Session.ID, nil)
		Expect(err).NotTo(HaveOccurred())
		key := waitingCapture("cap")

		forgeIntent(key, ns+"-other-team", foreign.Session.ID)
		Consistently(func() string { return getSnapshotObj(key).Status.SnapshotID }, 5*time.Second).Should(BeEmpty(),
			"another team's snapshot was recorded as this capture's: a Sandbox could boot from it")
		Expect(emuSnapshot(theirs.Snapshot.ID).Status).To(Equal(vercel.SnapshotCreated))
	})
})
