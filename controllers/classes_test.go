package controllers_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	sandboxv1 "github.com/getsentry/sandbox-controller/api/v1alpha1"
	"github.com/getsentry/sandbox-controller/internal/vercel"
	"github.com/getsentry/sandbox-controller/localstack"
	"github.com/getsentry/sandbox-controller/localstack/emulator"
)

// tenantCredentials are the emulator's tenants besides its own token: each
// token sees only its own team and project. Each spec below uses its own
// tenant, so that a rotation or a default class in one does not reach the
// others.
var tenantCredentials = []emulator.Credential{
	{Token: "tok_alpha", Teams: []string{"team_alpha"}, Projects: []string{"prj_alpha"}},
	{Token: "tok_beta", Teams: []string{"team_beta"}, Projects: []string{"prj_beta"}},
	{Token: "tok_rotate", Teams: []string{"team_rotate"}, Projects: []string{"prj_rotate"}},
	{Token: "tok_held", Teams: []string{"team_held"}, Projects: []string{"prj_held"}},
	{Token: "tok_default", Teams: []string{"team_default"}, Projects: []string{"prj_default"}},
	{Token: "tok_crash", Teams: []string{"team_crash"}, Projects: []string{"prj_crash"}},
	{Token: "tok_keys", Teams: []string{"team_keys"}, Projects: []string{"prj_keys"}},
}

// classSecretNamespace holds the classes' Secrets, as a cluster admin would
// keep them in the manager's namespace.
const classSecretNamespace = "sandbox-classes"

// newClass creates the Secret and the SandboxClass of one tenant; selector
// labels, when set, are the namespaces' labels it allows.
func newClass(name, token, team, project string, selector map[string]string, annotations map[string]string, mods ...func(*sandboxv1.SandboxClass)) *sandboxv1.SandboxClass {
	ctx := context.Background()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: classSecretNamespace}}
	if err := k8sClient.Create(ctx, ns); err != nil && !apierrors.IsAlreadyExists(err) {
		Expect(err).NotTo(HaveOccurred())
	}
	sec := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: classSecretNamespace, Name: name + "-credentials"},
		Data: map[string][]byte{
			sandboxv1.ClassSecretTokenKey:     []byte(token),
			sandboxv1.ClassSecretTeamIDKey:    []byte(team),
			sandboxv1.ClassSecretProjectIDKey: []byte(project),
		},
	}
	Expect(k8sClient.Create(ctx, sec)).To(Succeed())
	cl := &sandboxv1.SandboxClass{
		ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: annotations},
		Spec: sandboxv1.SandboxClassSpec{
			CredentialsSecretRef: sandboxv1.ClassSecretReference{Namespace: classSecretNamespace, Name: sec.Name},
		},
	}
	if selector != nil {
		cl.Spec.NamespaceSelector = &metav1.LabelSelector{MatchLabels: selector}
	}
	for _, m := range mods {
		m(cl)
	}
	Expect(k8sClient.Create(ctx, cl)).To(Succeed())
	// A class left behind keeps verifying its credentials through the
	// recording proxy, which specs that count Vercel requests would see.
	DeferCleanup(func() {
		Expect(client.IgnoreNotFound(k8sClient.Delete(ctx, &sandboxv1.SandboxClass{ObjectMeta: metav1.ObjectMeta{Name: name}}))).To(Succeed())
		// The class goes only once no object uses it. An object an earlier
		// spec left behind, created in the same second as this class, was
		// given it (a default class applies to objects not older than it),
		// and envtest never finishes deleting a namespace: delete every
		// object pinned to the class, not only this spec's.
		deleteClassUsers(ctx, name)
		Eventually(func() bool {
			return apierrors.IsNotFound(k8sClient.Get(ctx, types.NamespacedName{Name: name}, &sandboxv1.SandboxClass{}))
		}, time.Minute).Should(BeTrue(), "SandboxClass %s is still there", name)
		Expect(client.IgnoreNotFound(k8sClient.Delete(ctx, sec))).To(Succeed())
	})
	return cl
}

