package controllers_test

import (
	"context"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
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

		It("warns, then deletes a Sandbox that rested deleteObjectAfterSeconds, keeping its Vercel sandbox under Retain", longSpec, func() {
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

	Context("validation", func() {
		It("refuses OnNewerSnapshot without a snapshotRef, and deleteObjectAfterSeconds under 60", func() {
			err := k8sClient.Create(context.Background(), &sandboxv1.Sandbox{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "norefs"},
				Spec: sandboxv1.SandboxSpec{Source: runtimeSource("node24"), RecreatePolicy: sandboxv1.RecreateOnNewerSnapshot}})
			Expect(err).To(MatchError(ContainSubstring("spec.recreatePolicy OnNewerSnapshot needs spec.source.snapshotRef")))
			err = k8sClient.Create(context.Background(), &sandboxv1.Sandbox{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "hasty"},
				Spec: sandboxv1.SandboxSpec{Source: runtimeSource("node24"), Idle: &sandboxv1.IdlePolicy{DeleteObjectAfterSeconds: ptr.To[int64](59)}}})
			Expect(err).To(MatchError(ContainSubstring("deleteObjectAfterSeconds")))
		})
	})

	Context("spec.recreatePolicy", func() {
		ctx := context.Background()
		recreated := func(key types.NamespacedName) func(Gomega) *metav1.Condition {
			return func(g Gomega) *metav1.Condition {
				sbx := &sandboxv1.Sandbox{}
				g.Expect(k8sClient.Get(ctx, key, sbx)).To(Succeed())
				return meta.FindStatusCondition(sbx.Status.Conditions, sandboxv1.ConditionRecreated)
			}
		}
		// ownedSandboxes lists the live Vercel sandboxes created for sbx.
		ownedSandboxes := func(sbx *sandboxv1.Sandbox) []string {
			var out []string
			for _, s := range emu.LiveSandboxes() {
				if s.Tags["k8s-uid"] == string(sbx.UID) {
					out = append(out, s.Name)
				}
			}
			return out
		}

		It("recreates a sandbox deleted outside the operator under OnGone, counting it and saying why", func() {
			key := types.NamespacedName{Namespace: ns, Name: "phoenix"}
			newSandbox(ns, key.Name, sandboxv1.SandboxSpec{
				Source:         runtimeSource("node24"),
				RecreatePolicy: sandboxv1.RecreateOnGone,
				Setup:          []sandboxv1.SetupCommand{{Name: "mark", Command: "sh", Args: []string{"-c", "echo ran >> /vercel/sandbox/setup.log"}}},
			})
			sbx := waitReady(key)
			first, firstSession := sbx.Status.VercelName, sbx.Status.SessionID

			By("deleting its Vercel sandbox directly")
			_, err := vc.DeleteSandbox(ctx, first, false)
			Expect(err).NotTo(HaveOccurred())

			Eventually(recreated(key), 30*time.Second).Should(And(Not(BeNil()),
				HaveField("Status", metav1.ConditionTrue), HaveField("Reason", sandboxv1.ReasonNotFound),
				HaveField("Message", ContainSubstring("deleted outside the operator"))))
			sbx = waitReady(key)
			Expect(sbx.Status.Recreations).To(Equal(int32(1)))
			Expect(sbx.Status.VercelName).To(Equal(first + "-r1"))
			Expect(sbx.Status.SessionID).NotTo(Equal(firstSession))
			Expect(ownedSandboxes(sbx)).To(ConsistOf(first + "-r1"))
			log, err := vc.ReadFile(ctx, sbx.Status.SessionID, "/vercel/sandbox/setup.log", "")
			Expect(err).NotTo(HaveOccurred())
			Expect(string(log)).To(Equal("ran\n"), "setup runs on the new filesystem")
			expectEvent(key, "Warning Recreating")

			By("deleting the object, which deletes the new Vercel sandbox")
			Expect(k8sClient.Delete(ctx, sbx)).To(Succeed())
			Eventually(gone(key)).Should(BeTrue())
			Expect(ownedSandboxes(sbx)).To(BeEmpty())
		})

		It("recreates a non-persistent sandbox that ended when it should run again, deleting the old one", func() {
			key := types.NamespacedName{Namespace: ns, Name: "oneshot"}
			newSandbox(ns, key.Name, sandboxv1.SandboxSpec{Source: runtimeSource("node24"), Persistent: ptr.To(false), RecreatePolicy: sandboxv1.RecreateOnGone})
			first := waitReady(key).Status.VercelName
			setState(key, sandboxv1.SandboxStateStopped)
			Eventually(readyCondition(key)).Should(HaveField("Reason", sandboxv1.ReasonStopped))
			Expect(getSandbox(key).Status.Recreations).To(BeZero(), "a stop that was asked for recreates nothing")
			// The messages say what the policy will do, not what it would without one.
			ready := readyCondition(key)(Default)
			Expect(ready.Message).To(ContainSubstring("spec.recreatePolicy OnGone creates a new Vercel sandbox"))
			Expect(ready.Message).NotTo(ContainSubstring("cannot run again"))
			resumable := meta.FindStatusCondition(getSandbox(key).Status.Conditions, sandboxv1.ConditionResumable)
			Expect(resumable).NotTo(BeNil())
			Expect(resumable.Message).To(And(ContainSubstring("spec.recreatePolicy OnGone"), Not(ContainSubstring("cannot run again"))))

			setState(key, sandboxv1.SandboxStateRunning)
			Eventually(recreated(key)).Should(And(Not(BeNil()), HaveField("Reason", sandboxv1.ReasonNotPersistent)))
			sbx := waitReady(key)
			Expect(sbx.Status.Recreations).To(Equal(int32(1)))
			Expect(ownedSandboxes(sbx)).To(ConsistOf(first+"-r1"), "the ended sandbox is deleted")
		})

		It("recreates a paused sandbox whose snapshot is gone when it resumes, deleting the old one", func() {
			key := types.NamespacedName{Namespace: ns, Name: "amnesiac"}
			newSandbox(ns, key.Name, sandboxv1.SandboxSpec{Source: runtimeSource("node24"), RecreatePolicy: sandboxv1.RecreateOnGone})
			first := waitReady(key).Status.VercelName
			setState(key, sandboxv1.SandboxStateStopped)
			Eventually(readyCondition(key)).Should(HaveField("Reason", sandboxv1.ReasonStopped))
			snap := getSandbox(key).Status.CurrentSnapshotID
			Expect(snap).To(HavePrefix("snap_"))
			_, err := vc.DeleteSnapshot(ctx, snap)
			Expect(err).NotTo(HaveOccurred())

			setState(key, sandboxv1.SandboxStateRunning)
			Eventually(recreated(key)).Should(And(Not(BeNil()), HaveField("Reason", sandboxv1.ReasonSnapshotMissing)))
			sbx := waitReady(key)
			Expect(sbx.Status.Recreations).To(Equal(int32(1)))
			Expect(ownedSandboxes(sbx)).To(ConsistOf(first + "-r1"))
		})

		It("recreates an Idle sandbox deleted outside the operator when a heartbeat wakes it", func() {
			key := types.NamespacedName{Namespace: ns, Name: "sleeper"}
			newSandbox(ns, key.Name, sandboxv1.SandboxSpec{Source: runtimeSource("node24"), TimeoutSeconds: ptr.To[int64](4), RecreatePolicy: sandboxv1.RecreateOnGone})
			first := waitReady(key).Status.VercelName
			Eventually(readyCondition(key), 30*time.Second).Should(HaveField("Reason", sandboxv1.ReasonIdleTimeout))
			_, err := vc.DeleteSandbox(ctx, first, false)
			Expect(err).NotTo(HaveOccurred())

			heartbeat(key, time.Now())
			Eventually(recreated(key)).Should(And(Not(BeNil()), HaveField("Reason", sandboxv1.ReasonNotFound)))
			sbx := waitReady(key)
			Expect(sbx.Status.Recreations).To(Equal(int32(1)))
			Expect(ownedSandboxes(sbx)).To(ConsistOf(first + "-r1"))
		})

		It("reports Never as before: a deleted sandbox stays Failed with reason NotFound", func() {
			key := types.NamespacedName{Namespace: ns, Name: "mortal"}
			newSandbox(ns, key.Name, sandboxv1.SandboxSpec{Source: runtimeSource("node24")})
			first := waitReady(key).Status.VercelName
			_, err := vc.DeleteSandbox(ctx, first, false)
			Expect(err).NotTo(HaveOccurred())
			Eventually(readyCondition(key), 30*time.Second).Should(HaveField("Reason", sandboxv1.ReasonNotFound))
			Consistently(func() int32 { return getSandbox(key).Status.Recreations }, 2*pollInterval).Should(BeZero())
			Expect(recreated(key)(Default)).To(BeNil())
		})

		It("says when its SandboxSnapshot has new content, and under OnNewerSnapshot boots the next session from it", func() {
			recipe := func(epoch, content string) sandboxv1.SandboxSnapshotSpec {
				r := sandboxv1.Runtime("node24")
				return sandboxv1.SandboxSnapshotSpec{Source: sandboxv1.SandboxSnapshotSource{Recipe: &sandboxv1.SnapshotRecipe{
					Runtime:      &r,
					RebuildEpoch: epoch,
					Setup:        []sandboxv1.RecipeCommand{{Name: "write", Command: "sh", Args: []string{"-c", "echo " + content + " > /vercel/sandbox/version.txt"}}},
				}}}
			}
			snapKey := types.NamespacedName{Namespace: ns, Name: "workspace"}
			newSnapshot(ns, snapKey.Name, recipe("1", "v1"))
			v1 := waitSnapshotReady(snapKey)

			key := types.NamespacedName{Namespace: ns, Name: "tracker"}
			newSandbox(ns, key.Name, sandboxv1.SandboxSpec{
				Source:         sandboxv1.SandboxSource{SnapshotRef: &sandboxv1.LocalObjectReference{Name: snapKey.Name}},
				RecreatePolicy: sandboxv1.RecreateOnNewerSnapshot,
			})
			sbx := waitReady(key)
			Expect(sbx.Status.BootedFrom).To(HaveField("ContentHash", v1.Status.ContentHash))
			outdated := func(g Gomega) *metav1.Condition {
				s := &sandboxv1.Sandbox{}
				g.Expect(k8sClient.Get(ctx, key, s)).To(Succeed())
				return meta.FindStatusCondition(s.Status.Conditions, sandboxv1.ConditionSnapshotOutdated)
			}
			Eventually(outdated).Should(And(Not(BeNil()), HaveField("Status", metav1.ConditionFalse)))

			By("replacing the recipe (the source is immutable, so the SandboxSnapshot is re-created)")
			deleteAndWait(snapKey)
			newSnapshot(ns, snapKey.Name, recipe("2", "v2"))
			v2 := waitSnapshotReady(snapKey)
			Expect(v2.Status.ContentHash).NotTo(Equal(v1.Status.ContentHash))
			Eventually(outdated).Should(And(HaveField("Status", metav1.ConditionTrue), HaveField("Reason", sandboxv1.ReasonSnapshotOutdated)))
			expectEvent(key, "Normal SnapshotOutdated")
			Expect(getSandbox(key).Status.SessionID).To(Equal(sbx.Status.SessionID), "a running session is never replaced")

			By("pausing and resuming it")
			setState(key, sandboxv1.SandboxStateStopped)
			Eventually(readyCondition(key)).Should(HaveField("Reason", sandboxv1.ReasonStopped))
			setState(key, sandboxv1.SandboxStateRunning)
			Eventually(recreated(key), 30*time.Second).Should(And(Not(BeNil()), HaveField("Reason", sandboxv1.ReasonSnapshotOutdated)))
			sbx = waitReady(key)
			Expect(sbx.Status.Recreations).To(Equal(int32(1)))
			Expect(sbx.Status.BootedFrom).To(And(HaveField("SnapshotID", v2.Status.SnapshotID), HaveField("ContentHash", v2.Status.ContentHash)))
			data, err := vc.ReadFile(ctx, sbx.Status.SessionID, "/vercel/sandbox/version.txt", "")
			Expect(err).NotTo(HaveOccurred())
			Expect(string(data)).To(Equal("v2\n"))
			Eventually(outdated).Should(HaveField("Status", metav1.ConditionFalse))
			Expect(ownedSandboxes(sbx)).To(ConsistOf(sbx.Status.VercelName))
		})
	})
})

