package v1alpha1_test

import (
	"os/exec"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/runtime"

	sandboxv1 "github.com/getsentry/sandbox-controller/api/v1alpha1"
)

// TestAPIDependsOnApimachineryOnly keeps the API importable by any client
// program: no controller-runtime (the operator's framework) and no client-go
// in the packages under api/.
func TestAPIDependsOnApimachineryOnly(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "github.com/getsentry/sandbox-controller/api/...").CombinedOutput()
	if err != nil {
		t.Fatalf("go list -deps: %v\n%s", err, out)
	}
	for _, pkg := range strings.Fields(string(out)) {
		for _, banned := range []string{"sigs.k8s.io/controller-runtime", "k8s.io/client-go"} {
			if pkg == banned || strings.HasPrefix(pkg, banned+"/") {
				t.Errorf("api/... depends on %s; it may depend on k8s.io/apimachinery only", pkg)
			}
		}
	}
}

// TestAddToScheme checks that every kind and its list is registered under
// sandbox.sentry.io/v1alpha1.
func TestAddToScheme(t *testing.T) {
	s := runtime.NewScheme()
	if err := sandboxv1.AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	for _, obj := range []runtime.Object{
		&sandboxv1.Sandbox{}, &sandboxv1.SandboxList{},
		&sandboxv1.SandboxSnapshot{}, &sandboxv1.SandboxSnapshotList{},
		&sandboxv1.SandboxFork{}, &sandboxv1.SandboxForkList{},
	} {
		gvks, _, err := s.ObjectKinds(obj)
		if err != nil {
			t.Errorf("%T: %v", obj, err)
			continue
		}
		if len(gvks) != 1 || gvks[0].GroupVersion() != sandboxv1.GroupVersion {
			t.Errorf("%T registered as %v, want group version %s", obj, gvks, sandboxv1.GroupVersion)
		}
	}
	if got, want := sandboxv1.Resource("sandboxes").String(), "sandboxes.sandbox.sentry.io"; got != want {
		t.Errorf("Resource = %q, want %q", got, want)
	}
}
