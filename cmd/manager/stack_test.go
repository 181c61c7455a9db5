package main

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/getsentry/sandbox-controller/localstack"
	"github.com/getsentry/sandbox-controller/localstack/emulator"
)

// startStack starts the local control plane and the emulator (with emu's
// options) for a test that runs the manager binary, stops them when the test
// ends, and returns the stack and an admin kubeconfig for the binary.
func startStack(ctx context.Context, t *testing.T, emu emulator.Options) (*localstack.Stack, string) {
	t.Helper()
	assets := os.Getenv("KUBEBUILDER_ASSETS")
	if assets == "" {
		t.Fatal("KUBEBUILDER_ASSETS is not set: run `make test`, or KUBEBUILDER_ASSETS=$(./hack/envtest.sh) go test ./cmd/manager/")
	}
	stack, err := localstack.Start(ctx, localstack.Options{RepoRoot: filepath.Join("..", ".."), AssetsDir: assets, Emulator: emu})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := stack.Stop(); err != nil {
			t.Error(err)
		}
	})
	// What `make deploy` installs for the manager, among it the empty Secret
	// the binary writes its status digest key into: it never creates one
	// (it runs as the administrator here, but a deployed manager may not).
	if _, _, err := stack.InstallManagerRBAC(ctx); err != nil {
		t.Fatal(err)
	}
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	if err := stack.ControlPlane.WriteAdminKubeconfig(kubeconfig); err != nil {
		t.Fatal(err)
	}
	return stack, kubeconfig
}