// expectEventWithin waits up to timeout for an event about key containing want.
func expectEventWithin(key types.NamespacedName, want string, timeout time.Duration) {
	GinkgoHelper()
	Eventually(func() []string { return eventsFor(key) }, timeout).Should(ContainElement(ContainSubstring(want)))
}

// A crash between the create of a recreation and the status write after it
// must neither count the recreation twice nor leave a second Vercel sandbox.
var _ = Describe("Sandbox recreation crash window", func() {
	It("records the recreation before the create, so a restart adopts the new sandbox", func() {
		ctx := context.Background()
		ns := newNamespace()
		key := types.NamespacedName{Namespace: ns, Name: "lazarus"}
		newSandbox(ns, key.Name, sandboxv1.SandboxSpec{Source: runtimeSource("node24"), RecreatePolicy: sandboxv1.RecreateOnGone})
		sbx := waitReady(key)
		first := sbx.Status.VercelName
		committed := recorder.stallAfterCommit(func(r recordedRequest) bool {
			return r.Method == "POST" && strings.HasSuffix(r.Path, "/sandboxes") && strings.Contains(string(r.Body), `"name":"`+first+`-r1"`)
		})
		_, err := vc.DeleteSandbox(ctx, first, false)
		Expect(err).NotTo(HaveOccurred())

		By("crashing once Vercel created the new sandbox")
		Eventually(committed, 30*time.Second).Should(BeClosed())
		stopManager()
		restarted := false
		DeferCleanup(func() {
			if !restarted {
				startManager(k8sClient.Scheme())
			}
		})
		st := getSandbox(key).Status
		Expect(st.Recreations).To(Equal(int32(1)), "the recreation is counted before the create")
		Expect(st.VercelName).To(Equal(first+"-r1"), "the new name is recorded before the create")
		Expect(st.SessionID).To(BeEmpty())

		By("restarting")
		startManager(k8sClient.Scheme())
		restarted = true
		sbx = waitReady(key)
		Expect(sbx.Status.Recreations).To(Equal(int32(1)))
		Expect(sbx.Status.VercelName).To(Equal(first + "-r1"))
		var owned []string
		for _, s := range emu.LiveSandboxes() {
			if s.Tags["k8s-uid"] == string(sbx.UID) {
				owned = append(owned, s.Name)
			}
		}
		Expect(owned).To(ConsistOf(first+"-r1"), "one Vercel sandbox for one object")
	})
})
