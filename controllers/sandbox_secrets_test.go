package controllers_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/http"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	sandboxv1 "github.com/getsentry/sandbox-controller/api/v1alpha1"
	"github.com/getsentry/sandbox-controller/internal/vercel"
)

var _ = Describe("Secret rotation", func() {
	var (
		ctx context.Context
		ns  string
	)
	BeforeEach(func() {
		ctx = context.Background()
		ns = newNamespace()
	})

	rotate := func(name, key, value string) {
		GinkgoHelper()
		sec := &corev1.Secret{}
		Expect(k8sClient.Get(ctx, types.NamespacedName{Namespace: ns, Name: name}, sec)).To(Succeed())
		sec.Data[key] = []byte(value)
		Expect(k8sClient.Update(ctx, sec)).To(Succeed())
	}
	secretsCurrent := func(key types.NamespacedName) func(Gomega) *metav1.Condition {
		return func(g Gomega) *metav1.Condition {
			sbx := &sandboxv1.Sandbox{}
			g.Expect(k8sClient.Get(ctx, key, sbx)).To(Succeed())
			return meta.FindStatusCondition(sbx.Status.Conditions, sandboxv1.ConditionSecretsCurrent)
		}
	}
	// injected is the value the emulator holds for the session's injected
	// Authorization header to api.github.com: what its egress would send.
	injected := func(session string) func(Gomega) string {
		return func(g Gomega) string {
			h, ok := emu.InjectedHeaders(session)
			g.Expect(ok).To(BeTrue(), "session %s unknown to the emulator", session)
			return h["api.github.com"]["Authorization"]
		}
	}

	It("announces a rotation that reaches Vercel with a spec change", func() {
		const oldValue, newValue = "Bearer ghs_WithChangeOld1", "Bearer ghs_WithChangeNew2"
		Expect(k8sClient.Create(ctx, &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "gh"},
			Data:       map[string][]byte{"token": []byte(oldValue)},
		})).To(Succeed())
		key := types.NamespacedName{Namespace: ns, Name: "changing"}
		newSandbox(ns, key.Name, sandboxv1.SandboxSpec{
			Source: runtimeSource("node24"),
			NetworkPolicy: &sandboxv1.NetworkPolicy{
				Mode: sandboxv1.NetworkAllowlist,
				InjectHeaders: []sandboxv1.HeaderInjection{{
					Domain:  "api.github.com",
					Headers: []sandboxv1.InjectedHeader{{Name: "Authorization", ValueFrom: sandboxv1.EnvVarSource{SecretKeyRef: sandboxv1.SecretKeySelector{Name: "gh", Key: "token"}}}},
				}},
			},
		})
		session := waitReady(key).Status.SessionID
		Eventually(injected(session)).Should(Equal(oldValue))

		// Paused, the controller sees neither; resumed, one reconcile finds
		// both the new generation and the new value: the update carries the
		// value (refreshSecrets waits for the spec change), as it would when
		// the Secret changes between a change's apply and its status write.
		annotate(key, sandboxv1.AnnotationPaused, "true")
		Eventually(sandboxCondition(key, sandboxv1.ConditionPaused)).Should(And(Not(BeNil()), HaveField("Status", metav1.ConditionTrue)))
		sbx := getSandbox(key)
		sbx.Spec.Ports = []int32{3000}
		Expect(k8sClient.Update(ctx, sbx)).To(Succeed())
		rotate("gh", "token", newValue)
		annotate(key, sandboxv1.AnnotationPaused, "")

		Eventually(injected(session)).Should(Equal(newValue))
		expectEvent(key, "Normal SecretRotated: Secret gh rotated: its injected header values were applied to the running session "+session)
		Eventually(secretsCurrent(key)).Should(HaveField("Status", metav1.ConditionTrue))
	})

	It("applies a rotated injected header value to the running session without a spec change", func() {
		const oldValue, newValue = "Bearer ghs_RotateOldHeader1", "Bearer ghs_RotateNewHeader2"
		Expect(k8sClient.Create(ctx, &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "gh"},
			Data:       map[string][]byte{"token": []byte(oldValue)},
		})).To(Succeed())
		key := types.NamespacedName{Namespace: ns, Name: "rotating"}
		newSandbox(ns, "rotating", sandboxv1.SandboxSpec{
			Source: runtimeSource("node24"),
			NetworkPolicy: &sandboxv1.NetworkPolicy{
				Mode: sandboxv1.NetworkAllowlist,
				InjectHeaders: []sandboxv1.HeaderInjection{{
					Domain:  "api.github.com",
					Headers: []sandboxv1.InjectedHeader{{Name: "Authorization", ValueFrom: sandboxv1.EnvVarSource{SecretKeyRef: sandboxv1.SecretKeySelector{Name: "gh", Key: "token"}}}},
				}},
			},
		})
		sbx := waitReady(key)
		session, generation := sbx.Status.SessionID, sbx.Generation
		Expect(injected(session)(Default)).To(Equal(oldValue))
		Eventually(secretsCurrent(key)).Should(HaveField("Status", metav1.ConditionTrue))

		By("rotating the Secret")
		rotate("gh", "token", newValue)
		Eventually(injected(session)).Should(Equal(newValue), "the running session's injected header")
		expectEvent(key, "Normal SecretRotated: Secret gh rotated: its injected header values were applied to the running session "+session)
		sbx = getSandbox(key)
		Expect(sbx.Generation).To(Equal(generation), "no spec change")
		Expect(sbx.Status.SessionID).To(Equal(session), "the same session")
		vsb, ok := emu.Sandbox(sbx.Status.VercelName)
		Expect(ok).To(BeTrue())
		Expect(vsb.NetworkPolicy.InjectionRules).To(HaveLen(1))
		Eventually(secretsCurrent(key)).Should(HaveField("Status", metav1.ConditionTrue))

		By("deleting the Secret: the session keeps running with what it has")
		Expect(k8sClient.Delete(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "gh"}})).To(Succeed())
		Eventually(secretsCurrent(key)).Should(And(HaveField("Status", metav1.ConditionFalse), HaveField("Reason", sandboxv1.ReasonSecretNotFound)))
		expectEvent(key, "Warning SecretNotFound: Secret \"gh\" not found; the header Authorization injected for api.github.com (spec.networkPolicy.injectHeaders) needs it; the Vercel sandbox keeps the values it was given")
		Consistently(func(g Gomega) {
			s := getSandbox(key)
			g.Expect(s.Status.SessionID).To(Equal(session))
			g.Expect(meta.IsStatusConditionTrue(s.Status.Conditions, sandboxv1.ConditionReady)).To(BeTrue())
		}, 3*time.Second).Should(Succeed())
		Expect(injected(session)(Default)).To(Equal(newValue))

		By("creating it again with another value")
		const thirdValue = "Bearer ghs_RotateThirdHeader3"
		Expect(k8sClient.Create(ctx, &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "gh"},
			Data:       map[string][]byte{"token": []byte(thirdValue)},
		})).To(Succeed())
		Eventually(injected(session)).Should(Equal(thirdValue))
		Eventually(secretsCurrent(key)).Should(HaveField("Status", metav1.ConditionTrue))

		for _, v := range []string{oldValue, newValue, thirdValue} {
			expectSecretNowhere(key, v)
		}
	})

	It("records digests no reader can check a guessed value against, rewrites an upgrade's unkeyed ones without a rotation, and still detects one", func() {
		const oldValue, newValue = "key-DigestOldEnv1", "key-DigestNewEnv2"
		Expect(k8sClient.Create(ctx, &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "api"},
			Data:       map[string][]byte{"key": []byte(oldValue)},
		})).To(Succeed())
		key := types.NamespacedName{Namespace: ns, Name: "digests"}
		newSandbox(ns, "digests", sandboxv1.SandboxSpec{
			Source: runtimeSource("node24"),
			Env:    []sandboxv1.EnvVar{{Name: "API_KEY", ValueFrom: &sandboxv1.EnvVarSource{SecretKeyRef: sandboxv1.SecretKeySelector{Name: "api", Key: "key"}}}},
		})
		sbx := waitReady(key)
		session := sbx.Status.SessionID
		Eventually(secretsCurrent(key)).Should(HaveField("Status", metav1.ConditionTrue))
		// unkeyed is what anyone who reads the Sandbox can compute for a
		// guessed value: the form earlier versions recorded.
		unkeyed := func(uid types.UID, value string) string {
			h := sha256.New()
			fmt.Fprintf(h, "%s\x00%s\x00%s\x00%d\x00%s", uid, "api", "key", len(value), value)
			return hex.EncodeToString(h.Sum(nil))[:16]
		}
		applied := func(g Gomega) sandboxv1.AppliedSecret {
			s := getSandbox(key)
			g.Expect(s.Status.Secrets).NotTo(BeNil())
			g.Expect(s.Status.Secrets.Applied).To(HaveLen(1))
			return s.Status.Secrets.Applied[0]
		}
		first := applied(Default)
		Expect(first.Digest).NotTo(BeEmpty())
		Expect(first.Digest).NotTo(ContainSubstring(unkeyed(sbx.UID, oldValue)), "the right guess is confirmed by the digest in status")

		By("an upgrade finds the unkeyed digest of the current value: it is replaced, and nothing is applied or announced")
		sbx = getSandbox(key)
		sbx.Status.Secrets.Applied[0].Digest = unkeyed(sbx.UID, oldValue)
		Expect(k8sClient.Status().Update(ctx, sbx)).To(Succeed())
		writesBefore := len(recorder.requests(http.MethodPatch, sbx.Status.VercelName)) + len(recorder.requests(http.MethodPost, sbx.Status.VercelName))
		sbx = getSandbox(key)
		if sbx.Annotations == nil {
			sbx.Annotations = map[string]string{}
		}
		sbx.Annotations[sandboxv1.AnnotationReconcileRequestedAt] = "digest-upgrade"
		Expect(k8sClient.Update(ctx, sbx)).To(Succeed())
		Eventually(func(g Gomega) string { return applied(g).Digest }).Should(Equal(first.Digest), "the unkeyed digest is rewritten keyed")
		Expect(eventsFor(key)).NotTo(ContainElement(ContainSubstring("SecretRotated")))
		s := getSandbox(key)
		Expect(s.Status.SessionID).To(Equal(session))
		Expect(s.Status.Secrets.StaleSession).To(BeEmpty())
		Expect(meta.IsStatusConditionTrue(s.Status.Conditions, sandboxv1.ConditionSecretsCurrent)).To(BeTrue())
		Expect(len(recorder.requests(http.MethodPatch, s.Status.VercelName))+len(recorder.requests(http.MethodPost, s.Status.VercelName))).
			To(Equal(writesBefore), "no Vercel write for an unchanged value")

		By("a change that leaves the value alone is no rotation")
		sec := &corev1.Secret{}
		Expect(k8sClient.Get(ctx, types.NamespacedName{Namespace: ns, Name: "api"}, sec)).To(Succeed())
		sec.Labels = map[string]string{"touched": "yes"}
		Expect(k8sClient.Update(ctx, sec)).To(Succeed())
		Eventually(func(g Gomega) string { return applied(g).ResourceVersion }).Should(Equal(sec.ResourceVersion))
		Expect(applied(Default).Digest).To(Equal(first.Digest))
		Expect(eventsFor(key)).NotTo(ContainElement(ContainSubstring("SecretRotated")))

		By("rotating the value: detected as before")
		rotate("api", "key", newValue)
		expectEvent(key, "Normal SecretRotated: Secret api rotated: its env values apply from the next session (Vercel cannot change a running session's environment); session "+session+" keeps the old ones until it stops")
		Eventually(func(g Gomega) string { return applied(g).Digest }).ShouldNot(Equal(first.Digest))
		Expect(applied(Default).Digest).NotTo(ContainSubstring(unkeyed(sbx.UID, newValue)))
		for _, v := range []string{oldValue, newValue} {
			expectSecretNowhere(key, v)
		}
	})

	It("refuses a Secret env value with a NUL character, at creation and at rotation, in status instead of a broken session", func() {
		const good = "key-NulGood1"
		nul := []byte("key-Nul\x00Bad2")
		Expect(k8sClient.Create(ctx, &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "nul"},
			Data:       map[string][]byte{"key": nul},
		})).To(Succeed())
		env := []sandboxv1.EnvVar{{Name: "API_KEY", ValueFrom: &sandboxv1.EnvVarSource{SecretKeyRef: sandboxv1.SecretKeySelector{Name: "nul", Key: "key"}}}}
		refusal := `Secret "nul" is refused: its key "key" holds a NUL character, which the environment variable API_KEY (spec.env) cannot carry`

		By("creating a Sandbox whose env reads it: refused before Vercel")
		key := types.NamespacedName{Namespace: ns, Name: "nul-create"}
		newSandbox(ns, key.Name, sandboxv1.SandboxSpec{Source: runtimeSource("node24"), Env: env})
		Eventually(func(g Gomega) {
			c := meta.FindStatusCondition(getSandbox(key).Status.Conditions, sandboxv1.ConditionSynced)
			g.Expect(c).NotTo(BeNil())
			g.Expect(c.Reason).To(Equal(sandboxv1.ReasonSecretRefused))
			g.Expect(c.Message).To(ContainSubstring(refusal))
		}).Should(Succeed())
		sbx := getSandbox(key)
		Expect(sbx.Status.SessionID).To(BeEmpty())
		Expect(meta.IsStatusConditionTrue(sbx.Status.Conditions, sandboxv1.ConditionReady)).To(BeFalse())
		Expect(createsFor(sbx.Status.VercelName)).To(BeEmpty(), "nothing reached Vercel")

		By("rotating a running Sandbox's Secret to a value with a NUL: reported, the session keeps what it has")
		Expect(k8sClient.Create(ctx, &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "later"},
			Data:       map[string][]byte{"key": []byte(good)},
		})).To(Succeed())
		running := types.NamespacedName{Namespace: ns, Name: "nul-rotate"}
		newSandbox(ns, running.Name, sandboxv1.SandboxSpec{Source: runtimeSource("node24"),
			Env: []sandboxv1.EnvVar{{Name: "API_KEY", ValueFrom: &sandboxv1.EnvVarSource{SecretKeyRef: sandboxv1.SecretKeySelector{Name: "later", Key: "key"}}}}})
		session := waitReady(running).Status.SessionID
		rotate("later", "key", string(nul))
		Eventually(secretsCurrent(running)).Should(And(HaveField("Status", metav1.ConditionFalse), HaveField("Reason", sandboxv1.ReasonSecretRefused),
			HaveField("Message", ContainSubstring(`Secret "later" is refused: its key "key" holds a NUL character`))))
		s := getSandbox(running)
		Expect(s.Status.SessionID).To(Equal(session))
		Expect(meta.IsStatusConditionTrue(s.Status.Conditions, sandboxv1.ConditionReady)).To(BeTrue())
		Expect(envIs(ctx, session, "API_KEY", good)).To(BeTrue(), "the session keeps the value it was given")
		for _, k := range []types.NamespacedName{key, running} {
			expectSecretNowhere(k, string(nul))
			expectSecretNowhere(k, good)
		}
	})

	It("applies a rotated env value from the next session, and says the running one keeps the old", func() {
		const oldValue, newValue, thirdValue = "key-RotateOldEnv1", "key-RotateNewEnv2", "key-RotateThirdEnv3"
		Expect(k8sClient.Create(ctx, &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "api"},
			Data:       map[string][]byte{"key": []byte(oldValue)},
		})).To(Succeed())
		key := types.NamespacedName{Namespace: ns, Name: "envrot"}
		newSandbox(ns, "envrot", sandboxv1.SandboxSpec{
			Source: runtimeSource("node24"),
			Env:    []sandboxv1.EnvVar{{Name: "API_KEY", ValueFrom: &sandboxv1.EnvVarSource{SecretKeyRef: sandboxv1.SecretKeySelector{Name: "api", Key: "key"}}}},
		})
		sbx := waitReady(key)
		first := sbx.Status.SessionID
		Expect(envIs(ctx, first, "API_KEY", oldValue)).To(BeTrue())

		By("rotating the Secret")
		rotate("api", "key", newValue)
		Eventually(secretsCurrent(key)).Should(And(HaveField("Status", metav1.ConditionFalse), HaveField("Reason", sandboxv1.ReasonSecretRotated)))
		expectEvent(key, "Normal SecretRotated: Secret api rotated: its env values apply from the next session (Vercel cannot change a running session's environment); session "+first+" keeps the old ones until it stops")
		Expect(getSandbox(key).Status.Secrets.StaleSession).To(Equal(first))
		Expect(envIs(ctx, first, "API_KEY", oldValue)).To(BeTrue(), "a running session's env cannot change")

		By("pausing it, then rotating again: the watch wakes the resting Sandbox, which nothing polls")
		setState(key, sandboxv1.SandboxStateStopped)
		Eventually(func() sandboxv1.SandboxPhase { return getSandbox(key).Status.Phase }).Should(Equal(sandboxv1.SandboxStopped))
		Eventually(secretsCurrent(key)).Should(HaveField("Status", metav1.ConditionTrue), "no session keeps old values")
		// At rest nothing looks at it (no poll, no requeue): only the
		// Secret watch can bring the rotation to it.
		vercelName := getSandbox(key).Status.VercelName
		reads := func() int { return len(recorder.requests(http.MethodGet, vercelName)) }
		Eventually(func() bool { before := reads(); time.Sleep(2 * pollInterval); return reads() == before }, 30*time.Second).
			Should(BeTrue(), "the resting Sandbox is still polled")
		rotate("api", "key", thirdValue)
		Eventually(func() []string { return eventsFor(key) }).Should(ContainElement("Normal SecretRotated: Secret api rotated: its env values apply from the next session"))
		Expect(getSandbox(key).Status.Phase).To(Equal(sandboxv1.SandboxStopped), "a rotation does not resume it")

		By("resuming it: the next session has the value of the last rotation")
		setState(key, sandboxv1.SandboxStateRunning)
		Eventually(func(g Gomega) {
			s := getSandbox(key)
			g.Expect(s.Status.SessionID).NotTo(Equal(first))
			g.Expect(meta.IsStatusConditionTrue(s.Status.Conditions, sandboxv1.ConditionReady)).To(BeTrue())
		}).Should(Succeed())
		second := getSandbox(key).Status.SessionID
		Expect(envIs(ctx, second, "API_KEY", thirdValue)).To(BeTrue(), "the next session's env")
		Eventually(secretsCurrent(key)).Should(HaveField("Status", metav1.ConditionTrue))
		Expect(getSandbox(key).Status.Secrets.StaleSession).To(BeEmpty())

		for _, v := range []string{oldValue, newValue, thirdValue} {
			expectSecretNowhere(key, v)
		}
	})
})

// envIs reports whether the variable has the value in the session's
// commands; the value is compared inside the sandbox, so a mismatch prints
// no value.
func envIs(ctx context.Context, session, name, value string) bool {
	GinkgoHelper()
	cmd, err := vc.RunCommand(ctx, session, vercel.RunCommandRequest{Command: "sh", Args: []string{"-c", `[ "$` + name + `" = "$WANT" ]`}, Env: map[string]string{"WANT": value}})
	Expect(err).NotTo(HaveOccurred())
	done, err := vc.GetCommand(ctx, session, cmd.ID, true)
	Expect(err).NotTo(HaveOccurred())
	Expect(done.ExitCode).NotTo(BeNil())
	return *done.ExitCode == 0
}
