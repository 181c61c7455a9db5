// Package managerpod runs the real manager binary as a pod of its Deployment
// would run it, for the install tests: as the Deployment's ServiceAccount,
// with the container's arguments and environment (Secret references and the
// downward API's metadata.namespace resolved, $(VAR) expanded as the kubelet
// does) and the Vercel token from the Secret volume the Deployment mounts.
// Only what a local process cannot share with a pod is adapted: the listen
// addresses, the token's path, and the namespace a pod reads from its
// ServiceAccount mount (for leader election, and the manager's own).
package managerpod

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/getsentry/sandbox-controller/localstack/controlplane"
)

// Build builds cmd/manager of the repository at repoRoot into outDir and
// returns the binary's path.
func Build(repoRoot, outDir string) (string, error) {
	bin := filepath.Join(outDir, "manager")
	cmd := exec.Command("go", "build", "-ldflags", commitLDFlags(repoRoot), "-o", bin, "./cmd/manager")
	cmd.Dir = repoRoot
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build ./cmd/manager: %w\n%s", err, out)
	}
	return bin, nil
}

// commitLDFlags stamps the commit and its time, read with git, into
// internal/version, so the manager reports what it was built from (`kubectl
// sandbox version`) even where GOFLAGS=-buildvcs=false leaves the build
// info empty; "" when git cannot tell (the build then reports what it can).
func commitLDFlags(repoRoot string) string {
	out, err := exec.Command("git", "-C", repoRoot, "log", "-1", "--format=%H %cI").Output()
	rev, at, ok := strings.Cut(strings.TrimSpace(string(out)), " ")
	if err != nil || !ok {
		return ""
	}
	// As the Makefile's VERSION: the nearest release tag, else v0.0.0-dev.
	version := "v0.0.0-dev"
	if tag, err := exec.Command("git", "-C", repoRoot, "describe", "--tags", "--match", "v[0-9]*", "--dirty").Output(); err == nil {
		version = strings.TrimSpace(string(tag))
	}
	const pkg = "github.com/getsentry/sandbox-controller/internal/version"
	return "-X " + pkg + ".version=" + version + " -X " + pkg + ".revision=" + rev + " -X " + pkg + ".commitTime=" + at
}

// Options says which pod to run.
type Options struct {
	// Name names the process in messages and in its log file.
	Name string
	// Binary is the manager binary (Build).
	Binary string
	// Deployment is the installed manager Deployment; its first container
	// is run. Its namespace is the pod's.
	Deployment *appsv1.Deployment
	// Pod, when set instead of Deployment, is the pod to run (its first
	// container), as a kubelet runs one of the Deployment's pods.
	Pod *corev1.Pod
	// ControlPlane issues the ServiceAccount's token.
	ControlPlane *controlplane.ControlPlane
	// Client reads the Secrets the container refers to.
	Client client.Client
	// ExtraArgs follow the Deployment's arguments: a flag given again here
	// wins, as Go's flag package keeps the last occurrence.
	ExtraArgs []string
	// Output, when set, also receives the process's output.
	Output io.Writer
}

// Process is one run of the manager binary.
type Process struct {
	Name string
	// MetricsAddr is where metrics are served (host:port); "" when the
	// Deployment disables them.
	MetricsAddr string

	probeAddr, probePath string
	livenessPath         string
	cmd                  *exec.Cmd
	log                  lockedBuffer
	done                 chan struct{}
	err                  error
}

// Start runs the manager as a pod of opts.Deployment would, and returns once
// its readiness probe passes; any failure ends the test. When t ends the
// process gets SIGTERM, and SIGKILL 30 s later; if t failed, the tail of its
// output is logged and all of it written to a file.
func Start(ctx context.Context, t testing.TB, opts Options) *Process {
	t.Helper()
	p, err := start(ctx, t.TempDir(), opts)
	if err != nil {
		t.Fatalf("start %s: %v", opts.Name, err)
	}
	t.Cleanup(func() {
		_ = p.Stop(30 * time.Second)
		if t.Failed() {
			full := filepath.Join(os.TempDir(), strings.ReplaceAll(t.Name(), "/", "_")+"-"+p.Name+".log")
			_ = os.WriteFile(full, []byte(p.Log()), 0o600)
			t.Logf("%s log (last 8 KiB; all of it in %s):\n%s", p.Name, full, p.LogTail())
		}
	})
	if err := p.waitReady(ctx); err != nil {
		t.Fatal(err)
	}
	return p
}