// deleteClassUsers deletes every Sandbox, SandboxSnapshot and SandboxFork
// pinned to class name, in any namespace.
func deleteClassUsers(ctx context.Context, name string) {
	GinkgoHelper()
	pinned := client.MatchingLabels{sandboxv1.LabelClass: name}
	for _, list := range []client.ObjectList{&sandboxv1.SandboxList{}, &sandboxv1.SandboxSnapshotList{}, &sandboxv1.SandboxForkList{}} {
		Expect(k8sClient.List(ctx, list, pinned)).To(Succeed())
		Expect(meta.EachListItem(list, func(o runtime.Object) error {
			return client.IgnoreNotFound(k8sClient.Delete(ctx, o.(client.Object)))
		})).To(Succeed())
	}
}

// labelledNamespace creates a namespace for one spec with labels.
func labelledNamespace(labels map[string]string) string {
	ns := newNamespace()
	n := &corev1.Namespace{}
	Expect(k8sClient.Get(context.Background(), types.NamespacedName{Name: ns}, n)).To(Succeed())
	n.Labels = labels
	Expect(k8sClient.Update(context.Background(), n)).To(Succeed())
	return ns
}

func classCondition(name, condType string) func(Gomega) *metav1.Condition {
	return func(g Gomega) *metav1.Condition {
		cl := &sandboxv1.SandboxClass{}
		g.Expect(k8sClient.Get(context.Background(), types.NamespacedName{Name: name}, cl)).To(Succeed())
		return meta.FindStatusCondition(cl.Status.Conditions, condType)
	}
}

func sandboxCondition(key types.NamespacedName, condType string) func(Gomega) *metav1.Condition {
	return func(g Gomega) *metav1.Condition {
		sbx := &sandboxv1.Sandbox{}
		g.Expect(k8sClient.Get(context.Background(), key, sbx)).To(Succeed())
		return meta.FindStatusCondition(sbx.Status.Conditions, condType)
	}
}

// remoteNames are the names of the live Vercel sandboxes of one team and
// project, as the emulator holds them.
func remoteNames(team, project string) []string {
	var out []string
	for _, s := range emu.LiveSandboxesIn(team, project) {
		out = append(out, s.Name)
	}
	return out
}

// remoteWithUID says whether any live Vercel sandbox, in any team or
// project, is tagged with uid.
func remoteWithUID(uid types.UID) bool {
	for _, s := range emu.LiveSandboxes() {
		if s.Tags["k8s-uid"] == string(uid) {
			return true
		}
	}
	return false
}

func withStatus(reason string) OmegaMatcher {
	return And(Not(BeNil()), HaveField("Status", metav1.ConditionFalse), HaveField("Reason", reason))
}

