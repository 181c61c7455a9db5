package controllers_test

import (
	"context"
	"fmt"
	"net/http"
	"sync"
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
	"github.com/getsentry/sandbox-controller/internal/vercel"
)

// These specs run in real time with short idle windows (9 s, so the controller
// extends 3 s before a deadline) against the suite's 2 s poll interval.
var _ = Describe("Sandbox lifecycle", func() {
	ctx := context.Background()
	var ns string
	BeforeEach(func() { ns = newNamespace() })

	Context("pause and resume", func() {
		It("pauses a persistent sandbox and resumes it with its files, without running setup again", func() {
			key := types.NamespacedName{Namespace: ns, Name: "pausable"}
			newSandbox(ns, "pausable", sandboxv1.SandboxSpec{
				Source: runtimeSource("node24"),
				Setup:  []sandboxv1.SetupCommand{{Name: "once", Command: "sh", Args: []string{"-c", "echo ran >> /vercel/sandbox/setup.log"}}},
			})
			sbx := waitReady(key)
			first := sbx.Status.SessionID
			Expect(meta.FindStatusCondition(sbx.Status.Conditions, sandboxv1.ConditionResumable)).To(And(
				HaveField("Status", metav1.ConditionTrue), HaveField("Reason", sandboxv1.ReasonPersistent)))
			Expect(vc.WriteFiles(ctx, first, []vercel.File{{Path: "/vercel/sandbox/notes.txt", Content: []byte("written before the pause\n")}})).To(Succeed())

			By("pausing it")
			setState(key, sandboxv1.SandboxStateStopped)
			Eventually(readyCondition(key)).Should(And(HaveField("Status", metav1.ConditionFalse), HaveField("Reason", sandboxv1.ReasonStopped)))
			sbx = getSandbox(key)
			Expect(sbx.Status.Phase).To(Equal(sandboxv1.SandboxStopped))
			Expect(sbx.Status.ExpiresAt).To(BeNil())
			Expect(sbx.Status.StoppedAt).NotTo(BeNil())
			Expect(sbx.Status.CurrentSnapshotID).To(HavePrefix("snap_"))
			remote, _ := emu.Sandbox(sbx.Status.VercelName)
			Expect(remote.Status).To(Equal(vercel.SessionStopped))
			expectEvent(key, "Normal Stopped")

			By("polling it no more while it is stopped")
			gets := len(recorder.requests(http.MethodGet, "/"+sbx.Status.VercelName))
			Consistently(func() int { return len(recorder.requests(http.MethodGet, "/"+sbx.Status.VercelName)) }, 3*pollInterval).Should(Equal(gets))

			By("resuming it")
			setState(key, sandboxv1.SandboxStateRunning)
			Eventually(func() string { return getSandbox(key).Status.SessionID }).ShouldNot(Equal(first))
			sbx = waitReady(key)
			Expect(sbx.Status.Phase).To(Equal(sandboxv1.SandboxRunning))
			Expect(sbx.Status.ExpiresAt).NotTo(BeNil())
			Expect(sbx.Status.StoppedAt).To(BeNil())
			data, err := vc.ReadFile(ctx, sbx.Status.SessionID, "/vercel/sandbox/notes.txt", "")
			Expect(err).NotTo(HaveOccurred())
			Expect(string(data)).To(Equal("written before the pause\n"))
			log, err := vc.ReadFile(ctx, sbx.Status.SessionID, "/vercel/sandbox/setup.log", "")
			Expect(err).NotTo(HaveOccurred())
			Expect(string(log)).To(Equal("ran\n"), "setup must not run again on resume")
			expectEvent(key, "Normal Resumed")
			Expect(sessionsOf(sbx.Status.VercelName)).To(Equal(2))
		})

		It("resumes a sandbox whose pause is lifted the moment Vercel stopped it, before the stop's status write is seen", func() {
			key := types.NamespacedName{Namespace: ns, Name: "blink"}
			newSandbox(ns, "blink", sandboxv1.SandboxSpec{Source: runtimeSource("node24")})
			sbx := waitReady(key)
			first := sbx.Status.SessionID

			// Running again as soon as Vercel has the stop: the reconcile of
			// the spec change may read a cache without the stop's status
			// write, and must not take its own stop for one outside the
			// operator (SessionStopped, which waits for a heartbeat).
			setState(key, sandboxv1.SandboxStateStopped)
			Eventually(func() vercel.SessionStatus {
				remote, _ := emu.Sandbox(sbx.Status.VercelName)
				return remote.Status
			}, 10*time.Second, 5*time.Millisecond).Should(Equal(vercel.SessionStopped))
			setState(key, sandboxv1.SandboxStateRunning)

			Eventually(func() string { return getSandbox(key).Status.SessionID }).ShouldNot(Equal(first))
			sbx = waitReady(key)
			Expect(eventsFor(key)).NotTo(ContainElement(HavePrefix("Warning " + sandboxv1.ReasonSessionStopped)))
		})

		It("ends a non-persistent sandbox for good when it is stopped, and says so", func() {
			key := types.NamespacedName{Namespace: ns, Name: "oneshot"}
			newSandbox(ns, "oneshot", sandboxv1.SandboxSpec{Source: runtimeSource("node24"), Persistent: ptr.To(false)})
			sbx := waitReady(key)
			Expect(meta.FindStatusCondition(sbx.Status.Conditions, sandboxv1.ConditionResumable)).To(And(
				HaveField("Status", metav1.ConditionFalse), HaveField("Reason", sandboxv1.ReasonNotPersistent)))
			setState(key, sandboxv1.SandboxStateStopped)
			Eventually(readyCondition(key)).Should(HaveField("Reason", sandboxv1.ReasonStopped))
			Expect(readyCondition(key)(Default).Message).To(ContainSubstring("cannot run again"))

			setState(key, sandboxv1.SandboxStateRunning)
			Eventually(func() int64 { return getSandbox(key).Status.ObservedGeneration }).Should(Equal(getSandbox(key).Generation))
			Consistently(func() sandboxv1.SandboxPhase { return getSandbox(key).Status.Phase }, 2*pollInterval).Should(Equal(sandboxv1.SandboxStopped))
			Expect(readyCondition(key)(Default)).To(And(HaveField("Status", metav1.ConditionFalse), HaveField("Message", ContainSubstring("cannot run again"))))
			Expect(sessionsOf(sbx.Status.VercelName)).To(Equal(1))
		})
	})

	Context("idle window and heartbeat", func() {
		It("keeps a sandbox alive across several idle windows with heartbeats, lets it go Idle without them, and wakes it with a newer one", longSpec, func() {
			key := types.NamespacedName{Namespace: ns, Name: "chatty"}
			newSandbox(ns, "chatty", sandboxv1.SandboxSpec{Source: runtimeSource("node24"), TimeoutSeconds: ptr.To[int64](9)})
			sbx := waitReady(key)
			first, name := sbx.Status.SessionID, sbx.Status.VercelName

			By("heartbeating every second for more than three idle windows")
			start := time.Now()
			for time.Since(start) < 28*time.Second {
				heartbeat(key, time.Now())
				time.Sleep(time.Second)
				Expect(getSandbox(key).Status).To(And(HaveField("Phase", sandboxv1.SandboxRunning), HaveField("SessionID", first)))
			}
			sbx = getSandbox(key)
			Expect(sbx.Status.ExpiresAt.Time).To(BeTemporally(">", sbx.Status.StartedAt.Add(28*time.Second)), "status.expiresAt shows the extended deadline")
			remote, _ := emu.Sandbox(name)
			Expect(remote.ExpiresAt).To(BeNumerically("~", sbx.Status.ExpiresAt.UnixMilli(), 1000))
			extends := len(recorder.requests(http.MethodPost, first+"/extend-timeout"))
			// 28 s of heartbeats need about 28/(9-3) extensions, not one per heartbeat.
			Expect(extends).To(And(BeNumerically(">=", 3), BeNumerically("<=", 8)))
			expectEvent(key, "Normal Extended")

			By("going Idle once the heartbeats stop")
			Eventually(readyCondition(key), 4*9*time.Second).Should(HaveField("Reason", sandboxv1.ReasonIdleTimeout))
			sbx = getSandbox(key)
			Expect(sbx.Status.Phase).To(Equal(sandboxv1.SandboxIdle))
			Expect(sbx.Status.ExpiresAt).To(BeNil())
			Expect(sbx.Status.StoppedAt).NotTo(BeNil())
			expectEvent(key, "Normal IdleTimeout")
			gets := len(recorder.requests(http.MethodGet, "/"+name))
			Consistently(func() int { return len(recorder.requests(http.MethodGet, "/"+name)) }, 3*pollInterval).Should(Equal(gets), "an Idle sandbox is not polled")

			By("waking on a heartbeat newer than the stop")
			heartbeat(key, time.Now())
			Eventually(func() string { return getSandbox(key).Status.SessionID }).ShouldNot(Equal(first))
			waitReady(key)
			expectEvent(key, "Normal Resumed")
		})
	})

	Context("shutdown time", func() {
		It("warns, then stops the sandbox for good at shutdownTime with policy Stop", func() {
			key := types.NamespacedName{Namespace: ns, Name: "endofday"}
			shutdown := metav1.NewTime(time.Now().Add(8 * time.Second).Truncate(time.Second)) // as the API server stores it
			newSandbox(ns, "endofday", sandboxv1.SandboxSpec{Source: runtimeSource("node24"), ShutdownTime: &shutdown})
			waitReady(key)
			// The suite's manager warns the default 5 minutes ahead: at once here.
			expectEvent(key, "Warning ShutdownWarning")
			Expect(readyCondition(key)(Default).Status).To(Equal(metav1.ConditionTrue), "the warning comes before the stop")
			Eventually(readyCondition(key), 3*8*time.Second).Should(HaveField("Reason", sandboxv1.ReasonShutdownTime))
			Expect(time.Now()).To(BeTemporally(">=", shutdown.Time))
			sbx := getSandbox(key)
			Expect(sbx.Status.Phase).To(Equal(sandboxv1.SandboxStopped))
			expectEvent(key, "Normal ShutdownStop")
			remote, _ := emu.Sandbox(sbx.Status.VercelName)
			Expect(remote.Status).To(Equal(vercel.SessionStopped))

			By("staying stopped after a heartbeat")
			heartbeat(key, time.Now())
			Consistently(func() sandboxv1.SandboxPhase { return getSandbox(key).Status.Phase }, 2*pollInterval).Should(Equal(sandboxv1.SandboxStopped))
			Expect(sessionsOf(sbx.Status.VercelName)).To(Equal(1))
		})

		It("deletes the Vercel sandbox and the object at shutdownTime with policy Delete", func() {
			key := types.NamespacedName{Namespace: ns, Name: "ephemeral"}
			shutdown := metav1.NewTime(time.Now().Add(8 * time.Second).Truncate(time.Second)) // as the API server stores it
			newSandbox(ns, "ephemeral", sandboxv1.SandboxSpec{Source: runtimeSource("node24"), ShutdownTime: &shutdown, ShutdownPolicy: sandboxv1.ShutdownDelete})
			name := waitReady(key).Status.VercelName
			expectEvent(key, "Warning ShutdownWarning")
			Eventually(func() bool { return apierrors.IsNotFound(k8sClient.Get(ctx, key, &sandboxv1.Sandbox{})) }, 3*8*time.Second).Should(BeTrue())
			Expect(time.Now()).To(BeTemporally(">=", shutdown.Time))
			_, exists := emu.Sandbox(name)
			Expect(exists).To(BeFalse())
			Expect(recorder.requests(http.MethodDelete, "/"+name)).To(HaveLen(1), "deleted once, by the finalizer")
			expectEvent(key, "Normal ShutdownDelete")
			expectEvent(key, "Normal Deleted")
		})

		It("with deletionPolicy Retain deletes only the object at shutdownTime, and stops the session it keeps", func() {
			key := types.NamespacedName{Namespace: ns, Name: "kept"}
			shutdown := metav1.NewTime(time.Now().Add(4 * time.Second).Truncate(time.Second))
			newSandbox(ns, "kept", sandboxv1.SandboxSpec{Source: runtimeSource("node24"), ShutdownTime: &shutdown,
				ShutdownPolicy: sandboxv1.ShutdownDelete, DeletionPolicy: sandboxv1.DeletionPolicyRetain})
			sbx := waitReady(key)
			DeferCleanup(func() { _, _ = vc.DeleteSandbox(context.Background(), sbx.Status.VercelName, false) })
			Eventually(func() bool { return apierrors.IsNotFound(k8sClient.Get(ctx, key, &sandboxv1.Sandbox{})) }, 3*4*time.Second).Should(BeTrue())
			remote, exists := emu.Sandbox(sbx.Status.VercelName)
			Expect(exists).To(BeTrue(), "Retain keeps the Vercel sandbox")
			Eventually(func() vercel.SessionStatus { return sessionStatus(remote.CurrentSessionID) }).Should(Equal(vercel.SessionStopped))
			Expect(recorder.requests(http.MethodDelete, "/"+sbx.Status.VercelName)).To(BeEmpty())
			expectEvent(key, "Normal ShutdownDelete")
			expectEvent(key, "Normal Retained")
		})
	})

	Context("drift", func() {
		It("reports a session stopped behind its back within the poll interval, and a heartbeat resumes it", func() {
			key := types.NamespacedName{Namespace: ns, Name: "stoppedbehind"}
			newSandbox(ns, "stoppedbehind", sandboxv1.SandboxSpec{Source: runtimeSource("node24")})
			first := waitReady(key).Status.SessionID
			_, err := vc.StopSession(ctx, first)
			Expect(err).NotTo(HaveOccurred())
			Eventually(readyCondition(key), 3*pollInterval).Should(And(
				HaveField("Status", metav1.ConditionFalse), HaveField("Reason", sandboxv1.ReasonSessionStopped),
				HaveField("Message", ContainSubstring("outside the operator"))))
			Expect(getSandbox(key).Status.Phase).To(Equal(sandboxv1.SandboxStopped))
			expectEvent(key, "Warning SessionStopped")

			heartbeat(key, time.Now())
			Eventually(func() string { return getSandbox(key).Status.SessionID }).ShouldNot(Equal(first))
			waitReady(key)
		})

		It("reports a session stopped by a snapshot taken outside the Sandbox controller as Snapshotted, not as drift", func() {
			key := types.NamespacedName{Namespace: ns, Name: "snapped"}
			newSandbox(ns, "snapped", sandboxv1.SandboxSpec{Source: runtimeSource("node24")})
			first := waitReady(key).Status.SessionID
			snap, err := vc.CreateSnapshot(ctx, first, nil)
			Expect(err).NotTo(HaveOccurred())
			Eventually(readyCondition(key), 3*pollInterval).Should(And(
				HaveField("Status", metav1.ConditionFalse), HaveField("Reason", sandboxv1.ReasonSnapshotted)))
			sbx := getSandbox(key)
			Expect(sbx.Status.Phase).To(Equal(sandboxv1.SandboxStopped))
			Expect(sbx.Status.CurrentSnapshotID).To(Equal(snap.Snapshot.ID))
			expectEvent(key, "Normal Snapshotted")
			Expect(eventsFor(key)).NotTo(ContainElement(ContainSubstring("Warning SessionStopped")))
		})

		It("observes a stopped sandbox deleted behind its back when a reconcile is requested", func() {
			key := types.NamespacedName{Namespace: ns, Name: "deletedbehind"}
			newSandbox(ns, "deletedbehind", sandboxv1.SandboxSpec{Source: runtimeSource("node24")})
			name := waitReady(key).Status.VercelName
			setState(key, sandboxv1.SandboxStateStopped)
			Eventually(readyCondition(key)).Should(HaveField("Reason", sandboxv1.ReasonStopped))
			_, err := vc.DeleteSandbox(ctx, name, false)
			Expect(err).NotTo(HaveOccurred())
			// Stopped sandboxes are not polled, so nothing notices yet.
			Consistently(readyCondition(key), 2*pollInterval).Should(HaveField("Reason", sandboxv1.ReasonStopped))

			annotate(key, sandboxv1.AnnotationReconcileRequestedAt, time.Now().Format(time.RFC3339Nano))
			Eventually(readyCondition(key)).Should(HaveField("Reason", sandboxv1.ReasonNotFound))
			sbx := getSandbox(key)
			Expect(sbx.Status.Phase).To(Equal(sandboxv1.SandboxFailed))
			Expect(sbx.Status.LastHandledReconcileAt).To(Equal(sbx.Annotations[sandboxv1.AnnotationReconcileRequestedAt]))
		})

		It("reports SnapshotMissing when the snapshot to resume from is gone", func() {
			key := types.NamespacedName{Namespace: ns, Name: "nosnap"}
			newSandbox(ns, "nosnap", sandboxv1.SandboxSpec{Source: runtimeSource("node24")})
			waitReady(key)
			setState(key, sandboxv1.SandboxStateStopped)
			Eventually(readyCondition(key)).Should(HaveField("Reason", sandboxv1.ReasonStopped))
			snap := getSandbox(key).Status.CurrentSnapshotID
			Expect(snap).NotTo(BeEmpty())
			_, err := vc.DeleteSnapshot(ctx, snap)
			Expect(err).NotTo(HaveOccurred())

			setState(key, sandboxv1.SandboxStateRunning)
			Eventually(readyCondition(key)).Should(And(HaveField("Status", metav1.ConditionFalse), HaveField("Reason", sandboxv1.ReasonSnapshotMissing)))
			sbx := getSandbox(key)
			Expect(sbx.Status.Phase).To(Equal(sandboxv1.SandboxFailed))
			Expect(meta.FindStatusCondition(sbx.Status.Conditions, sandboxv1.ConditionResumable)).To(And(
				HaveField("Status", metav1.ConditionFalse), HaveField("Reason", sandboxv1.ReasonSnapshotMissing)))
			expectEvent(key, "Warning SnapshotMissing")
		})
	})

	Context("intent annotations", func() {
		It("does nothing while paused by annotation but report it, and catches up when unpaused", func() {
			key := types.NamespacedName{Namespace: ns, Name: "maintenance"}
			newSandbox(ns, "maintenance", sandboxv1.SandboxSpec{Source: runtimeSource("node24"), Ports: []int32{3000}})
			name := waitReady(key).Status.VercelName
			annotate(key, sandboxv1.AnnotationPaused, "true")
			Eventually(func() *metav1.Condition {
				return meta.FindStatusCondition(getSandbox(key).Status.Conditions, sandboxv1.ConditionPaused)
			}).Should(And(Not(BeNil()), HaveField("Status", metav1.ConditionTrue), HaveField("Reason", sandboxv1.ReasonReconcilePaused)))

			requests := len(recorder.requests(http.MethodGet, "/"+name)) + len(recorder.requests(http.MethodPatch, "/"+name))
			sbx := getSandbox(key)
			sbx.Spec.Ports = []int32{3000, 4000}
			Expect(k8sClient.Update(ctx, sbx)).To(Succeed())
			Consistently(func() int {
				return len(recorder.requests(http.MethodGet, "/"+name)) + len(recorder.requests(http.MethodPatch, "/"+name))
			}, 2*pollInterval).Should(Equal(requests), "no Vercel call while paused")
			Expect(getSandbox(key).Status.Routes).To(HaveLen(1))

			annotate(key, sandboxv1.AnnotationPaused, "")
			Eventually(func() []sandboxv1.SandboxRoute { return getSandbox(key).Status.Routes }).Should(HaveLen(2))
			Expect(meta.FindStatusCondition(getSandbox(key).Status.Conditions, sandboxv1.ConditionPaused)).To(BeNil())
		})
	})

	Context("Vercel request budget", func() {
		It("makes at most one poll per running sandbox per interval, plus the extensions its heartbeats need", func() {
			const n = 8
			const window = 9 * time.Second // idle window; extensions come 3 s before a deadline
			keys := make([]types.NamespacedName, n)
			for i := range keys {
				keys[i] = types.NamespacedName{Namespace: ns, Name: fmt.Sprintf("busy-%d", i)}
				newSandbox(ns, keys[i].Name, sandboxv1.SandboxSpec{Source: runtimeSource("node24"), TimeoutSeconds: ptr.To(int64(window / time.Second))})
			}
			names, sessions := map[string]string{}, map[string]string{}
			for _, k := range keys {
				sbx := waitReady(k)
				names[k.Name], sessions[k.Name] = sbx.Status.VercelName, sbx.Status.SessionID
			}
			count := func(method, part string) int { return len(recorder.requests(method, part)) }
			getsBefore, extendsBefore := map[string]int{}, map[string]int{}
			for _, k := range keys {
				getsBefore[k.Name] = count(http.MethodGet, "/"+names[k.Name])
				extendsBefore[k.Name] = count(http.MethodPost, sessions[k.Name]+"/extend-timeout")
			}

			const measured = 16 * time.Second // 8 poll intervals, 4 heartbeats per sandbox per interval
			start := time.Now()
			var wg sync.WaitGroup
			for _, k := range keys {
				wg.Add(1)
				go func() {
					defer GinkgoRecover()
					defer wg.Done()
					for time.Since(start) < measured {
						heartbeat(k, time.Now())
						time.Sleep(500 * time.Millisecond)
					}
				}()
			}
			wg.Wait()
			elapsed := time.Since(start)

			intervals := int(elapsed / pollInterval)
			maxExtends := int(elapsed/(window-3*time.Second)) + 1
			var totalGets, totalExtends, heartbeats int
			for _, k := range keys {
				sbx := getSandbox(k)
				Expect(sbx.Status.Phase).To(Equal(sandboxv1.SandboxRunning))
				Expect(sbx.Status.SessionID).To(Equal(sessions[k.Name]), "heartbeats kept the first session alive")
				gets := count(http.MethodGet, "/"+names[k.Name]) - getsBefore[k.Name]
				extends := count(http.MethodPost, sessions[k.Name]+"/extend-timeout") - extendsBefore[k.Name]
				Expect(gets).To(BeNumerically("<=", intervals+1), "polls of %s", k.Name)
				Expect(extends).To(And(BeNumerically(">=", 1), BeNumerically("<=", maxExtends)), "extensions of %s", k.Name)
				totalGets += gets
				totalExtends += extends
			}
			heartbeats = n * int(measured/(500*time.Millisecond))
			AddReportEntry("request budget", fmt.Sprintf("%d running sandboxes, %s, poll interval %s, ~%d heartbeats: %d polls (%.2f per sandbox per interval), %d extensions",
				n, elapsed.Round(time.Second), pollInterval, heartbeats, totalGets, float64(totalGets)/float64(n*intervals), totalExtends))
			GinkgoWriter.Printf("request budget: %d sandboxes, %s: %d polls, %d extensions, %d heartbeats\n", n, elapsed.Round(time.Second), totalGets, totalExtends, heartbeats)
		})
	})
})

