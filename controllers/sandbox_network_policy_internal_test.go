package controllers

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	sandboxv1 "github.com/getsentry/sandbox-controller/api/v1alpha1"
)

func secretRef(name, key string) sandboxv1.EnvVarSource {
	return sandboxv1.EnvVarSource{SecretKeyRef: sandboxv1.SecretKeySelector{Name: name, Key: key}}
}

func header(name, secret, key string) sandboxv1.InjectedHeader {
	return sandboxv1.InjectedHeader{Name: name, ValueFrom: secretRef(secret, key)}
}

// policyReader serves the Secrets of the translation tests.
func policyReader(t *testing.T) *secretReader {
	t.Helper()
	scheme := runtime.NewScheme()
	if err := corev1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	sec := func(name string, data map[string]string, typ corev1.SecretType) *corev1.Secret {
		s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name}, Data: map[string][]byte{}, Type: typ}
		for k, v := range data {
			s.Data[k] = []byte(v)
		}
		return s
	}
	c := fake.NewClientBuilder().WithScheme(scheme).WithObjects(
		sec("gh", map[string]string{"token": "Bearer gh-canary"}, corev1.SecretTypeOpaque),
		sec("broker", map[string]string{
			"url":      "https://broker.example.com/forward/tok-canary",
			"query":    "https://broker.example.com/f?token=q-canary",
			"fragment": "https://broker.example.com/f#frag-canary",
			"http":     "http://broker.example.com/plain-canary",
			"userinfo": "https://user:pw-canary@broker.example.com/f",
			"garbage":  "https://bro ker\x7f/g-canary",
		}, corev1.SecretTypeOpaque),
		sec("sa", map[string]string{"token": "sa-canary"}, corev1.SecretTypeServiceAccountToken),
	).Build()
	return &secretReader{reader: c, namespace: "ns"}
}

