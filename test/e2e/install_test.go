package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"

	"github.com/getsentry/sandbox-controller/localstack/controlplane"
)

// crdNames returns the names of the CustomResourceDefinitions in a YAML stream.
func crdNames(t *testing.T, stream []byte) []string {
	t.Helper()
	var names []string
	for _, doc := range splitYAML(t, stream) {
		var crd apiextensionsv1.CustomResourceDefinition
		must(t, yaml.Unmarshal(doc, &crd))
		if crd.Kind == "CustomResourceDefinition" {
			names = append(names, crd.Name)
		}
	}
	slices.Sort(names)
	return names
}

// TestEveryCRDIsInstalled fails when a CRD that controller-gen writes is
// missing from what `make install` (config/crd) or `make deploy`
// (config/default) render: the manager would then fail to start its informers.
func TestEveryCRDIsInstalled(t *testing.T) {
	files, err := filepath.Glob(filepath.Join(repoRoot, "config", "crd", "bases", "*.yaml"))
	must(t, err)
	var generated []string
	for _, f := range files {
		b, err := os.ReadFile(f)
		must(t, err)
		generated = append(generated, crdNames(t, b)...)
	}
	slices.Sort(generated)
	kinds := []string{"sandboxclasses.sandbox.sentry.io", "sandboxes.sandbox.sentry.io", "sandboxforks.sandbox.sentry.io",
		"sandboxpools.sandbox.sentry.io", "sandboxquotas.sandbox.sentry.io", "sandboxsnapshots.sandbox.sentry.io"}
	if !slices.Equal(generated, kinds) {
		t.Fatalf("config/crd/bases holds the CRDs %v, want the API's kinds %v", generated, kinds)
	}
	// PROJECT (kubebuilder's record of the kinds) names the same kinds.
	project, err := os.ReadFile(filepath.Join(repoRoot, "PROJECT"))
	must(t, err)
	var scaffold struct {
		Resources []struct{ Kind string } `json:"resources"`
	}
	must(t, yaml.Unmarshal(project, &scaffold))
	var recorded, crdKinds []string
	for _, r := range scaffold.Resources {
		recorded = append(recorded, r.Kind)
	}
	for _, f := range files {
		b, err := os.ReadFile(f)
		must(t, err)
		var crd apiextensionsv1.CustomResourceDefinition
		must(t, yaml.Unmarshal(b, &crd))
		crdKinds = append(crdKinds, crd.Spec.Names.Kind)
	}
	slices.Sort(recorded)
	slices.Sort(crdKinds)
	if !slices.Equal(recorded, crdKinds) {
		t.Errorf("PROJECT records the kinds %v, config/crd/bases has CRDs for %v", recorded, crdKinds)
	}
	for _, dir := range []string{"config/crd", "config/default"} {
		rendered, err := controlplane.Render(repoRoot, dir)
		must(t, err)
		if got := crdNames(t, rendered); !slices.Equal(got, generated) {
			t.Errorf("kustomize build %s renders CRDs %v, want every generated one: %v", dir, got, generated)
		}
	}
}

// TestDeployIMG: `make deploy IMG=x` deploys image x (it used to ignore IMG).
func TestDeployIMG(t *testing.T) {
	for _, img := range []string{"registry.example.com/team/sandbox-controller:v1.2.3", "sandbox-controller:dev",
		"ghcr.io/getsentry/sandbox-controller@sha256:" + strings.Repeat("ab", 32)} {
		out, err := controlplane.RenderDeploy(repoRoot, img)
		must(t, err)
		d := findDeployment(t, out)
		if got := d.Spec.Template.Spec.Containers[0].Image; got != img {
			t.Errorf("make deploy IMG=%s renders image %q", img, got)
		}
	}
}

// TestDeployLeavesConfigAlone: rendering for another image does not edit the
// committed config/ (kubebuilder's `kustomize edit set image` does).
func TestDeployLeavesConfigAlone(t *testing.T) {
	path := filepath.Join(repoRoot, "config", "manager", "kustomization.yaml")
	before, err := os.ReadFile(path)
	must(t, err)
	_, err = controlplane.RenderDeploy(repoRoot, "elsewhere.example.com/other:v9")
	must(t, err)
	after, err := os.ReadFile(path)
	must(t, err)
	if string(before) != string(after) {
		t.Errorf("make deploy's rendering changed %s:\n%s", path, after)
	}
}

