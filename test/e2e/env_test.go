package e2e

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/go-logr/logr"
	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/yaml"

	"github.com/getsentry/sandbox-controller/localstack"
	"github.com/getsentry/sandbox-controller/localstack/controlplane"
	"github.com/getsentry/sandbox-controller/localstack/emulator"
	"github.com/getsentry/sandbox-controller/localstack/kubelet"
	"github.com/getsentry/sandbox-controller/localstack/managerpod"
)

// What `make deploy` names things (config/default's namespace and namePrefix).
const (
	systemNamespace = "sandbox-controller-system"
	managerSA       = "sandbox-controller-controller-manager"
	deploymentName  = "sandbox-controller-controller-manager"
	credentialsName = "vercel-credentials"
	teamID          = "team_emulator"
	projectID       = "prj_emulator"
	// The image make deploy is asked for; nothing pulls it here, the manager
	// binary runs as a local process with the Deployment's arguments.
	deployImage = "example.com/sandbox-controller:e2e"
)

var (
	repoRoot = func() string {
		d, err := filepath.Abs(filepath.Join("..", ".."))
		if err != nil {
			panic(err)
		}
		return d
	}()

	// buildDir holds the manager binary, built once per test binary.
	buildDir     string
	buildManager = sync.OnceValues(func() (string, error) { return managerpod.Build(repoRoot, buildDir) })
)

// env is one installed operator, as a user gets it with `make deploy`: a
// control plane that behaves like a cluster (kube-controller-manager
// included), config/default rendered by kustomize and applied with kubectl's
// server-side apply, the Vercel emulator on loopback standing in for Vercel,
// the credentials Secret the Deployment reads, and the manager binary running
// as the deployed ServiceAccount with the Deployment's own arguments.
type env struct {
	t          *testing.T
	ctx        context.Context
	cp         *controlplane.ControlPlane
	manifests  []byte
	deployment *appsv1.Deployment
	// kubeconfig authenticates as a cluster administrator (the test's user).
	kubeconfig string
	client     client.Client
	emu        *emulator.Emulator
	emuURL     string
	emuDataDir string
}

type envOptions struct {
	// noManager leaves starting managers to the test.
	noManager bool
	// managerArgs are appended to the Deployment's arguments.
	managerArgs []string
	// egress configures the emulator's enforcement of network policies
	// (upstreams on loopback under real-looking names).
	egress emulator.EgressOptions
	// kubelet runs the Deployment's pods with localstack/kubelet, as `make
	// dev --deployed` does, instead of the test starting managers; the
	// deployment and replicaset controllers run too.
	kubelet bool
}

// TestMain gives controller-runtime's logger (envtest logs through it) a
// destination, so it does not print "log.SetLogger(...) was never called",
// and removes the manager binary when the tests end.
func TestMain(m *testing.M) {
	ctrllog.SetLogger(logr.Discard())
	var err error
	if buildDir, err = os.MkdirTemp("", "e2e-manager-"); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := m.Run()
	_ = os.RemoveAll(buildDir)
	os.Exit(code)
}

func newEnv(t *testing.T, opts envOptions) *env {
	t.Helper()
	if testing.Short() {
		t.Skip("starts a control plane, the emulator and the manager binary")
	}
	// Each env is a cluster of its own (its own control plane, emulator,
	// ports and files), and a test spends most of its time waiting on them:
	// go test runs -parallel (the number of cores) of them at once.
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	e := &env{t: t, ctx: ctx}
	dir := t.TempDir()

	cpLog, err := os.Create(filepath.Join(dir, "controlplane.log"))
	must(t, err)
	t.Cleanup(func() { _ = cpLog.Close() })
	// Nothing installed by the stack: what `make deploy` renders is applied
	// below instead, CRDs and admission policy included.
	stack, err := localstack.Start(ctx, localstack.Options{
		RepoRoot:          repoRoot,
		ControllerManager: true,
		Workloads:         opts.kubelet,
		ControlPlaneLog:   cpLog,
		InstallNothing:    true,
		Emulator:          emulator.Options{DataDir: filepath.Join(dir, "emulator"), Egress: opts.egress},
	})
	must(t, err)
	t.Cleanup(func() {
		if err := stack.Stop(); err != nil {
			t.Errorf("stop the control plane and the emulator: %v", err)
		}
	})
	e.cp, e.client, e.emu, e.emuURL = stack.ControlPlane, stack.Client, stack.Emulator, stack.EmulatorURL
	e.emuDataDir = filepath.Join(dir, "emulator")
	e.kubeconfig = filepath.Join(dir, "admin.kubeconfig")
	must(t, e.cp.WriteAdminKubeconfig(e.kubeconfig))

	// The namespace and the credentials Secret, with the README's own
	// commands, before the manager is deployed, as the README orders it.
	e.runReadmeBlock("**2. The credentials Secret**", map[string]string{
		"VERCEL_TOKEN": e.emu.Token(), "VERCEL_TEAM_ID": teamID, "VERCEL_PROJECT_ID": projectID,
	})

	// Exactly what `make deploy IMG=…` applies.
	e.manifests, err = controlplane.RenderDeploy(repoRoot, deployImage)
	must(t, err)
	must(t, controlplane.Apply(ctx, e.kubeconfig, e.manifests))
	e.deployment = findDeployment(t, e.manifests)

	switch {
	case opts.kubelet:
		e.startKubelet(dir, opts.managerArgs...)
	case !opts.noManager:
		e.startManager("manager", opts.managerArgs...)
	}
	return e
}

