package controllers_test

import (
	"context"
	"encoding/json"
	"net/url"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	sandboxv1 "github.com/getsentry/sandbox-controller/api/v1alpha1"
	"github.com/getsentry/sandbox-controller/internal/vercel"
)

// spec.rewind and status.history (docs/decisions/0006-rewind.md).
var _ = Describe("Sandbox history and rewind", func() {
	ctx := context.Background()
	var ns string
	BeforeEach(func() { ns = newNamespace() })

	const notes = "/vercel/sandbox/notes.txt"
	write := func(key types.NamespacedName, content string) {
		GinkgoHelper()
		Expect(vc.WriteFiles(ctx, getSandbox(key).Status.SessionID, []vercel.File{{Path: notes, Content: []byte(content), Mode: 0o644}})).To(Succeed())
	}
	read := func(key types.NamespacedName) string {
		GinkgoHelper()
		data, err := vc.ReadFile(ctx, getSandbox(key).Status.SessionID, notes, "")
		Expect(err).NotTo(HaveOccurred())
		return string(data)
	}
	// pause stops the Sandbox (a snapshot of its files) and returns the
	// snapshot the next session resumes from.
	pause := func(key types.NamespacedName) string {
		GinkgoHelper()
		before := getSandbox(key).Status.CurrentSnapshotID
		setState(key, sandboxv1.SandboxStateStopped)
		Eventually(func(g Gomega) {
			s := getSandbox(key)
			g.Expect(s.Status.Phase).To(Equal(sandboxv1.SandboxStopped))
			g.Expect(s.Status.CurrentSnapshotID).NotTo(BeEmpty())
			g.Expect(s.Status.CurrentSnapshotID).NotTo(Equal(before))
		}).Should(Succeed())
		return getSandbox(key).Status.CurrentSnapshotID
	}
	resume := func(key types.NamespacedName) *sandboxv1.Sandbox {
		GinkgoHelper()
		session := getSandbox(key).Status.SessionID
		setState(key, sandboxv1.SandboxStateRunning)
		Eventually(func(g Gomega) {
			s := getSandbox(key)
			g.Expect(s.Status.SessionID).NotTo(Equal(session))
		}).Should(Succeed())
		return waitReady(key)
	}
	rewindTo := func(key types.NamespacedName, token string, rw sandboxv1.SandboxRewind) {
		GinkgoHelper()
		// A merge patch: the field not set is sent as null, which removes it.
		body, err := json.Marshal(map[string]any{"spec": map[string]any{"rewind": map[string]any{
			"token": token, "snapshotRef": rw.SnapshotRef, "snapshotID": rw.SnapshotID}}})
		Expect(err).NotTo(HaveOccurred())
		Expect(k8sClient.Patch(ctx, &sandboxv1.Sandbox{ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name}},
			client.RawPatch(types.MergePatchType, body))).To(Succeed())
	}
	rewound := func(key types.NamespacedName, token string) *sandboxv1.Sandbox {
		GinkgoHelper()
		Eventually(func(g Gomega) *sandboxv1.RewindStatus { return getSandbox(key).Status.Rewind }).Should(And(
			Not(BeNil()), HaveField("Token", token), HaveField("State", sandboxv1.RewindRewound)))
		return getSandbox(key)
	}
	historyIDs := func(s *sandboxv1.Sandbox) (ids []string, current string) {
		for _, e := range s.Status.History {
			ids = append(ids, e.ID)
			if e.Current {
				current = e.ID
			}
		}
		return ids, current
	}
	newPersistent := func(name string) types.NamespacedName {
		key := types.NamespacedName{Namespace: ns, Name: name}
		newSandbox(ns, name, sandboxv1.SandboxSpec{Source: runtimeSource("node24")})
		waitReady(key)
		return key
	}

	It("rewinds to an earlier pause: the files are the earlier ones, the history shows both, and a new token rewinds again", func() {
		key := newPersistent("rewind")
		write(key, "A\n")
		a := pause(key)
		Eventually(func() []sandboxv1.SnapshotHistoryEntry { return getSandbox(key).Status.History }).Should(
			ConsistOf(And(HaveField("ID", a), HaveField("Current", true), HaveField("Automatic", true), HaveField("SizeBytes", BeNumerically(">", 0)))))

		resume(key)
		Expect(read(key)).To(Equal("A\n"))
		write(key, "B\n")
		b := pause(key)
		Eventually(func(g Gomega) {
			ids, current := historyIDs(getSandbox(key))
			g.Expect(ids).To(Equal([]string{b, a}), "newest first")
			g.Expect(current).To(Equal(b))
		}).Should(Succeed())

		By("rewinding a running session to A: it is stopped (a snapshot of B's files), A is made current, a new session resumes from it")
		running := resume(key)
		Expect(read(key)).To(Equal("B\n"))
		rewindTo(key, "first", sandboxv1.SandboxRewind{SnapshotID: &a})
		s := rewound(key, "first")
		Expect(s.Status.Rewind.SnapshotID).To(Equal(a))
		Eventually(func(g Gomega) {
			s := getSandbox(key)
			g.Expect(s.Status.SessionID).NotTo(Equal(running.Status.SessionID))
		}).Should(Succeed())
		s = waitReady(key)
		Expect(read(key)).To(Equal("A\n"), "the files of snapshot A")
		ids, current := historyIDs(s)
		Expect(current).To(Equal(a))
		Expect(ids).To(ContainElements(a, b))
		Expect(ids).To(HaveLen(3), "A, B and the snapshot the rewind's stop took")
		Expect(ids[0]).To(Equal(s.Status.Rewind.FromSnapshotID), "the stop's snapshot is the newest")
		vsb, ok := emu.Sandbox(s.Status.VercelName)
		Expect(ok).To(BeTrue())
		Expect(emuSessionOf(vsb.CurrentSessionID).SourceSnapshotID).To(Equal(a), "Vercel resumed from A")
		expectEvent(key, "Normal Rewinding")
		expectEvent(key, "Normal Rewound")

		By("the same snapshot again, with a new token")
		write(key, "C\n")
		rewindTo(key, "second", sandboxv1.SandboxRewind{SnapshotID: &a})
		rewound(key, "second")
		Eventually(func(g Gomega) {
			s := getSandbox(key)
			g.Expect(s.Status.Phase).To(Equal(sandboxv1.SandboxRunning))
			data, err := vc.ReadFile(ctx, s.Status.SessionID, notes, "")
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(string(data)).To(Equal("A\n"))
		}).Should(Succeed())

		By("another snapshot under the same token: refused by the API server")
		s = getSandbox(key)
		s.Spec.Rewind.SnapshotID = &b
		err := k8sClient.Update(ctx, s)
		Expect(apierrors.IsInvalid(err)).To(BeTrue(), "%v", err)
		Expect(err.Error()).To(ContainSubstring("spec.rewind: another snapshot needs a new spec.rewind.token"))
	})

	It("rewinds a paused Sandbox without resuming it, by SandboxSnapshot, and resumes from it later", func() {
		key := newPersistent("paused")
		write(key, "captured\n")
		newSnapshot(ns, "cap", sandboxv1.SandboxSnapshotSpec{KeepSourceRunning: true, Source: sandboxv1.SandboxSnapshotSource{
			SandboxRef: &sandboxv1.LocalObjectReference{Name: key.Name}}})
		snap := waitSnapshotReady(types.NamespacedName{Namespace: ns, Name: "cap"})
		waitReady(key)
		write(key, "later\n")
		pause(key)
		session := getSandbox(key).Status.SessionID

		rewindTo(key, "by-ref", sandboxv1.SandboxRewind{SnapshotRef: &sandboxv1.LocalObjectReference{Name: "cap"}})
		s := rewound(key, "by-ref")
		Expect(s.Status.Rewind.SnapshotName).To(Equal("cap"))
		Expect(s.Status.Rewind.SnapshotID).To(Equal(snap.Status.SnapshotID))
		Consistently(func() string { return getSandbox(key).Status.SessionID }, 2*pollInterval).Should(Equal(session), "spec.state Stopped: no session")
		Expect(getSandbox(key).Status.Phase).To(Equal(sandboxv1.SandboxStopped))

		resume(key)
		Expect(read(key)).To(Equal("captured\n"))
	})

	It("refuses snapshots it cannot rewind to in Ready, naming the field, and leaves the session running", func() {
		key := newPersistent("refused")
		other := newPersistent("other")
		otherSnap := pause(other)
		write(key, "kept\n")
		session := getSandbox(key).Status.SessionID
		expectRefused := func(token, want string) {
			GinkgoHelper()
			Eventually(func(g Gomega) {
				s := getSandbox(key)
				g.Expect(s.Status.Rewind).To(And(Not(BeNil()), HaveField("Token", token), HaveField("State", sandboxv1.RewindFailed)))
				g.Expect(readyCondition(key)(g)).To(And(HaveField("Status", metav1.ConditionFalse), HaveField("Reason", sandboxv1.ReasonRewindFailed),
					HaveField("Message", ContainSubstring(want))))
			}).Should(Succeed())
			s := getSandbox(key)
			Expect(s.Status.SessionID).To(Equal(session), "not stopped")
			Expect(s.Status.Phase).To(Equal(sandboxv1.SandboxRunning))
			expectEvent(key, "Warning RewindFailed: "+want)
		}

		rewindTo(key, "other", sandboxv1.SandboxRewind{SnapshotID: &otherSnap})
		expectRefused("other", "spec.rewind.snapshotID: Vercel snapshot "+otherSnap+" was not taken of this Sandbox's Vercel sandbox")

		unknown := "snap_" + strings.Repeat("0", 28)
		rewindTo(key, "unknown", sandboxv1.SandboxRewind{SnapshotID: &unknown})
		expectRefused("unknown", "spec.rewind.snapshotID: Vercel snapshot "+unknown+" does not exist in this Sandbox's Vercel project")

		rewindTo(key, "no-ref", sandboxv1.SandboxRewind{SnapshotRef: &sandboxv1.LocalObjectReference{Name: "nope"}})
		expectRefused("no-ref", `spec.rewind.snapshotRef: SandboxSnapshot "nope" does not exist in namespace `+ns)

		By("spec.rewind removed: Ready again")
		Expect(k8sClient.Patch(ctx, &sandboxv1.Sandbox{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: key.Name}},
			client.RawPatch(types.MergePatchType, []byte(`{"spec":{"rewind":null}}`)))).To(Succeed())
		waitReady(key)
		Expect(getSandbox(key).Status.SessionID).To(Equal(session))

		By("a snapshot of its own that was deleted")
		write(key, "own\n")
		own := pause(key)
		resume(key)
		session = getSandbox(key).Status.SessionID
		_, err := vc.DeleteSnapshot(ctx, own)
		Expect(err).NotTo(HaveOccurred())
		rewindTo(key, "deleted", sandboxv1.SandboxRewind{SnapshotID: &own})
		expectRefused("deleted", "spec.rewind.snapshotID: Vercel snapshot "+own+" was deleted or has expired")
		Expect(read(key)).To(Equal("own\n"), "the files untouched")
	})

	It("applies a rewind once across a crash between its PATCH and the status write: work done meanwhile is kept", func() {
		key := newPersistent("crash")
		write(key, "A\n")
		a := pause(key)
		resume(key)
		write(key, "B\n")
		b := pause(key)
		name := getSandbox(key).Status.VercelName
		isRewindPatch := func(r recordedRequest) bool {
			return r.Method == "PATCH" && strings.HasSuffix(r.Path, "/sandboxes/"+name) && strings.Contains(string(r.Body), `"currentSnapshotId"`)
		}
		committed := recorder.stallAfterCommit(isRewindPatch)

		By("the manager sending the PATCH, which Vercel applies, and crashing before it hears back")
		rewindTo(key, "crash", sandboxv1.SandboxRewind{SnapshotID: &a})
		Eventually(committed).Should(BeClosed())
		stopManager()
		s := getSandbox(key)
		Expect(s.Status.Rewind).To(And(Not(BeNil()), HaveField("State", sandboxv1.RewindRewinding), HaveField("FromSnapshotID", b)),
			"the intent was recorded before the PATCH")
		vsb, _ := emu.Sandbox(name)
		Expect(vsb.CurrentSnapshotID).To(Equal(a))

		By("a client resuming the sandbox meanwhile (the SDK), writing a file, and its session stopping")
		resp, err := vc.GetSandbox(ctx, name, true)
		Expect(err).NotTo(HaveOccurred())
		Expect(vc.WriteFiles(ctx, resp.Session.ID, []vercel.File{{Path: notes, Content: []byte("meanwhile\n"), Mode: 0o644}})).To(Succeed())
		stop, err := vc.StopSession(ctx, resp.Session.ID)
		Expect(err).NotTo(HaveOccurred())
		c := stop.Sandbox.CurrentSnapshotID
		Expect(c).NotTo(BeElementOf(a, b))

		By("the manager starting again: it records the rewind Vercel has, and sends nothing again")
		startManager(k8sClient.Scheme())
		s = rewound(key, "crash")
		Expect(s.Status.Rewind.Message).To(ContainSubstring("was not sent again"))
		n := 0
		for _, r := range recorder.requests("PATCH", "/sandboxes/"+name) {
			if isRewindPatch(r) {
				n++
			}
		}
		Expect(n).To(Equal(1), "one PATCH of currentSnapshotId")
		vsb, _ = emu.Sandbox(name)
		Expect(vsb.CurrentSnapshotID).To(Equal(c), "not set back to A")
		resume(key)
		Expect(read(key)).To(Equal("meanwhile\n"))
	})

	It("reads the snapshot listing only when the lineage changed: none while a session runs and is polled", func() {
		key := newPersistent("steady")
		pause(key)
		resume(key)
		name := getSandbox(key).Status.VercelName
		Eventually(func() []sandboxv1.SnapshotHistoryEntry { return getSandbox(key).Status.History }).Should(HaveLen(1))
		// This Sandbox's listings only: other specs' namespaces are being
		// deleted meanwhile.
		listings := func() int {
			n := 0
			for _, r := range recorder.requests("GET", "/v2/sandboxes/snapshots") {
				if q, err := url.ParseQuery(r.Query); err == nil && q.Get("name") == name {
					n++
				}
			}
			return n
		}
		Expect(listings()).To(BeNumerically(">=", 1), "the history was read from a listing of this sandbox's snapshots")
		polls := len(recorder.requests("GET", "/sandboxes/"+name))
		lists := listings()
		time.Sleep(3 * pollInterval)
		Expect(len(recorder.requests("GET", "/sandboxes/"+name))-polls).To(BeNumerically(">=", 2), "polled")
		Expect(listings()-lists).To(BeZero(), "no listing per poll")
	})

	It("needs the use verb on vercelsnapshots for spec.rewind.snapshotID; snapshotRef needs none", func() {
		Expect(k8sClient.Create(ctx, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "users"}, Rules: []rbacv1.PolicyRule{{
			APIGroups: []string{sandboxv1.GroupVersion.Group}, Resources: []string{"sandboxes"}, Verbs: []string{"get", "create", "update", "patch"},
		}}})).To(Succeed())
		Expect(k8sClient.Create(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "users"},
			RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "users"},
			Subjects: []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: "carol"}},
		})).To(Succeed())
		c := rest.CopyConfig(cfg)
		c.Impersonate = rest.ImpersonationConfig{UserName: "carol"}
		carol, err := client.New(c, client.Options{Scheme: k8sClient.Scheme()})
		Expect(err).NotTo(HaveOccurred())
		id := "snap_" + strings.Repeat("1", 28)
		sbx := func(rw sandboxv1.SandboxRewind) *sandboxv1.Sandbox {
			rw.Token = "t"
			return &sandboxv1.Sandbox{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "carols"},
				Spec: sandboxv1.SandboxSpec{Source: runtimeSource("node24"), Rewind: &rw}}
		}
		Eventually(func() error {
			return carol.Create(ctx, sbx(sandboxv1.SandboxRewind{SnapshotRef: &sandboxv1.LocalObjectReference{Name: "any"}}), client.DryRunAll)
		}).Should(Succeed())
		Eventually(func() string {
			err := carol.Create(ctx, sbx(sandboxv1.SandboxRewind{SnapshotID: &id}), client.DryRunAll)
			if err == nil || !apierrors.IsForbidden(err) {
				return ""
			}
			return err.Error()
		}).Should(ContainSubstring("user carol may not use Vercel snapshot id " + id + " in namespace " + ns + ": spec.rewind.snapshotID needs the verb use on vercelsnapshots"))
	})
})

// emuSessionOf is the emulator's session with id.
func emuSessionOf(sessionID string) vercel.Session {
	for _, s := range emu.Sessions() {
		if s.ID == sessionID {
			return s
		}
	}
	Fail("no emulator session " + sessionID)
	return vercel.Session{}
}