// Run starts the process in dir, which receives its kubeconfig, token file
// and HOME, and returns without waiting for its readiness (see Ready): a
// kubelet's view of a container start.
func Run(ctx context.Context, dir string, opts Options) (*Process, error) {
	return start(ctx, dir, opts)
}

// start starts the process in dir, which receives its kubeconfig, token file
// and HOME.
func start(ctx context.Context, dir string, opts Options) (*Process, error) {
	var ns, what string
	var pod corev1.PodSpec
	switch {
	case opts.Pod != nil:
		ns, pod, what = opts.Pod.Namespace, opts.Pod.Spec, "pod "+opts.Pod.Name
	case opts.Deployment != nil:
		ns, pod, what = opts.Deployment.Namespace, opts.Deployment.Spec.Template.Spec, "deployment "+opts.Deployment.Name
	default:
		return nil, errors.New("managerpod: neither a Deployment nor a Pod to run")
	}
	if ns == "" || len(pod.Containers) == 0 {
		return nil, fmt.Errorf("%s: want a namespace and a container", what)
	}
	c := pod.Containers[0]
	secret := func(name, key string) (string, error) {
		var s corev1.Secret
		if err := opts.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &s); err != nil {
			return "", err
		}
		v, ok := s.Data[key]
		if !ok {
			return "", fmt.Errorf("secret %s/%s has no key %s", ns, name, key)
		}
		return string(v), nil
	}

	// The environment, in order: a value may refer to variables before it.
	env := map[string]string{}
	procEnv := []string{"PATH=" + os.Getenv("PATH"), "HOME=" + filepath.Join(dir, "home")}
	for _, e := range c.Env {
		v := expand(e.Value, env)
		switch from := e.ValueFrom; {
		case from == nil:
		case from.SecretKeyRef != nil:
			var err error
			if v, err = secret(from.SecretKeyRef.Name, from.SecretKeyRef.Key); err != nil {
				return nil, fmt.Errorf("env %s: %w", e.Name, err)
			}
		case from.FieldRef != nil && from.FieldRef.FieldPath == "metadata.namespace":
			v = ns // the downward API: the pod's namespace is its Deployment's
		default:
			return nil, fmt.Errorf("env %s: only secretKeyRef and fieldRef metadata.namespace are resolved here", e.Name)
		}
		env[e.Name] = v
		procEnv = append(procEnv, e.Name+"="+v)
	}
	if len(c.EnvFrom) > 0 {
		return nil, errors.New("envFrom is not resolved here")
	}
	// A pod's own namespace, which the manager reads from the ServiceAccount
	// mount when no --manager-namespace names it, reaches a local process
	// as $POD_NAMESPACE, the manager's next source.
	if _, ok := env["POD_NAMESPACE"]; !ok {
		procEnv = append(procEnv, "POD_NAMESPACE="+ns)
	}

	// What the kubelet passes: the command's arguments and the args, expanded.
	var args []string
	for _, a := range append(slices.Clone(c.Command[min(1, len(c.Command)):]), c.Args...) {
		args = append(args, expand(a, env))
	}
	p := &Process{Name: opts.Name, done: make(chan struct{}), probePath: "/readyz"}
	if h := c.ReadinessProbe; h != nil && h.HTTPGet != nil {
		p.probePath = h.HTTPGet.Path
	}
	if h := c.LivenessProbe; h != nil && h.HTTPGet != nil {
		p.livenessPath = h.HTTPGet.Path
	}
	var err error
	if p.probeAddr, err = freeAddr(); err != nil {
		return nil, err
	}
	set := map[string]string{"health-probe-bind-address": p.probeAddr}
	if v, _ := flagValue(args, "metrics-bind-address"); v != "0" {
		if p.MetricsAddr, err = freeAddr(); err != nil {
			return nil, err
		}
		set["metrics-bind-address"] = p.MetricsAddr
	}
	if _, ok := flagValue(args, "leader-election-namespace"); !ok {
		set["leader-election-namespace"] = ns
	}
	if file, ok := flagValue(args, "vercel-token-file"); ok {
		name, key, err := secretFile(pod, c, file)
		if err != nil {
			return nil, err
		}
		token, err := secret(name, key)
		if err != nil {
			return nil, fmt.Errorf("--vercel-token-file: %w", err)
		}
		set["vercel-token-file"] = filepath.Join(dir, "vercel-token")
		if err := os.WriteFile(set["vercel-token-file"], []byte(token), 0o600); err != nil {
			return nil, err
		}
	}
	if args, err = setFlags(args, set); err != nil {
		return nil, err
	}

	sa := pod.ServiceAccountName
	if sa == "" {
		sa = "default"
	}
	kubeconfig := filepath.Join(dir, "kubeconfig")
	if err := opts.ControlPlane.WriteServiceAccountKubeconfig(ctx, ns, sa, kubeconfig); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(filepath.Join(dir, "home"), 0o700); err != nil {
		return nil, err
	}
	p.cmd = exec.Command(opts.Binary, append(args, opts.ExtraArgs...)...)
	p.cmd.Env = append(procEnv, "KUBECONFIG="+kubeconfig)
	var out io.Writer = &p.log
	if opts.Output != nil {
		out = io.MultiWriter(&p.log, opts.Output)
	}
	p.cmd.Stdout, p.cmd.Stderr = out, out
	if err := p.cmd.Start(); err != nil {
		return nil, err
	}
	go func() { p.err = p.cmd.Wait(); close(p.done) }()
	return p, nil
}

