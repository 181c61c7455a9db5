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

	sandboxv1 "github.com/getsentry/sandbox-controller/api/v1alpha1"
	"github.com/getsentry/sandbox-controller/internal/vercel"
)

// A capture and the Sandbox it stops share one Vercel snapshot: Vercel
// resumes the stopped sandbox from it. These specs delete captures while
// their source still needs them, and capture sources that cannot run.
var _ = Describe("SandboxSnapshot captures and their source", func() {
	ctx := context.Background()
	var ns string
	BeforeEach(func() { ns = newNamespace() })

	captureOf := func(name, source string) types.NamespacedName {
		newSnapshot(ns, name, sandboxv1.SandboxSnapshotSpec{
			Source: sandboxv1.SandboxSnapshotSource{SandboxRef: &sandboxv1.LocalObjectReference{Name: source}},
		})
		return types.NamespacedName{Namespace: ns, Name: name}
	}
	// capturedSource makes a running Sandbox with a file, captures it and
	// waits until the Sandbox reports the stop; it returns the snapshot id.
	capturedSource := func(src, capture string) (types.NamespacedName, types.NamespacedName, string) {
		srcKey := types.NamespacedName{Namespace: ns, Name: src}
		newSandbox(ns, src, sandboxv1.SandboxSpec{Source: runtimeSource("node24")})
		runIn(ctx, waitReady(srcKey).Status.SessionID, "echo kept > /vercel/sandbox/kept.txt")
		capKey := captureOf(capture, src)
		id := waitSnapshotReady(capKey).Status.SnapshotID
		Eventually(readyCondition(srcKey), 3*pollInterval).Should(HaveField("Reason", sandboxv1.ReasonSnapshotted))
		vsb, ok := emu.Sandbox(getSandbox(srcKey).Status.VercelName)
		Expect(ok).To(BeTrue())
		Expect(vsb.CurrentSnapshotID).To(Equal(id), "the stopped source resumes from the capture")
		return srcKey, capKey, id
	}
	expectFileKept := func(srcKey types.NamespacedName) {
		GinkgoHelper()
		data, err := vc.ReadFile(ctx, getSandbox(srcKey).Status.SessionID, "/vercel/sandbox/kept.txt", "")
		Expect(err).NotTo(HaveOccurred())
		Expect(string(data)).To(Equal("kept\n"))
	}

	// The defect the chaos soak found (seed 15): the capture's delete took the
	// snapshot its stopped source resumes from, and the Sandbox failed for
	// good with SnapshotMissing at its next heartbeat.
	It("deletes a capture its stopped source would resume from only after resuming the source, which keeps its files", func() {
		srcKey, capKey, id := capturedSource("src", "cap")
		deleteAndWait(capKey)
		Expect(emuSnapshot(id).Status).To(Equal(vercel.SnapshotDeleted))

		heartbeat(srcKey, time.Now())
		Eventually(readyCondition(srcKey)).Should(HaveField("Reason", sandboxv1.ReasonRunning), "not SnapshotMissing")
		expectFileKept(srcKey)
		expectEvent(capKey, "Normal Resumed")
	})

	It("deletes a capture of a source paused since: the source is resumed and paused again, and runs later with its files", func() {
		srcKey, capKey, id := capturedSource("paused", "paused-cap")
		setState(srcKey, sandboxv1.SandboxStateStopped)
		Eventually(readyCondition(srcKey)).Should(HaveField("Reason", sandboxv1.ReasonStopped))
		deleteAndWait(capKey)
		Expect(emuSnapshot(id).Status).To(Equal(vercel.SnapshotDeleted))

		By("the Sandbox stopping the resumed session again, so it resumes from a snapshot of its own")
		name := getSandbox(srcKey).Status.VercelName
		Eventually(func(g Gomega) {
			vsb, ok := emu.Sandbox(name)
			g.Expect(ok).To(BeTrue())
			g.Expect(vsb.CurrentSnapshotID).NotTo(BeEmpty())
			g.Expect(vsb.CurrentSnapshotID).NotTo(Equal(id))
			g.Expect(sessionStatus(vsb.CurrentSessionID)).To(Equal(vercel.SessionStopped))
			g.Expect(getSandbox(srcKey).Status.Phase).To(Equal(sandboxv1.SandboxStopped))
		}, 3*pollInterval+20*time.Second).Should(Succeed())

		setState(srcKey, sandboxv1.SandboxStateRunning)
		waitReady(srcKey)
		expectFileKept(srcKey)
	})

	It("fails a capture whose source failed, saying why, instead of waiting silently", func() {
		srcKey := types.NamespacedName{Namespace: ns, Name: "broken"}
		newSandbox(ns, srcKey.Name, sandboxv1.SandboxSpec{Source: runtimeSource("node24"), Setup: []sandboxv1.SetupCommand{{
			Command: "sh", Args: []string{"-c", "exit 3"},
		}}})
		Eventually(readyCondition(srcKey)).Should(HaveField("Reason", sandboxv1.ReasonSetupFailed))
		Expect(getSandbox(srcKey).Status.Phase).To(Equal(sandboxv1.SandboxFailed))

		capKey := captureOf("broken-cap", srcKey.Name)
		Eventually(snapshotReason(capKey)).Should(Equal(sandboxv1.ReasonSourceFailed))
		snap := getSnapshotObj(capKey)
		Expect(snap.Status.Phase).To(Equal(sandboxv1.SnapshotFailed))
		Expect(snap.Status.ReadyToUse).To(BeFalse())
		Expect(meta.FindStatusCondition(snap.Status.Conditions, sandboxv1.ConditionReady).Message).To(And(
			ContainSubstring(`Sandbox "broken" failed`), ContainSubstring(sandboxv1.ReasonSetupFailed)))
		expectEvent(capKey, "Warning SourceFailed")
		Expect(snap.Status.Capture).To(BeNil(), "nothing asked of Vercel")
	})

	It("says a capture waits for a paused source", func() {
		srcKey := types.NamespacedName{Namespace: ns, Name: "resting"}
		newSandbox(ns, srcKey.Name, sandboxv1.SandboxSpec{Source: runtimeSource("node24"), State: sandboxv1.SandboxStateStopped})
		capKey := captureOf("resting-cap", srcKey.Name)
		Eventually(func() string {
			c := meta.FindStatusCondition(getSnapshotObj(capKey).Status.Conditions, sandboxv1.ConditionReady)
			if c == nil {
				return ""
			}
			return c.Reason + ": " + c.Message
		}).Should(And(HavePrefix(sandboxv1.ReasonSourceNotRunning), ContainSubstring("paused (spec.state Stopped)")))
		Expect(getSnapshotObj(capKey).Status.Phase).To(Equal(sandboxv1.SnapshotPending))
	})
})

