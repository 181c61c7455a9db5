package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"k8s.io/apimachinery/pkg/labels"

	"github.com/getsentry/sandbox-controller/localstack"
	"github.com/getsentry/sandbox-controller/localstack/kubelet"
	"github.com/getsentry/sandbox-controller/localstack/managerpod"
)

// managerPodLabels select the pods of config/manager's Deployment, the only
// ones the local kubelet runs.
var managerPodLabels = labels.SelectorFromSet(labels.Set{"control-plane": "controller-manager"})

// runDeployed is `make dev ARGS=--deployed`: the control plane runs the
// deployment and replicaset controllers, nothing is installed, no manager
// runs in this process. The user follows the README's "Install on a
// cluster" — the credentials Secret, `make deploy`, `kubectl rollout status`
// — and the local kubelet runs the Deployment's pods as processes of the
// manager binary, as their ServiceAccount, with their arguments and Secret
// file. Only the Vercel API URL is added, pointing at the emulator. It
// returns the exit code once ctx ends.
func runDeployed(ctx context.Context, stack *localstack.Stack, paths layout, fail func(string, ...any) int, cleanups *[]func()) int {
	fmt.Println("Building the manager binary the image holds (go build ./cmd/manager)…")
	bin, err := managerpod.Build(".", filepath.Dir(paths.kubeconfig))
	if err != nil {
		return fail("%v", err)
	}
	kubeletLog, err := os.Create(filepath.Join(filepath.Dir(paths.kubeconfig), "kubelet.log"))
	if err != nil {
		return fail("%v", err)
	}
	defer kubeletLog.Close()
	k := kubelet.New(kubelet.Options{
		ControlPlane: stack.ControlPlane, Client: stack.Client, Binary: bin,
		Selector:  managerPodLabels,
		ExtraArgs: []string{"--vercel-api-url=" + stack.EmulatorURL},
		Dir:       paths.pods,
		Log:       kubeletLog,
	})
	kctx, stopKubelet := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- k.Run(kctx) }()
	*cleanups = append(*cleanups, func() {
		stopKubelet()
		if err := <-done; err != nil {
			fmt.Fprintf(os.Stderr, "dev: kubelet: %v\n", err)
		}
	})

	const teamID, projectID = localstack.TeamID, localstack.ProjectID
	vercelEnv := fmt.Sprintf("VERCEL_TOKEN=%s VERCEL_TEAM_ID=%s VERCEL_PROJECT_ID=%s", stack.Emulator.Token(), teamID, projectID)
	envFile := fmt.Sprintf("export KUBECONFIG=%s\nexport VERCEL_API_URL=%s %s\n", paths.kubeconfig, stack.EmulatorURL, vercelEnv)
	if err := os.WriteFile(paths.env, []byte(envFile), 0o600); err != nil {
		return fail("%v", err)
	}
	fmt.Printf(`
Nothing is installed and no manager runs yet: install it as on a cluster (README, "Install on a
cluster", steps 2 to 4). A local kubelet (log: %s) runs the pods of the manager's Deployment
as processes of %s — with the Deployment's arguments and environment, its ServiceAccount's
token and its Secret file — adding only --vercel-api-url=%s. Container logs: %s/.

  source %s    # KUBECONFIG and the emulator's VERCEL_TOKEN, VERCEL_TEAM_ID, VERCEL_PROJECT_ID

  kubectl create namespace sandbox-controller-system
  kubectl -n sandbox-controller-system create secret generic vercel-credentials \
    --from-literal=token="$VERCEL_TOKEN" --from-literal=team-id="$VERCEL_TEAM_ID" \
    --from-literal=project-id="$VERCEL_PROJECT_ID"
  make deploy IMG=sandbox-controller:local   # the image is not pulled: the kubelet runs the binary above
  kubectl -n sandbox-controller-system rollout status deployment/sandbox-controller-controller-manager
  kubectl apply -f config/samples/sandbox_v1alpha1_sandbox.yaml
  kubectl wait --for=condition=Ready sandbox/hello --timeout=2m

What this control plane cannot do: it has no scheduler, container runtime, Services or network
(the kubelet runs only pods labelled %s, and nothing reaches them through a Service), so the
metrics Service, ServiceMonitor and image pulls are not exercised; for those, use kind or k3d with
the image from `+"`make image`"+` (README, "Install on a cluster").

`, kubeletLog.Name(), bin, stack.EmulatorURL, paths.pods, paths.env, managerPodLabels)
	fmt.Println(ReadyLine)
	fmt.Println("Press Ctrl-C to stop everything.")
	select {
	case <-ctx.Done():
		keepStopping()
		return 0
	case err := <-done:
		done <- err // for the clean-up
		return fail("the kubelet stopped: %v", err)
	}
}
