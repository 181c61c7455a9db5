package chaos

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"

	"github.com/getsentry/sandbox-controller/controllers"
	"github.com/getsentry/sandbox-controller/localstack"
	"github.com/getsentry/sandbox-controller/localstack/controlplane"
	"github.com/getsentry/sandbox-controller/localstack/emulator"
)

// What `make deploy` names things (config/default).
const (
	systemNamespace = "sandbox-controller-system"
	managerSA       = "sandbox-controller-controller-manager"
	deploymentName  = "sandbox-controller-controller-manager"
	credentialsName = "vercel-credentials"
	leaseName       = "sandbox-controller.sandbox.sentry.io"
	// Nothing pulls it: the manager binary runs as local processes with the
	// Deployment's arguments.
	deployImage = "example.com/sandbox-controller:chaos"
)

// Config says how hard and how long to shake the operator.
type Config struct {
	// Seed drives every random choice: workload, faults and kills.
	Seed int64
	// Duration is the length of the chaos phase.
	Duration time.Duration
	// Objects caps the live workload objects (Sandboxes, SandboxSnapshots
	// and SandboxForks the workload created; fork children not counted).
	Objects int
	// Namespaces is how many namespaces hold them at any time.
	Namespaces int
	// OpInterval, KillEvery and FaultEvery are mean delays (each drawn
	// between half and one and a half times the value) between workload
	// operations, SIGKILLs of a random replica and fault episodes.
	OpInterval time.Duration
	KillEvery  time.Duration
	FaultEvery time.Duration
	// BlackHole is how long every Vercel request hangs, once, starting
	// BlackHoleAt into the chaos phase (0: never).
	BlackHole   time.Duration
	BlackHoleAt time.Duration
	// Converge bounds the wait for convergence once the chaos stops.
	Converge time.Duration
	// Replicas is the number of manager replicas (2).
	Replicas int
	// ManagerBin is the manager binary (`go build ./cmd/manager`).
	ManagerBin string
	// ManagerArgs are appended to the Deployment's arguments.
	ManagerArgs []string
	// RepoRoot holds config/ and bin/kustomize; found from the working
	// directory when empty.
	RepoRoot string
	// AssetsDir holds kube-apiserver, etcd and kube-controller-manager
	// ($KUBEBUILDER_ASSETS when empty).
	AssetsDir string
	// WorkDir receives the logs (chaos.log, one file per manager process,
	// the control plane's) and, when a target is missed, a dump of the
	// objects. A temporary directory when empty.
	WorkDir string
	// Exec is the emulator's command execution mode ("" automatic:
	// namespace when run as root on Linux, else host).
	Exec string
	// Log receives progress lines (besides WorkDir/chaos.log); nil: none.
	Log io.Writer
}

// Defaults are the settings of `make chaos` without ARGS: a 30-minute soak.
func Defaults() Config {
	return Config{
		Seed:        1,
		Duration:    30 * time.Minute,
		Objects:     300,
		Namespaces:  4,
		OpInterval:  400 * time.Millisecond,
		KillEvery:   8 * time.Second,
		FaultEvery:  4 * time.Second,
		BlackHole:   time.Minute,
		BlackHoleAt: 10 * time.Minute,
		Converge:    10 * time.Minute,
		Replicas:    2,
	}
}

func (c *Config) defaults() {
	d := Defaults()
	if c.Duration <= 0 {
		c.Duration = d.Duration
	}
	if c.Objects <= 0 {
		c.Objects = d.Objects
	}
	if c.Namespaces <= 0 {
		c.Namespaces = d.Namespaces
	}
	if c.OpInterval <= 0 {
		c.OpInterval = d.OpInterval
	}
	if c.KillEvery <= 0 {
		c.KillEvery = d.KillEvery
	}
	if c.FaultEvery <= 0 {
		c.FaultEvery = d.FaultEvery
	}
	if c.Converge <= 0 {
		c.Converge = d.Converge
	}
	if c.Replicas <= 0 {
		c.Replicas = d.Replicas
	}
}

