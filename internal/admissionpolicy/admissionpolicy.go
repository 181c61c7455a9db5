// Package admissionpolicy installs the admission policies of config/admission
// into a control plane and waits until the API server applies them. The test
// suites, `make dev` and the benchmark use it; clusters get the same YAML
// through kustomize (`make install`, `make deploy`).
package admissionpolicy

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/controller-runtime/pkg/client"

	sandboxv1 "github.com/getsentry/sandbox-controller/api/v1alpha1"
)

// Install creates the objects of the policy files in dir (every *.yaml but
// kustomize's own) and waits until a Sandbox created in namespace gets the
// finalizer at admission. The API server loads policies asynchronously, so
// without the wait the first Sandboxes could miss it.
func Install(ctx context.Context, c client.Client, dir, namespace string) error {
	files, err := filepath.Glob(filepath.Join(dir, "*.yaml"))
	if err != nil {
		return err
	}
	for _, f := range files {
		if base := filepath.Base(f); base == "kustomization.yaml" || base == "kustomizeconfig.yaml" {
			continue
		}
		if err := createAll(ctx, c, f); err != nil {
			return err
		}
	}
	probe := &sandboxv1.Sandbox{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, GenerateName: "admission-probe-"},
		Spec:       sandboxv1.SandboxSpec{Source: sandboxv1.SandboxSource{Runtime: new(sandboxv1.Runtime("node24"))}},
	}
	// Errors are retried too: a CRD installed a moment ago may not be served yet.
	var last error
	err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		p := probe.DeepCopy()
		if last = c.Create(ctx, p, client.DryRunAll); last != nil {
			return false, nil
		}
		return slices.Contains(p.Finalizers, sandboxv1.SandboxFinalizer), nil
	})
	if err != nil {
		return fmt.Errorf("the finalizer policy of %s did not take effect: %w (last probe: %v)", dir, err, last)
	}
	return nil
}

func createAll(ctx context.Context, c client.Client, path string) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	dec := yaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096)
	for {
		u := &unstructured.Unstructured{}
		if err := dec.Decode(&u.Object); errors.Is(err, io.EOF) {
			return nil
		} else if err != nil {
			return fmt.Errorf("%s: %w", path, err)
		}
		if len(u.Object) == 0 {
			continue
		}
		if err := c.Create(ctx, u); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("%s: create %s %s: %w", path, u.GetKind(), u.GetName(), err)
		}
	}
}
