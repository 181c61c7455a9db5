package controllers_test

import (
	"context"
	"net/http"
	"os"
	"path/filepath"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/yaml"

	sandboxv1 "github.com/getsentry/sandbox-controller/api/v1alpha1"
	"github.com/getsentry/sandbox-controller/controllers"
	"github.com/getsentry/sandbox-controller/internal/recipe"
	"github.com/getsentry/sandbox-controller/internal/vercel"
	"github.com/getsentry/sandbox-controller/localstack"
)

// docs/security.md names these specs as the proof that the operator deletes
// only what it made (issue 16 item 3), and of adoption (issue 17 item 4).
var _ = Describe("Ownership: the operator deletes and adopts only what is its own", func() {
	ctx := context.Background()
	var ns string
	BeforeEach(func() { ns = newNamespace() })

	// as returns a client impersonating user, who has only what grant gave.
	as := func(user string) client.Client {
		c := rest.CopyConfig(cfg)
		c.Impersonate = rest.ImpersonationConfig{UserName: user}
		cl, err := client.New(c, client.Options{Scheme: k8sClient.Scheme()})
		Expect(err).NotTo(HaveOccurred())
		return cl
	}
	grant := func(name string, roleRef rbacv1.RoleRef, rules []rbacv1.PolicyRule, user string) {
		if rules != nil {
			Expect(k8sClient.Create(ctx, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Rules: rules})).To(Succeed())
			roleRef = rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: name}
		}
		Expect(k8sClient.Create(ctx, &rbacv1.RoleBinding{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
			RoleRef:    roleRef,
			Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: user}},
		})).To(Succeed())
	}
	editor := func(user string, extra ...string) {
		grant("edit-"+user, rbacv1.RoleRef{}, []rbacv1.PolicyRule{{
			APIGroups: []string{sandboxv1.GroupVersion.Group},
			Resources: append([]string{"sandboxes", "sandboxsnapshots"}, extra...),
			Verbs:     []string{"get", "list", "watch", "create", "update", "patch", "delete"},
		}}, user)
	}
	// foreign makes a Vercel sandbox outside the operator and returns its name.
	foreign := func(name string, tags map[string]string) string {
		_, err := vc.CreateSandbox(ctx, vercel.CreateSandboxRequest{Name: name, Runtime: "node24", Tags: tags})
		Expect(err).NotTo(HaveOccurred())
		return name
	}
	alive := func(name string) bool {
		_, ok := emu.Sandbox(name)
		return ok
	}
	patchStatus := func(c client.Client, obj client.Object, mutate func()) {
		GinkgoHelper()
		Eventually(func() error {
			Expect(k8sClient.Get(ctx, client.ObjectKeyFromObject(obj), obj)).To(Succeed())
			before := obj.DeepCopyObject().(client.Object)
			mutate()
			return c.Status().Patch(ctx, obj, client.MergeFrom(before))
		}).Should(Succeed())
	}

	It("ignores a status.vercelName aimed at a foreign sandbox, and its finalizer deletes only its own", func() {
		victim := foreign(ns+"-victim", map[string]string{"team": "other"})
		editor("mallory", "sandboxes/status")
		mallory := as("mallory")
		key := types.NamespacedName{Namespace: ns, Name: "mine"}
		Eventually(func() error {
			return mallory.Create(ctx, &sandboxv1.Sandbox{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: key.Name}, Spec: sandboxv1.SandboxSpec{Source: runtimeSource("node24")}})
		}).Should(Succeed())
		own := waitReady(key).Status.VercelName

		By("mallory pointing status at the victim, then asking for a reconcile: the name is put back")
		sbx := &sandboxv1.Sandbox{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: key.Name}}
		patchStatus(mallory, sbx, func() { sbx.Status.VercelName = victim })
		annotate(key, sandboxv1.AnnotationReconcileRequestedAt, time.Now().String())
		Eventually(func() string { return getSandbox(key).Status.VercelName }).Should(Equal(own))
		expectEvent(key, `StatusNameIgnored: status.vercelName named Vercel sandbox "`+victim+`"`)
		Expect(readyCondition(key)(Default).Status).To(Equal(metav1.ConditionTrue), "its own sandbox still runs")

		By("mallory pointing status at the victim, then deleting the Sandbox: its own sandbox goes, the victim stays")
		patchStatus(mallory, sbx, func() { sbx.Status.VercelName = victim })
		Expect(mallory.Delete(ctx, sbx)).To(Succeed())
		Eventually(func() bool { return apierrors.IsNotFound(k8sClient.Get(ctx, key, &sandboxv1.Sandbox{})) }).Should(BeTrue())
		Expect(alive(own)).To(BeFalse(), "its own sandbox was deleted")
		Expect(alive(victim)).To(BeTrue(), "the victim was deleted")
		Expect(recorder.requests("DELETE", "/sandboxes/"+victim)).To(BeEmpty())
	})

	It("acts on no status.sessionID it did not observe: a shutdown stops its own session, not the one status was pointed at", func() {
		victim := foreign(ns+"-victim-session", map[string]string{"team": "other"})
		victimRemote, _ := emu.Sandbox(victim)
		victimSession := victimRemote.CurrentSessionID
		editor("mallory", "sandboxes/status")
		mallory := as("mallory")
		key := types.NamespacedName{Namespace: ns, Name: "timed"}
		shutdown := metav1.NewTime(time.Now().Add(20 * time.Second))
		Eventually(func() error {
			return mallory.Create(ctx, &sandboxv1.Sandbox{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: key.Name}, Spec: sandboxv1.SandboxSpec{
				Source: runtimeSource("node24"), DeletionPolicy: sandboxv1.DeletionPolicyRetain, ShutdownTime: &shutdown, ShutdownPolicy: sandboxv1.ShutdownDelete}})
		}).Should(Succeed())
		own := waitReady(key).Status.SessionID

		// Between two looks at Vercel (the suite polls every 2 s) the
		// controller works from status: mallory keeps it pointed at the
		// victim's session across the shutdown.
		stop := make(chan struct{})
		done := make(chan struct{})
		go func() {
			defer GinkgoRecover()
			defer close(done)
			for {
				select {
				case <-stop:
					return
				case <-time.After(50 * time.Millisecond):
				}
				sbx := &sandboxv1.Sandbox{}
				if k8sClient.Get(ctx, key, sbx) != nil || !sbx.DeletionTimestamp.IsZero() {
					return
				}
				if sbx.Status.SessionID != victimSession {
					before := sbx.DeepCopy()
					sbx.Status.SessionID = victimSession
					_ = mallory.Status().Patch(ctx, sbx, client.MergeFrom(before))
				}
			}
		}()
		DeferCleanup(func() { close(stop); <-done })
		Eventually(func() bool { return apierrors.IsNotFound(k8sClient.Get(ctx, key, &sandboxv1.Sandbox{})) }, time.Minute).Should(BeTrue())
		Expect(recorder.requests(http.MethodPost, victimSession)).To(BeEmpty(), "a call on the session status was pointed at")
		remote, _ := emu.Sandbox(victim)
		Expect(remote.CurrentSessionID).To(Equal(victimSession))
		Expect(sessionStatus(victimSession)).To(Equal(vercel.SessionRunning), "the victim's session was stopped")
		Expect(sessionStatus(own)).To(Equal(vercel.SessionStopped), "its own session still runs past the shutdown")
	})

	It("reports a sandbox of another owner under its derived name, and leaves it when deleted", func() {
		key := types.NamespacedName{Namespace: ns, Name: "squatted"}
		sbx := &sandboxv1.Sandbox{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: key.Name, Annotations: map[string]string{sandboxv1.AnnotationPaused: "true"}},
			Spec:       sandboxv1.SandboxSpec{Source: runtimeSource("node24")},
		}
		Expect(k8sClient.Create(ctx, sbx)).To(Succeed())
		// Another object of this cluster owns it: still not this one's.
		name := foreign(controllers.VercelName(ns, key.Name, sbx.UID), map[string]string{"managed-by": "sandbox-controller", "k8s-cluster": clusterID, "k8s-uid": "another-object"})
		annotate(key, sandboxv1.AnnotationPaused, "")
		Eventually(readyCondition(key)).Should(And(Not(BeNil()), HaveField("Reason", sandboxv1.ReasonNameConflict)))
		expectEvent(key, "NameConflict: A Vercel sandbox named "+name+" exists but was not created for this object")

		Expect(k8sClient.Delete(ctx, sbx)).To(Succeed())
		Eventually(func() bool { return apierrors.IsNotFound(k8sClient.Get(ctx, key, &sandboxv1.Sandbox{})) }).Should(BeTrue())
		Expect(alive(name)).To(BeTrue(), "the other owner's sandbox was deleted")
		expectEvent(key, "OwnedElsewhere: Left Vercel sandbox "+name+" alone")
	})

	It("never deletes a foreign sandbox that holds a recipe's builder name; the build starts once the name is free", func() {
		rcp := sandboxv1.SnapshotRecipe{Runtime: ptr.To(sandboxv1.Runtime("node24")), Setup: []sandboxv1.RecipeCommand{{Command: "sh", Args: []string{"-c", "echo built > /vercel/sandbox/built"}}}}
		name := foreign(controllers.BuilderName(clusterID, ns, recipe.Hash(&rcp, ""), ""), map[string]string{"app": "box"})
		key := types.NamespacedName{Namespace: ns, Name: "recipe"}
		newSnapshot(ns, key.Name, sandboxv1.SandboxSnapshotSpec{Source: sandboxv1.SandboxSnapshotSource{Recipe: &rcp}})
		Eventually(snapshotReason(key)).Should(Equal(sandboxv1.ReasonNameConflict))
		expectEvent(key, "NameConflict: A Vercel sandbox named "+name+" exists but was not created for this build")
		Expect(getSnapshotObj(key).Status.Phase).To(Equal(sandboxv1.SnapshotFailed))
		Consistently(func() bool { return alive(name) }, 3*time.Second).Should(BeTrue(), "the foreign sandbox was deleted")
		Expect(recorder.requests("DELETE", "/sandboxes/"+name)).To(BeEmpty())

		By("its owner deleting it: the build runs in a builder of its own")
		_, err := vc.DeleteSandbox(ctx, name, false)
		Expect(err).NotTo(HaveOccurred())
		annotateSnapshot(key, sandboxv1.AnnotationReconcileRequestedAt, time.Now().String())
		snap := waitSnapshotReady(key, 90*time.Second)
		Expect(snap.Status.Provenance.Origin).To(Equal(sandboxv1.SnapshotBuilt))
		deleteAndWait(key)
		Expect(emuSnapshot(snap.Status.SnapshotID).Status).To(Equal(vercel.SnapshotDeleted), "its own snapshot is deleted")
	})

	It("refuses to delete a snapshot that a status patch points at", func() {
		victim := vercelSnapshot(ctx, ns+"-victim", nil)
		editor("mallory", "sandboxsnapshots/status")
		mallory := as("mallory")
		src := types.NamespacedName{Namespace: ns, Name: "src"}
		Eventually(func() error {
			return mallory.Create(ctx, &sandboxv1.Sandbox{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: src.Name}, Spec: sandboxv1.SandboxSpec{Source: runtimeSource("node24")}})
		}).Should(Succeed())
		waitReady(src)
		key := types.NamespacedName{Namespace: ns, Name: "cap"}
		Expect(mallory.Create(ctx, &sandboxv1.SandboxSnapshot{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: key.Name},
			Spec:       sandboxv1.SandboxSnapshotSpec{Source: sandboxv1.SandboxSnapshotSource{SandboxRef: &sandboxv1.LocalObjectReference{Name: src.Name}}},
		})).To(Succeed())
		own := waitSnapshotReady(key).Status.SnapshotID

		snap := &sandboxv1.SandboxSnapshot{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: key.Name}}
		patchStatus(mallory, snap, func() { snap.Status.SnapshotID = victim })
		Expect(mallory.Delete(ctx, snap)).To(Succeed())
		Eventually(func() bool { return apierrors.IsNotFound(k8sClient.Get(ctx, key, &sandboxv1.SandboxSnapshot{})) }).Should(BeTrue())
		Expect(emuSnapshot(victim).Status).To(Equal(vercel.SnapshotCreated), "the victim snapshot was deleted")
		expectEvent(key, "OwnedElsewhere: Left Vercel snapshot "+victim+" alone")
		Expect(emuSnapshot(own).Status).To(Equal(vercel.SnapshotCreated), "status no longer named it: it is left, not guessed")
	})

	Context("adoption", func() {
		// adopting is a Sandbox that takes over the Vercel sandbox name.
		adopting := func(objName, name string) *sandboxv1.Sandbox {
			return &sandboxv1.Sandbox{
				ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: objName, Annotations: map[string]string{sandboxv1.AnnotationLastActivity: time.Now().UTC().Format(time.RFC3339)}},
				Spec:       sandboxv1.SandboxSpec{Source: sandboxv1.SandboxSource{Adopt: &sandboxv1.AdoptSource{Name: name}}, TimeoutSeconds: ptr.To[int64](600)},
			}
		}
		refused := func(err error, want string) {
			GinkgoHelper()
			Expect(err).To(HaveOccurred())
			Expect(apierrors.IsForbidden(err)).To(BeTrue(), "%v", err)
			Expect(err.Error()).To(ContainSubstring(want))
		}
		// The ClusterRole config/rbac ships, as `make deploy` installs it.
		shippedRole := func() rbacv1.RoleRef {
			b, err := os.ReadFile(filepath.Join(repoRoot, "config", "rbac", "sandbox_adopter_role.yaml"))
			Expect(err).NotTo(HaveOccurred())
			role := &rbacv1.ClusterRole{}
			Expect(yaml.Unmarshal(b, role)).To(Succeed())
			role.Name = ns + "-" + role.Name
			Expect(k8sClient.Create(ctx, role)).To(Succeed())
			DeferCleanup(func() { Expect(k8sClient.Delete(ctx, role)).To(Succeed()) })
			return rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role.Name}
		}

		It("adopts a sandbox created directly through the Vercel API without a restart, then pauses, resumes and deletes it", func() {
			name := ns + "-junior"
			created, err := vc.CreateSandbox(ctx, vercel.CreateSandboxRequest{Name: name, Runtime: "node24", Timeout: 600000, Tags: map[string]string{"app": "junior"}})
			Expect(err).NotTo(HaveOccurred())
			session := created.Session.ID
			runIn(ctx, session, "echo kept > /vercel/sandbox/marker")
			editor("alice")
			editor("bob")
			alice, bob := as("alice"), as("bob")
			grant("adopt-alice", shippedRole(), nil, "alice")
			grant("adopt-bob-other", rbacv1.RoleRef{}, []rbacv1.PolicyRule{{
				APIGroups: []string{sandboxv1.GroupVersion.Group}, Resources: []string{"vercelsandboxes"}, Verbs: []string{"use"}, ResourceNames: []string{ns + "-other"},
			}}, "bob")

			By("bob, allowed to adopt another name only: refused at admission")
			Eventually(func() error { return bob.Create(ctx, adopting("other", ns+"-other"), client.DryRunAll) }).Should(Succeed())
			refused(bob.Create(ctx, adopting("by-bob", name)), "user bob may not adopt Vercel sandbox "+name)

			By("alice, with the shipped role: adopted, tagged, its session kept")
			key := types.NamespacedName{Namespace: ns, Name: "junior"}
			Eventually(func() error { return alice.Create(ctx, adopting(key.Name, name)) }).Should(Succeed())
			sbx := waitReady(key)
			Expect(sbx.Status.SessionID).To(Equal(session), "adopted without a restart")
			Expect(sbx.Status.VercelName).To(Equal(name))
			expectEvent(key, "Adopted: Adopted Vercel sandbox "+name)
			remote, _ := emu.Sandbox(name)
			Expect(remote.Tags).To(Equal(map[string]string{"app": "junior", "managed-by": "sandbox-controller", "k8s-cluster": clusterID, "k8s-uid": string(sbx.UID)}))

			By("another Sandbox adopting it now: refused, it has an owner")
			second := types.NamespacedName{Namespace: ns, Name: "second"}
			Expect(alice.Create(ctx, adopting(second.Name, name))).To(Succeed())
			Eventually(readyCondition(second)).Should(And(Not(BeNil()), HaveField("Reason", sandboxv1.ReasonOwnedElsewhere)))
			expectEvent(second, "OwnedElsewhere: Vercel sandbox "+name+" is owned by the object with UID "+string(sbx.UID))
			Expect(alice.Delete(ctx, &sandboxv1.Sandbox{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: second.Name}})).To(Succeed())
			Eventually(func() bool { return apierrors.IsNotFound(k8sClient.Get(ctx, second, &sandboxv1.Sandbox{})) }).Should(BeTrue())
			Expect(alive(name)).To(BeTrue(), "the refused adopter's finalizer deleted it")

			By("pause and resume: the filesystem is kept")
			setState(key, sandboxv1.SandboxStateStopped)
			Eventually(func() sandboxv1.SandboxPhase { return getSandbox(key).Status.Phase }).Should(Equal(sandboxv1.SandboxStopped))
			setState(key, sandboxv1.SandboxStateRunning)
			Eventually(func(g Gomega) {
				s := getSandbox(key)
				g.Expect(s.Status.Phase).To(Equal(sandboxv1.SandboxRunning))
				g.Expect(s.Status.SessionID).NotTo(Equal(session))
			}, 60*time.Second).Should(Succeed())
			Expect(runIn(ctx, getSandbox(key).Status.SessionID, "cat /vercel/sandbox/marker")).To(Equal("kept\n"))

			By("delete: deletionPolicy Delete deletes the adopted sandbox")
			Expect(alice.Delete(ctx, &sandboxv1.Sandbox{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: key.Name}})).To(Succeed())
			Eventually(func() bool { return apierrors.IsNotFound(k8sClient.Get(ctx, key, &sandboxv1.Sandbox{})) }).Should(BeTrue())
			Expect(alive(name)).To(BeFalse())
		})

		It("releases a retained sandbox (owner tags removed), which a new Sandbox can adopt", func() {
			key := types.NamespacedName{Namespace: ns, Name: "first"}
			newSandbox(ns, key.Name, sandboxv1.SandboxSpec{Source: runtimeSource("node24"), DeletionPolicy: sandboxv1.DeletionPolicyRetain})
			name := waitReady(key).Status.VercelName
			Expect(k8sClient.Delete(ctx, getSandbox(key))).To(Succeed())
			Eventually(func() bool { return apierrors.IsNotFound(k8sClient.Get(ctx, key, &sandboxv1.Sandbox{})) }).Should(BeTrue())
			remote, ok := emu.Sandbox(name)
			Expect(ok).To(BeTrue())
			Expect(remote.Tags).To(BeEmpty(), "released")

			again := types.NamespacedName{Namespace: ns, Name: "again"}
			Expect(k8sClient.Create(ctx, adopting(again.Name, name))).To(Succeed())
			Expect(waitReady(again).Status.VercelName).To(Equal(name))
		})
	})
})

