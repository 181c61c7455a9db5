package controllers_test

import (
	"context"
	"encoding/base64"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
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
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	sandboxv1 "github.com/getsentry/sandbox-controller/api/v1alpha1"
	"github.com/getsentry/sandbox-controller/internal/vercel"
	"github.com/getsentry/sandbox-controller/localstack/admissionpolicy"
)

// docs/security.md names these specs as the proof of each rule. Two users
// share a namespace and may both create the three kinds; only alice may read
// the Secret alice-secret (and, where a spec grants it, use snapshot ids).
// Each exfiltration route is tried by bob and refused at admission, and works
// for alice.
var _ = Describe("Security: authorization at admission", func() {
	ctx := context.Background()
	var ns string
	var alice, bob client.Client
	const aliceSecret = "alice-secret"
	const canaryValue = "sk_live_CanaryAdmission42"

	// as returns a client that impersonates user, with RBAC only what the
	// spec granted.
	as := func(user string) client.Client {
		c := rest.CopyConfig(cfg)
		c.Impersonate = rest.ImpersonationConfig{UserName: user}
		cl, err := client.New(c, client.Options{Scheme: k8sClient.Scheme()})
		Expect(err).NotTo(HaveOccurred())
		return cl
	}
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
	// refused asserts that create (or update) by c fails at admission with
	// a message that contains each of want.
	refused := func(err error, want ...string) {
		GinkgoHelper()
		Expect(err).To(HaveOccurred())
		Expect(apierrors.IsForbidden(err)).To(BeTrue(), "%v", err)
		for _, w := range want {
			Expect(err.Error()).To(ContainSubstring(w))
		}
	}
	envFrom := func(secret string) []sandboxv1.EnvVar {
		return []sandboxv1.EnvVar{{Name: "API_KEY", ValueFrom: &sandboxv1.EnvVarSource{SecretKeyRef: sandboxv1.SecretKeySelector{Name: secret, Key: "key"}}}}
	}
	headersFrom := func(secret string) *sandboxv1.NetworkPolicy {
		return &sandboxv1.NetworkPolicy{Mode: sandboxv1.NetworkAllowlist, InjectHeaders: []sandboxv1.HeaderInjection{{
			Domain:  "attacker.example.com",
			Headers: []sandboxv1.InjectedHeader{{Name: "Authorization", ValueFrom: sandboxv1.EnvVarSource{SecretKeyRef: sandboxv1.SecretKeySelector{Name: secret, Key: "key"}}}},
		}}}
	}
	// rulesFrom references secret from an allow rule (a transform header or
	// a forwardURL), behind a rule that references none.
	rulesFrom := func(secret string, forward bool) *sandboxv1.NetworkPolicy {
		rule := sandboxv1.NetworkRule{Transform: &sandboxv1.NetworkTransform{Headers: []sandboxv1.InjectedHeader{
			{Name: "Authorization", ValueFrom: sandboxv1.EnvVarSource{SecretKeyRef: sandboxv1.SecretKeySelector{Name: secret, Key: "key"}}}}}}
		if forward {
			rule = sandboxv1.NetworkRule{ForwardURL: &sandboxv1.ForwardURLSource{ValueFrom: sandboxv1.EnvVarSource{SecretKeyRef: sandboxv1.SecretKeySelector{Name: secret, Key: "key"}}}}
		}
		return &sandboxv1.NetworkPolicy{Mode: sandboxv1.NetworkAllowlist, Allow: []sandboxv1.DomainRules{
			{Domain: "registry.npmjs.org"},
			{Domain: "attacker.example.com", Rules: []sandboxv1.NetworkRule{
				{Match: &sandboxv1.NetworkMatch{Methods: []string{"GET"}}, Response: &sandboxv1.NetworkResponse{StatusCode: 403}}, rule}},
		}}
	}

	BeforeEach(func() {
		ns = newNamespace()
		Expect(k8sClient.Create(ctx, &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: aliceSecret},
			Data:       map[string][]byte{"key": []byte(canaryValue), "username": []byte("x-access-token"), "password": []byte(canaryValue)},
		})).To(Succeed())
		grant("sandbox-users", []rbacv1.PolicyRule{{
			APIGroups: []string{sandboxv1.GroupVersion.Group},
			Resources: []string{"sandboxes", "sandboxsnapshots", "sandboxforks"},
			Verbs:     []string{"get", "list", "watch", "create", "update", "patch", "delete"},
		}}, "alice", "bob")
		grant("read-alice-secret", []rbacv1.PolicyRule{{
			APIGroups: []string{""}, Resources: []string{"secrets"}, Verbs: []string{"get"}, ResourceNames: []string{aliceSecret},
		}}, "alice")
		alice, bob = as("alice"), as("bob")
		// RBAC takes effect when the API server's informers see it.
		Eventually(func() error {
			return alice.Create(ctx, &sandboxv1.Sandbox{
				ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "rbac-probe"},
				Spec:       sandboxv1.SandboxSpec{Source: runtimeSource("node24"), Env: envFrom(aliceSecret)},
			}, client.DryRunAll)
		}).Should(Succeed())
	})

	It("refuses every route that would send a Secret the user may not read, and admits it for one who may", func() {
		objects := map[string]client.Object{
			"Sandbox env": &sandboxv1.Sandbox{
				ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "env"},
				Spec:       sandboxv1.SandboxSpec{Source: runtimeSource("node24"), Env: envFrom(aliceSecret)},
			},
			"Sandbox injected header": &sandboxv1.Sandbox{
				ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "header"},
				Spec:       sandboxv1.SandboxSpec{Source: runtimeSource("node24"), NetworkPolicy: headersFrom(aliceSecret)},
			},
			"Sandbox transform header": &sandboxv1.Sandbox{
				ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "transform"},
				Spec:       sandboxv1.SandboxSpec{Source: runtimeSource("node24"), NetworkPolicy: rulesFrom(aliceSecret, false)},
			},
			"Sandbox forwardURL": &sandboxv1.Sandbox{
				ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "forward"},
				Spec:       sandboxv1.SandboxSpec{Source: runtimeSource("node24"), NetworkPolicy: rulesFrom(aliceSecret, true)},
			},
			"SandboxFork template transform header": &sandboxv1.SandboxFork{
				ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "fork-transform"},
				Spec: sandboxv1.SandboxForkSpec{
					Source:   sandboxv1.SandboxForkSource{SnapshotRef: &sandboxv1.LocalObjectReference{Name: "any"}},
					Template: sandboxv1.SandboxForkTemplate{Spec: sandboxv1.SandboxOverrides{NetworkPolicy: rulesFrom(aliceSecret, false)}},
				},
			},
			"SandboxFork template forwardURL": &sandboxv1.SandboxFork{
				ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "fork-forward"},
				Spec: sandboxv1.SandboxForkSpec{
					Source:   sandboxv1.SandboxForkSource{SnapshotRef: &sandboxv1.LocalObjectReference{Name: "any"}},
					Template: sandboxv1.SandboxForkTemplate{Spec: sandboxv1.SandboxOverrides{NetworkPolicy: rulesFrom(aliceSecret, true)}},
				},
			},
			"Sandbox git credentials": &sandboxv1.Sandbox{
				ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "git"},
				Spec: sandboxv1.SandboxSpec{Source: sandboxv1.SandboxSource{Git: &sandboxv1.GitSource{
					URL: "https://attacker.example.com/repo.git", Credentials: &sandboxv1.GitCredentials{SecretName: aliceSecret},
				}}},
			},
			"SandboxFork template env": &sandboxv1.SandboxFork{
				ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "fork-env"},
				Spec: sandboxv1.SandboxForkSpec{
					Source:   sandboxv1.SandboxForkSource{SnapshotRef: &sandboxv1.LocalObjectReference{Name: "any"}},
					Template: sandboxv1.SandboxForkTemplate{Spec: sandboxv1.SandboxOverrides{Env: envFrom(aliceSecret)}},
				},
			},
			"SandboxFork template injected header": &sandboxv1.SandboxFork{
				ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "fork-header"},
				Spec: sandboxv1.SandboxForkSpec{
					Source:   sandboxv1.SandboxForkSource{SnapshotRef: &sandboxv1.LocalObjectReference{Name: "any"}},
					Template: sandboxv1.SandboxForkTemplate{Spec: sandboxv1.SandboxOverrides{NetworkPolicy: headersFrom(aliceSecret)}},
				},
			},
			"SandboxSnapshot recipe clone credentials": &sandboxv1.SandboxSnapshot{
				ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "recipe"},
				Spec: sandboxv1.SandboxSnapshotSpec{Source: sandboxv1.SandboxSnapshotSource{Recipe: &sandboxv1.SnapshotRecipe{
					Runtime: ptr.To(sandboxv1.Runtime("node24")),
					Repositories: []sandboxv1.RecipeRepository{
						{URL: "https://example.com/public.git", Path: "public"},
						{URL: "https://attacker.example.com/repo.git", Path: "app", Credentials: &sandboxv1.GitCredentials{SecretName: aliceSecret}},
					},
				}}},
			},
		}
		for route, obj := range objects {
			By("bob, through " + route)
			refused(bob.Create(ctx, obj.DeepCopyObject().(client.Object)), "user bob may not get every Secret", aliceSecret)
			By("alice, through " + route)
			Expect(alice.Create(ctx, obj.DeepCopyObject().(client.Object), client.DryRunAll)).To(Succeed())
		}
	})

	It("authorizes up to 24 distinct Secrets in one object, each checked, duplicates once", func() {
		// The API server allows two authorizer checks per CEL expression and
		// about 28 per policy; the policy checks them in pairs.
		var env []sandboxv1.EnvVar
		var names []string
		for i := range 24 {
			name := fmt.Sprintf("many-%02d", i)
			names = append(names, name)
			Expect(k8sClient.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Data: map[string][]byte{"key": []byte("v")}})).To(Succeed())
			// Two variables per Secret: duplicates cost no second check.
			for _, v := range []string{"A", "B"} {
				env = append(env, sandboxv1.EnvVar{Name: fmt.Sprintf("%s_%02d", v, i), ValueFrom: &sandboxv1.EnvVarSource{SecretKeyRef: sandboxv1.SecretKeySelector{Name: name, Key: "key"}}})
			}
		}
		grant("read-many", []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"secrets"}, Verbs: []string{"get"}, ResourceNames: names[:23]}}, "alice")
		sbx := func(env []sandboxv1.EnvVar) *sandboxv1.Sandbox {
			return &sandboxv1.Sandbox{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "many"}, Spec: sandboxv1.SandboxSpec{Source: runtimeSource("node24"), Env: env}}
		}
		By("alice may read 23 of them: refused, naming the pair with the 24th")
		Eventually(func() error { return alice.Create(ctx, sbx(env[:46]), client.DryRunAll) }).Should(Succeed())
		refused(alice.Create(ctx, sbx(env), client.DryRunAll), "user alice may not get every Secret", "many-22, many-23")
		By("granted the 24th: admitted")
		grant("read-24th", []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"secrets"}, Verbs: []string{"get"}, ResourceNames: names[23:]}}, "alice")
		Eventually(func() error { return alice.Create(ctx, sbx(env), client.DryRunAll) }).Should(Succeed())
		By("a 25th distinct Secret: refused with the bound in the message")
		more := append(slices.Clone(env), sandboxv1.EnvVar{Name: "C", ValueFrom: &sandboxv1.EnvVarSource{SecretKeyRef: sandboxv1.SecretKeySelector{Name: aliceSecret, Key: "key"}}})
		err := alice.Create(ctx, sbx(more), client.DryRunAll)
		Expect(err).To(HaveOccurred())
		Expect(err.Error()).To(ContainSubstring("references 25 distinct Secrets; at most 24"))
	})

	It("checks every spec change of an object that references a Secret, not its metadata", func() {
		key := types.NamespacedName{Namespace: ns, Name: "alices"}
		Expect(alice.Create(ctx, &sandboxv1.Sandbox{
			ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name},
			Spec:       sandboxv1.SandboxSpec{Source: runtimeSource("node24"), Env: envFrom(aliceSecret)},
		})).To(Succeed())
		sbx := waitReady(key)
		Expect(sbx.Spec.Env).To(HaveLen(1))

		By("bob changing the spec: refused, he may not read the Secret it sends")
		s := getSandbox(key)
		s.Spec.NetworkPolicy = headersFrom(aliceSecret)
		refused(bob.Update(ctx, s), "user bob may not get every Secret", aliceSecret)
		By("bob sending a heartbeat (metadata only): admitted")
		Eventually(func() error {
			s := getSandbox(key)
			if s.Annotations == nil {
				s.Annotations = map[string]string{}
			}
			s.Annotations[sandboxv1.AnnotationLastActivity] = time.Now().UTC().Format(time.RFC3339)
			return bob.Update(ctx, s)
		}).Should(Succeed())
		By("alice changing the spec: admitted")
		Eventually(func() error {
			s := getSandbox(key)
			s.Spec.TimeoutSeconds = ptr.To[int64](600)
			return alice.Update(ctx, s)
		}).Should(Succeed())
		expectSecretNowhere(key, canaryValue)
	})

	It("refuses any Secret reference in the manager's own namespace, even an administrator's", func() {
		err := k8sClient.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: admissionpolicy.ManagerNamespace}})
		Expect(client.IgnoreAlreadyExists(err)).To(Succeed())
		refused(k8sClient.Create(ctx, &sandboxv1.Sandbox{
			ObjectMeta: metav1.ObjectMeta{Namespace: admissionpolicy.ManagerNamespace, Name: "steal-the-token"},
			Spec:       sandboxv1.SandboxSpec{Source: runtimeSource("node24"), Env: envFrom("vercel-credentials")},
		}, client.DryRunAll), "the sandbox-controller manager's own", "vercel-credentials")
		Expect(k8sClient.Create(ctx, &sandboxv1.Sandbox{
			ObjectMeta: metav1.ObjectMeta{Namespace: admissionpolicy.ManagerNamespace, Name: "no-secrets"},
			Spec:       sandboxv1.SandboxSpec{Source: runtimeSource("node24")},
		}, client.DryRunAll)).To(Succeed())
	})

	It("refuses a ServiceAccount-token Secret in the controller (admission cannot see the type)", func() {
		Expect(k8sClient.Create(ctx, &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "sa-token", Annotations: map[string]string{corev1.ServiceAccountNameKey: "default"}},
			Type:       corev1.SecretTypeServiceAccountToken,
			Data:       map[string][]byte{"token": []byte(canaryValue + "-sa")},
		})).To(Succeed())
		grant("read-sa-token", []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"secrets"}, Verbs: []string{"get"}, ResourceNames: []string{"sa-token"}}}, "alice")
		key := types.NamespacedName{Namespace: ns, Name: "sa"}
		Eventually(func() error {
			return alice.Create(ctx, &sandboxv1.Sandbox{
				ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name},
				Spec: sandboxv1.SandboxSpec{Source: runtimeSource("node24"), Env: []sandboxv1.EnvVar{{
					Name: "TOKEN", ValueFrom: &sandboxv1.EnvVarSource{SecretKeyRef: sandboxv1.SecretKeySelector{Name: "sa-token", Key: "token"}},
				}}},
			})
		}).Should(Succeed())
		Eventually(func(g Gomega) {
			s := getSandbox(key)
			c := meta.FindStatusCondition(s.Status.Conditions, sandboxv1.ConditionSynced)
			g.Expect(c).NotTo(BeNil())
			g.Expect(c.Reason).To(Equal(sandboxv1.ReasonSecretRefused))
			g.Expect(c.Message).To(ContainSubstring(`Secret "sa-token" is refused: a ServiceAccount token`))
		}).Should(Succeed())
		vercelName := getSandbox(key).Status.VercelName
		Expect(vercelName).NotTo(BeEmpty())
		Expect(createsFor(vercelName)).To(BeEmpty(), "nothing reached Vercel")
		expectSecretNowhere(key, canaryValue+"-sa")
	})

	Context("raw snapshot ids", func() {
		var id string
		BeforeEach(func() { id = vercelSnapshot(ctx, ns+"-raw", nil) })
		// The ClusterRole config/rbac ships, as `make deploy` installs it.
		shippedRole := func() *rbacv1.ClusterRole {
			b, err := os.ReadFile(filepath.Join(repoRoot, "config", "rbac", "sandbox_snapshot_id_user_role.yaml"))
			Expect(err).NotTo(HaveOccurred())
			role := &rbacv1.ClusterRole{}
			Expect(yaml.Unmarshal(b, role)).To(Succeed())
			role.Name = ns + "-" + role.Name // one per spec
			Expect(k8sClient.Create(ctx, role)).To(Succeed())
			DeferCleanup(func() { Expect(k8sClient.Delete(ctx, role)).To(Succeed()) })
			return role
		}
		importOf := func(name, id string) *sandboxv1.SandboxSnapshot {
			return &sandboxv1.SandboxSnapshot{
				ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
				Spec:       sandboxv1.SandboxSnapshotSpec{Source: sandboxv1.SandboxSnapshotSource{SnapshotID: &id}},
			}
		}
		bootOf := func(name, id string) *sandboxv1.Sandbox {
			return &sandboxv1.Sandbox{
				ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
				Spec:       sandboxv1.SandboxSpec{Source: sandboxv1.SandboxSource{SnapshotID: &id}},
			}
		}

		It("need the use verb on vercelsnapshots: refused without it, working with the shipped role", func() {
			role := shippedRole()
			Expect(k8sClient.Create(ctx, &rbacv1.RoleBinding{
				ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "snapshot-ids"},
				RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role.Name},
				Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: "alice"}},
			})).To(Succeed())

			By("bob importing it and booting from it: refused")
			refused(bob.Create(ctx, importOf("bobs-import", id)), "user bob may not use Vercel snapshot id "+id)
			refused(bob.Create(ctx, bootOf("bobs-boot", id)), "user bob may not use Vercel snapshot id "+id)

			By("alice importing it and booting from it: admitted, and both work")
			Eventually(func() error { return alice.Create(ctx, importOf("imported", id)) }).Should(Succeed())
			Expect(alice.Create(ctx, bootOf("booted", id))).To(Succeed())
			snap := waitSnapshotReady(types.NamespacedName{Namespace: ns, Name: "imported"})
			Expect(snap.Status.Provenance).To(Equal(&sandboxv1.SnapshotProvenance{Origin: sandboxv1.SnapshotImported, SourceSessionID: emuSnapshot(id).SourceSessionID}))
			sbx := waitReady(types.NamespacedName{Namespace: ns, Name: "booted"})
			Expect(sbx.Status.BootedFrom).To(Equal(&sandboxv1.BootedFrom{SnapshotID: id}))

			By("bob booting from alice's import by snapshotRef: no id, no permission needed")
			Expect(bob.Create(ctx, &sandboxv1.Sandbox{
				ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "by-ref"},
				Spec:       sandboxv1.SandboxSpec{Source: sandboxv1.SandboxSource{SnapshotRef: &sandboxv1.LocalObjectReference{Name: "imported"}}},
			}, client.DryRunAll)).To(Succeed())

			By("deleting the import with deletionPolicy Delete: the snapshot stays in Vercel")
			deleteAndWait(types.NamespacedName{Namespace: ns, Name: "imported"})
			Expect(emuSnapshot(id).Status).To(Equal(vercel.SnapshotCreated))
		})

		It("can be granted for some ids only (resourceNames)", func() {
			other := vercelSnapshot(ctx, ns+"-other", nil)
			grant("one-snapshot-id", []rbacv1.PolicyRule{{
				APIGroups: []string{sandboxv1.GroupVersion.Group}, Resources: []string{"vercelsnapshots"}, Verbs: []string{"use"}, ResourceNames: []string{id},
			}}, "bob")
			Eventually(func() error { return bob.Create(ctx, importOf("allowed", id), client.DryRunAll) }).Should(Succeed())
			refused(bob.Create(ctx, importOf("other", other), client.DryRunAll), "user bob may not use Vercel snapshot id "+other)
		})

		It("records the provenance of a snapshot the operator captured", func() {
			src := types.NamespacedName{Namespace: ns, Name: "src"}
			newSandbox(ns, src.Name, sandboxv1.SandboxSpec{Source: runtimeSource("node24")})
			vercelName := waitReady(src).Status.VercelName
			key := types.NamespacedName{Namespace: ns, Name: "cap"}
			newSnapshot(ns, key.Name, sandboxv1.SandboxSnapshotSpec{Source: sandboxv1.SandboxSnapshotSource{SandboxRef: &sandboxv1.LocalObjectReference{Name: src.Name}}})
			snap := waitSnapshotReady(key)
			Expect(snap.Status.Provenance).To(Equal(&sandboxv1.SnapshotProvenance{
				Origin: sandboxv1.SnapshotCaptured, SourceSessionID: emuSnapshot(snap.Status.SnapshotID).SourceSessionID, SourceVercelName: vercelName,
			}))
		})
	})

	Context("a team's own images", func() {
		const own = sandboxv1.ImageReference("acme/agents/worker:1.4")
		imaged := func(name string, img sandboxv1.ImageReference) *sandboxv1.Sandbox {
			return &sandboxv1.Sandbox{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
				Spec: sandboxv1.SandboxSpec{Source: sandboxv1.SandboxSource{Image: &img}}}
		}

		It("need the use verb on vercelimages: refused without it, working with the shipped role; managed images need none", func() {
			b, err := os.ReadFile(filepath.Join(repoRoot, "config", "rbac", "sandbox_image_user_role.yaml"))
			Expect(err).NotTo(HaveOccurred())
			role := &rbacv1.ClusterRole{}
			Expect(yaml.Unmarshal(b, role)).To(Succeed())
			role.Name = ns + "-" + role.Name
			Expect(k8sClient.Create(ctx, role)).To(Succeed())
			DeferCleanup(func() { Expect(k8sClient.Delete(ctx, role)).To(Succeed()) })
			Expect(k8sClient.Create(ctx, &rbacv1.RoleBinding{
				ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "images"},
				RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role.Name},
				Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: "alice"}},
			})).To(Succeed())

			By("bob starting from the team's image: refused, naming the permission")
			refused(bob.Create(ctx, imaged("bobs", own)), "user bob may not use image "+string(own), "vercelimages.sandbox.sentry.io")
			By("bob starting from a managed image: admitted")
			Expect(bob.Create(ctx, imaged("managed", "vercel/sandbox/node:24"), client.DryRunAll)).To(Succeed())

			By("alice starting from it: admitted, created from the image Vercel pinned")
			Eventually(func() error { return alice.Create(ctx, imaged("alices", own)) }).Should(Succeed())
			sbx := waitReady(types.NamespacedName{Namespace: ns, Name: "alices"})
			remote, ok := emu.Sandbox(sbx.Status.VercelName)
			Expect(ok).To(BeTrue())
			Expect(remote.Image).To(HavePrefix("acme/agents/worker@sha256:"))
		})

		It("can be granted for some images only (resourceNames)", func() {
			grant("one-image", []rbacv1.PolicyRule{{
				APIGroups: []string{sandboxv1.GroupVersion.Group}, Resources: []string{"vercelimages"}, Verbs: []string{"use"}, ResourceNames: []string{string(own)},
			}}, "bob")
			Eventually(func() error { return bob.Create(ctx, imaged("allowed", own), client.DryRunAll) }).Should(Succeed())
			refused(bob.Create(ctx, imaged("other", "acme/agents/worker:2.0"), client.DryRunAll), "user bob may not use image acme/agents/worker:2.0")
		})
	})

	It("refuses bob through the real kubectl (--as) with a message naming the Secret", func() {
		manifest := `apiVersion: sandbox.sentry.io/v1alpha1
kind: Sandbox
metadata:
  name: kubectl-env
  namespace: ` + ns + `
spec:
  source: {runtime: node24}
  env:
  - name: API_KEY
    valueFrom: {secretKeyRef: {name: ` + aliceSecret + `, key: key}}
`
		f := filepath.Join(GinkgoT().TempDir(), "sandbox.yaml")
		Expect(os.WriteFile(f, []byte(manifest), 0o600)).To(Succeed())
		out, err := kubectl("--as", "bob", "create", "-f", f)
		Expect(err).To(HaveOccurred(), out)
		Expect(out).To(ContainSubstring("user bob may not get every Secret this Sandbox references in namespace " + ns + " (" + aliceSecret + ")"))
		out, err = kubectl("--as", "alice", "create", "--dry-run=server", "-f", f)
		Expect(err).NotTo(HaveOccurred(), out)
	})
})