// TestInstall applies `make deploy`'s rendering with server-side apply (newEnv
// does it with the real kubectl) and checks that every object is on the
// server, that applying `make install`'s rendering on top is accepted too, and
// then uses the operator as a new user would: categories, and deleting a
// namespace that holds objects of every kind.
func TestInstall(t *testing.T) {
	e := newEnv(t, envOptions{})

	t.Run("every rendered object is on the server", func(t *testing.T) {
		docs := splitYAML(t, e.manifests)
		if len(docs) < 10 {
			t.Fatalf("the rendering has only %d objects", len(docs))
		}
		kinds := map[string]int{}
		for _, doc := range docs {
			u := &unstructured.Unstructured{}
			must(t, yaml.Unmarshal(doc, &u.Object))
			kinds[u.GetKind()]++
			args := []string{"get", strings.ToLower(u.GetKind()) + "." + u.GroupVersionKind().Group, u.GetName(), "-o", "name"}
			if u.GroupVersionKind().Group == "" {
				args[1] = strings.ToLower(u.GetKind())
			}
			if ns := u.GetNamespace(); ns != "" {
				args = append(args, "-n", ns)
			}
			if _, err := e.kubectl(args...); err != nil {
				t.Errorf("%s %s/%s was not created: %v", u.GetKind(), u.GetNamespace(), u.GetName(), err)
			}
		}
		t.Logf("make deploy rendered %d objects: %v", len(docs), kinds)
		if got := e.deployment.Spec.Template.Spec.Containers[0].Image; got != deployImage {
			t.Errorf("deployed image %q, want %q", got, deployImage)
		}
		crds, err := controlplane.Render(repoRoot, "config/crd")
		must(t, err)
		must(t, controlplane.Apply(e.ctx, e.kubeconfig, crds))
	})

	t.Run("categories", func(t *testing.T) { testCategories(t, e) })
	t.Run("deleting a namespace deletes its Vercel resources", func(t *testing.T) { testNamespaceDeletion(t, e) })
}

// objectsOfEveryKind is a Sandbox, a snapshot captured from it and a fork of
// that snapshot with two children.
func objectsOfEveryKind(ns string) string {
	return fmt.Sprintf(`apiVersion: v1
kind: Namespace
metadata:
  name: %[1]s
---
apiVersion: sandbox.sentry.io/v1alpha1
kind: Sandbox
metadata:
  name: box
  namespace: %[1]s
spec:
  source:
    runtime: node24
---
apiVersion: sandbox.sentry.io/v1alpha1
kind: SandboxSnapshot
metadata:
  name: box-snap
  namespace: %[1]s
spec:
  source:
    sandboxRef:
      name: box
  keepSourceRunning: true
---
apiVersion: sandbox.sentry.io/v1alpha1
kind: SandboxFork
metadata:
  name: box-fork
  namespace: %[1]s
spec:
  source:
    snapshotRef:
      name: box-snap
  replicas: 2
`, ns)
}

func (e *env) waitReady(t *testing.T, ns string) {
	t.Helper()
	for _, kind := range []string{"sandboxsnapshot", "sandboxfork", "sandbox"} {
		if _, err := e.kubectl("wait", "-n", ns, "--for=condition=Ready", kind, "--all", "--timeout=90s"); err != nil {
			t.Fatal(err)
		}
	}
}

func testCategories(t *testing.T, e *env) {
	const ns = "categories"
	e.apply(objectsOfEveryKind(ns))
	e.waitReady(t, ns)

	names := func(what string) []string {
		out, err := e.kubectl("get", what, "-n", ns, "-o", "name")
		must(t, err)
		return strings.Fields(out)
	}
	for _, n := range names("sandboxes") {
		if !strings.HasPrefix(n, "sandbox.sandbox.sentry.io/") {
			t.Errorf("kubectl get sandboxes returned %s", n)
		}
	}
	if got := len(names("sandboxes")); got != 3 { // box and the fork's two children
		t.Errorf("kubectl get sandboxes returned %d objects, want 3", got)
	}
	all := strings.Join(names("sentry-sandboxes"), " ")
	for _, want := range []string{"sandbox.sandbox.sentry.io/box", "sandboxsnapshot.sandbox.sentry.io/box-snap", "sandboxfork.sandbox.sentry.io/box-fork"} {
		if !strings.Contains(all, want) {
			t.Errorf("kubectl get sentry-sandboxes lacks %s: %s", want, all)
		}
	}

	// The command that used to delete every kind through the category. Not
	// --wait: the fork re-creates its children under the same names at once.
	out, err := e.kubectl("delete", "sandboxes", "--all", "-n", ns, "--wait=false")
	must(t, err)
	for _, want := range []string{"box", "box-fork-0", "box-fork-1"} {
		if !strings.Contains(out, `sandbox.sandbox.sentry.io "`+want+`" deleted`) {
			t.Errorf("kubectl delete sandboxes --all did not delete Sandbox %s:\n%s", want, out)
		}
	}
	if strings.Contains(out, "sandboxsnapshot") || strings.Contains(out, "sandboxfork") {
		t.Errorf("kubectl delete sandboxes --all deleted other kinds:\n%s", out)
	}
	if _, err := e.kubectl("wait", "-n", ns, "--for=delete", "sandbox/box", "--timeout=60s"); err != nil {
		t.Fatal(err)
	}
	for _, kept := range []string{"sandboxsnapshot/box-snap", "sandboxfork/box-fork"} {
		out, err := e.kubectl("get", kept, "-n", ns, "-o", "jsonpath={.metadata.deletionTimestamp}")
		if err != nil || strings.TrimSpace(out) != "" {
			t.Errorf("kubectl delete sandboxes --all touched %s: %v %s", kept, err, out)
		}
	}
}