var _ = Describe("SandboxClass", func() {
	ctx := context.Background()

	It("puts two classes in two namespaces into two Vercel projects that never see each other's sandboxes", func() {
		newClass("alpha", "tok_alpha", "team_alpha", "prj_alpha", map[string]string{"tenant": "alpha"}, nil)
		newClass("beta", "tok_beta", "team_beta", "prj_beta", map[string]string{"tenant": "beta"}, nil)
		nsA := labelledNamespace(map[string]string{"tenant": "alpha"})
		nsB := labelledNamespace(map[string]string{"tenant": "beta"})
		a := newSandbox(nsA, "box", sandboxv1.SandboxSpec{Source: runtimeSource("node24"), ClassName: ptr.To("alpha")})
		b := newSandbox(nsB, "box", sandboxv1.SandboxSpec{Source: runtimeSource("node24"), ClassName: ptr.To("beta")})
		sa := waitReady(client.ObjectKeyFromObject(a))
		sb := waitReady(client.ObjectKeyFromObject(b))

		By("checking from the emulator's side: each sandbox is in its class's team and project only")
		Expect(remoteNames("team_alpha", "prj_alpha")).To(ConsistOf(sa.Status.VercelName))
		Expect(remoteNames("team_beta", "prj_beta")).To(ConsistOf(sb.Status.VercelName))
		Expect(remoteNames(localstack.TeamID, localstack.ProjectID)).NotTo(ContainElements(sa.Status.VercelName, sb.Status.VercelName))

		By("checking that one class's token cannot read the other's sandbox")
		for _, c := range []struct{ tok, team, project, other string }{
			{"tok_alpha", "team_beta", "prj_beta", sb.Status.VercelName},
			{"tok_beta", "team_alpha", "prj_alpha", sa.Status.VercelName},
		} {
			api, err := vercel.New(vercel.Config{BaseURL: emu.URL(), Token: c.tok, TeamID: c.team, ProjectID: c.project, MaxRetries: -1})
			Expect(err).NotTo(HaveOccurred())
			_, err = api.GetSandbox(ctx, c.other, false)
			Expect(vercel.IsUnauthorized(err)).To(BeTrue(), "%s read %s: %v", c.tok, c.other, err)
		}

		By("reporting on each class: valid credentials, its ids, one user")
		for _, c := range []struct{ name, team, project string }{{"alpha", "team_alpha", "prj_alpha"}, {"beta", "team_beta", "prj_beta"}} {
			Eventually(classCondition(c.name, sandboxv1.ConditionCredentialsValid)).Should(And(Not(BeNil()), HaveField("Status", metav1.ConditionTrue)))
			Eventually(func(g Gomega) {
				cl := &sandboxv1.SandboxClass{}
				g.Expect(k8sClient.Get(ctx, types.NamespacedName{Name: c.name}, cl)).To(Succeed())
				g.Expect(cl.Status.TeamID).To(Equal(c.team))
				g.Expect(cl.Status.ProjectID).To(Equal(c.project))
				g.Expect(cl.Status.InUse).To(Equal(int32(1)))
				g.Expect(cl.Finalizers).To(ContainElement(sandboxv1.SandboxClassFinalizer))
			}).Should(Succeed())
		}
		Expect(sa.Labels).To(HaveKeyWithValue(sandboxv1.LabelClass, "alpha"))

		By("refusing a namespace outside the class's selector, without any call to Vercel")
		refused := newSandbox(nsB, "intruder", sandboxv1.SandboxSpec{Source: runtimeSource("node24"), ClassName: ptr.To("alpha")})
		key := client.ObjectKeyFromObject(refused)
		Eventually(readyCondition(key)).Should(withStatus(sandboxv1.ReasonClassNotAllowed))
		c := readyCondition(key)(Default)
		Expect(c.Message).To(ContainSubstring(`SandboxClass "alpha"`))
		Expect(c.Message).To(ContainSubstring(nsB))
		Consistently(func() bool { return remoteWithUID(refused.UID) }, 2*time.Second).Should(BeFalse())
		Expect(getSandbox(key).Status.VercelName).To(BeEmpty())
		expectEvent(key, "Warning ClassNotAllowed")

		By("refusing a snapshot of another class (ClassMismatch on ResolvedRefs), without any call to Vercel")
		snap := &sandboxv1.SandboxSnapshot{
			ObjectMeta: metav1.ObjectMeta{Namespace: nsB, Name: "beta-snap"},
			Spec: sandboxv1.SandboxSnapshotSpec{ClassName: ptr.To("beta"),
				Source: sandboxv1.SandboxSnapshotSource{SandboxRef: &sandboxv1.LocalObjectReference{Name: "nothing-yet"}}},
		}
		Expect(k8sClient.Create(ctx, snap)).To(Succeed())
		// A class that allows every namespace, in its own project.
		newClass("alpha-open", "tok_alpha", "team_alpha", "prj_alpha", nil, nil)
		cross := newSandbox(nsB, "cross", sandboxv1.SandboxSpec{
			Source:    sandboxv1.SandboxSource{SnapshotRef: &sandboxv1.LocalObjectReference{Name: "beta-snap"}},
			ClassName: ptr.To("alpha-open"),
		})
		Eventually(sandboxCondition(client.ObjectKeyFromObject(cross), sandboxv1.ConditionResolvedRefs)).Should(withStatus(sandboxv1.ReasonClassMismatch))
		Expect(readyCondition(client.ObjectKeyFromObject(cross))(Default).Message).To(ContainSubstring(`is of class "beta"`))
		Expect(remoteWithUID(cross.UID)).To(BeFalse())

		Expect(k8sClient.Delete(ctx, a)).To(Succeed())
		Expect(k8sClient.Delete(ctx, b)).To(Succeed())
		Expect(k8sClient.Delete(ctx, refused)).To(Succeed())
		Expect(k8sClient.Delete(ctx, cross)).To(Succeed())
		Expect(k8sClient.Delete(ctx, snap)).To(Succeed())
		Eventually(func() []string { return remoteNames("team_alpha", "prj_alpha") }).Should(BeEmpty())
		Eventually(func() []string { return remoteNames("team_beta", "prj_beta") }).Should(BeEmpty())
	})

	It("uses a token rotated in the class's Secret without a restart", func() {
		newClass("rotate", "tok_rotate", "team_rotate", "prj_rotate", nil, nil)
		ns := newNamespace()
		sbx := newSandbox(ns, "box", sandboxv1.SandboxSpec{Source: runtimeSource("node24"), ClassName: ptr.To("rotate")})
		key := client.ObjectKeyFromObject(sbx)
		waitReady(key)
		Eventually(classCondition("rotate", sandboxv1.ConditionCredentialsValid)).Should(And(Not(BeNil()), HaveField("Status", metav1.ConditionTrue)))

		By("revoking the token in Vercel: the class and its Sandbox say so")
		Expect(emu.SetTeamToken("team_rotate", "tok_rotate_2")).To(Succeed())
		Eventually(classCondition("rotate", sandboxv1.ConditionCredentialsValid)).Should(withStatus(sandboxv1.ReasonUnauthorized))
		Expect(classCondition("rotate", sandboxv1.ConditionCredentialsValid)(Default).Message).To(ContainSubstring("sandbox-classes/rotate-credentials"))
		Eventually(sandboxCondition(key, sandboxv1.ConditionSynced), 45*time.Second).Should(withStatus(sandboxv1.ReasonUnauthorized))
		Expect(sandboxCondition(key, sandboxv1.ConditionSynced)(Default).Message).To(ContainSubstring(`SandboxClass "rotate"`))

		By("writing the new token into the Secret: used without a restart")
		sec := &corev1.Secret{}
		Expect(k8sClient.Get(ctx, types.NamespacedName{Namespace: classSecretNamespace, Name: "rotate-credentials"}, sec)).To(Succeed())
		sec.Data[sandboxv1.ClassSecretTokenKey] = []byte("tok_rotate_2")
		Expect(k8sClient.Update(ctx, sec)).To(Succeed())
		Eventually(classCondition("rotate", sandboxv1.ConditionCredentialsValid), 45*time.Second).Should(And(Not(BeNil()), HaveField("Status", metav1.ConditionTrue)))
		Eventually(sandboxCondition(key, sandboxv1.ConditionSynced), 90*time.Second).Should(And(Not(BeNil()), HaveField("Status", metav1.ConditionTrue)))
		Eventually(readyCondition(key)).Should(And(Not(BeNil()), HaveField("Status", metav1.ConditionTrue)))
		Expect(remoteNames("team_rotate", "prj_rotate")).To(ConsistOf(getSandbox(key).Status.VercelName))
		for _, l := range strings.Split(logs.String(), "\n") {
			Expect(l).NotTo(ContainSubstring("tok_rotate"), "a token in the log")
		}
		Expect(k8sClient.Delete(ctx, sbx)).To(Succeed())
		Eventually(func() []string { return remoteNames("team_rotate", "prj_rotate") }).Should(BeEmpty())
	})

	It("holds a class being deleted until no object uses it", func() {
		newClass("held", "tok_held", "team_held", "prj_held", nil, nil, func(cl *sandboxv1.SandboxClass) {
			cl.Spec.Defaults = &sandboxv1.SandboxClassDefaults{Resources: &sandboxv1.SandboxResources{VCPUs: ptr.To[int32](4)}}
		})
		ns := newNamespace()
		sbx := newSandbox(ns, "box", sandboxv1.SandboxSpec{Source: runtimeSource("node24"), ClassName: ptr.To("held")})
		got := waitReady(client.ObjectKeyFromObject(sbx))

		By("applying the class's defaults to what the Sandbox leaves unset")
		Expect(got.Spec.Resources).NotTo(BeNil())
		Expect(got.Spec.Resources.VCPUs).To(HaveValue(Equal(int32(4))))
		remote := emu.LiveSandboxesIn("team_held", "prj_held")
		Expect(remote).To(HaveLen(1))
		Expect(remote[0].VCPUs).To(Equal(int64(4)))
		Eventually(func(g Gomega) int32 {
			cl := &sandboxv1.SandboxClass{}
			g.Expect(k8sClient.Get(ctx, types.NamespacedName{Name: "held"}, cl)).To(Succeed())
			return cl.Status.InUse
		}).Should(Equal(int32(1)))

		cl := &sandboxv1.SandboxClass{ObjectMeta: metav1.ObjectMeta{Name: "held"}}
		Expect(k8sClient.Delete(ctx, cl)).To(Succeed())
		Eventually(classCondition("held", sandboxv1.ConditionReady)).Should(withStatus(sandboxv1.ReasonInUse))
		Expect(classCondition("held", sandboxv1.ConditionReady)(Default).Message).To(ContainSubstring("1 Sandboxes"))

		By("refusing new objects of the class meanwhile")
		late := newSandbox(ns, "late", sandboxv1.SandboxSpec{Source: runtimeSource("node24"), ClassName: ptr.To("held")})
		Eventually(readyCondition(client.ObjectKeyFromObject(late))).Should(withStatus(sandboxv1.ReasonClassNotFound))
		Expect(readyCondition(client.ObjectKeyFromObject(late))(Default).Message).To(ContainSubstring("being deleted"))

		By("keeping the class while its user runs")
		Consistently(func() error {
			return k8sClient.Get(ctx, types.NamespacedName{Name: "held"}, &sandboxv1.SandboxClass{})
		}, 2*time.Second).Should(Succeed())

		By("releasing it once the last user is gone, its Vercel sandbox deleted with the class's client")
		Expect(k8sClient.Delete(ctx, sbx)).To(Succeed())
		Expect(k8sClient.Delete(ctx, late)).To(Succeed())
		Eventually(func() bool {
			return apierrors.IsNotFound(k8sClient.Get(ctx, types.NamespacedName{Name: "held"}, &sandboxv1.SandboxClass{}))
		}).Should(BeTrue())
		Expect(remoteNames("team_held", "prj_held")).To(BeEmpty())
	})

	It("refuses a change of spec.className and an over-long class name, naming the field", func() {
		ns := newNamespace()
		write := func(manifest string) string {
			f := filepath.Join(GinkgoT().TempDir(), "m.yaml")
			Expect(os.WriteFile(f, []byte(manifest), 0o600)).To(Succeed())
			return f
		}
		sbx := fmt.Sprintf("apiVersion: sandbox.sentry.io/v1alpha1\nkind: Sandbox\nmetadata: {name: fixed, namespace: %s}\nspec:\n  source: {runtime: node24}\n  state: Stopped\n  className: %%s\n", ns)
		// The class does not exist: the object waits (ClassNotFound); the
		// API server's validation is what is checked here.
		out, err := kubectl("apply", "-f", write(fmt.Sprintf(sbx, "one")))
		Expect(err).NotTo(HaveOccurred(), out)
		out, err = kubectl("apply", "--dry-run=server", "-f", write(fmt.Sprintf(sbx, "two")))
		Expect(err).To(HaveOccurred())
		Expect(out).To(ContainSubstring("spec.className"))
		Expect(out).To(ContainSubstring("spec.className is immutable"))
		Eventually(readyCondition(types.NamespacedName{Namespace: ns, Name: "fixed"})).Should(withStatus(sandboxv1.ReasonClassNotFound))

		out, err = kubectl("apply", "--dry-run=server", "-f", write(fmt.Sprintf(
			"apiVersion: sandbox.sentry.io/v1alpha1\nkind: SandboxClass\nmetadata: {name: %s}\nspec:\n  credentialsSecretRef: {name: s, namespace: creds}\n", strings.Repeat("a", 64))))
		Expect(err).To(HaveOccurred())
		Expect(out).To(ContainSubstring("metadata.name of a SandboxClass must be at most 63 characters"))

		By("accepting the samples of config/samples/classes")
		if err := k8sClient.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "sandbox-system"}}); err != nil && !apierrors.IsAlreadyExists(err) {
			Expect(err).NotTo(HaveOccurred())
		}
		out, err = kubectl("apply", "--dry-run=server", "-f", "config/samples/classes/sandboxclass.yaml")
		Expect(err).NotTo(HaveOccurred(), out)
		out, err = kubectl("apply", "--dry-run=server", "-n", ns, "-f", "config/samples/classes/sandbox_with_class.yaml")
		Expect(err).NotTo(HaveOccurred(), out)
	})

	It("gives objects that name no class the default class, and leaves objects reconciled before it on the manager's credentials", func() {
		before := newNamespace()
		old := newSandbox(before, "old", sandboxv1.SandboxSpec{Source: runtimeSource("node24")})
		oldSt := waitReady(client.ObjectKeyFromObject(old)).Status
		// Timestamps have a resolution of one second, and an object created
		// in the same second as the default class counts as newer.
		time.Sleep(time.Until(old.CreationTimestamp.Add(1100 * time.Millisecond)))

		// newClass deletes it after the spec, so the default class reaches
		// no other spec.
		newClass("default", "tok_default", "team_default", "prj_default", nil, map[string]string{sandboxv1.AnnotationDefaultClass: "true"})
		ns := newNamespace()
		sbx := newSandbox(ns, "box", sandboxv1.SandboxSpec{Source: runtimeSource("node24")})
		st := waitReady(client.ObjectKeyFromObject(sbx))
		Expect(st.Labels).To(HaveKeyWithValue(sandboxv1.LabelClass, "default"))
		Expect(remoteNames("team_default", "prj_default")).To(ConsistOf(st.Status.VercelName))

		By("reconciling the older Sandbox again: it stays where its Vercel sandbox is")
		annotate(client.ObjectKeyFromObject(old), sandboxv1.AnnotationReconcileRequestedAt, time.Now().Format(time.RFC3339Nano))
		Eventually(func() string { return getSandbox(client.ObjectKeyFromObject(old)).Status.LastHandledReconcileAt }).ShouldNot(BeEmpty())
		Expect(getSandbox(client.ObjectKeyFromObject(old)).Labels).To(HaveKeyWithValue(sandboxv1.LabelClass, ""))
		Expect(readyCondition(client.ObjectKeyFromObject(old))(Default).Status).To(Equal(metav1.ConditionTrue))
		Expect(remoteNames(localstack.TeamID, localstack.ProjectID)).To(ContainElement(oldSt.VercelName))
		Expect(remoteNames("team_default", "prj_default")).NotTo(ContainElement(oldSt.VercelName))

		Expect(k8sClient.Delete(ctx, sbx)).To(Succeed())
		Expect(k8sClient.Delete(ctx, old)).To(Succeed())
		Eventually(func() []string { return remoteNames("team_default", "prj_default") }).Should(BeEmpty())
	})
})

