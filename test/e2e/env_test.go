package e2e

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/go-logr/logr"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/yaml"

	"github.com/getsentry/sandbox-controller/internal/controlplane"
	"github.com/getsentry/sandbox-controller/internal/emulator"
	"github.com/getsentry/sandbox-controller/internal/localstack"
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

	buildOnce  sync.Once
	managerBin string
	buildErr   error
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
	tokenFile  string
}

type envOptions struct {
	// noManager leaves starting managers to the test.
	noManager bool
	// managerArgs are appended to the Deployment's arguments.
	managerArgs []string
}

// TestMain gives controller-runtime's logger (envtest logs through it) a
// destination, so it does not print "log.SetLogger(...) was never called".
func TestMain(m *testing.M) {
	ctrllog.SetLogger(logr.Discard())
	os.Exit(m.Run())
}

func newEnv(t *testing.T, opts envOptions) *env {
	t.Helper()
	if testing.Short() {
		t.Skip("starts a control plane, the emulator and the manager binary")
	}
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
		ControlPlaneLog:   cpLog,
		InstallNothing:    true,
		Emulator:          emulator.Options{DataDir: filepath.Join(dir, "emulator")},
	})
	must(t, err)
	t.Cleanup(func() {
		if err := stack.Stop(); err != nil {
			t.Errorf("stop the control plane and the emulator: %v", err)
		}
	})
	e.cp, e.client, e.emu, e.emuURL = stack.ControlPlane, stack.Client, stack.Emulator, stack.EmulatorURL
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
	// The kubelet would mount the Secret's token key at the path the
	// Deployment names; the process gets a file with the same content.
	e.tokenFile = filepath.Join(dir, "vercel-token")
	must(t, os.WriteFile(e.tokenFile, []byte(e.emu.Token()), 0o600))

	if !opts.noManager {
		e.startManager("manager", opts.managerArgs...)
	}
	return e
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
	cmd.Env = append(os.Environ(), "KUBECONFIG="+e.kubeconfig)
	for k, v := range env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("README's commands after %q: %v\n%s", heading, err, out)
	}
}

// managerProcess is one run of the real manager binary.
type managerProcess struct {
	name       string
	cmd        *exec.Cmd
	log        *lockedBuffer
	done       chan struct{}
	err        error
	metricsURL string // https://127.0.0.1:port/metrics
	probeAddr  string
}

// startManager runs the manager binary as the deployed ServiceAccount, with
// the Deployment's arguments (addresses and the token path adapted to a local
// process) followed by extra. It is stopped at the end of the test.
func (e *env) startManager(name string, extra ...string) *managerProcess {
	t := e.t
	t.Helper()
	bin := buildManager(t)
	kubeconfig := filepath.Join(t.TempDir(), name+".kubeconfig")
	must(t, e.cp.WriteServiceAccountKubeconfig(e.ctx, systemNamespace, managerSA, kubeconfig))

	c := e.deployment.Spec.Template.Spec.Containers[0]
	metricsAddr, probeAddr := freeAddr(t), freeAddr(t)
	var args []string
	for _, a := range c.Args {
		switch flagName(a) {
		case "metrics-bind-address", "health-probe-bind-address", "vercel-token-file":
			continue // replaced below
		}
		args = append(args, a)
	}
	args = append(args,
		"--metrics-bind-address="+metricsAddr,
		"--health-probe-bind-address="+probeAddr,
		"--vercel-token-file="+e.tokenFile,
		"--vercel-api-url="+e.emuURL,
		// In a pod the namespace comes from the ServiceAccount mount.
		"--leader-election-namespace="+systemNamespace,
	)
	args = append(args, extra...)

	p := &managerProcess{name: name, log: &lockedBuffer{}, done: make(chan struct{}),
		metricsURL: "https://" + metricsAddr + "/metrics", probeAddr: probeAddr}
	p.cmd = exec.Command(bin, args...)
	p.cmd.Env = []string{"KUBECONFIG=" + kubeconfig, "HOME=" + t.TempDir(), "PATH=" + os.Getenv("PATH")}
	for _, ev := range c.Env { // team and project id from the Secret, as the kubelet resolves them
		if ev.ValueFrom != nil && ev.ValueFrom.SecretKeyRef != nil {
			var s corev1.Secret
			must(t, e.client.Get(e.ctx, client.ObjectKey{Namespace: systemNamespace, Name: ev.ValueFrom.SecretKeyRef.Name}, &s))
			p.cmd.Env = append(p.cmd.Env, ev.Name+"="+string(s.Data[ev.ValueFrom.SecretKeyRef.Key]))
		} else {
			p.cmd.Env = append(p.cmd.Env, ev.Name+"="+ev.Value)
		}
	}
	p.cmd.Stdout, p.cmd.Stderr = p.log, p.log
	must(t, p.cmd.Start())
	go func() { p.err = p.cmd.Wait(); close(p.done) }()
	t.Cleanup(func() {
		p.signal(syscall.SIGTERM)
		select {
		case <-p.done:
		case <-time.After(30 * time.Second):
			p.signal(syscall.SIGKILL)
			<-p.done
		}
		if t.Failed() {
			full := filepath.Join(os.TempDir(), strings.ReplaceAll(t.Name(), "/", "_")+"-"+name+".log")
			_ = os.WriteFile(full, []byte(p.log.String()), 0o600)
			t.Logf("%s log (last 8 KiB; all of it in %s):\n%s", name, full, tail(p.log.String(), 8<<10))
		}
	})
	e.waitHealthy(p)
	return p
}

// waitHealthy waits for the manager's /healthz, and fails if it exits first.
func (e *env) waitHealthy(p *managerProcess) {
	e.t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case <-p.done:
			e.t.Fatalf("%s exited: %v\n%s", p.name, p.err, tail(p.log.String(), 8<<10))
		default:
		}
		if conn, err := net.DialTimeout("tcp", p.probeAddr, time.Second); err == nil {
			_ = conn.Close()
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	e.t.Fatalf("%s did not serve its probes within 60s\n%s", p.name, tail(p.log.String(), 8<<10))
}

func (p *managerProcess) signal(sig syscall.Signal) {
	if p.cmd.Process != nil {
		_ = p.cmd.Process.Signal(sig)
	}
}

// exited reports whether the process has ended.
func (p *managerProcess) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
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

// buildManager builds cmd/manager once per test binary.
func buildManager(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "e2e-manager-")
		if err != nil {
			buildErr = err
			return
		}
		managerBin = filepath.Join(dir, "manager")
		cmd := exec.Command("go", "build", "-o", managerBin, "./cmd/manager")
		cmd.Dir = repoRoot
		if out, err := cmd.CombinedOutput(); err != nil {
			buildErr = fmt.Errorf("go build ./cmd/manager: %v\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return managerBin
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

func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	must(t, err)
	defer l.Close()
	return l.Addr().String()
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func tail(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}

// lockedBuffer collects a process's output while tests read it.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
