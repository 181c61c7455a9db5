// Command chart regenerates the parts of the Helm chart that come from
// config/, so that the chart installs the same CRDs, RBAC and admission policy
// as `make deploy`:
//
//   - charts/sandbox-controller/files/crds/: config/crd/bases, byte for byte
//     (templates/crds.yaml installs them);
//   - templates/generated/rbac.yaml: config/rbac rendered by kustomize;
//   - templates/generated/validating-admission.yaml and admission.yaml:
//     config/admission rendered by kustomize, the validating policies (always
//     installed, the manager's namespace replaced by the release's) and the
//     mutating one (only where the cluster serves it).
//
// Where config/default's kustomization sets a namePrefix and a namespace, the
// generated templates put the release's name prefix and namespace. `make
// chart` runs it (and `make manifests` runs `make chart`); CI fails when the
// result differs from the commit, and test/chart compares the rendered chart
// with the rendered config/default.
package main

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"

	"sigs.k8s.io/yaml"
)

// Stand-ins for the release's values while kustomize renders config/: each is
// replaced by a template expression afterwards, so none may occur in config/.
const (
	prefixToken    = "chart-fullname-"
	namespaceToken = "chart-release-namespace"
	labelsKey      = "chart-labels-placeholder"
)

// chartLabels are set by the chart's labels template; a config/ label with one
// of these keys (kubebuilder scaffolds `app.kubernetes.io/managed-by:
// kustomize`) is replaced by the chart's value.
var chartLabels = []string{
	"helm.sh/chart",
	"app.kubernetes.io/name",
	"app.kubernetes.io/instance",
	"app.kubernetes.io/version",
	"app.kubernetes.io/managed-by",
}

func main() {
	root := flag.String("root", ".", "Repository root.")
	kustomize := flag.String("kustomize", "bin/kustomize", "kustomize binary (`make kustomize` builds it).")
	flag.Parse()
	if err := run(*root, *kustomize); err != nil {
		fmt.Fprintln(os.Stderr, "error:", err)
		os.Exit(1)
	}
}

func run(root, kustomize string) error {
	root, err := filepath.Abs(root)
	if err != nil {
		return err
	}
	if kustomize, err = exec.LookPath(kustomize); err != nil {
		return fmt.Errorf("kustomize: %w (run `make kustomize`)", err)
	}
	if kustomize, err = filepath.Abs(kustomize); err != nil {
		return err
	}
	chart := filepath.Join(root, "charts", "sandbox-controller")
	if err := copyCRDs(filepath.Join(root, "config", "crd", "bases"), filepath.Join(chart, "files", "crds")); err != nil {
		return err
	}
	generated := filepath.Join(chart, "templates", "generated")
	if err := os.MkdirAll(generated, 0o755); err != nil {
		return err
	}
	rbac, err := render(kustomize, filepath.Join(root, "config", "rbac"), true)
	if err != nil {
		return err
	}
	if err := write(filepath.Join(generated, "rbac.yaml"), "config/rbac", "", rbac); err != nil {
		return err
	}
	admission, err := render(kustomize, filepath.Join(root, "config", "admission"), false)
	if err != nil {
		return err
	}
	// The validating policies are the operator's security (docs/security.md):
	// always installed. The mutating one is optional and needs Kubernetes 1.36.
	var validating, mutating []string
	for _, o := range admission {
		if strings.Contains(o, "\nkind: ValidatingAdmissionPolicy") {
			validating = append(validating, strings.ReplaceAll(o, managerNamespace, `{{ .Release.Namespace }}`))
		} else {
			mutating = append(mutating, o)
		}
	}
	if err := write(filepath.Join(generated, "validating-admission.yaml"), "config/admission", "", validating); err != nil {
		return err
	}
	return write(filepath.Join(generated, "admission.yaml"), "config/admission",
		`eq (include "sandbox-controller.installAdmissionPolicy" .) "true"`, mutating)
}

// managerNamespace is config/default's namespace, which
// config/admission/secret-references.yaml names as the manager's own; the
// chart's manager runs in the release namespace instead.
const managerNamespace = "sandbox-controller-system"

// copyCRDs makes dst a copy of the YAML files in src, removing any other.
func copyCRDs(src, dst string) error {
	files, err := filepath.Glob(filepath.Join(src, "*.yaml"))
	if err != nil {
		return err
	}
	if len(files) == 0 {
		return fmt.Errorf("no CRDs in %s (run `make manifests`)", src)
	}
	if err := os.MkdirAll(dst, 0o755); err != nil {
		return err
	}
	old, err := filepath.Glob(filepath.Join(dst, "*"))
	if err != nil {
		return err
	}
	for _, f := range old {
		if !slices.Contains(files, filepath.Join(src, filepath.Base(f))) {
			if err := os.Remove(f); err != nil {
				return err
			}
		}
	}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(dst, filepath.Base(f)), b, 0o644); err != nil {
			return err
		}
	}
	return nil
}

