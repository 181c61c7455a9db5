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

// WaitServed waits until every CRD of the cluster serves its objects, for
// reads and for creates. An Established CRD can still answer "Resource kind
// … not found" for a moment: its storage starts after the condition is set,
// and the API server's admission policies learn new kinds by polling (every
// 5 s). A create that follows an install at once then fails, so each kind is
// probed with a server-side dry-run create until the refusal is gone (a
// validation error of the empty probe object means the kind is served).
func WaitServed(ctx context.Context, kubeconfig string) error {
	out, err := run(exec.CommandContext(ctx, "kubectl", "--kubeconfig", kubeconfig, "get", "crd", "-o",
		`jsonpath={range .items[*]}{.spec.group} {.spec.versions[0].name} {.spec.names.kind} {.spec.scope}{"\n"}{end}`), nil)
	if err != nil {
		return err
	}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.Fields(line)
		if len(f) != 4 {
			continue
		}
		probe := fmt.Sprintf("apiVersion: %s/%s\nkind: %s\nmetadata:\n  name: served-probe\n", f[0], f[1], f[2])
		if f[3] == "Namespaced" {
			probe += "  namespace: default\n"
		}
		var last error
		err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
			_, last = run(exec.CommandContext(ctx, "kubectl", "--kubeconfig", kubeconfig, "create", "--dry-run=server", "-f", "-"), []byte(probe))
			return last == nil || !strings.Contains(last.Error(), "There can be a delay"), nil
		})
		if err != nil {
			return fmt.Errorf("%s.%s is not served: %w (last: %v)", f[2], f[0], err, last)
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
