// Package chart tests the Helm chart in charts/sandbox-controller with the
// real helm binary (bin/helm, built by `make helm`): it lints and renders the
// chart, checks that it installs what config/ (and so `make deploy`) installs
// — the same CRDs, RBAC and admission policy, a manager configured alike —
// that every manager flag is reachable from the values, and applies the
// rendering to a real API server (envtest) with kubectl and with helm itself.
package chart

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"

	"github.com/getsentry/sandbox-controller/localstack/controlplane"
)

const (
	chartPath = "charts/sandbox-controller"
	allOn     = "test/chart/testdata/all-on.yaml"
	// With this release name and namespace the chart's object names and
	// namespaces are those of config/default (namePrefix sandbox-controller-,
	// namespace sandbox-controller-system).
	deployRelease   = "sandbox-controller"
	deployNamespace = "sandbox-controller-system"
	// What helm reports a cluster serving MutatingAdmissionPolicy as.
	mapAPIVersion = "admissionregistration.k8s.io/v1/MutatingAdmissionPolicy"
)

// root is the repository root; every command runs there.
var root string

var (
	// helmHome isolates helm's cache, config and data from the user's.
	helmHome string
	// buildDir holds the manager binary the tests build.
	buildDir string
)

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	var err error
	if root, err = filepath.Abs("../.."); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	if helmHome, err = os.MkdirTemp("", "chart-test-helm-"); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(helmHome)
	if buildDir, err = os.MkdirTemp("", "chart-test-build-"); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(buildDir)
	return m.Run()
}

// tool returns the path of a binary that `make <target>` builds into bin/.
func tool(t *testing.T, env, name, target string) string {
	t.Helper()
	p := os.Getenv(env)
	if p == "" {
		p = filepath.Join(root, "bin", name)
	}
	if _, err := os.Stat(p); err != nil {
		t.Fatalf("%s: %v: run `make %s` (make test does)", name, err, target)
	}
	return p
}

// command runs a binary in the repository root and returns its stdout; a
// failure carries stderr.
func command(name string, stdin io.Reader, env []string, args ...string) (string, error) {
	var stdout, stderr bytes.Buffer
	cmd := exec.Command(name, args...)
	cmd.Dir = root
	cmd.Stdin = stdin
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	cmd.Env = append(os.Environ(), env...)
	if err := cmd.Run(); err != nil {
		return stdout.String(), fmt.Errorf("%s %s: %w\n%s", filepath.Base(name), strings.Join(args, " "), err, stderr.String())
	}
	return stdout.String(), nil
}

// helm runs bin/helm with the given arguments.
func helm(t *testing.T, args ...string) (string, error) {
	t.Helper()
	return command(tool(t, "HELM", "helm", "helm"), nil, []string{
		"HELM_CACHE_HOME=" + filepath.Join(helmHome, "cache"),
		"HELM_CONFIG_HOME=" + filepath.Join(helmHome, "config"),
		"HELM_DATA_HOME=" + filepath.Join(helmHome, "data"),
	}, args...)
}

// renderText is `helm template release chart -n namespace args...`.
func renderText(t *testing.T, release, namespace string, args ...string) string {
	t.Helper()
	out, err := helm(t, append([]string{"template", release, chartPath, "--namespace", namespace}, args...)...)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// render returns the objects `helm template` renders.
func render(t *testing.T, release, namespace string, args ...string) []*unstructured.Unstructured {
	t.Helper()
	return decode(t, renderText(t, release, namespace, args...))
}

// kustomize returns the objects `kustomize build dir` renders, as `make
// deploy` and `make install` do.
func kustomize(t *testing.T, dir string) []*unstructured.Unstructured {
	t.Helper()
	out, err := controlplane.Render(root, dir)
	if err != nil {
		t.Fatal(err)
	}
	return decode(t, string(out))
}

// decode splits a multi-document YAML stream into objects.
func decode(t *testing.T, text string) []*unstructured.Unstructured {
	t.Helper()
	r := utilyaml.NewYAMLReader(bufio.NewReader(strings.NewReader(text)))
	var objs []*unstructured.Unstructured
	for {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			return objs
		}
		if err != nil {
			t.Fatal(err)
		}
		j, err := yaml.YAMLToJSON(doc)
		if err != nil {
			t.Fatalf("%v in\n%s", err, doc)
		}
		if string(j) == "null" {
			continue // an empty document
		}
		u := &unstructured.Unstructured{}
		if err := u.UnmarshalJSON(j); err != nil {
			t.Fatalf("%v in\n%s", err, doc)
		}
		objs = append(objs, u)
	}
}

// find returns the object of that kind and name, or nil.
func find(objs []*unstructured.Unstructured, kind, name string) *unstructured.Unstructured {
	for _, o := range objs {
		if o.GetKind() == kind && o.GetName() == name {
			return o
		}
	}
	return nil
}

// ofKind returns the objects of the given kinds.
func ofKind(objs []*unstructured.Unstructured, kinds ...string) []*unstructured.Unstructured {
	var out []*unstructured.Unstructured
	for _, o := range objs {
		if slices.Contains(kinds, o.GetKind()) {
			out = append(out, o)
		}
	}
	return out
}

// names lists objects as Kind/name, for messages.
func names(objs []*unstructured.Unstructured) []string {
	var out []string
	for _, o := range objs {
		out = append(out, o.GetKind()+"/"+o.GetName())
	}
	slices.Sort(out)
	return out
}

// theDeployment returns the one Deployment among objs, typed; with sharding
// (one Deployment per shard), shard 0's, once shardDeployments checked that
// the others differ from it in the shard only.
func theDeployment(t *testing.T, objs []*unstructured.Unstructured) *appsv1.Deployment {
	t.Helper()
	deps := ofKind(objs, "Deployment")
	if len(deps) > 1 {
		return shardDeployments(t, objs)[0]
	}
	if len(deps) != 1 {
		t.Fatalf("want one Deployment, got %v", names(deps))
	}
	d := &appsv1.Deployment{}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(deps[0].Object, d); err != nil {
		t.Fatal(err)
	}
	if n := len(d.Spec.Template.Spec.Containers); n != 1 {
		t.Fatalf("Deployment %s: want one container, got %d", d.Name, n)
	}
	return d
}

// appVersion is the chart's appVersion, the default image tag.
func appVersion(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root, chartPath, "Chart.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var c struct {
		AppVersion string `json:"appVersion"`
	}
	if err := yaml.Unmarshal(b, &c); err != nil {
		t.Fatal(err)
	}
	if c.AppVersion == "" {
		t.Fatal("Chart.yaml has no appVersion")
	}
	return c.AppVersion
}
