package controllers

import (
	"slices"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	sandboxv1 "github.com/getsentry/sandbox-controller/api/v1alpha1"
)

// inheritedSecrets lists exactly the Secrets a child references because of
// the inherited spec: every Secret of childSpec's result that the template
// does not name itself (the template's were checked at admission), so a
// field childSpec starts to inherit cannot slip past the review unnoticed.
func TestInheritedSecrets(t *testing.T) {
	envFrom := func(name, secret string) sandboxv1.EnvVar {
		return sandboxv1.EnvVar{Name: name, ValueFrom: &sandboxv1.EnvVarSource{SecretKeyRef: sandboxv1.SecretKeySelector{Name: secret, Key: "k"}}}
	}
	headersFrom := func(secrets ...string) *sandboxv1.NetworkPolicy {
		np := &sandboxv1.NetworkPolicy{Mode: sandboxv1.NetworkAllowlist}
		for _, s := range secrets {
			np.InjectHeaders = append(np.InjectHeaders, sandboxv1.HeaderInjection{Domain: s + ".example.com",
				Headers: []sandboxv1.InjectedHeader{{Name: "Authorization", ValueFrom: sandboxv1.EnvVarSource{SecretKeyRef: sandboxv1.SecretKeySelector{Name: s, Key: "k"}}}}})
		}
		return np
	}
	source := &sandboxv1.SourceSandboxSpec{
		Env:           []sandboxv1.EnvVar{{Name: "PLAIN", Value: ptr.To("x")}, envFrom("A", "env-a"), envFrom("B", "shared"), envFrom("C", "env-a")},
		NetworkPolicy: headersFrom("shared", "hdr-b"),
	}
	tests := []struct {
		name      string
		inherited *sandboxv1.SourceSandboxSpec
		template  sandboxv1.SandboxOverrides
		want      []inheritedSecret
	}{
		{name: "nothing inherited (recipe, inherit None)", inherited: nil, template: sandboxv1.SandboxOverrides{Env: []sandboxv1.EnvVar{envFrom("T", "template-only")}}},
		{name: "env and headers, each Secret once", inherited: source, want: []inheritedSecret{
			{"env-a", "spec.env"}, {"shared", "spec.env"}, {"hdr-b", "spec.networkPolicy.injectHeaders"},
		}},
		{name: "template env replaces the inherited env", inherited: source,
			template: sandboxv1.SandboxOverrides{Env: []sandboxv1.EnvVar{envFrom("T", "template-only")}},
			want:     []inheritedSecret{{"shared", "spec.networkPolicy.injectHeaders"}, {"hdr-b", "spec.networkPolicy.injectHeaders"}}},
		{name: "an empty template env replaces it too", inherited: source,
			template: sandboxv1.SandboxOverrides{Env: []sandboxv1.EnvVar{}},
			want:     []inheritedSecret{{"shared", "spec.networkPolicy.injectHeaders"}, {"hdr-b", "spec.networkPolicy.injectHeaders"}}},
		{name: "template network policy replaces the inherited one", inherited: source,
			template: sandboxv1.SandboxOverrides{NetworkPolicy: &sandboxv1.NetworkPolicy{Mode: sandboxv1.NetworkAllowAll}},
			want:     []inheritedSecret{{"env-a", "spec.env"}, {"shared", "spec.env"}}},
		{name: "both replaced", inherited: source,
			template: sandboxv1.SandboxOverrides{Env: []sandboxv1.EnvVar{}, NetworkPolicy: headersFrom("template-only")}},
		{name: "allow rules: transform headers and forwardURL", inherited: &sandboxv1.SourceSandboxSpec{NetworkPolicy: &sandboxv1.NetworkPolicy{
			Mode: sandboxv1.NetworkAllowlist, Allow: []sandboxv1.DomainRules{{Domain: "api.github.com", Rules: []sandboxv1.NetworkRule{
				{Response: &sandboxv1.NetworkResponse{StatusCode: 403}},
				{ForwardURL: &sandboxv1.ForwardURLSource{ValueFrom: sandboxv1.EnvVarSource{SecretKeyRef: sandboxv1.SecretKeySelector{Name: "broker", Key: "url"}}}},
				{Transform: &sandboxv1.NetworkTransform{Headers: []sandboxv1.InjectedHeader{{Name: "X", ValueFrom: sandboxv1.EnvVarSource{SecretKeyRef: sandboxv1.SecretKeySelector{Name: "tr", Key: "k"}}}}}},
			}}}}},
			want: []inheritedSecret{{"broker", "spec.networkPolicy.allow[].rules[].forwardURL"}, {"tr", "spec.networkPolicy.allow[].rules[].transform"}}},
		{name: "no Secret in the source", inherited: &sandboxv1.SourceSandboxSpec{Env: []sandboxv1.EnvVar{{Name: "PLAIN", Value: ptr.To("x")}}, NetworkPolicy: &sandboxv1.NetworkPolicy{Mode: sandboxv1.NetworkDenyAll}}},
	}
	snap := &sandboxv1.SandboxSnapshot{ObjectMeta: metav1.ObjectMeta{Name: "snap"}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fork := &sandboxv1.SandboxFork{Spec: sandboxv1.SandboxForkSpec{Template: sandboxv1.SandboxForkTemplate{Spec: tt.template}}}
			got := inheritedSecrets(fork, tt.inherited)
			if !slices.Equal(got, tt.want) {
				t.Fatalf("inheritedSecrets = %v, want %v", got, tt.want)
			}
			// Every Secret the child references is inherited or the template's.
			spec := childSpec(fork, snap, tt.inherited)
			var names []string
			for _, s := range got {
				names = append(names, s.Name)
			}
			templateRefs := secretNamesOf(tt.template.Env, tt.template.NetworkPolicy)
			for _, ref := range secretNamesOf(spec.Env, spec.NetworkPolicy) {
				if !slices.Contains(names, ref) && !slices.Contains(templateRefs, ref) {
					t.Errorf("child references Secret %s, which is neither reviewed nor the template's", ref)
				}
			}
		})
	}
}