// Canaries for scrubbing, end to end: what a failing setup step prints
// reaches the Ready message and events with every form of the secret removed.
var _ = Describe("Security: scrubbing command output", func() {
	ctx := context.Background()
	var ns string
	BeforeEach(func() { ns = newNamespace() })

	const value = "sk_live_ScrubCanary0123456789"
	b64 := base64.StdEncoding.EncodeToString([]byte(value))

	// failingSetup makes a Sandbox whose env reads the Secret and whose
	// setup runs script as its failing step, and returns the Ready message.
	failingSetup := func(name string, before []sandboxv1.SetupCommand, script string) (types.NamespacedName, string) {
		key := types.NamespacedName{Namespace: ns, Name: name}
		newSandbox(ns, name, sandboxv1.SandboxSpec{
			Source: runtimeSource("node24"),
			Env:    []sandboxv1.EnvVar{{Name: "API_KEY", ValueFrom: &sandboxv1.EnvVarSource{SecretKeyRef: sandboxv1.SecretKeySelector{Name: "api", Key: "key"}}}},
			Setup:  append(before, sandboxv1.SetupCommand{Name: "leak", Command: "sh", Args: []string{"-c", script}}),
		})
		Eventually(readyCondition(key), 60*time.Second).Should(And(Not(BeNil()), HaveField("Reason", sandboxv1.ReasonSetupFailed)))
		return key, readyCondition(key)(Default).Message
	}
	expectNoPiece := func(key types.NamespacedName, msg string, forms ...string) {
		GinkgoHelper()
		for _, f := range forms {
			for i := 0; i+8 <= len(f); i++ {
				Expect(msg).NotTo(ContainSubstring(f[i:i+8]), "a piece of %q", f)
			}
			expectSecretNowhere(key, f)
		}
		for _, e := range eventsFor(key) {
			for _, f := range forms {
				Expect(e).NotTo(ContainSubstring(f[len(f)-8:]))
			}
		}
	}

	It("removes the base64, hex and URL forms, and a secret the tail would cut in half", func() {
		Expect(k8sClient.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "api"}, Data: map[string][]byte{"key": []byte(value)}})).To(Succeed())
		// The raw value, its encodings, then padding: 2040 bytes after the
		// value, so the 2048-byte tail of the output starts 8 bytes before
		// the value's end.
		encodings := `printf %s "$API_KEY" | base64; printf %s "$API_KEY" | od -An -tx1 | tr -d ' \n'; echo; printf 'X=%s\n' "$API_KEY" | base64`
		encodedLen := len(b64) + 1 + 2*len(value) + 1 + len(base64.StdEncoding.EncodeToString([]byte("X="+value+"\n"))) + 1
		key, msg := failingSetup("encodings", nil,
			fmt.Sprintf(`printf %%s "$API_KEY"; %s; head -c %d /dev/zero | tr '\0' x; exit 7`, encodings, 2040-encodedLen))
		Expect(msg).To(ContainSubstring("exited with code 7"))
		Expect(msg).To(HaveSuffix(strings.Repeat("x", 100)))
		expectNoPiece(key, msg, value, b64)
	})

	It("removes the value the command ran with after the Secret was rotated", func() {
		secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "api"}, Data: map[string][]byte{"key": []byte(value)}}
		Expect(k8sClient.Create(ctx, secret)).To(Succeed())
		key := types.NamespacedName{Namespace: ns, Name: "rotated"}
		go func() {
			defer GinkgoRecover()
			// Rotate while the first step sleeps: the session has the old
			// value in its env, the Secret the new one.
			Eventually(func(g Gomega) sandboxv1.SandboxPhase {
				s := &sandboxv1.Sandbox{}
				g.Expect(k8sClient.Get(ctx, key, s)).To(Succeed())
				return s.Status.Phase
			}, 30*time.Second).Should(Equal(sandboxv1.SandboxSettingUp))
			secret.Data["key"] = []byte("sk_live_RotatedValue987654321")
			Expect(k8sClient.Update(ctx, secret)).To(Succeed())
		}()
		_, msg := failingSetup("rotated", []sandboxv1.SetupCommand{{Command: "sleep", Args: []string{"4"}}}, `echo "key=$API_KEY"; exit 1`)
		Expect(msg).To(ContainSubstring("key=[redacted]"))
		expectNoPiece(key, msg, value)
	})
})