// startKubelet runs localstack/kubelet for the manager's pods, with extra
// after the containers' arguments, until the test ends.
func (e *env) startKubelet(dir string, extra ...string) {
	t := e.t
	t.Helper()
	bin, err := buildManager()
	must(t, err)
	sel, err := metav1.LabelSelectorAsSelector(e.deployment.Spec.Selector)
	must(t, err)
	log, err := os.Create(filepath.Join(dir, "kubelet.log"))
	must(t, err)
	k := kubelet.New(kubelet.Options{
		ControlPlane: e.cp, Client: e.client, Binary: bin, Selector: sel,
		ExtraArgs: append([]string{"--vercel-api-url=" + e.emuURL}, extra...),
		Dir:       filepath.Join(dir, "pods"), Log: log,
	})
	ctx, cancel := context.WithCancel(e.ctx)
	done := make(chan error, 1)
	go func() { done <- k.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("kubelet: %v", err)
		}
		_ = log.Close()
		if t.Failed() {
			b, _ := os.ReadFile(log.Name())
			t.Logf("kubelet:\n%s", b)
			logs, _ := filepath.Glob(filepath.Join(dir, "pods", "*.log"))
			for _, l := range logs {
				b, _ := os.ReadFile(l)
				t.Logf("%s (last 8 KiB):\n%s", filepath.Base(l), b[max(0, len(b)-8<<10):])
			}
		}
	})
}

// runReadmeBlock runs, with bash and the admin kubeconfig, the first ```sh
// block of README.md after the line starting with heading: the commands a
// user copies. env supplies the variables they expect.
func (e *env) runReadmeBlock(heading string, env map[string]string) {
	t := e.t
	t.Helper()
	readme, err := os.ReadFile(filepath.Join(repoRoot, "README.md"))
	must(t, err)
	_, after, ok := strings.Cut(string(readme), "\n"+heading)
	if !ok {
		t.Fatalf("README.md has no paragraph %q", heading)
	}
	_, after, ok = strings.Cut(after, "```sh\n")
	if !ok {
		t.Fatalf("README.md has no sh block after %q", heading)
	}
	script, _, _ := strings.Cut(after, "```")
	cmd := exec.CommandContext(e.ctx, "bash", "-euo", "pipefail", "-c", script)
	cmd.Dir = repoRoot // the README's paths are the repository's
	cmd.Env = append(os.Environ(), "KUBECONFIG="+e.kubeconfig)
	for k, v := range env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("README's commands after %q: %v\n%s", heading, err, out)
	}
}

// startManager runs the manager binary as a pod of the deployed Deployment
// would (localstack/managerpod), against the emulator, with extra after the
// Deployment's arguments. It is stopped at the end of the test.
func (e *env) startManager(name string, extra ...string) *managerpod.Process {
	t := e.t
	t.Helper()
	bin, err := buildManager()
	must(t, err)
	return managerpod.Start(e.ctx, t, managerpod.Options{
		Name:         name,
		Binary:       bin,
		Deployment:   e.deployment,
		ControlPlane: e.cp,
		Client:       e.client,
		ExtraArgs:    append([]string{"--vercel-api-url=" + e.emuURL}, extra...),
	})
}

// kubectl runs the real kubectl as the cluster administrator.
func (e *env) kubectl(args ...string) (string, error) {
	return e.kubectlAs(e.kubeconfig, args...)
}

func (e *env) kubectlAs(kubeconfig string, args ...string) (string, error) {
	cmd := exec.CommandContext(e.ctx, "kubectl", append([]string{"--kubeconfig", kubeconfig}, args...)...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	if err != nil {
		err = fmt.Errorf("kubectl %s: %w: %s", strings.Join(args, " "), err, out.String())
	}
	return out.String(), err
}

// apply pipes YAML to `kubectl apply -f -`.
func (e *env) apply(manifest string) {
	e.t.Helper()
	cmd := exec.CommandContext(e.ctx, "kubectl", "--kubeconfig", e.kubeconfig, "apply", "-f", "-")
	cmd.Stdin = strings.NewReader(manifest)
	if out, err := cmd.CombinedOutput(); err != nil {
		e.t.Fatalf("kubectl apply: %v\n%s\n--- manifest:\n%s", err, out, manifest)
	}
}

// findDeployment returns the manager Deployment among the rendered objects.
func findDeployment(t *testing.T, manifests []byte) *appsv1.Deployment {
	t.Helper()
	for _, doc := range splitYAML(t, manifests) {
		var meta metav1.TypeMeta
		must(t, yaml.Unmarshal(doc, &meta))
		if meta.Kind != "Deployment" {
			continue
		}
		d := &appsv1.Deployment{}
		must(t, yaml.UnmarshalStrict(doc, d))
		if d.Name == deploymentName {
			return d
		}
	}
	t.Fatalf("the rendering has no Deployment %s", deploymentName)
	return nil
}

// splitYAML splits a YAML stream into its documents, skipping empty ones.
func splitYAML(t *testing.T, stream []byte) [][]byte {
	t.Helper()
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(stream)))
	var docs [][]byte
	for {
		doc, err := r.Read()
		if err != nil {
			break
		}
		if len(bytes.TrimSpace(doc)) > 0 && !bytes.Equal(bytes.TrimSpace(doc), []byte("---")) {
			docs = append(docs, doc)
		}
	}
	return docs
}

func flagName(arg string) string {
	name, _, _ := strings.Cut(strings.TrimLeft(arg, "-"), "=")
	return name
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
