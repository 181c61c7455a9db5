// Command dev runs the local development environment behind `make dev`: a
// control plane (localstack/controlplane: etcd, kube-apiserver and
// kube-controller-manager) with the CRDs installed as `make install` renders
// them, the Vercel Sandbox API emulator, and the manager pointed at both, in
// the foreground until Ctrl-C. It needs no cluster, no Vercel account and no Docker.
//
// The manager runs as the ServiceAccount `make deploy` gives it, with the
// ClusterRole and Roles rendered from config/ (localstack.InstallManagerRBAC),
// not as an administrator: a permission it lacks fails here as in a cluster.
//
// Everything it writes lives in the state directory (--state-dir, default
// bin/dev): the admin kubeconfig, the manager's kubeconfig, a sourceable env file, the logs, the
// emulator's data and the control plane's files. A lock file in it makes a
// second instance on the same directory refuse to start.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/getsentry/sandbox-controller/controllers"
	"github.com/getsentry/sandbox-controller/internal/notify"
	"github.com/getsentry/sandbox-controller/localstack"
	"github.com/getsentry/sandbox-controller/localstack/emulator"
	"github.com/getsentry/sandbox-controller/localstack/procfs"
)

// stopSignals end the environment cleanly.
var stopSignals = []os.Signal{os.Interrupt, syscall.SIGTERM, syscall.SIGHUP}

// ReadyLine is printed, alone on its line, once everything is up; scripts
// wait for it.
const ReadyLine = "Ready."

type config struct {
	stateDir                       string
	emulatorExec                   string
	metricsAddr, probeAddr         string
	requestsPerMinute, concurrency int
	vercelInFlight                 int
	pollInterval, backoffCap       time.Duration
	maxSessionLength               time.Duration
	shutdownWarning                time.Duration
	zap                            zap.Options
	// deployed runs no manager in-process: `make deploy` installs it and
	// localstack/kubelet runs its Deployment's pods (deployed.go).
	deployed bool
	// oidc starts a local OIDC issuer the API server trusts for oidcTrust
	// (oidc.go).
	oidc      bool
	oidcTrust string
}

func main() {
	var c config
	flag.StringVar(&c.stateDir, "state-dir", filepath.Join("bin", "dev"), "Directory for the kubeconfig, env file, logs, lock and all runtime data.")
	flag.StringVar(&c.emulatorExec, "emulator-exec", "", `How the emulator runs sandbox commands: "" (auto: namespace when possible, else host), "namespace", "host" or "none".`)
	flag.StringVar(&c.metricsAddr, "metrics-bind-address", "0", "Address the manager's Prometheus metrics endpoint binds to; 0 disables it.")
	flag.StringVar(&c.probeAddr, "health-probe-bind-address", "0", "Address the manager's /healthz and /readyz probes bind to; 0 disables them.")
	flag.IntVar(&c.requestsPerMinute, "vercel-requests-per-minute", 10000, "Client-side budget of Vercel control-plane requests per minute.")
	flag.DurationVar(&c.pollInterval, "poll-interval", time.Minute, "How often a running sandbox is observed for changes made outside the operator (jittered by up to 10%).")
	flag.DurationVar(&c.backoffCap, "backoff-cap", time.Minute, "Longest delay between retries after an error.")
	flag.DurationVar(&c.maxSessionLength, "max-session-length", controllers.DefaultMaxSessionLength, "The Vercel plan's maximum session length: heartbeats never extend a session beyond it (the emulator's Pro plan allows 24h).")
	flag.DurationVar(&c.shutdownWarning, "shutdown-warning", controllers.DefaultShutdownWarning, "How long before a Sandbox's spec.shutdownTime the ShutdownWarning event is emitted.")
	flag.IntVar(&c.concurrency, "max-concurrent-reconciles", 32, "Reconciles of each kind that run in parallel.")
	flag.IntVar(&c.vercelInFlight, "vercel-max-in-flight", 32, "Vercel requests in flight at once, shared by all kinds (0: no bound).")
	flag.BoolVar(&c.deployed, "deployed", false, "Start no manager and install nothing: follow the README's \"Install on a cluster\" against this control plane (make deploy), whose Deployment's pods a local kubelet runs as processes.")
	flag.BoolVar(&c.oidc, "oidc", false, "Start a local OIDC issuer shaped like Vercel's and start the API server trusting it (--authentication-config), as docs/clients.md's serverless clients authenticate; prints how to mint a token.")
	flag.StringVar(&c.oidcTrust, "oidc-trust", defaultOIDCTrust, "With --oidc: the functions the API server accepts, comma-separated team/project/environment.")
	c.zap = zap.Options{Development: true}
	c.zap.BindFlags(flag.CommandLine)
	flag.Parse()
	os.Exit(run(c))
}

