package controllers_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	sandboxv1 "github.com/getsentry/sandbox-controller/api/v1alpha1"
	"github.com/getsentry/sandbox-controller/internal/vercel"
)

// Fork children inherit the Secret references of the Sandbox their snapshot
// was taken from, and the manager — which may read every Secret — creates
// them, so the secret-references admission policy never sees the fork's
// creator. The fork controller checks, per inherited Secret, that the creator
// recorded at admission (annotation sandbox.sentry.io/created-by) may get it.
//
// bob may create and read SandboxForks, Sandboxes and SandboxSnapshots but may
// not read the Secrets; alice may read both. The source Sandbox, made by the
// administrator, sends one Secret as env and one as an injected header.
var _ = Describe("Security: fork children inherit only Secrets the fork's creator may read", func() {
	ctx := context.Background()
	var ns string
	const (
		envSecret    = "env-secret"
		headerSecret = "header-secret"
		envValue     = "sk_live_ForkEnvCanary42"
		headerValue  = "sk_live_ForkHeaderCanary42"
	)

	grant := func(name string, rules []rbacv1.PolicyRule, users ...string) {
		Expect(k8sClient.Create(ctx, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Rules: rules})).To(Succeed())
		var subjects []rbacv1.Subject
		for _, u := range users {
			subjects = append(subjects, rbacv1.Subject{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: u})
		}
		Expect(k8sClient.Create(ctx, &rbacv1.RoleBinding{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: name},
			Subjects:   subjects,
		})).To(Succeed())
	}
	// forkAs creates a SandboxFork with the real kubectl, impersonating user.
	forkAs := func(user, name, source, template string) {
		GinkgoHelper()
		manifest := fmt.Sprintf(`apiVersion: sandbox.sentry.io/v1alpha1
kind: SandboxFork
metadata:
  name: %s
  namespace: %s
spec:
  keepSourceRunning: true
  source: %s
`, name, ns, source) + template
		Eventually(func() (string, error) { return kubectlWithManifest(manifest, "--as", user, "create") }).Should(ContainSubstring("created"))
	}
	getFork := func(name string) *sandboxv1.SandboxFork {
		f := &sandboxv1.SandboxFork{}
		Expect(k8sClient.Get(ctx, types.NamespacedName{Namespace: ns, Name: name}, f)).To(Succeed())
		return f
	}
	children := func(fork string) []sandboxv1.Sandbox {
		list := &sandboxv1.SandboxList{}
		Expect(k8sClient.List(ctx, list, client.InNamespace(ns), client.MatchingLabels{sandboxv1.LabelFork: fork})).To(Succeed())
		return list.Items
	}
	// refused waits for the fork to say why it creates no child, and checks
	// that none is created.
	refused := func(name string, want []string, notWant ...string) {
		GinkgoHelper()
		Eventually(func(g Gomega) {
			f := &sandboxv1.SandboxFork{}
			g.Expect(k8sClient.Get(ctx, types.NamespacedName{Namespace: ns, Name: name}, f)).To(Succeed())
			ready := meta.FindStatusCondition(f.Status.Conditions, sandboxv1.ConditionReady)
			g.Expect(ready).NotTo(BeNil(), "status: %+v", f.Status)
			g.Expect(ready.Reason).To(Equal(sandboxv1.ReasonSecretNotPermitted), "children: %d, condition: %+v", len(children(name)), ready)
			g.Expect(ready.ObservedGeneration).To(Equal(f.Generation))
			for _, w := range want {
				g.Expect(ready.Message).To(ContainSubstring(w))
			}
			for _, w := range notWant {
				g.Expect(ready.Message).NotTo(ContainSubstring(w))
			}
			g.Expect(ready.Message).NotTo(Or(ContainSubstring(envValue), ContainSubstring(headerValue)))
			g.Expect(f.Status.Phase).To(Equal(sandboxv1.ForkPending))
		}, 90*time.Second).Should(Succeed())
		Consistently(func() []sandboxv1.Sandbox { return children(name) }, 3*pollInterval).Should(BeEmpty())
		key := types.NamespacedName{Namespace: ns, Name: name}
		expectEvent(key, "Warning "+sandboxv1.ReasonSecretNotPermitted)
		for _, e := range eventsFor(key) {
			Expect(e).NotTo(Or(ContainSubstring(envValue), ContainSubstring(headerValue)))
		}
	}
	forkReady := func(name string, want int32) {
		GinkgoHelper()
		Eventually(func(g Gomega) {
			f := &sandboxv1.SandboxFork{}
			g.Expect(k8sClient.Get(ctx, types.NamespacedName{Namespace: ns, Name: name}, f)).To(Succeed())
			g.Expect(f.Status.Phase).To(Equal(sandboxv1.ForkReady), "status: %+v", f.Status)
			g.Expect(f.Status.ReadyReplicas).To(Equal(want))
		}, 90*time.Second).Should(Succeed())
	}
	creator := func(name string) map[string]any {
		GinkgoHelper()
		v, ok := getFork(name).Annotations[sandboxv1.AnnotationCreatedBy]
		Expect(ok).To(BeTrue(), "the fork records no creator")
		var out map[string]any
		Expect(json.Unmarshal([]byte(v), &out)).To(Succeed(), v)
		return out
	}

	BeforeEach(func() {
		ns = newNamespace()
		for name, value := range map[string]string{envSecret: envValue, headerSecret: headerValue} {
			Expect(k8sClient.Create(ctx, &corev1.Secret{
				ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
				Data:       map[string][]byte{"key": []byte(value)},
			})).To(Succeed())
		}
		grant("sandbox-users", []rbacv1.PolicyRule{{
			APIGroups: []string{sandboxv1.GroupVersion.Group},
			Resources: []string{"sandboxes", "sandboxsnapshots", "sandboxforks"},
			Verbs:     []string{"get", "list", "watch", "create", "update", "patch"},
		}}, "alice", "bob")
		grant("read-secrets", []rbacv1.PolicyRule{{
			APIGroups: []string{""}, Resources: []string{"secrets"}, Verbs: []string{"get"}, ResourceNames: []string{envSecret, headerSecret},
		}}, "alice")

		newSandbox(ns, "source", sandboxv1.SandboxSpec{
			Source: runtimeSource("node24"),
			Env: []sandboxv1.EnvVar{
				{Name: "MODE", Value: ptr.To("fast")},
				{Name: "API_KEY", ValueFrom: &sandboxv1.EnvVarSource{SecretKeyRef: sandboxv1.SecretKeySelector{Name: envSecret, Key: "key"}}},
			},
			NetworkPolicy: &sandboxv1.NetworkPolicy{Mode: sandboxv1.NetworkAllowlist, AllowedDomains: []string{"api.example.com"},
				InjectHeaders: []sandboxv1.HeaderInjection{{
					Domain:  "api.example.com",
					Headers: []sandboxv1.InjectedHeader{{Name: "Authorization", ValueFrom: sandboxv1.EnvVarSource{SecretKeyRef: sandboxv1.SecretKeySelector{Name: headerSecret, Key: "key"}}}},
				}}},
		})
		waitReady(types.NamespacedName{Namespace: ns, Name: "source"})
	})

	It("refuses bob's fork of the Sandbox (sandboxRef), naming each Secret and bob, and creates alice's", func() {
		forkAs("bob", "bobs", "{sandboxRef: {name: source}}", "")
		Expect(creator("bobs")).To(HaveKeyWithValue("user", "bob"))
		refused("bobs", []string{"bob", envSecret, headerSecret, "spec.template.inherit"})

		By("alice, who may read both Secrets, gets children that send them")
		forkAs("alice", "alices", "{sandboxRef: {name: source}}", "")
		forkReady("alices", 1)
		kids := children("alices")
		Expect(kids).To(HaveLen(1))
		var sent vercel.CreateSandboxRequest
		Expect(json.Unmarshal(lastCreateFor(kids[0].Status.VercelName), &sent)).To(Succeed())
		Expect(sent.Env).To(HaveKeyWithValue("API_KEY", envValue))

		By("bob still gets nothing after alice's fork captured the same source")
		Consistently(func() []sandboxv1.Sandbox { return children("bobs") }, pollInterval).Should(BeEmpty())
	})

	It("refuses bob's fork of a SandboxSnapshot of the Sandbox (snapshotRef with inherited spec) for the Secrets the template does not replace", func() {
		newSnapshot(ns, "snap", sandboxv1.SandboxSnapshotSpec{
			Source:            sandboxv1.SandboxSnapshotSource{SandboxRef: &sandboxv1.LocalObjectReference{Name: "source"}},
			KeepSourceRunning: true,
		})
		waitSnapshotReady(types.NamespacedName{Namespace: ns, Name: "snap"})

		forkAs("bob", "bobs-snap", "{snapshotRef: {name: snap}}", "")
		refused("bobs-snap", []string{"bob", envSecret, headerSecret})

		By("a template env of his own replaces the inherited env: only the header Secret is refused")
		forkAs("bob", "bobs-env", "{snapshotRef: {name: snap}}", "  template: {spec: {env: [{name: MODE, value: mine}]}}\n")
		refused("bobs-env", []string{"bob", headerSecret, "spec.networkPolicy"}, envSecret)

		By("inherit None: bob's children get his template alone")
		forkAs("bob", "bobs-none", "{snapshotRef: {name: snap}}", "  template: {inherit: None}\n")
		forkReady("bobs-none", 1)
		kid := children("bobs-none")[0]
		Expect(kid.Spec.Env).To(BeEmpty())
		Expect(kid.Spec.NetworkPolicy).To(BeNil())

		By("alice forking the same snapshot gets the inherited references")
		forkAs("alice", "alices-snap", "{snapshotRef: {name: snap}}", "")
		forkReady("alices-snap", 1)
		kid = children("alices-snap")[0]
		Expect(kid.Spec.Env).To(ContainElement(HaveField("Name", "API_KEY")))
		Expect(kid.Spec.NetworkPolicy.InjectHeaders).To(HaveLen(1))
	})

	It("records the creator from the request, not from what the creator wrote, and keeps it", func() {
		forged := `{"user":"alice","groups":["system:masters"]}`
		forkAs("bob", "forged", "{sandboxRef: {name: source}}", "")
		out, err := kubectlWithManifest(fmt.Sprintf(`apiVersion: sandbox.sentry.io/v1alpha1
kind: SandboxFork
metadata:
  name: forged-at-create
  namespace: %s
  annotations:
    %s: '%s'
spec:
  source: {sandboxRef: {name: source}}
`, ns, sandboxv1.AnnotationCreatedBy, forged), "--as", "bob", "create")
		Expect(err).NotTo(HaveOccurred(), out)
		Expect(creator("forged-at-create")).To(HaveKeyWithValue("user", "bob"))
		Expect(creator("forged-at-create")["groups"]).NotTo(ContainElement("system:masters"))

		By("bob rewriting it on his fork: the record stays")
		out, err = kubectl("--as", "bob", "annotate", "--overwrite", "-n", ns, "sbxfork/forged", sandboxv1.AnnotationCreatedBy+"="+forged)
		Expect(strings.Contains(out, "annotated") || err != nil).To(BeTrue(), out)
		Expect(creator("forged")).To(HaveKeyWithValue("user", "bob"))
		By("bob removing it: the record stays")
		out, err = kubectl("--as", "bob", "annotate", "-n", ns, "sbxfork/forged", sandboxv1.AnnotationCreatedBy+"-")
		Expect(strings.Contains(out, "annotated") || err != nil).To(BeTrue(), out)
		Expect(creator("forged")).To(HaveKeyWithValue("user", "bob"))
		refused("forged", []string{"bob", envSecret})
		refused("forged-at-create", []string{"bob", envSecret})
	})
})
