package e2e

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestCategoriesStayInTheNamespace runs, with the real kubectl against the
// installed CRDs and a running manager, the command that once deleted every
// SandboxClass of the cluster: `kubectl delete <category> --all -n team-b`,
// for every category a sandbox.sentry.io kind declares. kubectl ignores -n
// for cluster-scoped kinds, so a category holding one reaches across
// namespaces. The test checks what the API server serves (no cluster-scoped
// kind in any category), then that the namespaced command deletes team-b's
// objects of the category and nothing else: not the SandboxClass, not
// team-a's objects, not team-b's SandboxQuota (in no category: an
// administrator's budget outlives the workloads).
func TestCategoriesStayInTheNamespace(t *testing.T) {
	e := newEnv(t, envOptions{})

	// What the API server serves: the discovery document kubectl resolves
	// categories from.
	out, err := e.kubectl("get", "--raw", "/apis/sandbox.sentry.io/v1alpha1")
	must(t, err)
	var list metav1.APIResourceList
	must(t, json.Unmarshal([]byte(out), &list))
	categories := map[string]bool{}
	kinds := 0
	for _, r := range list.APIResources {
		if strings.Contains(r.Name, "/") { // a subresource
			continue
		}
		kinds++
		if !r.Namespaced && len(r.Categories) > 0 {
			t.Errorf("cluster-scoped %s is in the categories %v: `kubectl delete %s --all -n <ns>` would delete it cluster-wide", r.Name, r.Categories, r.Categories[0])
		}
		for _, c := range r.Categories {
			categories[c] = true
		}
	}
	if kinds != 6 {
		t.Fatalf("kubectl api-resources lists %d sandbox.sentry.io kinds, want 6:\n%s", kinds, out)
	}
	if !categories["sentry-sandboxes"] {
		t.Fatalf("no kind is in the category sentry-sandboxes (README.md uses it):\n%s", out)
	}

	for _, ns := range []string{"team-a", "team-b"} {
		if out, err := e.kubectl("create", "namespace", ns); err != nil {
			t.Fatal(out, err)
		}
	}
	e.apply(`apiVersion: sandbox.sentry.io/v1alpha1
kind: SandboxClass
metadata:
  name: team-a
spec:
  credentialsSecretRef:
    name: ` + credentialsName + `
    namespace: ` + systemNamespace + `
  namespaceSelector:
    matchLabels:
      kubernetes.io/metadata.name: team-a
`)
	for _, ns := range []string{"team-a", "team-b"} {
		e.apply(fmt.Sprintf(`apiVersion: sandbox.sentry.io/v1alpha1
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
  name: snap
  namespace: %[1]s
spec:
  source:
    recipe:
      runtime: node24
      setup:
      - name: hello
        command: sh
        args: ["-c", "echo hello > /tmp/hello"]
---
apiVersion: sandbox.sentry.io/v1alpha1
kind: SandboxQuota
metadata:
  name: budget
  namespace: %[1]s
spec:
  hard:
    runningSandboxes: 10
`, ns))
	}
	// Deleting a Sandbox that has a Vercel sandbox goes through its
	// finalizer: let the manager create them first.
	for _, ns := range []string{"team-a", "team-b"} {
		if out, err := e.kubectl("wait", "-n", ns, "--for=condition=Ready", "sandbox/box", "--timeout=120s"); err != nil {
			t.Fatal(out, err)
		}
	}

	for c := range categories {
		// kubectl waits (its default) until the objects are gone, so the
		// finalizers have run by the time it returns.
		out, err := e.kubectl("delete", c, "--all", "-n", "team-b", "--timeout=120s")
		if err != nil {
			t.Fatalf("kubectl delete %s --all -n team-b: %v", c, err)
		}
		t.Logf("kubectl delete %s --all -n team-b:\n%s", c, out)
		if strings.Contains(out, "sandboxclass") {
			t.Errorf("kubectl delete %s --all -n team-b deleted a SandboxClass:\n%s", c, out)
		}
	}

	// Gone: team-b's objects of the category.
	if out, err := e.kubectl("get", "sentry-sandboxes", "-n", "team-b", "-o", "name"); err != nil || strings.TrimSpace(out) != "" {
		t.Errorf("after kubectl delete sentry-sandboxes --all -n team-b, team-b still holds (err %v):\n%s", err, out)
	}
	for _, obj := range []string{"sandbox/box", "sandboxsnapshot/snap"} {
		out, err := e.kubectl("get", "-n", "team-b", obj, "--ignore-not-found", "-o", "name")
		if err != nil || strings.TrimSpace(out) != "" {
			t.Errorf("team-b %s survived the delete (err %v): %s", obj, err, out)
		}
	}
	// Kept: everything cluster-scoped, the other namespace, the quota.
	for _, c := range []struct{ ns, obj string }{
		{"", "sandboxclass/team-a"},
		{"team-a", "sandbox/box"},
		{"team-a", "sandboxsnapshot/snap"},
		{"team-a", "sandboxquota/budget"},
		{"team-b", "sandboxquota/budget"},
	} {
		args := []string{"get", c.obj, "-o", "name"}
		if c.ns != "" {
			args = append(args, "-n", c.ns)
		}
		if out, err := e.kubectl(args...); err != nil {
			t.Errorf("%s %s did not survive kubectl delete <category> --all -n team-b: %v %s", c.ns, c.obj, err, out)
		}
	}
	out, err = e.kubectl("get", "sandboxclasses", "-o", "name")
	must(t, err)
	if strings.TrimSpace(out) != "sandboxclass.sandbox.sentry.io/team-a" {
		t.Errorf("SandboxClasses after the namespaced delete: %q, want the one created", out)
	}
}
