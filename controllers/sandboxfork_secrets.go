package controllers

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	sandboxv1 "github.com/getsentry/sandbox-controller/api/v1alpha1"
)

// A fork's children inherit the Secret references of the Sandbox their
// snapshot was taken from. The manager creates the children, so the
// secret-references admission policy checks the manager, not the user who
// created the fork: without the check here, a user who may create forks but
// not read a Secret gets sandboxes holding it. So before creating a child the
// controller asks, per inherited Secret, whether the fork's creator (recorded
// at admission in AnnotationCreatedBy, config/admission/created-by.yaml) may
// get it. References the template sets itself were checked at admission
// against whoever wrote them.

// +kubebuilder:rbac:groups=authorization.k8s.io,resources=subjectaccessreviews,verbs=create

// forkCreator is the user recorded in AnnotationCreatedBy.
type forkCreator struct {
	User   string   `json:"user"`
	Groups []string `json:"groups"`
}

// creatorOf reads the fork's recorded creator; false when there is none or
// it cannot be read (both mean: inherit no Secret reference).
func creatorOf(fork *sandboxv1.SandboxFork) (forkCreator, bool) {
	v, ok := fork.Annotations[sandboxv1.AnnotationCreatedBy]
	if !ok {
		return forkCreator{}, false
	}
	var c forkCreator
	if err := json.Unmarshal([]byte(v), &c); err != nil || c.User == "" {
		return forkCreator{}, false
	}
	return c, true
}

// inheritedSecret is one Secret a child would reference only because the
// source Sandbox did, and the child spec field that references it.
type inheritedSecret struct {
	Name, Field string
}

// inheritedSecrets lists, each once and in order, the Secrets the children
// reference through the inherited spec: the fields childSpec takes from it
// because the template leaves them unset.
func inheritedSecrets(fork *sandboxv1.SandboxFork, inherited *sandboxv1.SourceSandboxSpec) []inheritedSecret {
	if inherited == nil {
		return nil
	}
	var out []inheritedSecret
	seen := map[string]bool{}
	add := func(name, field string) {
		if !seen[name] {
			seen[name] = true
			out = append(out, inheritedSecret{Name: name, Field: field})
		}
	}
	o := fork.Spec.Template.Spec
	if o.Env == nil {
		for _, e := range inherited.Env {
			if e.ValueFrom != nil {
				add(e.ValueFrom.SecretKeyRef.Name, "spec.env")
			}
		}
	}
	if o.NetworkPolicy == nil {
		for _, ps := range policySecrets(inherited.NetworkPolicy) {
			add(ps.name, ps.field)
		}
	}
	return out
}

// refusedSecrets returns why the children may not be created with the
// inherited Secret references ("" when they may): the fork records no
// creator, or the creator may not get some of them (one SubjectAccessReview
// per Secret). An error means a review could not be asked.
func (r *SandboxForkReconciler) refusedSecrets(ctx context.Context, fork *sandboxv1.SandboxFork, snap *sandboxv1.SandboxSnapshot, inherited *sandboxv1.SourceSandboxSpec) (string, error) {
	secrets := inheritedSecrets(fork, inherited)
	if len(secrets) == 0 {
		return "", nil
	}
	how := "ask for get on them, set spec.template.spec.env and spec.template.spec.networkPolicy to replace what is inherited, or set spec.template.inherit to None"
	creator, ok := creatorOf(fork)
	if !ok {
		return fmt.Sprintf("the children would inherit references to Secrets %s from SandboxSnapshot %q, and the SandboxFork records no creator who may read them "+
			"(annotation %s, written at creation by the MutatingAdmissionPolicy created-by.sandbox.sentry.io, Kubernetes >= 1.36): "+
			"re-create the fork where the policy is installed, or set spec.template.spec.env and spec.template.spec.networkPolicy, or spec.template.inherit to None",
			describeSecrets(secrets), snap.Name, sandboxv1.AnnotationCreatedBy), nil
	}
	var denied []inheritedSecret
	for _, s := range secrets {
		sar := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
			User:   creator.User,
			Groups: creator.Groups,
			ResourceAttributes: &authorizationv1.ResourceAttributes{
				Namespace: fork.Namespace, Verb: "get", Version: "v1", Resource: "secrets", Name: s.Name,
			},
		}}
		if err := r.Create(ctx, sar); err != nil {
			return "", fmt.Errorf("review get on Secret %s for %s: %w", s.Name, creator.User, err)
		}
		if !sar.Status.Allowed {
			denied = append(denied, s)
		}
	}
	if len(denied) == 0 {
		return "", nil
	}
	return fmt.Sprintf("user %s, who created this SandboxFork, may not get Secrets %s in namespace %s, which the children would inherit from SandboxSnapshot %q "+
		"(the spec of the Sandbox it was taken from): %s", creator.User, describeSecrets(denied), fork.Namespace, snap.Name, how), nil
}

// describeSecrets is "name (field), …".
func describeSecrets(secrets []inheritedSecret) string {
	parts := make([]string, len(secrets))
	for i, s := range secrets {
		parts[i] = fmt.Sprintf("%s (%s)", s.Name, s.Field)
	}
	return strings.Join(parts, ", ")
}

// refuseSecrets reports inherited Secrets the fork may not pass on, with one
// Warning event when the refusal starts (or its message changes).
func (r *SandboxForkReconciler) refuseSecrets(fork *sandboxv1.SandboxFork, msg string) {
	st := &fork.Status
	if !hasConditionMessage(st.Conditions, sandboxv1.ReasonSecretNotPermitted, msg) {
		r.Recorder.Eventf(fork, nil, corev1.EventTypeWarning, sandboxv1.ReasonSecretNotPermitted, "Fork", "%s", msg)
	}
	st.Phase = sandboxv1.ForkPending
	setCondition(&st.Conditions, fork.Generation, sandboxv1.ConditionReady, metav1.ConditionFalse, sandboxv1.ReasonSecretNotPermitted, msg)
}

// hasConditionMessage reports whether Ready already says msg for reason.
func hasConditionMessage(conds []metav1.Condition, reason, msg string) bool {
	for _, c := range conds {
		if c.Type == sandboxv1.ConditionReady && c.Reason == reason && c.Message == msg {
			return true
		}
	}
	return false
}