// harness is one run.
type harness struct {
	cfg   Config
	stack *localstack.Stack

	kubeconfig  string // administrator
	managerArgs []string
	managerEnv  []string
	replicas    []*replica
	canaries    *canaries
	git         *gitServer // the repository a recipe variant clones (nil: none)
	// gitLn is the git server's listener, opened before the emulator so
	// that its egress proxy maps gitHost to it: builders clone through the
	// proxy, which refuses the host's loopback otherwise.
	gitLn net.Listener

	logMu   sync.Mutex
	logFile *os.File
	start   time.Time

	leaseMu sync.Mutex
	holders []string // Lease holders seen, in order

	stopEmulator func() // stops serving the emulator

	eventsMu   sync.Mutex
	eventsLog  *os.File        // logs/events.log: every event seen, once per version
	seenEvents map[string]bool // uid/resourceVersion

	ledger poolLedger // pool members and claims seen (check_pool.go)
}

func (h *harness) logf(format string, args ...any) {
	line := fmt.Sprintf("%7.1fs  %s\n", time.Since(h.start).Seconds(), fmt.Sprintf(format, args...))
	h.logMu.Lock()
	defer h.logMu.Unlock()
	if h.logFile != nil {
		_, _ = h.logFile.WriteString(line)
	}
	if h.cfg.Log != nil {
		_, _ = io.WriteString(h.cfg.Log, line)
	}
}

