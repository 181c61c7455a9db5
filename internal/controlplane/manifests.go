package controlplane

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
)

// Kustomize is the kustomize binary `make kustomize` builds into bin/: the
// same one `make install` and `make deploy` run.
func Kustomize(repoRoot string) (string, error) {
	bin := filepath.Join(repoRoot, "bin", "kustomize")
	if _, err := os.Stat(bin); err != nil {
		return "", fmt.Errorf("%s is missing: run `make kustomize` (make test and make dev do): %w", bin, err)
	}
	return bin, nil
}

// Render returns what `kustomize build <repoRoot>/<dir>` prints, exactly as
// `make install` (config/crd) and `make deploy` (config/default) render it.
func Render(repoRoot, dir string) ([]byte, error) {
	bin, err := Kustomize(repoRoot)
	if err != nil {
		return nil, err
	}
	return run(exec.Command(bin, "build", filepath.Join(repoRoot, dir)), nil)
}

// RenderDeploy returns what `make deploy IMG=<image>` applies.
func RenderDeploy(repoRoot, image string) ([]byte, error) {
	bin, err := Kustomize(repoRoot)
	if err != nil {
		return nil, err
	}
	return run(exec.Command(filepath.Join(repoRoot, "hack", "render-deploy.sh"), bin, image), nil)
}

// Apply applies manifests with the real kubectl and server-side apply, as
// `make install` and `make deploy` do, and waits until every CRD among them
// is established.
func Apply(ctx context.Context, kubeconfig string, manifests []byte) error {
	if _, err := run(exec.CommandContext(ctx, "kubectl", "--kubeconfig", kubeconfig,
		"apply", "--server-side", "--force-conflicts", "-f", "-"), manifests); err != nil {
		return err
	}
	if _, err := run(exec.CommandContext(ctx, "kubectl", "--kubeconfig", kubeconfig,
		"wait", "--for=condition=Established", "--timeout=60s", "crd", "--all"), nil); err != nil {
		return err
	}
	return WaitServed(ctx, kubeconfig)
}

// WaitServed waits until every CRD of the cluster serves its objects. An
// Established CRD can still answer "Resource kind … not found" for a moment
// (its storage starts after the condition is set), which fails a create that
// follows an install at once.
func WaitServed(ctx context.Context, kubeconfig string) error {
	out, err := run(exec.CommandContext(ctx, "kubectl", "--kubeconfig", kubeconfig,
		"get", "crd", "-o", "jsonpath={.items[*].metadata.name}"), nil)
	if err != nil {
		return err
	}
	for _, crd := range strings.Fields(string(out)) {
		var last error
		err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
			_, last = run(exec.CommandContext(ctx, "kubectl", "--kubeconfig", kubeconfig, "get", crd, "-A", "-o", "name"), nil)
			return last == nil, nil
		})
		if err != nil {
			return fmt.Errorf("%s is not served: %w (last: %v)", crd, err, last)
		}
	}
	return nil
}

func run(cmd *exec.Cmd, stdin []byte) ([]byte, error) {
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if stdin != nil {
		cmd.Stdin = bytes.NewReader(stdin)
	}
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("%s: %w: %s", filepath.Base(cmd.Path)+" "+fmt.Sprint(cmd.Args[1:]), err, bytes.TrimSpace(stderr.Bytes()))
	}
	return stdout.Bytes(), nil
}
