package controllers

import (
	"testing"
	"time"

	sandboxv1 "github.com/getsentry/sandbox-controller/api/v1alpha1"
	"github.com/getsentry/sandbox-controller/internal/vercel"
)

// spec.resources translates the same way for a Sandbox and a builder:
// memory follows the vCPUs.
func TestVercelResources(t *testing.T) {
	four := int32(4)
	for _, tc := range []struct {
		name string
		in   *sandboxv1.SandboxResources
		want *vercel.Resources
	}{
		{"unset", nil, nil},
		{"no vcpus", &sandboxv1.SandboxResources{}, nil},
		{"4 vcpus", &sandboxv1.SandboxResources{VCPUs: &four}, &vercel.Resources{VCPUs: 4, Memory: 8192}},
	} {
		got := vercelResources(tc.in)
		if (got == nil) != (tc.want == nil) || (got != nil && *got != *tc.want) {
			t.Errorf("%s: got %+v, want %+v", tc.name, got, tc.want)
		}
	}
}

// A builder is named and tagged for its build, never persistent, its
// session as long as the build's budget, with the recipe's resources and
// runtime.
func TestBuilderRequest(t *testing.T) {
	two := int32(2)
	rt := sandboxv1.Runtime("node24")
	tags := map[string]string{tagOwnerUID: "u"}
	for _, tc := range []struct {
		name        string
		rcp         sandboxv1.SnapshotRecipe
		wantRuntime string
		wantRes     *vercel.Resources
	}{
		{"runtime, resources", sandboxv1.SnapshotRecipe{Runtime: &rt, Resources: &sandboxv1.SandboxResources{VCPUs: &two}}, "node24", &vercel.Resources{VCPUs: 2, Memory: 4096}},
		{"on a base snapshot", sandboxv1.SnapshotRecipe{BaseSnapshotRef: &sandboxv1.LocalObjectReference{Name: "base"}}, "", nil},
	} {
		req := builderRequest("ns-build-x", tags, &tc.rcp, 30*time.Minute)
		if req.Name != "ns-build-x" || req.Tags[tagOwnerUID] != "u" || req.Timeout != 1_800_000 || req.Persistent == nil || *req.Persistent || req.Source != nil {
			t.Errorf("%s: request %+v", tc.name, req)
		}
		if req.Runtime != tc.wantRuntime || (req.Resources == nil) != (tc.wantRes == nil) || (req.Resources != nil && *req.Resources != *tc.wantRes) {
			t.Errorf("%s: runtime %q resources %+v", tc.name, req.Runtime, req.Resources)
		}
	}
}