// Run performs one soak and reports it. The error is for a run that could
// not be carried out (the environment did not start); missed targets are in
// the report (Report.Missed).
func Run(ctx context.Context, cfg Config) (_ *Report, err error) {
	cfg.defaults()
	if cfg.ManagerBin == "" {
		return nil, errors.New("chaos: Config.ManagerBin is required (go build ./cmd/manager)")
	}
	if cfg.WorkDir == "" {
		if cfg.WorkDir, err = os.MkdirTemp("", "chaos-"); err != nil {
			return nil, err
		}
	}
	if err := os.MkdirAll(filepath.Join(cfg.WorkDir, "logs"), 0o755); err != nil {
		return nil, err
	}
	// Run as root, the emulator runs commands as an unprivileged user, who
	// must reach the session directories.
	if err := os.Chmod(cfg.WorkDir, 0o755); err != nil {
		return nil, err
	}
	h := &harness{cfg: cfg, canaries: newCanaries(), start: time.Now()}
	if h.logFile, err = os.Create(filepath.Join(cfg.WorkDir, "chaos.log")); err != nil {
		return nil, err
	}
	defer h.logFile.Close()
	h.logf("chaos soak: seed %d, %s of chaos, up to %d objects in %d namespaces, %d replicas; logs in %s",
		cfg.Seed, cfg.Duration, cfg.Objects, cfg.Namespaces, cfg.Replicas, cfg.WorkDir)

	if err := h.startStack(ctx); err != nil {
		return nil, err
	}
	defer func() {
		if h.stopEmulator != nil {
			h.stopEmulator()
		}
		if serr := h.stack.Stop(); serr != nil && err == nil {
			h.logf("stop the control plane and the emulator: %v", serr)
		}
		_ = os.RemoveAll(filepath.Join(cfg.WorkDir, "emulator"))
	}()
	if err := h.deploy(ctx); err != nil {
		return nil, err
	}
	// Only commands of the namespace mode can clone: in host mode a
	// recipe's absolute paths (/vercel/sandbox/…) are the host's.
	if _, err := exec.LookPath("git"); err == nil && h.stack.Emulator.ExecMode() == "namespace" {
		if h.git, err = startGitServer(filepath.Join(cfg.WorkDir, "git"), h.gitLn); err != nil {
			return nil, err
		}
		defer h.git.close()
	} else {
		_ = h.gitLn.Close()
		h.logf("no recipe clones a repository: it needs git and the emulator's exec mode namespace (root on Linux)")
	}

	// Independent seeded streams, so that the timing of one part does not
	// change the choices of another.
	rngWork := rand.New(rand.NewPCG(uint64(cfg.Seed), 1))
	rngFault := rand.New(rand.NewPCG(uint64(cfg.Seed), 2))
	rngKill := rand.New(rand.NewPCG(uint64(cfg.Seed), 3))
	var rngKillMu sync.Mutex

	// The replicas, supervised as the kubelet would until the end.
	superCtx, stopSupervisors := context.WithCancel(ctx)
	var superWG sync.WaitGroup
	defer func() {
		stopSupervisors()
		superWG.Wait()
		var wg sync.WaitGroup
		for _, r := range h.replicas {
			wg.Go(func() { r.stop(40 * time.Second) })
		}
		wg.Wait()
	}()
	for i := range cfg.Replicas {
		r := &replica{name: string(rune('a' + i)), h: h}
		p, err := r.start()
		if err != nil {
			return nil, err
		}
		if err := p.waitProbes(time.Minute); err != nil {
			return nil, fmt.Errorf("manager %s: %w", r.name, err)
		}
		h.replicas = append(h.replicas, r)
		superWG.Go(func() { r.supervise(superCtx, rngKill, &rngKillMu) })
	}
	superWG.Go(func() { h.watchLease(superCtx) })
	if err := h.waitLeader(ctx, time.Minute); err != nil {
		return nil, err
	}

	w := newWorkload(h, rngWork)
	if err := w.setup(ctx); err != nil {
		return nil, err
	}
	faults := newFaultPlan(h, rngFault)

	// The chaos phase.
	chaosStart := time.Now()
	chaosCtx, endChaos := context.WithTimeout(ctx, cfg.Duration)
	var chaosWG sync.WaitGroup
	chaosWG.Go(func() { faults.run(chaosCtx, chaosStart) })
	chaosWG.Go(func() { w.run(ctx, chaosCtx) })
	chaosWG.Go(func() { h.killLoop(chaosCtx, rngKill, &rngKillMu) })
	chaosWG.Go(func() {
		for {
			select {
			case <-chaosCtx.Done():
				return
			case <-time.After(15 * time.Second):
				h.scanCluster(chaosCtx)
			}
		}
	})
	chaosWG.Wait()
	endChaos()
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	h.logf("chaos over after %s: %d workload operations, %d live objects; all faults lifted, no more kills; waiting up to %s for convergence",
		time.Since(chaosStart).Round(time.Second), w.total, w.liveObjects(), cfg.Converge)

	rep := &Report{Seed: cfg.Seed, Chaos: time.Since(chaosStart), WorkDir: cfg.WorkDir, cfg: cfg}
	v, waited, err := h.converge(ctx, w)
	if err != nil {
		return nil, err
	}
	rep.Verdict, rep.ConvergeWait = v, waited

	h.scanCluster(ctx)
	logs, _ := filepath.Glob(filepath.Join(cfg.WorkDir, "logs", "manager-*.log"))
	for _, f := range logs {
		if err := h.canaries.scanFile("manager logs", f); err != nil {
			h.logf("scan %s: %v", f, err)
		}
		rep.LeaseAcquisitions += countInFile(f, "successfully acquired lease")
	}
	rep.ManagerProcesses = len(logs)
	rep.Leaks = h.canaries.leaks()
	rep.Canaries = h.canaries.issued()
	rep.Requests = h.stack.Emulator.Counts()
	rep.WorkloadOps, rep.Ops, rep.Refused = w.total, w.summary(), w.refused
	rep.Faults = faults.summary()
	for _, r := range h.replicas {
		r.mu.Lock()
		rep.Kills += r.kills
		rep.LivenessRestarts += r.livenessRestarts
		rep.OwnExits = append(rep.OwnExits, r.ownExits...)
		r.mu.Unlock()
	}
	h.leaseMu.Lock()
	rep.LeaderChanges = max(len(h.holders)-1, 0)
	h.leaseMu.Unlock()
	if len(rep.Missed()) > 0 {
		h.dump(ctx)
	}
	if h.git != nil {
		rep.GitClones, rep.GitRefused = h.git.counts()
	}
	h.eventsMu.Lock()
	if h.eventsLog != nil {
		_ = h.eventsLog.Close()
	}
	h.eventsMu.Unlock()
	return rep, nil
}

