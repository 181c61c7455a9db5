package main

import (
	"context"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	sandboxv1 "github.com/getsentry/sandbox-controller/api/v1alpha1"
	"github.com/getsentry/sandbox-controller/controllers"
	"github.com/getsentry/sandbox-controller/internal/vercel"
	"github.com/getsentry/sandbox-controller/localstack"
	"github.com/getsentry/sandbox-controller/localstack/emulator"
)

// TestStartUpVerifiesCredentialsAndProject runs the manager binary with a
// token file Vercel rejects and a project id Vercel does not know. It says
// so loudly — log, /readyz, metrics — takes the fixed token from the file
// without a restart, and does not take the 404 of a delete in the unknown
// project for "deleted": the Sandbox stays Terminating and says why. Started
// again with the right project, the manager is ready and the delete finishes.
func TestStartUpVerifiesCredentialsAndProject(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	stack, kubeconfig := startStack(ctx, t, emulator.Options{Teams: []string{localstack.TeamID}, Projects: []string{localstack.ProjectID}})
	tokenFile := filepath.Join(t.TempDir(), "token")
	writeFile(t, tokenFile, "tok_revoked_canary\n")

	run := func(project string) (stop func(), out *syncBuffer, probe, metrics string) {
		probe, metrics, out = freeAddr(t), freeAddr(t), &syncBuffer{}
		cmd := exec.CommandContext(ctx, os.Args[0],
			"--kubeconfig="+kubeconfig,
			"--metrics-bind-address="+metrics, "--metrics-secure=false",
			"--health-probe-bind-address="+probe,
			"--vercel-api-url="+stack.EmulatorURL,
			"--vercel-token-file="+tokenFile,
			"--vercel-team-id="+localstack.TeamID,
			"--vercel-project-id="+project,
			"--backoff-cap=2s",
		)
		cmd.Env = append(filteredEnv("VERCEL_TOKEN"), "RUN_MANAGER_MAIN=1")
		cmd.Stdout, cmd.Stderr = out, out
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		stopped := false
		stop = func() {
			if stopped {
				return
			}
			stopped = true
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
			if t.Failed() {
				t.Logf("manager output (project %s):\n%s", project, out.String())
			}
			if strings.Contains(out.String(), "tok_revoked_canary") || strings.Contains(out.String(), stack.Emulator.Token()) {
				t.Error("the manager's output contains a token")
			}
		}
		t.Cleanup(stop)
		return stop, out, probe, metrics
	}
	get := func(url string) (int, string) {
		resp, err := http.Get(url)
		if err != nil {
			return 0, err.Error()
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}

	// A rejected token and an unknown project.
	stop, out, probe, metrics := run("prj_typo")
	waitFor(t, 30*time.Second, "the log to say Vercel rejected the credentials", func() bool {
		return strings.Contains(out.String(), "Vercel rejected the credentials")
	})
	waitFor(t, 10*time.Second, "the metric of rejected credentials", func() bool {
		_, body := get("http://" + metrics + "/metrics")
		return strings.Contains(body, "sandbox_controller_vercel_credentials_rejected 1") &&
			strings.Contains(body, "sandbox_controller_vercel_project_verified 0")
	})
	if code, body := get("http://" + probe + "/readyz?verbose"); code == 200 || !strings.Contains(body, "[-]vercel-credentials failed") {
		t.Errorf("/readyz with rejected credentials: %d\n%s", code, body)
	}

	// The Secret is rotated: the file now holds the token Vercel accepts.
	writeFile(t, tokenFile, stack.Emulator.Token()+"\n")
	waitFor(t, 30*time.Second, "the log to say the project is unknown", func() bool {
		return strings.Contains(out.String(), "Vercel does not know the project")
	})
	waitFor(t, 10*time.Second, "the metrics after the rotation", func() bool {
		_, body := get("http://" + metrics + "/metrics")
		return strings.Contains(body, "sandbox_controller_vercel_credentials_rejected 0") &&
			strings.Contains(body, "sandbox_controller_vercel_project_verified 0")
	})
	if code, _ := get("http://" + probe + "/readyz"); code == 200 {
		t.Error("/readyz is ok with an unknown project")
	}

	// The real sandbox of a Sandbox lives in the right project; a delete
	// through the wrong one answers 404 and must not release the object.
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "credentials"}}
	if err := stack.Client.Create(ctx, ns); err != nil {
		t.Fatal(err)
	}
	node := sandboxv1.Runtime("node24")
	sbx := &sandboxv1.Sandbox{ObjectMeta: metav1.ObjectMeta{Namespace: ns.Name, Name: "kept"},
		Spec: sandboxv1.SandboxSpec{Source: sandboxv1.SandboxSource{Runtime: &node}}}
	if err := stack.Client.Create(ctx, sbx); err != nil {
		t.Fatal(err)
	}
	key := types.NamespacedName{Namespace: ns.Name, Name: "kept"}
	waitFor(t, 30*time.Second, "the Sandbox's Vercel name", func() bool {
		return stack.Client.Get(ctx, key, sbx) == nil && sbx.Status.VercelName != ""
	})
	// As if a manager with the right project had created it before, with
	// the owner tags it puts on every sandbox (the cluster id defaults to
	// kube-system's UID).
	vc, err := vercel.New(stack.Vercel(""))
	if err != nil {
		t.Fatal(err)
	}
	cluster, err := controllers.ClusterIDFromKubeSystem(ctx, stack.Client)
	if err != nil {
		t.Fatal(err)
	}
	tags := map[string]string{"managed-by": "sandbox-controller", "k8s-cluster": cluster, "k8s-uid": string(sbx.UID)}
	if _, err := vc.CreateSandbox(ctx, vercel.CreateSandboxRequest{Name: sbx.Status.VercelName, Tags: tags}); err != nil {
		t.Fatal(err)
	}
	if err := stack.Client.Delete(ctx, sbx); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 30*time.Second, "the Sandbox to say the project is unknown", func() bool {
		if err := stack.Client.Get(ctx, key, sbx); err != nil {
			return false
		}
		c := meta.FindStatusCondition(sbx.Status.Conditions, sandboxv1.ConditionSynced)
		return c != nil && c.Reason == sandboxv1.ReasonProjectNotFound && !sbx.DeletionTimestamp.IsZero()
	})
	time.Sleep(3 * time.Second) // several retries (--backoff-cap=2s)
	if err := stack.Client.Get(ctx, key, sbx); err != nil {
		t.Fatalf("the Sandbox was released while its project was unknown (its Vercel sandbox leaks): %v", err)
	}
	stop()
	if _, ok := stack.Emulator.Sandbox(sbx.Status.VercelName); !ok {
		t.Fatal("the Vercel sandbox is gone")
	}

	// The right project: ready, verified, and the delete finishes.
	_, _, probe, metrics = run(localstack.ProjectID)
	waitFor(t, 30*time.Second, "/readyz with the right project", func() bool { code, _ := get("http://" + probe + "/readyz"); return code == 200 })
	if _, body := get("http://" + metrics + "/metrics"); !strings.Contains(body, "sandbox_controller_vercel_project_verified 1") {
		t.Error("the project is verified but the metric does not say so")
	}
	waitFor(t, 30*time.Second, "the Sandbox to be deleted", func() bool {
		return apierrors.IsNotFound(stack.Client.Get(ctx, key, &sandboxv1.Sandbox{}))
	})
	if _, ok := stack.Emulator.Sandbox(sbx.Status.VercelName); ok {
		t.Error("the Vercel sandbox was left behind")
	}
}

func writeFile(t *testing.T, file, content string) {
	t.Helper()
	tmp := file + ".tmp"
	if err := os.WriteFile(tmp, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, file); err != nil {
		t.Fatal(err)
	}
}