// annotateSnapshot sets one annotation of a SandboxSnapshot.
func annotateSnapshot(key types.NamespacedName, k, v string) {
	GinkgoHelper()
	annotateObj(&sandboxv1.SandboxSnapshot{ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name}}, k, v)
}

// Two clusters sharing one Vercel project: a second control plane with its
// own manager (--cluster-id cluster-b) against the suite's emulator.
var _ = Describe("Ownership across clusters sharing a Vercel project", Ordered, func() {
	ctx := context.Background()
	var other *localstack.Stack
	var cancel context.CancelFunc
	const otherCluster = "cluster-b"

	BeforeAll(func() {
		var err error
		other, err = localstack.Start(ctx, localstack.Options{RepoRoot: repoRoot, AssetsDir: os.Getenv("KUBEBUILDER_ASSETS"), EmulatorAddr: "-"})
		Expect(err).NotTo(HaveOccurred())
		DeferCleanup(func() { Expect(other.Stop()).To(Succeed()) })
		mgr, err := ctrl.NewManager(other.Config, ctrl.Options{
			Scheme: other.Scheme, Metrics: metricsserver.Options{BindAddress: "0"}, HealthProbeBindAddress: "0",
			Controller: config.Controller{SkipNameValidation: ptr.To(true)},
		})
		Expect(err).NotTo(HaveOccurred())
		Expect((&controllers.SandboxReconciler{Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(), Vercel: vc,
			Recorder: mgr.GetEventRecorder("sandbox-controller"), PollInterval: pollInterval, ClusterID: otherCluster,
			DigestKeySecret: controllers.DigestKeySecret{CreateMissing: true}}).SetupWithManager(mgr)).To(Succeed())
		Expect((&controllers.SandboxSnapshotReconciler{Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(), Vercel: vc,
			Recorder: mgr.GetEventRecorder("sandboxsnapshot-controller"), PollInterval: pollInterval, ClusterID: otherCluster}).SetupWithManager(mgr)).To(Succeed())
		var mctx context.Context
		mctx, cancel = context.WithCancel(ctx)
		done := make(chan struct{})
		go func() {
			defer GinkgoRecover()
			defer close(done)
			Expect(mgr.Start(mctx)).To(Succeed())
		}()
		DeferCleanup(func() { cancel(); <-done })
	})

	It("builds the same recipe in a builder of each cluster, and neither deletes the other's builder, snapshot or sandbox", func() {
		ns := newNamespace()
		Expect(other.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})).To(Succeed())
		rcp := sandboxv1.SnapshotRecipe{Runtime: ptr.To(sandboxv1.Runtime("node24")), Setup: []sandboxv1.RecipeCommand{{Command: "sh", Args: []string{"-c", "sleep 2; echo built > /vercel/sandbox/built"}}}}
		spec := sandboxv1.SandboxSnapshotSpec{Source: sandboxv1.SandboxSnapshotSource{Recipe: &rcp}}
		key := types.NamespacedName{Namespace: ns, Name: "recipe"}
		hash := recipe.Hash(&rcp, "")
		ours, theirs := controllers.BuilderName(clusterID, ns, hash, ""), controllers.BuilderName(otherCluster, ns, hash, "")
		Expect(ours).NotTo(Equal(theirs))

		newSnapshot(ns, key.Name, spec)
		Expect(other.Client.Create(ctx, &sandboxv1.SandboxSnapshot{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: key.Name}, Spec: spec})).To(Succeed())
		a := waitSnapshotReady(key, 90*time.Second)
		var b sandboxv1.SandboxSnapshot
		Eventually(func(g Gomega) {
			g.Expect(other.Client.Get(ctx, key, &b)).To(Succeed())
			g.Expect(b.Status.ReadyToUse).To(BeTrue(), "status: %+v", b.Status)
		}, 90*time.Second).Should(Succeed())
		Expect(createsFor(ours)).To(HaveLen(1), "this cluster's builder")
		Expect(createsFor(theirs)).To(HaveLen(1), "the other cluster's builder")
		Expect(b.Status.SnapshotID).NotTo(Equal(a.Status.SnapshotID), "each cluster serves its own snapshot")

		By("the other cluster adopting this cluster's sandbox: refused")
		src := types.NamespacedName{Namespace: ns, Name: "src"}
		newSandbox(ns, src.Name, sandboxv1.SandboxSpec{Source: runtimeSource("node24")})
		name := waitReady(src).Status.VercelName
		Expect(other.Client.Create(ctx, &sandboxv1.Sandbox{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "thief"},
			Spec:       sandboxv1.SandboxSpec{Source: sandboxv1.SandboxSource{Adopt: &sandboxv1.AdoptSource{Name: name}}},
		})).To(Succeed())
		Eventually(func(g Gomega) {
			s := &sandboxv1.Sandbox{}
			g.Expect(other.Client.Get(ctx, types.NamespacedName{Namespace: ns, Name: "thief"}, s)).To(Succeed())
			c := meta.FindStatusCondition(s.Status.Conditions, sandboxv1.ConditionReady)
			g.Expect(c).NotTo(BeNil())
			g.Expect(c.Reason).To(Equal(sandboxv1.ReasonOwnedElsewhere))
			g.Expect(c.Message).To(ContainSubstring(`owned by cluster "` + clusterID + `"`))
		}).Should(Succeed())

		By("deleting everything in the other cluster: this cluster's snapshot and sandbox stay")
		Expect(other.Client.Delete(ctx, &sandboxv1.Sandbox{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "thief"}})).To(Succeed())
		Expect(other.Client.Delete(ctx, &b)).To(Succeed())
		Eventually(func() bool { return apierrors.IsNotFound(other.Client.Get(ctx, key, &sandboxv1.SandboxSnapshot{})) }, 60*time.Second).Should(BeTrue())
		Eventually(func() bool {
			return apierrors.IsNotFound(other.Client.Get(ctx, types.NamespacedName{Namespace: ns, Name: "thief"}, &sandboxv1.Sandbox{}))
		}, 60*time.Second).Should(BeTrue())
		Expect(emuSnapshot(b.Status.SnapshotID).Status).To(Equal(vercel.SnapshotDeleted), "the other cluster deleted its own")
		Expect(emuSnapshot(a.Status.SnapshotID).Status).To(Equal(vercel.SnapshotCreated))
		_, ok := emu.Sandbox(name)
		Expect(ok).To(BeTrue())
		Expect(readyCondition(src)(Default).Status).To(Equal(metav1.ConditionTrue))
	})
})