// render builds dir with kustomize under a stand-in name prefix (and
// namespace), as config/default does with the real ones, and returns the
// objects as template text.
func render(kustomize, dir string, namespaced bool) ([]string, error) {
	sources, err := filepath.Glob(filepath.Join(dir, "*"))
	if err != nil {
		return nil, err
	}
	for _, f := range sources {
		b, err := os.ReadFile(f)
		if err != nil {
			return nil, err
		}
		if bytes.Contains(b, []byte(prefixToken)) || bytes.Contains(b, []byte(namespaceToken)) {
			return nil, fmt.Errorf("%s contains %s or %s, which hack/chart replaces", f, prefixToken, namespaceToken)
		}
	}
	tmp, err := os.MkdirTemp("", "chart-kustomize-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(tmp)
	// kustomize refuses absolute paths to a base.
	rel, err := filepath.Rel(tmp, dir)
	if err != nil {
		return nil, err
	}
	k := "namePrefix: " + prefixToken + "\n"
	if namespaced {
		k += "namespace: " + namespaceToken + "\n"
	}
	k += "resources:\n- " + filepath.ToSlash(rel) + "\n"
	if err := os.WriteFile(filepath.Join(tmp, "kustomization.yaml"), []byte(k), 0o644); err != nil {
		return nil, err
	}
	var stdout, stderr bytes.Buffer
	cmd := exec.Command(kustomize, "build", tmp)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("kustomize build %s: %w: %s", dir, err, stderr.String())
	}
	out := stdout.String()
	for _, s := range []string{"{{", labelsKey} {
		if strings.Contains(out, s) {
			return nil, fmt.Errorf("%s contains %q, which the chart's templates cannot carry as text", dir, s)
		}
	}
	var objects []string
	for doc := range strings.SplitSeq(out, "\n---\n") {
		o, err := toTemplate(doc, dir)
		if err != nil {
			return nil, err
		}
		objects = append(objects, o)
	}
	return objects, nil
}

var labelsLine = regexp.MustCompile(`(?m)^    ` + regexp.QuoteMeta(labelsKey) + `: x$`)

// toTemplate turns one rendered object into template text: the chart's labels
// added, the stand-ins replaced by the release's name prefix and namespace.
func toTemplate(doc, dir string) (string, error) {
	var obj map[string]any
	if err := yaml.Unmarshal([]byte(doc), &obj); err != nil {
		return "", fmt.Errorf("kustomize build %s: %w", dir, err)
	}
	meta, ok := obj["metadata"].(map[string]any)
	if !ok {
		return "", fmt.Errorf("kustomize build %s: an object without metadata", dir)
	}
	name, _ := meta["name"].(string)
	if !strings.HasPrefix(name, prefixToken) {
		return "", fmt.Errorf("kustomize build %s: %s has no name prefix", dir, name)
	}
	labels, _ := meta["labels"].(map[string]any)
	if labels == nil {
		labels = map[string]any{}
	}
	for _, k := range chartLabels {
		delete(labels, k)
	}
	labels[labelsKey] = "x"
	meta["labels"] = labels
	b, err := yaml.Marshal(obj)
	if err != nil {
		return "", err
	}
	s := string(b)
	if !labelsLine.MatchString(s) {
		return "", errors.New("labels placeholder not found at metadata.labels")
	}
	s = labelsLine.ReplaceAllLiteralString(s, `    {{- include "sandbox-controller.labels" . | nindent 4 }}`)
	s = strings.ReplaceAll(s, prefixToken, `{{ include "sandbox-controller.fullname" . }}-`)
	s = strings.ReplaceAll(s, namespaceToken, `{{ .Release.Namespace }}`)
	return s, nil
}

// write writes the objects as one template, installed only when cond (a
// template pipeline) is true, if it is not empty.
func write(path, source, cond string, objects []string) error {
	var b strings.Builder
	fmt.Fprintf(&b, "{{- /* Generated by `make chart` (hack/chart) from %s: do not edit. */}}\n", source)
	if cond != "" {
		fmt.Fprintf(&b, "{{- if %s }}\n", cond)
	}
	for _, o := range objects {
		b.WriteString("---\n")
		b.WriteString(o)
	}
	if cond != "" {
		b.WriteString("{{- end }}\n")
	}
	return os.WriteFile(path, []byte(b.String()), 0o644)
}