// The request each spec.networkPolicy becomes, as JSON: AllowAll and
// DenyAll in the mode form, Allowlist in the allow/subnets form with the
// shorthand merged in.
func TestBuildNetworkPolicy(t *testing.T) {
	str := func(s string) *string { return &s }
	for _, tc := range []struct {
		name string
		in   *sandboxv1.NetworkPolicy
		want string
	}{
		{"unset", nil, `null`},
		{"AllowAll", &sandboxv1.NetworkPolicy{Mode: sandboxv1.NetworkAllowAll}, `{"mode":"allow-all"}`},
		{"DenyAll", &sandboxv1.NetworkPolicy{Mode: sandboxv1.NetworkDenyAll}, `{"mode":"deny-all"}`},
		{"AllowAll with injection", &sandboxv1.NetworkPolicy{Mode: sandboxv1.NetworkAllowAll,
			InjectHeaders: []sandboxv1.HeaderInjection{{Domain: "api.github.com", Headers: []sandboxv1.InjectedHeader{header("Authorization", "gh", "token")}}}},
			`{"mode":"custom","allowedDomains":["*"],"injectionRules":[{"domain":"api.github.com","headers":{"Authorization":"Bearer gh-canary"}}]}`},
		{"DenyAll with injection", &sandboxv1.NetworkPolicy{Mode: sandboxv1.NetworkDenyAll,
			InjectHeaders: []sandboxv1.HeaderInjection{{Domain: "api.github.com", Headers: []sandboxv1.InjectedHeader{header("Authorization", "gh", "token")}}}},
			`{"mode":"custom","allowedDomains":["api.github.com"],"injectionRules":[{"domain":"api.github.com","headers":{"Authorization":"Bearer gh-canary"}}]}`},
		{"empty allowlist", &sandboxv1.NetworkPolicy{Mode: sandboxv1.NetworkAllowlist}, `{"allow":[]}`},
		{"plain allowlist and subnets", &sandboxv1.NetworkPolicy{Mode: sandboxv1.NetworkAllowlist,
			AllowedDomains: []string{"registry.npmjs.org", "*.github.com"},
			Allow:          []sandboxv1.DomainRules{{Domain: "example.com"}, {Domain: "registry.npmjs.org"}},
			Subnets:        &sandboxv1.NetworkSubnets{Allow: []string{"10.0.0.0/8"}, Deny: []string{"10.1.0.0/16"}}},
			`{"allow":["registry.npmjs.org","*.github.com","example.com"],"subnets":{"allow":["10.0.0.0/8"],"deny":["10.1.0.0/16"]}}`},
		{"injectHeaders become a transform rule placed before allow's rules", &sandboxv1.NetworkPolicy{Mode: sandboxv1.NetworkAllowlist,
			AllowedDomains: []string{"registry.npmjs.org"},
			InjectHeaders:  []sandboxv1.HeaderInjection{{Domain: "api.github.com", Headers: []sandboxv1.InjectedHeader{header("Authorization", "gh", "token")}}},
			Allow: []sandboxv1.DomainRules{{Domain: "api.github.com", Rules: []sandboxv1.NetworkRule{
				{Response: &sandboxv1.NetworkResponse{StatusCode: 403, Body: str("no"), ContentType: str("text/plain"), Headers: map[string]sandboxv1.HeaderValue{"X-Why": "policy"}}},
			}}}},
			`{"allow":{"api.github.com":[{"transform":[{"headers":{"Authorization":"Bearer gh-canary"}}]},` +
				`{"response":{"statusCode":403,"headers":{"X-Why":"policy"},"body":"no","contentType":"text/plain"}}],"registry.npmjs.org":[]}}`},
		{"Junior's broker: match, forwardURL, trailing response", &sandboxv1.NetworkPolicy{Mode: sandboxv1.NetworkAllowlist,
			Allow: []sandboxv1.DomainRules{{Domain: "api.github.com", Rules: []sandboxv1.NetworkRule{
				{Match: &sandboxv1.NetworkMatch{Methods: []string{"POST", "GET"}, Path: &sandboxv1.StringMatcher{StartsWith: str("/v1/")},
					Headers:     []sandboxv1.KeyValueMatcher{{Key: &sandboxv1.StringMatcher{Exact: str("x-api-key")}, Value: &sandboxv1.StringMatcher{Regex: str("^p.*$")}}},
					QueryString: []sandboxv1.KeyValueMatcher{{Key: &sandboxv1.StringMatcher{Exact: str("page")}}}},
					ForwardURL: &sandboxv1.ForwardURLSource{ValueFrom: secretRef("broker", "url")}},
				{Match: &sandboxv1.NetworkMatch{Path: &sandboxv1.StringMatcher{Exact: str("/health")}},
					Transform: &sandboxv1.NetworkTransform{Headers: []sandboxv1.InjectedHeader{header("X-Token", "gh", "token")}}},
				{Response: &sandboxv1.NetworkResponse{StatusCode: 204}},
			}}}},
			`{"allow":{"api.github.com":[` +
				`{"match":{"path":{"startsWith":"/v1/"},"method":["POST","GET"],"queryString":[{"key":{"exact":"page"}}],"headers":[{"key":{"exact":"x-api-key"},"value":{"regex":"^p.*$"}}]},"forwardURL":"https://broker.example.com/forward/tok-canary"},` +
				`{"match":{"path":{"exact":"/health"}},"transform":[{"headers":{"X-Token":"Bearer gh-canary"}}]},` +
				`{"response":{"statusCode":204}}]}}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			secrets := policyReader(t)
			got, err := buildNetworkPolicy(context.Background(), secrets, tc.in)
			if err != nil {
				t.Fatalf("error: %v", err)
			}
			b, err := json.Marshal(got)
			if err != nil {
				t.Fatal(err)
			}
			if string(b) != tc.want {
				t.Errorf("got  %s\nwant %s", b, tc.want)
			}
		})
	}
}

// Input the API server cannot check is refused with a message that names
// the field and never quotes a Secret's value.
func TestBuildNetworkPolicyRefuses(t *testing.T) {
	str := func(s string) *string { return &s }
	forward := func(key string) *sandboxv1.NetworkPolicy {
		return &sandboxv1.NetworkPolicy{Mode: sandboxv1.NetworkAllowlist, Allow: []sandboxv1.DomainRules{
			{Domain: "a.com"},
			{Domain: "api.github.com", Rules: []sandboxv1.NetworkRule{
				{Response: &sandboxv1.NetworkResponse{StatusCode: 403}},
				{ForwardURL: &sandboxv1.ForwardURLSource{ValueFrom: secretRef("broker", key)}}}}}}
	}
	regex := func(m sandboxv1.NetworkMatch) *sandboxv1.NetworkPolicy {
		return &sandboxv1.NetworkPolicy{Mode: sandboxv1.NetworkAllowlist, Allow: []sandboxv1.DomainRules{
			{Domain: "api.github.com", Rules: []sandboxv1.NetworkRule{{Match: &m, Response: &sandboxv1.NetworkResponse{StatusCode: 403}}}}}}
	}
	for _, tc := range []struct {
		name   string
		in     *sandboxv1.NetworkPolicy
		reason string
		want   string
	}{
		{"forwardURL with a query", forward("query"), sandboxv1.ReasonSecretRefused,
			`Secret "broker" is refused: its key "query" is not a URL spec.networkPolicy.allow[1].rules[1].forwardURL takes: it has a query or a fragment`},
		{"forwardURL with a fragment", forward("fragment"), sandboxv1.ReasonSecretRefused, "it has a query or a fragment"},
		{"forwardURL over http", forward("http"), sandboxv1.ReasonSecretRefused, "its scheme is not https"},
		{"forwardURL with credentials", forward("userinfo"), sandboxv1.ReasonSecretRefused, "it carries credentials before the host"},
		{"forwardURL that does not parse", forward("garbage"), sandboxv1.ReasonSecretRefused, "it does not parse as a URL"},
		{"forwardURL key missing", forward("nokey"), sandboxv1.ReasonSecretKeyNotFound,
			`key "nokey" not found in Secret "broker"; spec.networkPolicy.allow[1].rules[1].forwardURL needs it`},
		{"a path regex that does not compile", regex(sandboxv1.NetworkMatch{Path: &sandboxv1.StringMatcher{Regex: str("(ab")}}), sandboxv1.ReasonNetworkPolicyInvalid,
			"spec.networkPolicy.allow[0].rules[0].match.path.regex: does not compile as an RE2 regular expression: missing closing ): `(ab`"},
		{"a lookahead (not RE2)", regex(sandboxv1.NetworkMatch{Headers: []sandboxv1.KeyValueMatcher{{Key: &sandboxv1.StringMatcher{Exact: str("a")}}, {Value: &sandboxv1.StringMatcher{Regex: str("(?=x)")}}}}),
			sandboxv1.ReasonNetworkPolicyInvalid, "spec.networkPolicy.allow[0].rules[0].match.headers[1].value.regex: does not compile"},
		{"a query key regex", regex(sandboxv1.NetworkMatch{QueryString: []sandboxv1.KeyValueMatcher{{Key: &sandboxv1.StringMatcher{Regex: str("[")}}}}),
			sandboxv1.ReasonNetworkPolicyInvalid, "spec.networkPolicy.allow[0].rules[0].match.queryString[0].key.regex: does not compile"},
		{"a transform from a ServiceAccount token", &sandboxv1.NetworkPolicy{Mode: sandboxv1.NetworkAllowlist, Allow: []sandboxv1.DomainRules{
			{Domain: "a.com", Rules: []sandboxv1.NetworkRule{{Transform: &sandboxv1.NetworkTransform{Headers: []sandboxv1.InjectedHeader{header("Authorization", "sa", "token")}}}}}}},
			sandboxv1.ReasonSecretRefused, "a ServiceAccount token"},
		{"a transform Secret missing", &sandboxv1.NetworkPolicy{Mode: sandboxv1.NetworkAllowlist, Allow: []sandboxv1.DomainRules{
			{Domain: "a.com", Rules: []sandboxv1.NetworkRule{{Transform: &sandboxv1.NetworkTransform{Headers: []sandboxv1.InjectedHeader{header("Authorization", "none", "token")}}}}}}},
			sandboxv1.ReasonSecretNotFound, `Secret "none" not found; the header Authorization set for a.com (spec.networkPolicy.allow[0].rules[0].transform) needs it`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := buildNetworkPolicy(context.Background(), policyReader(t), tc.in)
			if err == nil {
				t.Fatal("accepted")
			}
			if got := classify(err).reason; got != tc.reason {
				t.Errorf("reason %s, want %s (%v)", got, tc.reason, err)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("message %q does not contain %q", err.Error(), tc.want)
			}
			if strings.Contains(err.Error(), "canary") || strings.Contains(err.Error(), "broker.example.com") {
				t.Errorf("message quotes a Secret's value: %q", err.Error())
			}
			if tc.reason == sandboxv1.ReasonNetworkPolicyInvalid {
				var pe *policyError
				if !errors.As(err, &pe) || !classify(err).terminal {
					t.Errorf("a spec error is terminal: %#v", err)
				}
			}
		})
	}
}

// Every Secret a policy references is a secret use (rotation wakes the
// Sandbox, admission and fork inheritance check it).
func TestPolicySecrets(t *testing.T) {
	np := &sandboxv1.NetworkPolicy{Mode: sandboxv1.NetworkAllowlist,
		InjectHeaders: []sandboxv1.HeaderInjection{{Domain: "a.com", Headers: []sandboxv1.InjectedHeader{header("A", "inj", "k")}}},
		Allow: []sandboxv1.DomainRules{{Domain: "b.com", Rules: []sandboxv1.NetworkRule{
			{Transform: &sandboxv1.NetworkTransform{Headers: []sandboxv1.InjectedHeader{header("B", "tr", "k")}}},
			{ForwardURL: &sandboxv1.ForwardURLSource{ValueFrom: secretRef("fwd", "url")}},
			{Response: &sandboxv1.NetworkResponse{StatusCode: 403}},
		}}}}
	uses := secretUses(&sandboxv1.SandboxSpec{NetworkPolicy: np})
	want := map[string]secretUse{"inj": useHeaders, "tr": useHeaders, "fwd": useForward}
	if len(uses) != len(want) {
		t.Fatalf("uses %v, want %v", uses, want)
	}
	for n, u := range want {
		if uses[n] != u {
			t.Errorf("%s: use %b, want %b", n, uses[n], u)
		}
	}
	if got := strings.Join(referencedSecrets(&sandboxv1.SandboxSpec{NetworkPolicy: np}), ","); got != "fwd,inj,tr" {
		t.Errorf("referenced %s", got)
	}
}
