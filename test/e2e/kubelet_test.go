package e2e

import (
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// TestReadmeInstallWithLocalKubelet follows "Install on a cluster" steps 2–4
// of the README against the local control plane, as `make dev --deployed`
// offers it: the credentials Secret with the README's commands, what `make
// deploy` applies, then step 4's commands verbatim — `kubectl rollout
// status` returns because localstack/kubelet runs the Deployment's pod (the
// manager binary as its ServiceAccount, with its arguments and Secret file)
// and reports its readiness probe, and the sample Sandbox becomes Ready
// through that manager. Deleting the pod gets a new one from the
// ReplicaSet, which the kubelet starts in turn, as on a cluster.
func TestReadmeInstallWithLocalKubelet(t *testing.T) {
	e := newEnv(t, envOptions{kubelet: true})

	start := time.Now()
	e.runReadmeBlock("**4. Check it works.**", nil)
	t.Logf("README step 4 (rollout status, sample Sandbox Ready) took %s", time.Since(start).Round(time.Second))

	// The pod that runs is the Deployment's, bound to the kubelet's node.
	pods := &corev1.PodList{}
	must(t, e.client.List(e.ctx, pods, client.InNamespace(systemNamespace)))
	if len(pods.Items) != 1 {
		t.Fatalf("want the Deployment's 1 pod, got %d", len(pods.Items))
	}
	first := pods.Items[0]
	if first.Spec.NodeName == "" || first.Status.Phase != corev1.PodRunning {
		t.Fatalf("pod %s: node %q, phase %s; want bound and Running", first.Name, first.Spec.NodeName, first.Status.Phase)
	}

	// A deleted pod is replaced, and the replacement runs the manager.
	if out, err := e.kubectl("-n", systemNamespace, "delete", "pod", first.Name, "--wait=true", "--timeout=90s"); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	out, err := e.kubectl("-n", systemNamespace, "rollout", "status", "deployment/"+deploymentName, "--timeout=2m")
	if err != nil {
		t.Fatalf("rollout status after the pod was deleted: %v\n%s", err, out)
	}
	must(t, e.client.List(e.ctx, pods, client.InNamespace(systemNamespace)))
	if len(pods.Items) != 1 || pods.Items[0].UID == first.UID {
		t.Fatalf("want one new pod after deleting %s, got %d pods", first.Name, len(pods.Items))
	}
	// The new manager reconciles: a Sandbox created now becomes Ready.
	e.apply(`apiVersion: sandbox.sentry.io/v1alpha1
kind: Sandbox
metadata:
  name: after-restart
  namespace: default
spec:
  source:
    runtime: node24
`)
	out, err = e.kubectl("-n", "default", "wait", "--for=condition=Ready", "sandbox/after-restart", "--timeout=2m")
	if err != nil || !strings.Contains(out, "condition met") {
		t.Fatalf("a Sandbox created after the pod was replaced: %v\n%s", err, out)
	}
}