// Crash windows: the manager stops right after Vercel applied a call and
// before the status write that would record its result; then the object is
// deleted. The delete must resolve what status recorded as intended.
var _ = Describe("SandboxSnapshot crash windows", func() {
	ctx := context.Background()
	var ns string
	BeforeEach(func() { ns = newNamespace() })

	node := func(rt string) *sandboxv1.Runtime { r := sandboxv1.Runtime(rt); return &r }
	recipe := func() sandboxv1.SandboxSnapshotSpec {
		return sandboxv1.SandboxSnapshotSpec{Source: sandboxv1.SandboxSnapshotSource{Recipe: &sandboxv1.SnapshotRecipe{
			Runtime: node("node24"),
			Setup:   []sandboxv1.RecipeCommand{{Name: "build", Command: "sh", Args: []string{"-c", "echo built > /vercel/sandbox/built.txt"}}},
		}}}
	}
	isBuilder := func(name string) bool { return strings.HasPrefix(name, ns+"-build-") }
	liveBuilders := func() []string {
		var out []string
		for _, sb := range emu.LiveSandboxes() {
			if isBuilder(sb.Name) {
				out = append(out, sb.Name)
			}
		}
		return out
	}
	sessionOfBuilder := func(id string) bool {
		for _, s := range emu.Sessions() {
			if s.ID == id {
				return isBuilder(s.SourceSandboxName)
			}
		}
		return false
	}
	// crashThenDelete stops the manager once Vercel applied the stalled
	// call, deletes the object meanwhile and starts a new manager, which
	// must let the object go.
	crashThenDelete := func(key types.NamespacedName, committed <-chan struct{}, whileDown func()) {
		Eventually(committed, 60*time.Second).Should(BeClosed())
		stopManager()
		restarted := false
		DeferCleanup(func() {
			if !restarted {
				startManager(k8sClient.Scheme())
			}
		})
		whileDown()
		Expect(k8sClient.Delete(ctx, &sandboxv1.SandboxSnapshot{ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name}})).To(Succeed())
		startManager(k8sClient.Scheme())
		restarted = true
		Eventually(func() bool {
			return apierrors.IsNotFound(k8sClient.Get(ctx, key, &sandboxv1.SandboxSnapshot{}))
		}, 60*time.Second).Should(BeTrue())
	}

	It("records a builder's name before creating it, so a delete after a crash deletes the builder", func() {
		committed := recorder.stallAfterCommit(func(r recordedRequest) bool {
			return r.Method == "POST" && strings.HasSuffix(r.Path, "/sandboxes") && strings.Contains(string(r.Body), `"name":"`+ns+`-build-`)
		})
		key := types.NamespacedName{Namespace: ns, Name: "crashed-build"}
		newSnapshot(ns, key.Name, recipe())
		crashThenDelete(key, committed, func() {
			builders := liveBuilders()
			Expect(builders).To(HaveLen(1), "Vercel created the builder")
			b := getSnapshotObj(key).Status.Build
			Expect(b).NotTo(BeNil(), "no build recorded")
			Expect(b.BuilderName).To(Equal(builders[0]), "the builder's name recorded before it was created")
		})
		Expect(liveBuilders()).To(BeEmpty(), "the builder leaked")
	})

	It("deletes a builder's capture taken just before a crash, with the builder", func() {
		committed := recorder.stallAfterCommit(func(r recordedRequest) bool {
			parts := strings.Split(r.Path, "/")
			return r.Method == "POST" && strings.HasSuffix(r.Path, "/snapshot") && len(parts) > 2 && sessionOfBuilder(parts[len(parts)-2])
		})
		key := types.NamespacedName{Namespace: ns, Name: "crashed-capture"}
		newSnapshot(ns, key.Name, recipe())
		var taken string
		crashThenDelete(key, committed, func() {
			st := getSnapshotObj(key).Status
			Expect(st.SnapshotID).To(BeEmpty())
			Expect(st.Build.Step).To(Equal("capture"), "the capture intent is recorded")
			for _, s := range emu.Snapshots() {
				if s.SourceSessionID == st.Build.SessionID && s.Status == vercel.SnapshotCreated {
					taken = s.ID
				}
			}
			Expect(taken).NotTo(BeEmpty(), "Vercel took the snapshot")
		})
		Expect(liveBuilders()).To(BeEmpty(), "the builder leaked")
		Expect(emuSnapshot(taken).Status).To(Equal(vercel.SnapshotDeleted), "the builder's snapshot leaked")
	})

	It("deletes a capture taken just before a crash, found by the recorded session, and the source still resumes", func() {
		srcKey := types.NamespacedName{Namespace: ns, Name: "crash-src"}
		newSandbox(ns, srcKey.Name, sandboxv1.SandboxSpec{Source: runtimeSource("node24")})
		session := waitReady(srcKey).Status.SessionID
		committed := recorder.stallAfterCommit(func(r recordedRequest) bool {
			return r.Method == "POST" && strings.HasSuffix(r.Path, "/sessions/"+session+"/snapshot")
		})
		key := types.NamespacedName{Namespace: ns, Name: "crash-cap"}
		newSnapshot(ns, key.Name, sandboxv1.SandboxSnapshotSpec{
			Source: sandboxv1.SandboxSnapshotSource{SandboxRef: &sandboxv1.LocalObjectReference{Name: srcKey.Name}},
		})
		var taken string
		crashThenDelete(key, committed, func() {
			st := getSnapshotObj(key).Status
			Expect(st.SnapshotID).To(BeEmpty())
			Expect(st.Capture).NotTo(BeNil())
			Expect(st.Capture.SessionID).To(Equal(session), "the capture intent is recorded")
			for _, s := range emu.Snapshots() {
				if s.SourceSessionID == session && s.CreationMethod == "manual" {
					taken = s.ID
				}
			}
			Expect(taken).NotTo(BeEmpty(), "Vercel took the snapshot")
		})
		Expect(emuSnapshot(taken).Status).To(Equal(vercel.SnapshotDeleted), "the capture leaked")
		heartbeat(srcKey, time.Now())
		waitReady(srcKey)
	})
})
