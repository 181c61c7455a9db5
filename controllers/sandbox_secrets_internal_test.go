package controllers

import (
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	sandboxv1 "github.com/getsentry/sandbox-controller/api/v1alpha1"
)

func TestSecretUses(t *testing.T) {
	sel := func(name string) sandboxv1.EnvVarSource {
		return sandboxv1.EnvVarSource{SecretKeyRef: sandboxv1.SecretKeySelector{Name: name, Key: "k"}}
	}
	both := sel("both")
	spec := &sandboxv1.SandboxSpec{
		Source: sandboxv1.SandboxSource{Git: &sandboxv1.GitSource{URL: "https://example.com/r.git", Credentials: &sandboxv1.GitCredentials{SecretName: "git"}}},
		Env:    []sandboxv1.EnvVar{{Name: "A", ValueFrom: &both}, {Name: "B"}},
		NetworkPolicy: &sandboxv1.NetworkPolicy{InjectHeaders: []sandboxv1.HeaderInjection{{
			Domain: "a.com", Headers: []sandboxv1.InjectedHeader{{Name: "X", ValueFrom: both}, {Name: "Y", ValueFrom: sel("hdr")}},
		}}},
	}
	uses := secretUses(spec)
	want := map[string]secretUse{"both": useEnv | useHeaders, "hdr": useHeaders, "git": useGit}
	if len(uses) != len(want) {
		t.Fatalf("uses %v, want %v", uses, want)
	}
	for n, u := range want {
		if uses[n] != u {
			t.Errorf("%s: use %b, want %b", n, uses[n], u)
		}
	}
	if got := strings.Join(referencedSecrets(spec), ","); got != "both,git,hdr" {
		t.Errorf("referenced %q", got)
	}
	if len(referencedSecrets(&sandboxv1.SandboxSpec{})) != 0 {
		t.Error("a spec without Secrets references some")
	}
}

func TestSecretDigest(t *testing.T) {
	const value = "s3cr3t-value-digest"
	sec := func(v string) *corev1.Secret {
		return &corev1.Secret{Data: map[string][]byte{"k": []byte(v), "other": []byte("x")}}
	}
	key := []byte("manager-key-0123456789abcdef0123")
	keys := map[string]bool{"k": true}
	d := secretDigest(key, "uid-1", "s", sec(value), keys)
	if !strings.HasPrefix(d, digestPrefix) || len(d) != len(digestPrefix)+16 || strings.Contains(d, value) {
		t.Errorf("digest %q", d)
	}
	if secretDigest(key, "uid-1", "s", sec(value), keys) != d {
		t.Error("not deterministic")
	}
	for what, other := range map[string]string{
		"another value":    secretDigest(key, "uid-1", "s", sec(value+"2"), keys),
		"another object":   secretDigest(key, "uid-2", "s", sec(value), keys),
		"another Secret":   secretDigest(key, "uid-1", "t", sec(value), keys),
		"more keys digest": secretDigest(key, "uid-1", "s", sec(value), map[string]bool{"k": true, "other": true}),
		"another key":      secretDigest([]byte("another-key-0123456789abcdef0123"), "uid-1", "s", sec(value), keys),
	} {
		if other == d {
			t.Errorf("%s: same digest", what)
		}
	}
	unread := sec(value)
	unread.Data["other"] = []byte("changed")
	if secretDigest(key, "uid-1", "s", unread, keys) != d {
		t.Error("a key the spec does not read changed the digest")
	}

	// Recorded digests of either form are compared by their form: an
	// upgrade finds unkeyed ones in status.
	legacy := legacyDigest("uid-1", "s", sec(value), keys)
	if !isLegacyDigest(legacy) || isLegacyDigest(d) || isLegacyDigest("") {
		t.Errorf("forms: legacy %q keyed %q", legacy, d)
	}
	for _, recorded := range []string{d, legacy} {
		if !sameValues(recorded, key, "uid-1", "s", sec(value), keys) {
			t.Errorf("%q: the same values count as changed", recorded)
		}
		if sameValues(recorded, key, "uid-1", "s", sec(value+"2"), keys) {
			t.Errorf("%q: changed values count as the same", recorded)
		}
	}
	if sameValues("", key, "uid-1", "s", sec(value), keys) {
		t.Error("a Secret never recorded counts as applied")
	}
}

func TestMarkSecrets(t *testing.T) {
	running := func(session string) *sandboxv1.Sandbox {
		sbx := &sandboxv1.Sandbox{Status: sandboxv1.SandboxStatus{SessionID: session, ExpiresAt: &metav1.Time{Time: time.Now()},
			Secrets: &sandboxv1.SecretsStatus{StaleSession: "s1"}}}
		sbx.UID = types.UID("u")
		markSecrets(sbx, nil)
		return sbx
	}
	sbx := running("s1")
	settleSecrets(sbx)
	c := meta.FindStatusCondition(sbx.Status.Conditions, sandboxv1.ConditionSecretsCurrent)
	if c == nil || c.Reason != sandboxv1.ReasonSecretRotated || !strings.Contains(c.Message, "s1") {
		t.Fatalf("stale session: %+v", c)
	}
	sbx.Status.SessionID = "s2"
	settleSecrets(sbx)
	c = meta.FindStatusCondition(sbx.Status.Conditions, sandboxv1.ConditionSecretsCurrent)
	if c.Reason != sandboxv1.ReasonSecretsCurrent || sbx.Status.Secrets.StaleSession != "" {
		t.Fatalf("after a new session: %+v, stale %q", c, sbx.Status.Secrets.StaleSession)
	}
	stopped := running("s1")
	stopped.Status.ExpiresAt = nil
	settleSecrets(stopped)
	if c := meta.FindStatusCondition(stopped.Status.Conditions, sandboxv1.ConditionSecretsCurrent); c.Reason != sandboxv1.ReasonSecretsCurrent {
		t.Fatalf("after the session stopped: %+v", c)
	}
	markSecrets(sbx, &secretError{name: "gone", missing: "secret"})
	c = meta.FindStatusCondition(sbx.Status.Conditions, sandboxv1.ConditionSecretsCurrent)
	if c.Reason != sandboxv1.ReasonSecretNotFound || !strings.Contains(c.Message, `"gone"`) {
		t.Fatalf("missing Secret: %+v", c)
	}
}
