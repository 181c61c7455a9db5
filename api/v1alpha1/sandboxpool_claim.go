package v1alpha1

import apiequality "k8s.io/apimachinery/pkg/api/equality"

// ClaimMismatch names the fields of spec that a member of a SandboxPool
// whose template spec is template cannot take: a running session has its
// source, class, resources, environment, persistence, setup and region. Empty when
// a member can serve spec. The operator decides claims with it, and clients
// check a claim before they send it, with the same rule.
func ClaimMismatch(template, spec *SandboxSpec) []string {
	// Both ways: DeepDerivative alone lets an unset field match anything.
	eq := func(a, b any) bool {
		return apiequality.Semantic.DeepDerivative(a, b) && apiequality.Semantic.DeepDerivative(b, a)
	}
	checks := []struct {
		name string
		a, b any
	}{
		{"source", template.Source, spec.Source},
		{"className", template.ClassName, spec.ClassName},
		{"resources", template.Resources, spec.Resources},
		{"env", template.Env, spec.Env},
		{"persistent", template.Persistent, spec.Persistent},
		{"setup", template.Setup, spec.Setup},
		{"region", template.Region, spec.Region},
	}
	var fields []string
	for _, c := range checks {
		if !eq(c.a, c.b) {
			fields = append(fields, "spec."+c.name)
		}
	}
	return fields
}