// waitReady waits up to a minute for the readiness probe to answer 200, and
// fails early when the process exits.
func (p *Process) waitReady(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	for {
		select {
		case <-p.done:
			return fmt.Errorf("%s exited before it was ready: %v", p.Name, p.err)
		case <-ctx.Done():
			return fmt.Errorf("%s: http://%s%s did not answer 200 within a minute", p.Name, p.probeAddr, p.probePath)
		case <-time.After(100 * time.Millisecond):
		}
		if p.Ready() {
			return nil
		}
	}
}

// Ready probes readiness once, as the kubelet's readiness probe does: true
// when the probe path answers 200 within a second.
func (p *Process) Ready() bool { return p.probe(p.probePath) }

// Live probes liveness once: true when the container has no liveness probe
// or its path answers 200 within a second.
func (p *Process) Live() bool { return p.livenessPath == "" || p.probe(p.livenessPath) }

func (p *Process) probe(path string) bool {
	hc := &http.Client{Timeout: time.Second} // the kubelet's default timeoutSeconds
	resp, err := hc.Get("http://" + p.probeAddr + path)
	if err != nil {
		return false
	}
	_ = resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

// Signal sends sig to the process.
func (p *Process) Signal(sig os.Signal) {
	_ = p.cmd.Process.Signal(sig)
}

// Stop sends SIGTERM, as the kubelet does, and SIGKILL once grace has
// passed. It returns the exit error, or that the process had to be killed.
func (p *Process) Stop(grace time.Duration) error {
	p.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
		return p.err
	case <-time.After(grace):
		p.Signal(syscall.SIGKILL)
		<-p.done
		return fmt.Errorf("%s did not stop within %v of SIGTERM and was killed", p.Name, grace)
	}
}

// Done is closed when the process has exited.
func (p *Process) Done() <-chan struct{} { return p.done }

// Exited reports whether the process has exited.
func (p *Process) Exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// Err is how the process exited, once Done is closed.
func (p *Process) Err() error {
	<-p.done
	return p.err
}

// Log is the process's output so far.
func (p *Process) Log() string { return p.log.String() }

// LogTail is the last 8 KiB of Log, for test failures.
func (p *Process) LogTail() string {
	s := p.log.String()
	return s[max(0, len(s)-8<<10):]
}

func freeAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return l.Addr().String(), nil
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