// aPoolAndItsClaim is a SandboxPool of one member and a Sandbox that claims
// it (applied once the pool is Ready).
func aPoolAndItsClaim(ns string) (pool, claim string) {
	return fmt.Sprintf(`apiVersion: sandbox.sentry.io/v1alpha1
kind: SandboxPool
metadata:
  name: warm
  namespace: %[1]s
spec:
  replicas: 1
  template:
    spec:
      source:
        runtime: node24
`, ns), fmt.Sprintf(`apiVersion: sandbox.sentry.io/v1alpha1
kind: Sandbox
metadata:
  name: conversation
  namespace: %[1]s
spec:
  poolRef:
    name: warm
  source:
    runtime: node24
`, ns)
}

func testNamespaceDeletion(t *testing.T, e *env) {
	const ns = "doomed"
	e.apply(objectsOfEveryKind(ns))
	e.waitReady(t, ns)
	// A pool's members and a claimant's taken member go with the
	// namespace too: the claim leaves the pool to refill, so the pool holds
	// one member and the claimant another Vercel sandbox.
	pool, claim := aPoolAndItsClaim(ns)
	e.apply(pool)
	if _, err := e.kubectl("wait", "-n", ns, "--for=condition=Ready", "sandboxpool/warm", "--timeout=90s"); err != nil {
		t.Fatal(err)
	}
	e.apply(claim)
	if _, err := e.kubectl("wait", "-n", ns, "--for=condition=Claimed", "sandbox/conversation", "--timeout=90s"); err != nil {
		t.Fatal(err)
	}
	for _, what := range []string{"sandbox/conversation", "sandboxpool/warm"} {
		if _, err := e.kubectl("wait", "-n", ns, "--for=condition=Ready", what, "--timeout=90s"); err != nil {
			t.Fatal(err)
		}
	}
	owned := func() (sandboxes, snapshots int) {
		for _, s := range e.emu.LiveSandboxes() {
			if strings.HasPrefix(s.Name, ns+"-") {
				sandboxes++
			}
		}
		var names []string
		out, err := e.kubectl("get", "sandboxsnapshot", "-n", ns, "-o", "jsonpath={.items[*].status.snapshotID}")
		if err == nil {
			names = strings.Fields(out)
		}
		for _, s := range e.emu.Snapshots() {
			if slices.Contains(names, s.ID) && s.Status != "deleted" {
				snapshots++
			}
		}
		return sandboxes, snapshots
	}
	if sb, sn := owned(); sb != 5 || sn != 1 {
		t.Fatalf("before the delete the emulator holds %d sandboxes and %d snapshots of %s, want 5 (box, 2 fork children, the claimant, the pool's member) and 1", sb, sn, ns)
	}
	snapIDs, err := e.kubectl("get", "sandboxsnapshot", "-n", ns, "-o", "jsonpath={.items[*].status.snapshotID}")
	must(t, err)

	start := time.Now()
	if _, err := e.kubectl("delete", "namespace", ns, "--wait=true", "--timeout=120s"); err != nil {
		t.Fatalf("namespace deletion did not finish: %v", err)
	}
	t.Logf("namespace %s with 5 Sandboxes, 1 SandboxSnapshot, 1 SandboxFork and 1 SandboxPool deleted in %s", ns, time.Since(start).Round(100*time.Millisecond))
	for _, s := range e.emu.LiveSandboxes() {
		if strings.HasPrefix(s.Name, ns+"-") {
			t.Errorf("Vercel sandbox %s outlived its namespace", s.Name)
		}
	}
	for _, s := range e.emu.Snapshots() {
		if slices.Contains(strings.Fields(snapIDs), s.ID) && s.Status != "deleted" {
			t.Errorf("Vercel snapshot %s outlived its namespace", s.ID)
		}
	}
}