// startStack starts the control plane (with kube-controller-manager, so
// namespaces delete and owners are collected), installs the CRDs and the
// admission policy, and starts the emulator.
func (h *harness) startStack(ctx context.Context) error {
	cpLog, err := os.Create(filepath.Join(h.cfg.WorkDir, "logs", "controlplane.log"))
	if err != nil {
		return err
	}
	if h.gitLn, err = net.Listen("tcp", "127.0.0.1:0"); err != nil {
		return err
	}
	h.stack, err = localstack.Start(ctx, localstack.Options{
		RepoRoot:          h.cfg.RepoRoot,
		AssetsDir:         h.cfg.AssetsDir,
		ControllerManager: true,
		ControlPlaneLog:   cpLog,
		Emulator: emulator.Options{DataDir: filepath.Join(h.cfg.WorkDir, "emulator"), Exec: h.cfg.Exec,
			Egress: emulator.EgressOptions{Hosts: map[string]string{gitHost: h.gitLn.Addr().String()}}},
		EmulatorAddr: "-", // served below, behind the request log
	})
	if err != nil {
		_ = cpLog.Close()
		_ = h.gitLn.Close()
		return fmt.Errorf("start the local stack: %w", err)
	}
	if h.stack.EmulatorURL, err = h.serveEmulator(); err != nil {
		_ = h.stack.Stop()
		return err
	}
	h.cfg.RepoRoot = h.stack.RepoRoot
	h.logf("control plane at %s, emulator at %s (exec mode %s)", h.stack.Config.Host, h.stack.EmulatorURL, h.stack.Emulator.ExecMode())
	return nil
}

// deploy applies what `make deploy` renders, creates the credentials Secret
// as the README does, and prepares the manager's command line: the
// Deployment's arguments (addresses and token path adapted to a local
// process), its environment resolved from the Secret, and a kubeconfig of
// the deployed ServiceAccount.
func (h *harness) deploy(ctx context.Context) error {
	h.kubeconfig = filepath.Join(h.cfg.WorkDir, "admin.kubeconfig")
	if err := h.stack.ControlPlane.WriteAdminKubeconfig(h.kubeconfig); err != nil {
		return err
	}
	manifests, err := controlplane.RenderDeploy(h.cfg.RepoRoot, deployImage)
	if err != nil {
		return err
	}
	if err := controlplane.Apply(ctx, h.kubeconfig, manifests); err != nil {
		return fmt.Errorf("apply config/default: %w", err)
	}
	emu := h.stack.Emulator
	secret := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: systemNamespace, Name: credentialsName},
		Data: map[string][]byte{"token": []byte(emu.Token()), "team-id": []byte(localstack.TeamID),
			"project-id": []byte(localstack.ProjectID)},
	}
	if err := h.stack.Client.Create(ctx, secret); err != nil {
		return fmt.Errorf("create the credentials Secret: %w", err)
	}
	tokenFile := filepath.Join(h.cfg.WorkDir, "vercel-token")
	if err := os.WriteFile(tokenFile, []byte(emu.Token()), 0o600); err != nil {
		return err
	}
	saKubeconfig := filepath.Join(h.cfg.WorkDir, "manager.kubeconfig")
	if err := h.stack.ControlPlane.WriteServiceAccountKubeconfig(ctx, systemNamespace, managerSA, saKubeconfig); err != nil {
		return err
	}

	dep, err := findDeployment(manifests)
	if err != nil {
		return err
	}
	c := dep.Spec.Template.Spec.Containers[0]
	for _, a := range c.Args {
		switch flagName(a) {
		case "metrics-bind-address", "health-probe-bind-address", "vercel-token-file":
			continue // replaced below
		}
		h.managerArgs = append(h.managerArgs, a)
	}
	h.managerArgs = append(h.managerArgs,
		"--metrics-bind-address=0",
		"--vercel-token-file="+tokenFile,
		"--vercel-api-url="+h.stack.EmulatorURL,
		// In a pod the namespace comes from the ServiceAccount mount.
		"--leader-election-namespace="+systemNamespace,
		// Short lease timings, as in test/e2e's high-availability test, so
		// that a SIGKILLed leader is replaced within seconds.
		"--leader-election-lease-duration=4s",
		"--leader-election-renew-deadline=3s",
		"--leader-election-retry-period=1s",
	)
	h.managerArgs = append(h.managerArgs, h.cfg.ManagerArgs...)
	h.managerEnv = []string{"KUBECONFIG=" + saKubeconfig, "HOME=" + h.cfg.WorkDir, "PATH=" + os.Getenv("PATH")}
	for _, ev := range c.Env {
		if ref := ev.ValueFrom; ref != nil && ref.SecretKeyRef != nil {
			if ref.SecretKeyRef.Name != credentialsName {
				return fmt.Errorf("the Deployment reads Secret %s, not %s", ref.SecretKeyRef.Name, credentialsName)
			}
			h.managerEnv = append(h.managerEnv, ev.Name+"="+string(secret.Data[ref.SecretKeyRef.Key]))
		} else {
			h.managerEnv = append(h.managerEnv, ev.Name+"="+ev.Value)
		}
	}
	h.logf("deployed config/default; managers run as ServiceAccount %s/%s with %s", systemNamespace, managerSA, strings.Join(h.managerArgs, " "))
	return nil
}

