// Package admissionpolicy installs the admission policies of config/admission
// into a control plane and waits until the API server applies them. The test
// suites, `make dev` and the benchmark use it; clusters get the same YAML
// through kustomize (`make install`, `make deploy`) and the chart.
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
	"strings"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/util/yaml"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	sandboxv1 "github.com/getsentry/sandbox-controller/api/v1alpha1"
	"github.com/getsentry/sandbox-controller/controllers"
)

// ManagerNamespace is the manager's namespace as config/default deploys it,
// which config/admission/secret-references.yaml names: no object there may
// reference a Secret (the chart substitutes its release namespace).
const ManagerNamespace = controllers.DefaultManagerNamespace

// probeUser is impersonated to see the validating policies refuse: it may
// create Sandboxes in the probe namespace while Install runs, and nothing else.
const probeUser = "sandbox.sentry.io:admission-probe"

// Install creates the objects of the policy files in dir (every *.yaml but
// kustomize's own) with the administrator cfg, and waits until the API server
// applies each policy to Sandboxes created in namespace: the finalizer is
// added (and a SandboxFork's creator recorded), a Secret reference and a raw
// snapshot id by a user without the permissions are refused. The API server loads policies asynchronously, so
// without the wait the first objects could slip through.
func Install(ctx context.Context, cfg *rest.Config, dir, namespace string) error {
	c, err := client.New(cfg, client.Options{Scheme: scheme()})
	if err != nil {
		return err
	}
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
	if err := poll(ctx, "the finalizer policy", func() (bool, error) {
		p := probe.DeepCopy()
		if err := c.Create(ctx, p, client.DryRunAll); err != nil {
			return false, err
		}
		return slices.Contains(p.Finalizers, sandboxv1.SandboxFinalizer), nil
	}); err != nil {
		return fmt.Errorf("%s: %w", dir, err)
	}
	fork := &sandboxv1.SandboxFork{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, GenerateName: "admission-probe-"},
		Spec:       sandboxv1.SandboxForkSpec{Source: sandboxv1.SandboxForkSource{SnapshotRef: &sandboxv1.LocalObjectReference{Name: "admission-probe"}}},
	}
	if err := poll(ctx, "the created-by policy", func() (bool, error) {
		f := fork.DeepCopy()
		if err := c.Create(ctx, f, client.DryRunAll); err != nil {
			return false, err
		}
		_, ok := f.Annotations[sandboxv1.AnnotationCreatedBy]
		return ok, nil
	}); err != nil {
		return fmt.Errorf("%s: %w", dir, err)
	}
	return probeValidating(ctx, cfg, c, probe)
}

// probeValidating waits until a user who may create Sandboxes, but neither
// read Secrets, use snapshot ids nor adopt Vercel sandboxes, is refused each.
func probeValidating(ctx context.Context, cfg *rest.Config, admin client.Client, probe *sandboxv1.Sandbox) (err error) {
	ns := probe.Namespace
	role := &rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "sandbox-admission-probe"},
		Rules:      []rbacv1.PolicyRule{{APIGroups: []string{sandboxv1.GroupVersion.Group}, Resources: []string{"sandboxes"}, Verbs: []string{"create"}}},
	}
	binding := &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "sandbox-admission-probe"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: role.Name},
		Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: probeUser}},
	}
	for _, o := range []client.Object{role, binding} {
		if err := admin.Create(ctx, o); err != nil && !apierrors.IsAlreadyExists(err) {
			return err
		}
	}
	defer func() {
		for _, o := range []client.Object{binding, role} {
			err = errors.Join(err, client.IgnoreNotFound(admin.Delete(ctx, o)))
		}
	}()
	as := rest.CopyConfig(cfg)
	as.Impersonate = rest.ImpersonationConfig{UserName: probeUser}
	user, err := client.New(as, client.Options{Scheme: admin.Scheme()})
	if err != nil {
		return err
	}
	refused := func(what, message string, mutate func(*sandboxv1.Sandbox)) error {
		return poll(ctx, what, func() (bool, error) {
			p := probe.DeepCopy()
			mutate(p)
			err := user.Create(ctx, p, client.DryRunAll)
			if err == nil {
				return false, errors.New("admitted")
			}
			// Until the Role takes effect RBAC refuses the create itself.
			return strings.Contains(err.Error(), message), err
		})
	}
	if err := refused("the secret-references policy", "may not get every Secret", func(s *sandboxv1.Sandbox) {
		s.Spec.Env = []sandboxv1.EnvVar{{Name: "PROBE", ValueFrom: &sandboxv1.EnvVarSource{SecretKeyRef: sandboxv1.SecretKeySelector{Name: "admission-probe", Key: "k"}}}}
	}); err != nil {
		return err
	}
	if err := refused("the snapshot-ids policy", "may not use Vercel snapshot id", func(s *sandboxv1.Sandbox) {
		s.Spec.Source = sandboxv1.SandboxSource{SnapshotID: new("snap_" + strings.Repeat("0", 28))}
	}); err != nil {
		return err
	}
	if err := refused("the images policy", "may not use image", func(s *sandboxv1.Sandbox) {
		s.Spec.Source = sandboxv1.SandboxSource{Image: new(sandboxv1.ImageReference("admission/probe:1"))}
	}); err != nil {
		return err
	}
	if err := refused("the rewind-snapshot-ids policy", "may not use Vercel snapshot id", func(s *sandboxv1.Sandbox) {
		s.Spec.Rewind = &sandboxv1.SandboxRewind{Token: "probe", SnapshotID: new("snap_" + strings.Repeat("0", 28))}
	}); err != nil {
		return err
	}
	return refused("the adopt policy", "may not adopt Vercel sandbox", func(s *sandboxv1.Sandbox) {
		s.Spec.Source = sandboxv1.SandboxSource{Adopt: &sandboxv1.AdoptSource{Name: "admission-probe"}}
	})
}

func scheme() *runtime.Scheme {
	s := runtime.NewScheme()
	utilruntime.Must(clientgoscheme.AddToScheme(s))
	utilruntime.Must(sandboxv1.AddToScheme(s))
	return s
}

// poll retries until ok; errors are retried too (a CRD or RBAC installed a
// moment ago may not be served yet), the last one is reported.
func poll(ctx context.Context, what string, ok func() (bool, error)) error {
	var last error
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		done, err := ok()
		last = err
		return done, nil
	})
	if err != nil {
		return fmt.Errorf("%s did not take effect: %w (last probe: %v)", what, err, last)
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