// The class label records which Vercel project holds an object's remote
// objects (pin); config/admission/class-label.yaml keeps it the
// controller's. A tenant who could write it would reach the manager's own
// credentials past the default class (an empty value), or point a running
// object at another project and orphan its sandbox.
var _ = Describe("The class label", func() {
	ctx := context.Background()

	It("is refused to a namespace editor at create and on any change, and points to spec.className", func() {
		ns := newNamespace()
		out, err := kubectl("create", "role", "sandbox-editor", "-n", ns, "--verb=create,get,list,update,patch",
			"--resource=sandboxes.sandbox.sentry.io,sandboxsnapshots.sandbox.sentry.io,sandboxforks.sandbox.sentry.io")
		Expect(err).NotTo(HaveOccurred(), out)
		out, err = kubectl("create", "rolebinding", "alice-edits", "-n", ns, "--role=sandbox-editor", "--user=alice")
		Expect(err).NotTo(HaveOccurred(), out)
		asAlice := func(manifest string) (string, error) {
			return kubectlWithManifest(manifest, "create", "--as=alice", "-n", ns)
		}
		refusal := And(ContainSubstring("is set by the controller"), ContainSubstring("spec.className"), ContainSubstring("user alice"))

		By("creating objects that carry the label, even empty (the manager's own credentials)")
		labelled := func(kind, name, value, spec string) string {
			return fmt.Sprintf("apiVersion: sandbox.sentry.io/v1alpha1\nkind: %s\nmetadata:\n  name: %s\n  labels:\n    %s: %q\nspec:\n%s", kind, name, sandboxv1.LabelClass, value, spec)
		}
		Eventually(func() string {
			out, _ := asAlice(labelled("Sandbox", "escape", "", "  source:\n    runtime: node24\n"))
			return out
		}).Should(refusal)
		out, err = asAlice(labelled("SandboxSnapshot", "escape", "beta", "  source:\n    sandboxRef:\n      name: plain\n"))
		Expect(err).To(HaveOccurred())
		Expect(out).To(refusal)
		out, err = asAlice(labelled("SandboxFork", "escape", "beta", "  source:\n    snapshotRef:\n      name: base\n  replicas: 1\n"))
		Expect(err).To(HaveOccurred())
		Expect(out).To(refusal)
		Expect(apierrors.IsNotFound(k8sClient.Get(ctx, types.NamespacedName{Namespace: ns, Name: "escape"}, &sandboxv1.Sandbox{}))).To(BeTrue())

		By("adding, changing or removing it on an object she may edit")
		out, err = asAlice("apiVersion: sandbox.sentry.io/v1alpha1\nkind: Sandbox\nmetadata:\n  name: plain\nspec:\n  source:\n    runtime: node24\n")
		Expect(err).NotTo(HaveOccurred(), out)
		key := types.NamespacedName{Namespace: ns, Name: "plain"}
		waitReady(key)
		out, err = kubectl("label", "--as=alice", "--overwrite", "-n", ns, "sandbox", "plain", sandboxv1.LabelClass+"=beta")
		Expect(err).To(HaveOccurred())
		Expect(out).To(refusal)
		// One allowed to (here the administrator, as the manager is by its
		// ClusterRole, which pins it once any SandboxClass exists) sets it;
		// she can then neither change nor remove it.
		out, err = kubectl("label", "--overwrite", "-n", ns, "sandbox", "plain", sandboxv1.LabelClass+"=")
		Expect(err).NotTo(HaveOccurred(), out)
		out, err = kubectl("label", "--as=alice", "--overwrite", "-n", ns, "sandbox", "plain", sandboxv1.LabelClass+"=beta")
		Expect(err).To(HaveOccurred())
		Expect(out).To(refusal)
		out, err = kubectl("label", "--as=alice", "-n", ns, "sandbox", "plain", sandboxv1.LabelClass+"-")
		Expect(err).To(HaveOccurred())
		Expect(out).To(refusal)
		Expect(getSandbox(key).Labels).To(HaveKeyWithValue(sandboxv1.LabelClass, ""))

		By("while other edits of a labelled object pass")
		out, err = kubectl("annotate", "--as=alice", "-n", ns, "sandbox", "plain", "example.com/note=kept")
		Expect(err).NotTo(HaveOccurred(), out)
	})
})
