// Package clienttest starts the dev environment the client libraries' tests
// and runnable examples use: the real API server with the CRDs, the Vercel
// emulator and the manager with all controllers (localstack), with
// KUBECONFIG and the VERCEL_* variables set as `make dev` prints them, so an
// example reads its configuration as a user's program does.
package clienttest

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/go-logr/logr"
	ctrl "sigs.k8s.io/controller-runtime"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/getsentry/sandbox-controller/controllers"
	"github.com/getsentry/sandbox-controller/localstack"
)

// Stack is the running environment while Main runs the tests.
var Stack *localstack.Stack

// Main starts the environment, runs the tests and stops it; it returns the
// exit code for os.Exit. It fails without KUBEBUILDER_ASSETS.
func Main(m *testing.M) int {
	code, err := run(m)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return code
}

func run(m *testing.M) (int, error) {
	assets := os.Getenv("KUBEBUILDER_ASSETS")
	if assets == "" {
		return 0, fmt.Errorf("KUBEBUILDER_ASSETS is not set: run the tests with KUBEBUILDER_ASSETS=$(./hack/envtest.sh)")
	}
	ctrl.SetLogger(logr.Discard())
	ctx := context.Background()
	stack, err := localstack.Start(ctx, localstack.Options{AssetsDir: assets, ControllerManager: true})
	if err != nil {
		return 0, err
	}
	defer stack.Stop()
	vcfg := stack.Vercel("")
	mgr, err := stack.StartManager(ctx, nil, ctrl.Options{
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
	}, vcfg, controllers.Options{PollInterval: time.Second})
	if err != nil {
		return 0, err
	}
	defer mgr.Stop()

	dir, err := os.MkdirTemp("", "clienttest-")
	if err != nil {
		return 0, err
	}
	defer os.RemoveAll(dir)
	kubeconfig := filepath.Join(dir, "kubeconfig")
	if err := stack.ControlPlane.WriteAdminKubeconfig(kubeconfig); err != nil {
		return 0, err
	}
	for k, v := range map[string]string{
		"KUBECONFIG": kubeconfig, "VERCEL_API_URL": vcfg.BaseURL, "VERCEL_TOKEN": vcfg.Token,
		"VERCEL_TEAM_ID": vcfg.TeamID, "VERCEL_PROJECT_ID": vcfg.ProjectID,
	} {
		if err := os.Setenv(k, v); err != nil {
			return 0, err
		}
	}
	Stack = stack
	return m.Run(), nil
}