// killLoop SIGKILLs a random replica every KillEvery on average.
func (h *harness) killLoop(ctx context.Context, rng *rand.Rand, mu *sync.Mutex) {
	for {
		mu.Lock()
		d := h.cfg.KillEvery/2 + time.Duration(rng.Int64N(int64(h.cfg.KillEvery)+1))
		i := rng.IntN(len(h.replicas))
		mu.Unlock()
		select {
		case <-ctx.Done():
			return
		case <-time.After(d):
		}
		r := h.replicas[i]
		leader := ""
		if h.isLeader(r) {
			leader = " (the leader)"
		}
		h.logf("SIGKILL manager %s%s", r.name, leader)
		r.kill()
	}
}

// watchLease polls the leader election Lease and records each new holder.
func (h *harness) watchLease(ctx context.Context) {
	for ctx.Err() == nil {
		l := &coordinationv1.Lease{}
		if err := h.stack.Client.Get(ctx, types.NamespacedName{Namespace: systemNamespace, Name: leaseName}, l); err == nil {
			holder := ""
			if l.Spec.HolderIdentity != nil {
				holder = *l.Spec.HolderIdentity
			}
			h.leaseMu.Lock()
			if holder != "" && (len(h.holders) == 0 || h.holders[len(h.holders)-1] != holder) {
				h.holders = append(h.holders, holder)
			}
			h.leaseMu.Unlock()
		}
		select {
		case <-ctx.Done():
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// isLeader reports whether r's current process holds the Lease, judged by
// its log: client-go logs the acquisition with the identity.
func (h *harness) isLeader(r *replica) bool {
	p := r.current()
	return p != nil && !p.exited() && countInFile(p.logPath, "successfully acquired lease") > 0
}

func (h *harness) waitLeader(ctx context.Context, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		h.leaseMu.Lock()
		n := len(h.holders)
		h.leaseMu.Unlock()
		if n > 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
	return fmt.Errorf("no manager held Lease %s/%s within %s", systemNamespace, leaseName, timeout)
}

// maxSessionMs is the longest session timeout the controller asks for
// (--max-session-length less a second; controllers.DefaultMaxSessionLength
// unless overridden).
func maxSessionMs(args []string) int64 {
	d := controllers.DefaultMaxSessionLength
	for _, a := range args {
		if flagName(a) == "max-session-length" {
			if _, v, ok := strings.Cut(a, "="); ok {
				if p, err := time.ParseDuration(v); err == nil {
					d = p
				}
			}
		}
	}
	return (d - time.Second).Milliseconds()
}

func findDeployment(manifests []byte) (*appsv1.Deployment, error) {
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(manifests)))
	for {
		doc, err := r.Read()
		if err != nil {
			break
		}
		var meta metav1.TypeMeta
		if yaml.Unmarshal(doc, &meta) != nil || meta.Kind != "Deployment" {
			continue
		}
		d := &appsv1.Deployment{}
		if err := yaml.Unmarshal(doc, d); err != nil {
			return nil, err
		}
		if d.Name == deploymentName {
			return d, nil
		}
	}
	return nil, fmt.Errorf("the rendering of config/default has no Deployment %s", deploymentName)
}

func flagName(arg string) string {
	name, _, _ := strings.Cut(strings.TrimLeft(arg, "-"), "=")
	return name
}

func countInFile(path, s string) int {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0
	}
	return bytes.Count(bytes.ToLower(b), []byte(strings.ToLower(s)))
}