// run returns the process exit code: 0 after a clean shutdown on a signal
// once ready, 130 when interrupted during start-up.
func run(c config) int {
	fail := func(format string, args ...any) int {
		fmt.Fprintf(os.Stderr, "dev: "+format+"\n", args...)
		return 1
	}
	stateDir, err := filepath.Abs(c.stateDir)
	if err != nil {
		return fail("%v", err)
	}
	if err := os.MkdirAll(stateDir, 0o755); err != nil {
		return fail("%v", err)
	}
	unlock, err := lock(filepath.Join(stateDir, "lock"))
	if err != nil {
		return fail("%v", err)
	}
	defer unlock()

	// Signals are caught from here on, so a Ctrl-C during start-up still
	// stops what was started. The control plane runs in its own process
	// group: the terminal's Ctrl-C reaches only us, and we stop it. A closed
	// terminal (SIGHUP) stops us the same way, and a closed stdout (`make dev
	// | head`) must not kill us with SIGPIPE half-way: either would orphan
	// the control plane.
	// (Notify, not Ignore: an ignored signal stays ignored in the children.)
	signal.Notify(make(chan os.Signal, 1), syscall.SIGPIPE)
	ctx, stop := signal.NotifyContext(context.Background(), stopSignals...)
	defer stop()

	killLeftovers(stateDir)
	paths := newLayout(stateDir)
	for _, d := range []string{paths.controlPlane, paths.emulatorData} {
		if err := os.RemoveAll(d); err != nil {
			return fail("clean %s: %v", d, err)
		}
	}

	assets, err := envtestAssets()
	if err != nil {
		return fail("%v", err)
	}
	cpLog, err := os.Create(paths.controlPlaneLog)
	if err != nil {
		return fail("%v", err)
	}
	defer cpLog.Close()
	mgrLog, err := os.Create(paths.managerLog)
	if err != nil {
		return fail("%v", err)
	}
	defer mgrLog.Close()
	emuLog, err := os.Create(paths.emulatorLog)
	if err != nil {
		return fail("%v", err)
	}
	defer emuLog.Close()
	// WriteTo after UseFlagOptions: the options carry a destination (stderr).
	ctrl.SetLogger(zap.New(zap.UseFlagOptions(&c.zap), zap.WriteTo(mgrLog)))

	// Everything started is stopped in reverse order, whatever happens next.
	var cleanups []func()
	defer func() {
		fmt.Println("Stopping: manager, emulator, control plane…")
		for i := len(cleanups) - 1; i >= 0; i-- {
			cleanups[i]()
		}
		_ = os.RemoveAll(paths.controlPlane)
		_ = os.Remove(paths.kubeconfig)
		_ = os.Remove(paths.managerKubeconfig)
		_ = os.Remove(paths.env)
		fmt.Println("Stopped.")
	}()

	oidcTrust, err := c.oidcTrusts()
	if err != nil {
		return fail("%v", err)
	}
	tenants, err := newDevTenants()
	if err != nil {
		return fail("%v", err)
	}
	fmt.Printf("Starting the control plane (etcd, kube-apiserver and kube-controller-manager from %s)…\n", assets)
	// The control plane's files live under the state dir, so leftovers of a
	// run killed with SIGKILL are recognisable (killLeftovers) and cleaned up.
	stack, err := localstack.Start(ctx, localstack.Options{
		RepoRoot:          ".",
		AssetsDir:         assets,
		StateDir:          paths.controlPlane,
		ControllerManager: true,
		Workloads:         c.deployed,
		InstallNothing:    c.deployed,
		ControlPlaneLog:   cpLog,
		OIDC:              oidcTrust,
		Emulator: emulator.Options{
			DataDir: paths.emulatorData,
			Exec:    c.emulatorExec,
			Logger:  slog.New(slog.NewTextHandler(emuLog, nil)),
			// Its own team and project only, as a Vercel token is scoped:
			// a wrong team answers 403 and a wrong project 404, so the
			// manager's project check (and a client's) can be seen locally.
			Teams:    []string{localstack.TeamID},
			Projects: []string{localstack.ProjectID},
			// Two more teams, each with its own token and project: the
			// SandboxClasses team-a and team-b (classes.go).
			Credentials: emulatorCredentials(tenants),
		},
	})
	if ctx.Err() != nil { // Ctrl-C while it started
		if stack != nil {
			_ = stack.Stop()
		}
		return 130
	}
	if err != nil {
		return fail("start the control plane and the emulator: %v (control plane output: %s)", err, paths.controlPlaneLog)
	}
	cleanups = append(cleanups, func() {
		if err := stack.Stop(); err != nil {
			fmt.Fprintf(os.Stderr, "dev: stop the emulator and the control plane: %v\n", err)
		}
	})
	for _, p := range procfs.ControlPlane() {
		fmt.Printf("  %s PID %d\n", p.Name, p.PID)
	}
	if err := stack.ControlPlane.WriteAdminKubeconfig(paths.kubeconfig); err != nil {
		return fail("admin kubeconfig: %v", err)
	}
	if c.deployed {
		fmt.Printf("  API server %s, with the deployment and replicaset controllers; nothing installed\n", stack.Config.Host)
	} else {
		fmt.Printf("  API server %s, CRDs installed from config/crd, admission policies from config/admission\n", stack.Config.Host)
	}
	emuURL, emu := stack.EmulatorURL, stack.Emulator
	fmt.Printf("Started the Vercel Sandbox API emulator at %s (data in %s)\n", emuURL, paths.emulatorData)
	if err := announceOIDC(stack, oidcTrust, stateDir, &cleanups); err != nil {
		return fail("OIDC: %v", err)
	}

	if c.deployed {
		return runDeployed(ctx, stack, paths, fail, &cleanups)
	}

	// The manager acts as its ServiceAccount, with the RBAC `make deploy`
	// installs: local behaviour is production behaviour.
	mgrCfg, mgrID, err := stack.InstallManagerRBAC(ctx)
	if err != nil {
		return fail("install the manager's RBAC: %v", err)
	}
	if err := stack.WriteManagerKubeconfig(mgrCfg, paths.managerKubeconfig); err != nil {
		return fail("manager kubeconfig: %v", err)
	}
	// Receivers of webhook notifications run on this machine here, so
	// loopback is allowed as an operator allows in-cluster receivers with
	// --notify-allow-destinations; every other internal range stays refused.
	notifyAllow, err := notify.ParseAllowList([]string{"127.0.0.0/8", "::1"})
	if err != nil {
		return fail("%v", err)
	}
	vc := stack.Vercel("")
	vc.RequestsPerMinute, vc.UserAgent = c.requestsPerMinute, "sandbox-controller (make dev)"
	mgr, err := stack.StartManager(ctx, mgrCfg, ctrl.Options{
		Metrics:                metricsserver.Options{BindAddress: c.metricsAddr},
		HealthProbeBindAddress: c.probeAddr,
	}, vc, controllers.Options{
		MaxConcurrentReconciles: c.concurrency,
		VercelInFlight:          c.vercelInFlight,
		// As the Deployment (--vercel-reserved-in-flight's default): deletes
		// and session extensions keep a slot of their own.
		VercelReservedInFlight: 1,
		PollInterval:           c.pollInterval,
		BackoffCap:             c.backoffCap,
		MaxSessionLength:       c.maxSessionLength,
		ShutdownWarning:        c.shutdownWarning,
		Notify:                 notify.Options{Allow: notifyAllow},
	})
	if err != nil {
		return fail("%v", err)
	}
	cleanups = append(cleanups, func() {
		if err := mgr.Stop(); err != nil {
			fmt.Fprintf(os.Stderr, "dev: manager: %v\n", err)
		}
	})
	fmt.Printf("Started the manager as %s, with the RBAC of config/default (logs: %s; try its permissions with kubectl --kubeconfig %s auth can-i …)\n",
		mgrID.User(), paths.managerLog, paths.managerKubeconfig)
	if err := createSampleQuota(ctx, stack.Client); err != nil {
		return fail("%v", err)
	}
	fmt.Printf("Created SandboxQuota %s/%s from %s (kubectl get sbxquota)\n", sampleQuotaNamespace, sampleQuotaName, sampleQuotaFile)
	if err := createTenants(ctx, stack.Client, tenants); err != nil {
		return fail("%v", err)
	}
	fmt.Printf("Created the SandboxClasses team-a and team-b (emulated teams team_a and team_b, Secrets in %s), for the namespaces team-a and team-b\n", classSecretsNamespace)
	const teamID, projectID = localstack.TeamID, localstack.ProjectID

	vercelEnv := fmt.Sprintf("VERCEL_API_URL=%s VERCEL_TOKEN=%s VERCEL_TEAM_ID=%s VERCEL_PROJECT_ID=%s",
		emuURL, emu.Token(), teamID, projectID)
	envFile := fmt.Sprintf("export KUBECONFIG=%s\nexport %s\n", paths.kubeconfig, vercelEnv)
	if err := os.WriteFile(paths.env, []byte(envFile), 0o600); err != nil {
		return fail("%v", err)
	}

	fmt.Printf(`
Emulator: %s
Logs: manager %s, emulator %s, control plane %s

Point kubectl at the control plane:

  export KUBECONFIG=%s

Then try:

  kubectl apply -f config/samples/
  kubectl wait --for=condition=Ready sandbox --all
  kubectl get sbx

Two tenants, each its own Vercel team and project (docs/sandboxclass.md):

  kubectl get sandboxclasses
  kubectl apply -n team-a -f config/samples/classes/sandbox_with_class.yaml

Other clients (e.g. the official Vercel SDK) reach the same backend with:

  export %s

(%s holds both exports: source it.)

`, emu.ExecDescription(), paths.managerLog, paths.emulatorLog, paths.controlPlaneLog, paths.kubeconfig, vercelEnv, paths.env)
	fmt.Println(ReadyLine)
	fmt.Println("Press Ctrl-C to stop everything.")

	select {
	case <-ctx.Done():
		keepStopping()
		return 0
	case <-mgr.Stopped():
		err := mgr.Err()
		return fail("the manager stopped: %v (see %s)", err, paths.managerLog)
	}
}

