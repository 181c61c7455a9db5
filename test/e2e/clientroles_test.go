package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"
)

// The client roles of config/rbac after config/default's namePrefix.
const (
	editorRole = "sandbox-controller-sandbox-editor-role"
	viewerRole = "sandbox-controller-sandbox-viewer-role"
	adminRole  = "sandbox-controller-sandbox-admin-role"
)

var (
	juniorOnce sync.Once
	juniorBin  string
	juniorErr  error
)

// buildJuniorClient builds examples/junior-client once per test binary.
func buildJuniorClient(t *testing.T) string {
	t.Helper()
	juniorOnce.Do(func() {
		dir, err := os.MkdirTemp("", "e2e-junior-")
		if err != nil {
			juniorErr = err
			return
		}
		juniorBin = filepath.Join(dir, "junior-client")
		cmd := exec.Command("go", "build", "-o", juniorBin, "./examples/junior-client")
		cmd.Dir = repoRoot
		if out, err := cmd.CombinedOutput(); err != nil {
			juniorErr = fmt.Errorf("go build ./examples/junior-client: %v\n%s", err, out)
		}
	})
	if juniorErr != nil {
		t.Fatal(juniorErr)
	}
	return juniorBin
}

// TestClientRoles runs clients as ServiceAccounts of their own namespace, with
// one RoleBinding each, against the deployed manager: examples/junior-client
// (Junior's flow: create, wait Ready, exec and files, heartbeat, delete) succeeds with the
// editor role and is refused without it; a viewer reads but cannot write;
// nobody but the controller writes status; and the roles are aggregated
// into the built-in view, edit and admin ClusterRoles.
func TestClientRoles(t *testing.T) {
	e := newEnv(t, envOptions{})
	junior := buildJuniorClient(t)
	const ns = "team-a"
	kubectl := func(args ...string) string {
		t.Helper()
		out, err := e.kubectl(args...)
		must(t, err)
		return out
	}
	kubectl("create", "namespace", ns)
	// ServiceAccount → the one RoleBinding it gets ("" for none).
	bindings := map[string]string{
		"junior":     editorRole,
		"viewer":     viewerRole,
		"ns-admin":   adminRole,
		"stranger":   "",
		"edit-user":  "edit",
		"view-user":  "view",
		"admin-user": "admin",
	}
	kubeconfigs := map[string]string{}
	dir := t.TempDir()
	for sa, role := range bindings {
		kubectl("create", "serviceaccount", sa, "-n", ns)
		if role != "" {
			// As the comment in config/rbac/sandbox_editor_role.yaml tells users.
			kubectl("create", "rolebinding", sa+"-sandboxes", "-n", ns, "--clusterrole="+role, "--serviceaccount="+ns+":"+sa)
		}
		kubeconfigs[sa] = filepath.Join(dir, sa+".kubeconfig")
		must(t, e.cp.WriteServiceAccountKubeconfig(e.ctx, ns, sa, kubeconfigs[sa]))
	}
	as := func(sa string, args ...string) (string, error) {
		return e.kubectlAs(kubeconfigs[sa], append([]string{"-n", ns}, args...)...)
	}
	runJunior := func(sa, name string) (string, error) {
		ctx, cancel := context.WithTimeout(e.ctx, 3*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, junior, "--kubeconfig", kubeconfigs[sa], "--namespace", ns, "--name", name)
		// The Vercel credentials are for its data-plane calls (a command,
		// files), which go straight to the emulator.
		cmd.Env = []string{"HOME=" + t.TempDir(), "PATH=" + os.Getenv("PATH"),
			"VERCEL_API_URL=" + e.emuURL, "VERCEL_TOKEN=" + e.emu.Token(), "VERCEL_TEAM_ID=" + teamID, "VERCEL_PROJECT_ID=" + projectID}
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	forbidden := func(t *testing.T, what, out string, err error) {
		t.Helper()
		if err == nil {
			t.Errorf("%s: allowed, want forbidden:\n%s", what, out)
		} else if !strings.Contains(out, "forbidden") {
			t.Errorf("%s: failed other than forbidden: %v", what, err)
		}
	}
	allowed := func(t *testing.T, what, out string, err error) {
		t.Helper()
		if err != nil {
			t.Errorf("%s: %v", what, err)
		}
	}

	t.Run("junior-client as editor", func(t *testing.T) {
		creates, deletes := e.emu.RequestCount("createSandbox"), e.emu.RequestCount("deleteSandbox")
		out, err := runJunior("junior", "conversation-42")
		if err != nil {
			t.Fatalf("junior-client as %s:%s:junior: %v\n%s", ns, editorRole, err, out)
		}
		for _, want := range []*regexp.Regexp{
			regexp.MustCompile(`(?m)^Ready: Sandbox team-a/conversation-42 \(session sbx_\S+\)$`),
			regexp.MustCompile(`(?m)^Answer: 42$`),
			regexp.MustCompile(`(?m)^Heartbeat sent$`),
			regexp.MustCompile(`(?m)^Deleted Sandbox team-a/conversation-42 `),
		} {
			if !want.MatchString(out) {
				t.Errorf("junior-client's output lacks %s:\n%s", want, out)
			}
		}
		// The manager did the Vercel work: one sandbox created, and deleted
		// before the finalizer let the object go.
		if n := e.emu.RequestCount("createSandbox") - creates; n != 1 {
			t.Errorf("the emulator received %d sandbox creates, want 1", n)
		}
		if n := e.emu.RequestCount("deleteSandbox") - deletes; n < 1 {
			t.Errorf("the emulator received no sandbox delete")
		}
		for _, s := range e.emu.LiveSandboxes() {
			if strings.HasPrefix(s.Name, ns+"-conversation-42-") {
				t.Errorf("Vercel sandbox %s outlived its Sandbox", s.Name)
			}
		}
	})

	t.Run("junior-client without a binding", func(t *testing.T) {
		out, err := runJunior("stranger", "conversation-43")
		if err == nil {
			t.Fatalf("junior-client without a RoleBinding succeeded:\n%s", out)
		}
		if !strings.Contains(out, `cannot create resource "sandboxes"`) {
			t.Errorf("junior-client without a RoleBinding failed other than forbidden: %v\n%s", err, out)
		}
		if got, err := e.kubectl("get", "sandbox", "conversation-43", "-n", ns, "--ignore-not-found", "-o", "name"); err != nil || got != "" {
			t.Errorf("Sandbox conversation-43 exists (%q, %v)", got, err)
		}
	})

	// Objects for the readers and writers below: a Sandbox, and a fork of a
	// snapshot that does not exist (it waits, but scales).
	e.apply(fmt.Sprintf(`apiVersion: sandbox.sentry.io/v1alpha1
kind: Sandbox
metadata:
  name: shared
  namespace: %[1]s
spec:
  source:
    runtime: node24
---
apiVersion: sandbox.sentry.io/v1alpha1
kind: SandboxFork
metadata:
  name: fanout
  namespace: %[1]s
spec:
  source:
    snapshotRef:
      name: not-yet
  replicas: 1
`, ns))
	if _, err := e.kubectl("wait", "-n", ns, "--for=condition=Ready", "sandbox/shared", "--timeout=90s"); err != nil {
		t.Fatal(err)
	}
	newSandbox := filepath.Join(dir, "new-sandbox.yaml")
	must(t, os.WriteFile(newSandbox, []byte(`apiVersion: sandbox.sentry.io/v1alpha1
kind: Sandbox
metadata:
  name: probe
spec:
  source:
    runtime: node24
`), 0o600))
	heartbeat := `{"metadata":{"annotations":{"sandbox.sentry.io/last-activity":"` + time.Now().UTC().Format(time.RFC3339) + `"}}}`
	statusPatch := `{"status":{"phase":"Failed"}}`

	t.Run("viewer reads, never writes", func(t *testing.T) {
		for _, what := range []string{"sandboxes", "sandboxsnapshots", "sandboxforks"} {
			out, err := as("viewer", "get", what)
			allowed(t, "viewer lists "+what, out, err)
		}
		out, err := as("viewer", "get", "sandbox", "shared", "-o", "jsonpath={.status.phase}")
		allowed(t, "viewer gets a Sandbox", out, err)
		if err == nil && out != "Running" {
			t.Errorf("viewer reads phase %q, want Running", out)
		}
		out, err = as("viewer", "get", "sandbox", "shared", "--subresource=status", "-o", "name")
		allowed(t, "viewer gets a Sandbox's status", out, err)

		out, err = as("viewer", "create", "-f", newSandbox)
		forbidden(t, "viewer creates a Sandbox", out, err)
		out, err = as("viewer", "patch", "sandbox", "shared", "--type=merge", "-p", heartbeat)
		forbidden(t, "viewer heartbeats a Sandbox", out, err)
		out, err = as("viewer", "scale", "sandboxfork", "fanout", "--replicas=2")
		forbidden(t, "viewer scales a SandboxFork", out, err)
		out, err = as("viewer", "delete", "sandbox", "shared", "--wait=false")
		forbidden(t, "viewer deletes a Sandbox", out, err)
		out, err = as("viewer", "get", "secrets")
		forbidden(t, "viewer (of sandboxes) lists Secrets", out, err)
	})

	t.Run("editor scales forks, never writes status", func(t *testing.T) {
		out, err := as("junior", "scale", "sandboxfork", "fanout", "--replicas=2")
		allowed(t, "editor scales a SandboxFork", out, err)
		if got := kubectl("get", "sandboxfork", "fanout", "-n", ns, "-o", "jsonpath={.spec.replicas}"); got != "2" {
			t.Errorf("after kubectl scale, spec.replicas is %q, want 2", got)
		}
		out, err = as("junior", "patch", "sandbox", "shared", "--type=merge", "-p", heartbeat)
		allowed(t, "editor heartbeats a Sandbox", out, err)
		for _, who := range []string{"junior", "ns-admin"} {
			out, err = as(who, "patch", "sandbox", "shared", "--subresource=status", "--type=merge", "-p", statusPatch)
			forbidden(t, who+" patches a Sandbox's status", out, err)
		}
		out, err = as("junior", "get", "secrets")
		forbidden(t, "editor (of sandboxes) lists Secrets", out, err)
	})

	t.Run("admin role", func(t *testing.T) {
		out, err := as("ns-admin", "create", "--dry-run=server", "-f", newSandbox)
		allowed(t, "ns-admin creates a Sandbox", out, err)
		out, err = as("ns-admin", "auth", "can-i", "deletecollection", "sandboxforks.sandbox.sentry.io")
		allowed(t, "ns-admin may deletecollection sandboxforks", out, err)
	})

	// The built-in roles gain the rules through kube-controller-manager's
	// ClusterRole aggregation, as on any cluster.
	t.Run("aggregated into edit, view and admin", func(t *testing.T) {
		for _, c := range []struct{ sa, builtin string }{{"edit-user", "edit"}, {"admin-user", "admin"}} {
			eventually(t, 30*time.Second, func() error {
				if _, err := as(c.sa, "create", "--dry-run=server", "-f", newSandbox); err != nil {
					groups, _ := e.kubectl("get", "clusterrole", c.builtin, "-o", "jsonpath={.rules[*].apiGroups}")
					if strings.TrimSpace(groups) == "" {
						return fmt.Errorf("the built-in ClusterRole %s has no rules: nothing aggregates them (kube-controller-manager's clusterrole-aggregation-controller)", c.builtin)
					}
					return fmt.Errorf("a ServiceAccount bound to %s cannot create a Sandbox (%s's API groups: %s): %v", c.builtin, c.builtin, groups, err)
				}
				return nil
			})
			out, err := as(c.sa, "scale", "sandboxfork", "fanout", "--replicas=1")
			allowed(t, c.sa+" scales a SandboxFork", out, err)
		}
		eventually(t, 30*time.Second, func() error {
			_, err := as("view-user", "get", "sandboxes,sandboxsnapshots,sandboxforks")
			return err
		})
		out, err := as("view-user", "create", "--dry-run=server", "-f", newSandbox)
		forbidden(t, "a ServiceAccount bound to view creates a Sandbox", out, err)
	})
}