func secretNamesOf(env []sandboxv1.EnvVar, np *sandboxv1.NetworkPolicy) []string {
	var out []string
	for _, e := range env {
		if e.ValueFrom != nil {
			out = append(out, e.ValueFrom.SecretKeyRef.Name)
		}
	}
	if np != nil {
		for _, i := range np.InjectHeaders {
			for _, h := range i.Headers {
				out = append(out, h.ValueFrom.SecretKeyRef.Name)
			}
		}
	}
	return out
}

// The record is what config/admission/created-by.yaml writes; anything else
// means "no creator", which inherits no Secret.
func TestCreatorOf(t *testing.T) {
	tests := []struct {
		name, value string
		absent      bool
		want        forkCreator
		ok          bool
	}{
		{name: "absent", absent: true},
		{name: "as the policy writes it", value: `{"user":"bob","groups":["team-a","system:authenticated"]}`,
			want: forkCreator{User: "bob", Groups: []string{"team-a", "system:authenticated"}}, ok: true},
		{name: "no groups", value: `{"user":"system:serviceaccount:ns:ci","groups":[]}`,
			want: forkCreator{User: "system:serviceaccount:ns:ci", Groups: []string{}}, ok: true},
		// strings.quote escapes " \ \n like JSON does.
		{name: "quoted characters", value: `{"user":"o\"brien\\x\n","groups":[]}`,
			want: forkCreator{User: "o\"brien\\x\n", Groups: []string{}}, ok: true},
		// and \v as JSON does not: unreadable, so no creator.
		{name: "an escape JSON lacks", value: `{"user":"a\vb","groups":[]}`},
		{name: "not JSON", value: "bob"},
		{name: "no user", value: `{"groups":["system:masters"]}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fork := &sandboxv1.SandboxFork{}
			if !tt.absent {
				fork.Annotations = map[string]string{sandboxv1.AnnotationCreatedBy: tt.value}
			}
			got, ok := creatorOf(fork)
			if ok != tt.ok || got.User != tt.want.User || !slices.Equal(got.Groups, tt.want.Groups) {
				t.Fatalf("creatorOf(%q) = %+v, %v; want %+v, %v", tt.value, got, ok, tt.want, tt.ok)
			}
		})
	}
}

// A fork without a recorded creator (no MutatingAdmissionPolicy) is refused
// every inherited Secret, without asking anyone, and told how to proceed; one
// that inherits no Secret needs no creator.
func TestRefusedSecretsWithoutCreator(t *testing.T) {
	r := &SandboxForkReconciler{} // no client: no review may be asked
	snap := &sandboxv1.SandboxSnapshot{ObjectMeta: metav1.ObjectMeta{Name: "snap"}}
	fork := &sandboxv1.SandboxFork{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "f"}}
	inherited := &sandboxv1.SourceSandboxSpec{Env: []sandboxv1.EnvVar{
		{Name: "PLAIN", Value: ptr.To("x")},
		{Name: "KEY", ValueFrom: &sandboxv1.EnvVarSource{SecretKeyRef: sandboxv1.SecretKeySelector{Name: "api-key", Key: "k"}}},
	}}
	msg, err := r.refusedSecrets(t.Context(), fork, snap, inherited)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"api-key (spec.env)", sandboxv1.AnnotationCreatedBy, "records no creator", "spec.template.inherit to None", `SandboxSnapshot "snap"`} {
		if !strings.Contains(msg, want) {
			t.Errorf("message %q lacks %q", msg, want)
		}
	}
	msg, err = r.refusedSecrets(t.Context(), fork, snap, &sandboxv1.SourceSandboxSpec{Env: inherited.Env[:1]})
	if err != nil || msg != "" {
		t.Fatalf("no inherited Secret: got %q, %v; want no refusal", msg, err)
	}
}