// keepStopping is called once a signal asked us to stop: a second Ctrl-C
// must not kill us half-way, or the control plane would be left running. It
// says that we heard it, and the deferred clean-ups carry on.
func keepStopping() {
	fmt.Println()
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, stopSignals...)
	go func() {
		for range sigs {
			fmt.Println("Still stopping; the control plane needs a few seconds…")
		}
	}()
}

// layout is where the files of one environment live.
type layout struct {
	kubeconfig, managerKubeconfig, env       string
	managerLog, emulatorLog, controlPlaneLog string
	controlPlane, emulatorData               string
	// pods holds the files and logs of the pods the kubelet runs (--deployed).
	pods string
}

func newLayout(stateDir string) layout {
	p := func(name string) string { return filepath.Join(stateDir, name) }
	return layout{
		kubeconfig:        p("kubeconfig"),
		managerKubeconfig: p("manager-kubeconfig"),
		env:               p("env"),
		managerLog:        p("manager.log"),
		emulatorLog:       p("emulator.log"),
		controlPlaneLog:   p("control-plane.log"),
		controlPlane:      p("control-plane"),
		emulatorData:      p("emulator"),
		pods:              p("pods"),
	}
}

// envtestAssets returns the directory holding kube-apiserver and etcd:
// $KUBEBUILDER_ASSETS, else what hack/envtest.sh prints (it builds them from
// the Go module proxy the first time, in about five minutes).
func envtestAssets() (string, error) {
	if d := os.Getenv("KUBEBUILDER_ASSETS"); d != "" {
		return d, nil
	}
	fmt.Println("Finding the envtest binaries with hack/envtest.sh (built on first use, about 5 minutes)…")
	cmd := exec.Command(filepath.Join("hack", "envtest.sh"))
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("hack/envtest.sh (run from the repository root): %w", err)
	}
	return strings.TrimSpace(string(out)), nil
}

