package controllers_test

import (
	"context"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	sandboxv1 "github.com/getsentry/sandbox-controller/api/v1alpha1"
	"github.com/getsentry/sandbox-controller/internal/vercel"
)

// The allow rules and subnets of spec.networkPolicy, as the emulator
// receives them (the request it stores, Secret values included): on create,
// on a change of the running session, on a rotation, on resume, for a
// fork's children; and what the controller refuses that CEL cannot.
var _ = Describe("Network policy rules", func() {
	ctx := context.Background()
	var ns string
	BeforeEach(func() { ns = newNamespace() })

	const (
		forwardOld = "https://broker.example.com/egress/tok_CanaryForwardOld1"
		forwardNew = "https://broker.example.com/egress/tok_CanaryForwardNew3"
		ghToken    = "Bearer ghs_CanaryTransform2"
	)
	secret := func(name string, data map[string]string) {
		GinkgoHelper()
		s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Data: map[string][]byte{}}
		for k, v := range data {
			s.Data[k] = []byte(v)
		}
		Expect(k8sClient.Create(ctx, s)).To(Succeed())
	}
	ref := func(name, key string) sandboxv1.EnvVarSource {
		return sandboxv1.EnvVarSource{SecretKeyRef: sandboxv1.SecretKeySelector{Name: name, Key: key}}
	}
	// brokerPolicy is Junior's egress pattern: a provider domain whose
	// POST /v1/* requests go to a broker (the URL, a credential, from a
	// Secret), a header from the injectHeaders shorthand, the rest denied
	// by a trailing response rule; plus an open domain and subnets.
	brokerPolicy := func() *sandboxv1.NetworkPolicy {
		return &sandboxv1.NetworkPolicy{
			Mode:           sandboxv1.NetworkAllowlist,
			AllowedDomains: []string{"registry.npmjs.org"},
			InjectHeaders: []sandboxv1.HeaderInjection{{Domain: "sentry.io",
				Headers: []sandboxv1.InjectedHeader{{Name: "Authorization", ValueFrom: ref("gh", "token")}}}},
			Allow: []sandboxv1.DomainRules{{Domain: "api.github.com", Rules: []sandboxv1.NetworkRule{
				{Match: &sandboxv1.NetworkMatch{Methods: []string{"POST"}, Path: &sandboxv1.StringMatcher{StartsWith: ptr.To("/v1/")}},
					ForwardURL: &sandboxv1.ForwardURLSource{ValueFrom: ref("broker", "url")}},
				{Response: &sandboxv1.NetworkResponse{StatusCode: 403, Body: ptr.To(`{"error":"denied by policy"}`), ContentType: ptr.To("application/json")}},
			}}},
			Subnets: &sandboxv1.NetworkSubnets{Allow: []string{"10.0.0.0/8"}, Deny: []string{"10.1.0.0/16"}},
		}
	}
	// expectBrokerPolicy checks a stored request against brokerPolicy with
	// the forward URL fwd.
	expectBrokerPolicy := func(g Gomega, p *vercel.NetworkPolicy, fwd string) {
		g.Expect(p).NotTo(BeNil())
		g.Expect(p.Mode).To(BeEmpty(), "the allow/subnets form")
		g.Expect(p.Subnets).To(Equal(&vercel.NetworkSubnets{Allow: []string{"10.0.0.0/8"}, Deny: []string{"10.1.0.0/16"}}))
		g.Expect(p.Allow).NotTo(BeNil())
		g.Expect(p.Allow.Rules).To(HaveKeyWithValue("registry.npmjs.org", BeEmpty()))
		g.Expect(p.Allow.Rules).To(HaveKeyWithValue("sentry.io", []vercel.NetworkRule{{Transform: []vercel.NetworkTransform{{Headers: map[string]string{"Authorization": ghToken}}}}}),
			"injectHeaders: a transform rule without match")
		rules := p.Allow.Rules["api.github.com"]
		g.Expect(rules).To(HaveLen(2), "allow's two rules, in order")
		g.Expect(rules[0].Match).To(Equal(&vercel.NetworkMatch{Method: []string{"POST"}, Path: &vercel.Matcher{StartsWith: ptr.To("/v1/")}}))
		g.Expect(rules[0].ForwardURL).To(Equal(fwd))
		g.Expect(rules[1].Response).To(Equal(&vercel.NetworkResponse{StatusCode: 403, Body: ptr.To(`{"error":"denied by policy"}`), ContentType: "application/json"}))
	}
	sessionPolicy := func(session string) func(Gomega) *vercel.NetworkPolicy {
		return func(g Gomega) *vercel.NetworkPolicy {
			p, ok := emu.SessionPolicyRequest(session)
			g.Expect(ok).To(BeTrue(), "session %s unknown to the emulator", session)
			return p
		}
	}

	It("sends the rules with their Secret values on create, on change and on resume, and a rotated forwardURL to the running session at once", func() {
		secret("broker", map[string]string{"url": forwardOld})
		secret("gh", map[string]string{"token": ghToken})
		key := types.NamespacedName{Namespace: ns, Name: "broker"}
		newSandbox(ns, key.Name, sandboxv1.SandboxSpec{Source: runtimeSource("node24"), Persistent: ptr.To(true), NetworkPolicy: brokerPolicy()})
		sbx := waitReady(key)
		session := sbx.Status.SessionID
		expectBrokerPolicy(Default, sessionPolicy(session)(Default), forwardOld)
		next, ok := emu.SandboxPolicyRequest(sbx.Status.VercelName)
		Expect(ok).To(BeTrue())
		expectBrokerPolicy(Default, next, forwardOld)
		Expect(sbx.Status.Secrets).NotTo(BeNil())
		Expect(sbx.Status.Secrets.Applied).To(ConsistOf(HaveField("Name", "broker"), HaveField("Name", "gh")))

		By("changing the policy of the running session")
		patch := client.MergeFrom(sbx.DeepCopy())
		sbx.Spec.NetworkPolicy.Allow = append(sbx.Spec.NetworkPolicy.Allow, sandboxv1.DomainRules{Domain: "uploads.github.com",
			Rules: []sandboxv1.NetworkRule{{Match: &sandboxv1.NetworkMatch{Headers: []sandboxv1.KeyValueMatcher{
				{Key: &sandboxv1.StringMatcher{Exact: ptr.To("x-upload")}, Value: &sandboxv1.StringMatcher{Regex: ptr.To(`^[a-z]+$`)}}}},
				Response: &sandboxv1.NetworkResponse{StatusCode: 204}}}})
		Expect(k8sClient.Patch(ctx, sbx, patch)).To(Succeed())
		Eventually(func(g Gomega) {
			p := sessionPolicy(session)(g)
			expectBrokerPolicy(g, p, forwardOld)
			g.Expect(p.Allow.Rules).To(HaveKeyWithValue("uploads.github.com", ConsistOf(And(
				HaveField("Match.Headers", ConsistOf(vercel.KeyValueMatcher{Key: &vercel.Matcher{Exact: ptr.To("x-upload")}, Value: &vercel.Matcher{Regex: ptr.To(`^[a-z]+$`)}})),
				HaveField("Response", Equal(&vercel.NetworkResponse{StatusCode: 204}))))))
		}).Should(Succeed())
		Expect(getSandbox(key).Status.SessionID).To(Equal(session), "the same session")

		By("rotating the forwardURL Secret")
		generation := getSandbox(key).Generation
		sec := &corev1.Secret{}
		Expect(k8sClient.Get(ctx, types.NamespacedName{Namespace: ns, Name: "broker"}, sec)).To(Succeed())
		sec.Data["url"] = []byte(forwardNew)
		Expect(k8sClient.Update(ctx, sec)).To(Succeed())
		Eventually(func(g Gomega) { expectBrokerPolicy(g, sessionPolicy(session)(g), forwardNew) }).Should(Succeed())
		expectEvent(key, "Normal SecretRotated: Secret broker rotated: its forward URLs were applied to the running session "+session)
		Expect(getSandbox(key).Generation).To(Equal(generation), "no spec change")

		By("stopping and resuming: the next session starts with the policy")
		setState(key, sandboxv1.SandboxStateStopped)
		Eventually(func() sandboxv1.SandboxPhase { return getSandbox(key).Status.Phase }, 60*time.Second).Should(Equal(sandboxv1.SandboxStopped))
		setState(key, sandboxv1.SandboxStateRunning)
		sbx = waitReady(key)
		Expect(sbx.Status.SessionID).NotTo(Equal(session))
		expectBrokerPolicy(Default, sessionPolicy(sbx.Status.SessionID)(Default), forwardNew)

		for _, v := range []string{"tok_CanaryForwardOld1", "tok_CanaryForwardNew3", "ghs_CanaryTransform2"} {
			expectSecretNowhere(key, v)
		}
	})

	It("gives a fork's children the rules, with the Secret values read for each child", func() {
		secret("broker", map[string]string{"url": forwardOld})
		secret("gh", map[string]string{"token": ghToken})
		srcKey := types.NamespacedName{Namespace: ns, Name: "origin"}
		newSandbox(ns, srcKey.Name, sandboxv1.SandboxSpec{Source: runtimeSource("node24"), NetworkPolicy: brokerPolicy()})
		waitReady(srcKey)
		Expect(k8sClient.Create(ctx, &sandboxv1.SandboxFork{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "kids"},
			Spec: sandboxv1.SandboxForkSpec{Source: sandboxv1.SandboxForkSource{SandboxRef: &sandboxv1.LocalObjectReference{Name: "origin"}},
				Replicas: ptr.To[int32](2), KeepSourceRunning: true},
		})).To(Succeed())
		var kids []sandboxv1.Sandbox
		Eventually(func(g Gomega) {
			f := &sandboxv1.SandboxFork{}
			g.Expect(k8sClient.Get(ctx, types.NamespacedName{Namespace: ns, Name: "kids"}, f)).To(Succeed())
			g.Expect(f.Status.ReadyReplicas).To(Equal(int32(2)), "status: %+v", f.Status)
			sel, err := metav1.ParseToLabelSelector(f.Status.Selector)
			g.Expect(err).NotTo(HaveOccurred())
			list := &sandboxv1.SandboxList{}
			g.Expect(k8sClient.List(ctx, list, client.InNamespace(ns), client.MatchingLabels(sel.MatchLabels))).To(Succeed())
			g.Expect(list.Items).To(HaveLen(2))
			kids = list.Items
		}, 120*time.Second).Should(Succeed())
		for _, c := range kids {
			Expect(c.Spec.NetworkPolicy).To(Equal(brokerPolicy()), "child %s", c.Name)
			expectBrokerPolicy(Default, sessionPolicy(c.Status.SessionID)(Default), forwardOld)
			expectSecretNowhere(types.NamespacedName{Namespace: ns, Name: c.Name}, "tok_CanaryForwardOld1")
		}
	})

	It("reports a regex that is not RE2 and a forwardURL Secret that is no https URL on Synced, naming the field, never the value", func() {
		synced := func(key types.NamespacedName) func(Gomega) *metav1.Condition {
			return func(g Gomega) *metav1.Condition {
				s := &sandboxv1.Sandbox{}
				g.Expect(k8sClient.Get(ctx, key, s)).To(Succeed())
				return meta.FindStatusCondition(s.Status.Conditions, sandboxv1.ConditionSynced)
			}
		}
		By("a lookahead, which Go's RE2 does not have")
		reKey := types.NamespacedName{Namespace: ns, Name: "regex"}
		newSandbox(ns, reKey.Name, sandboxv1.SandboxSpec{Source: runtimeSource("node24"), NetworkPolicy: &sandboxv1.NetworkPolicy{
			Mode: sandboxv1.NetworkAllowlist,
			Allow: []sandboxv1.DomainRules{{Domain: "api.github.com"}, {Domain: "api.openai.com", Rules: []sandboxv1.NetworkRule{
				{Response: &sandboxv1.NetworkResponse{StatusCode: 403}},
				{Match: &sandboxv1.NetworkMatch{Path: &sandboxv1.StringMatcher{Regex: ptr.To(`^/v1/(?!admin)`)}}, Response: &sandboxv1.NetworkResponse{StatusCode: 404}},
			}}},
		}})
		Eventually(synced(reKey)).Should(And(HaveField("Status", metav1.ConditionFalse), HaveField("Reason", sandboxv1.ReasonNetworkPolicyInvalid),
			HaveField("Message", ContainSubstring("spec.networkPolicy.allow[1].rules[1].match.path.regex: does not compile as an RE2 regular expression"))))
		_, created := emu.Sandbox(getSandbox(reKey).Status.VercelName)
		Expect(created).To(BeFalse(), "nothing was created")
		Expect(meta.FindStatusCondition(getSandbox(reKey).Status.Conditions, sandboxv1.ConditionReady)).To(HaveField("Status", metav1.ConditionFalse))

		By("a forwardURL Secret with a query")
		const badURL = "https://broker.example.com/egress?token=tok_CanaryBadForward4"
		secret("bad-broker", map[string]string{"url": badURL})
		fwKey := types.NamespacedName{Namespace: ns, Name: "forward"}
		newSandbox(ns, fwKey.Name, sandboxv1.SandboxSpec{Source: runtimeSource("node24"), NetworkPolicy: &sandboxv1.NetworkPolicy{
			Mode: sandboxv1.NetworkAllowlist,
			Allow: []sandboxv1.DomainRules{{Domain: "api.github.com", Rules: []sandboxv1.NetworkRule{
				{ForwardURL: &sandboxv1.ForwardURLSource{ValueFrom: ref("bad-broker", "url")}}}}},
		}})
		Eventually(synced(fwKey)).Should(And(HaveField("Status", metav1.ConditionFalse), HaveField("Reason", sandboxv1.ReasonSecretRefused),
			HaveField("Message", ContainSubstring(`Secret "bad-broker" is refused: its key "url" is not a URL spec.networkPolicy.allow[0].rules[0].forwardURL takes: it has a query or a fragment`))))
		expectSecretNowhere(fwKey, "tok_CanaryBadForward4")
		expectSecretNowhere(fwKey, "broker.example.com")

		By("fixing the Secret: the sandbox is created with it")
		sec := &corev1.Secret{}
		Expect(k8sClient.Get(ctx, types.NamespacedName{Namespace: ns, Name: "bad-broker"}, sec)).To(Succeed())
		sec.Data["url"] = []byte(forwardOld)
		Expect(k8sClient.Update(ctx, sec)).To(Succeed())
		sbx := waitReady(fwKey)
		p := sessionPolicy(sbx.Status.SessionID)(Default)
		Expect(p.Allow.Rules["api.github.com"]).To(ConsistOf(HaveField("ForwardURL", forwardOld)))
	})
})
