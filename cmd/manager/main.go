// Command manager runs the sandbox-controller: the reconcilers of the
// sandbox.sentry.io kinds, against the Kubernetes API server in KUBECONFIG (or
// in-cluster config) and the Vercel Sandbox API.
package main

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	sandboxv1 "github.com/getsentry/sandbox-controller/api/v1alpha1"
	"github.com/getsentry/sandbox-controller/controllers"
	"github.com/getsentry/sandbox-controller/internal/vercel"
)

func main() {
	var (
		metricsAddr, probeAddr string
		leaderElect            bool
		vercelURL, tokenFile   string
		teamID, projectID      string
		requestsPerMinute      int
		pollInterval           time.Duration
		backoffCap             time.Duration
		concurrency            int
		vercelInFlight         int
		maxSessionLength       time.Duration
		shutdownWarning        time.Duration
		kubeQPS                float64
		kubeBurst              int
	)
	flag.StringVar(&metricsAddr, "metrics-bind-address", ":8080", "Address the Prometheus metrics endpoint binds to; 0 disables it.")
	flag.StringVar(&probeAddr, "health-probe-bind-address", ":8081", "Address the /healthz and /readyz probes bind to.")
	flag.BoolVar(&leaderElect, "leader-elect", false, "Elect a leader so that only one manager replica reconciles at a time.")
	flag.StringVar(&vercelURL, "vercel-api-url", "https://api.vercel.com", "Base URL of the Vercel Sandbox API (the emulator's URL when running locally).")
	flag.StringVar(&tokenFile, "vercel-token-file", "", "File holding the Vercel token; the VERCEL_TOKEN environment variable is used when unset.")
	flag.StringVar(&teamID, "vercel-team-id", os.Getenv("VERCEL_TEAM_ID"), "Vercel team id (default $VERCEL_TEAM_ID).")
	flag.StringVar(&projectID, "vercel-project-id", os.Getenv("VERCEL_PROJECT_ID"), "Vercel project id (default $VERCEL_PROJECT_ID).")
	flag.IntVar(&requestsPerMinute, "vercel-requests-per-minute", 10000, "Client-side budget of Vercel control-plane requests per minute (Vercel Pro allows 10,000).")
	flag.DurationVar(&pollInterval, "poll-interval", time.Minute, "How often a running sandbox is observed for changes made outside the operator (jittered by up to 10%).")
	flag.DurationVar(&backoffCap, "backoff-cap", time.Minute, "Longest delay between retries after an error.")
	flag.IntVar(&concurrency, "max-concurrent-reconciles", 16, "Reconciles of each kind that run in parallel. Beyond --vercel-max-in-flight, the extra ones do their Kubernetes writes while others wait on Vercel.")
	flag.IntVar(&vercelInFlight, "vercel-max-in-flight", 4, "Vercel requests in flight at once, shared by all kinds (0: no bound); --vercel-requests-per-minute paces them too.")
	flag.DurationVar(&maxSessionLength, "max-session-length", controllers.DefaultMaxSessionLength, "The Vercel plan's maximum session length: heartbeats never extend a session beyond it (Pro and Enterprise 24h, Hobby 45m).")
	flag.DurationVar(&shutdownWarning, "shutdown-warning", controllers.DefaultShutdownWarning, "How long before a Sandbox's spec.shutdownTime the ShutdownWarning event is emitted.")
	flag.Float64Var(&kubeQPS, "kube-api-qps", 0, "Client-side limit of Kubernetes API requests per second; 0 keeps controller-runtime's default of none (the API server's priority and fairness applies), a negative value also disables it.")
	flag.IntVar(&kubeBurst, "kube-api-burst", 0, "Burst allowed above --kube-api-qps when that is positive (default twice the QPS).")
	opts := zap.Options{Development: false}
	opts.BindFlags(flag.CommandLine)
	flag.Parse()
	ctrl.SetLogger(zap.New(zap.UseFlagOptions(&opts)))
	log := ctrl.Log.WithName("setup")

	token, err := readToken(tokenFile)
	if err != nil {
		fmt.Fprintln(os.Stderr, "error:", err)
		os.Exit(2)
	}
	vcfg := vercel.Config{
		BaseURL:           vercelURL,
		Token:             token,
		TeamID:            teamID,
		ProjectID:         projectID,
		RequestsPerMinute: requestsPerMinute,
		UserAgent:         "sandbox-controller",
	}
	// Checked before connecting to Kubernetes, so a bad flag fails at once;
	// controllers.SetupWithManager builds the client the controllers use.
	if _, err := vercel.New(vcfg); err != nil {
		fmt.Fprintln(os.Stderr, "error: Vercel client:", err)
		os.Exit(2)
	}

	scheme := runtime.NewScheme()
	utilruntime.Must(clientgoscheme.AddToScheme(scheme))
	utilruntime.Must(sandboxv1.AddToScheme(scheme))
	restConfig := ctrl.GetConfigOrDie()
	if kubeQPS != 0 {
		restConfig.QPS, restConfig.Burst = float32(kubeQPS), kubeBurst
		if kubeBurst <= 0 {
			restConfig.Burst = max(1, int(2*kubeQPS))
		}
	}
	mgr, err := ctrl.NewManager(restConfig, ctrl.Options{
		Scheme:                 scheme,
		Metrics:                metricsserver.Options{BindAddress: metricsAddr},
		HealthProbeBindAddress: probeAddr,
		LeaderElection:         leaderElect,
		LeaderElectionID:       "sandbox-controller.sandbox.sentry.io",
	})
	if err != nil {
		log.Error(err, "Failed to create the manager")
		os.Exit(1)
	}
	if err := controllers.SetupWithManager(mgr, vcfg, controllers.Options{
		MaxConcurrentReconciles: concurrency,
		VercelInFlight:          vercelInFlight,
		PollInterval:            pollInterval,
		BackoffCap:              backoffCap,
		MaxSessionLength:        maxSessionLength,
		ShutdownWarning:         shutdownWarning,
	}); err != nil {
		log.Error(err, "Failed to set up the controllers")
		os.Exit(1)
	}
	if err := mgr.AddHealthzCheck("healthz", healthz.Ping); err != nil {
		log.Error(err, "Failed to add the health check")
		os.Exit(1)
	}
	if err := mgr.AddReadyzCheck("readyz", healthz.Ping); err != nil {
		log.Error(err, "Failed to add the ready check")
		os.Exit(1)
	}
	log.Info("Starting manager", "vercelAPI", vercelURL, "team", teamID, "project", projectID)
	if err := mgr.Start(ctrl.SetupSignalHandler()); err != nil {
		log.Error(err, "Manager stopped with an error")
		os.Exit(1)
	}
}

// readToken returns the Vercel token from the file, else $VERCEL_TOKEN. The
// manager refuses to start without one rather than failing every reconcile.
func readToken(file string) (string, error) {
	if file != "" {
		b, err := os.ReadFile(file)
		if err != nil {
			return "", fmt.Errorf("read --vercel-token-file: %w", err)
		}
		if t := strings.TrimSpace(string(b)); t != "" {
			return t, nil
		}
		return "", fmt.Errorf("--vercel-token-file %s is empty", file)
	}
	if t := strings.TrimSpace(os.Getenv("VERCEL_TOKEN")); t != "" {
		return t, nil
	}
	return "", errors.New("no Vercel credentials: set VERCEL_TOKEN or --vercel-token-file (and --vercel-team-id, --vercel-project-id), or run `make dev` for the local emulator")
}