// lock takes an exclusive, non-blocking lock on path and records our PID in
// it. The kernel releases the lock when the process ends, however it ends.
func lock(path string) (unlock func(), err error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		if !errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, fmt.Errorf("lock %s: %w", path, err)
		}
		holder := "unknown"
		// The holder writes its PID right after locking; give it a moment.
		for i := 0; i < 10; i++ {
			if b, _ := os.ReadFile(path); strings.TrimSpace(string(b)) != "" {
				holder = strings.TrimSpace(string(b))
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
		return nil, fmt.Errorf("another dev environment is already running with state directory %s (PID %s).\n"+
			"Use it (source %s), or stop it with Ctrl-C in its terminal or `kill %s`, then run `make dev` again",
			filepath.Dir(path), holder, filepath.Join(filepath.Dir(path), "env"), holder)
	}
	if err = f.Truncate(0); err == nil {
		_, err = f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	}
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("write %s: %w", path, err)
	}
	return func() { _ = f.Truncate(0); f.Close() }, nil
}

// killLeftovers kills the etcd, kube-apiserver and kube-controller-manager of
// an earlier run on this state dir that was itself killed (SIGKILL cannot be
// caught, and the control plane runs in its own process group, so it outlived
// its parent). They are recognised by their files under the state dir's
// control-plane directory; holding the lock proves no live run owns them.
func killLeftovers(stateDir string) {
	l := newLayout(stateDir)
	for _, p := range procfs.List() {
		if p.PID == os.Getpid() {
			continue
		}
		for _, a := range p.Args {
			if strings.Contains(a, l.controlPlane+string(filepath.Separator)) {
				fmt.Printf("Killing %s (PID %d), left running by an earlier run on %s\n", p.Name, p.PID, stateDir)
				_ = syscall.Kill(p.PID, syscall.SIGKILL)
				break
			}
		}
	}
}