// setState sets spec.state.
func setState(key types.NamespacedName, state sandboxv1.SandboxState) {
	sbx := getSandbox(key)
	patch := client.MergeFrom(sbx.DeepCopy())
	sbx.Spec.State = state
	Expect(k8sClient.Patch(context.Background(), sbx, patch)).To(Succeed())
}

// heartbeat signals activity at t, as a client does.
func heartbeat(key types.NamespacedName, t time.Time) {
	annotate(key, sandboxv1.AnnotationLastActivity, t.UTC().Format(time.RFC3339Nano))
}

// annotate sets (or, with an empty value, removes) one annotation of a
// Sandbox with a merge patch, which does not conflict with the controller's
// writes.
func annotate(key types.NamespacedName, k, v string) {
	GinkgoHelper()
	annotateObj(&sandboxv1.Sandbox{ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name}}, k, v)
}

// annotateObj sets (or, with an empty value, removes) one annotation of any
// object with a merge patch.
func annotateObj(o client.Object, k, v string) {
	GinkgoHelper()
	body := fmt.Sprintf(`{"metadata":{"annotations":{%q:null}}}`, k)
	if v != "" {
		body = fmt.Sprintf(`{"metadata":{"annotations":{%q:%q}}}`, k, v)
	}
	Expect(k8sClient.Patch(context.Background(), o, client.RawPatch(types.MergePatchType, []byte(body)))).To(Succeed())
}

// sessionsOf counts the sessions a Vercel sandbox has had.
func sessionsOf(name string) int {
	n := 0
	for _, s := range emu.Sessions() {
		if s.SourceSandboxName == name {
			n++
		}
	}
	return n
}
