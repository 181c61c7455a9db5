// Command manager runs the sandbox-controller: the reconcilers of the
// sandbox.sentry.io kinds, against the Kubernetes API server in KUBECONFIG (or
// in-cluster config) and the Vercel Sandbox API.
package main

import (
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/apimachinery/pkg/util/validation"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/certwatcher"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	"sigs.k8s.io/controller-runtime/pkg/metrics/filters"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	sandboxv1 "github.com/getsentry/sandbox-controller/api/v1alpha1"
	"github.com/getsentry/sandbox-controller/controllers"
	"github.com/getsentry/sandbox-controller/internal/leaderfence"
	"github.com/getsentry/sandbox-controller/internal/notify"
	"github.com/getsentry/sandbox-controller/internal/vercel"
	"github.com/getsentry/sandbox-controller/internal/version"
)

func main() {
	var (
		metricsAddr, probeAddr string
		metrics                metricsFlags
		leaderElect            bool
		leaderElection         leaderElectionFlags
		gracefulShutdown       time.Duration
		vercelURL, tokenFile   string
		teamID, projectID      string
		requestsPerMinute      int
		pollInterval           time.Duration
		backoffCap             time.Duration
		concurrency            int
		vercelInFlight         int
		vercelReserved         int
		vercelTimeouts         vercelTimeoutFlags
		maxSessionLength       time.Duration
		shutdownWarning        time.Duration
		referenceDeadline      time.Duration
		kubeQPS                float64
		kubeBurst              int
		clusterID              string
		shard                  controllers.Shard
		maxProbesPerNamespace  int
		digestKey              controllers.DigestKeySecret
	)
	flag.StringVar(&metricsAddr, "metrics-bind-address", ":8443", "Address the Prometheus metrics endpoint binds to (HTTPS unless --metrics-secure=false); 0 disables it.")
	flag.BoolVar(&metrics.secure, "metrics-secure", true, "Serve metrics over HTTPS, only to callers whose token the API server authenticates and authorizes for GET /metrics. --metrics-secure=false serves plain HTTP to anyone who can connect.")
	flag.StringVar(&metrics.certPath, "metrics-cert-path", "", "Directory holding the metrics server's certificate and key (reloaded when they change); a self-signed certificate when unset.")
	flag.StringVar(&metrics.certName, "metrics-cert-name", "tls.crt", "File name of the metrics server certificate in --metrics-cert-path.")
	flag.StringVar(&metrics.certKey, "metrics-cert-key", "tls.key", "File name of the metrics server key in --metrics-cert-path.")
	flag.BoolVar(&metrics.enableHTTP2, "enable-http2", false, "Allow HTTP/2 on the metrics server. Off by default because of the HTTP/2 stream cancellation and rapid reset CVEs (CVE-2023-44487, CVE-2023-39325).")
	flag.StringVar(&probeAddr, "health-probe-bind-address", ":8081", "Address the /healthz and /readyz probes bind to.")
	flag.BoolVar(&leaderElect, "leader-elect", false, "Elect a leader so that only one manager replica reconciles at a time.")
	flag.StringVar(&leaderElection.namespace, "leader-election-namespace", "", "Namespace of the leader election Lease; in a cluster it defaults to the manager's own namespace, out of a cluster it is required with --leader-elect.")
	flag.DurationVar(&leaderElection.leaseDuration, "leader-election-lease-duration", 15*time.Second, "How long a standby replica waits after the leader's last renewal before taking over; also the takeover time when the leader dies without releasing the lease.")
	flag.DurationVar(&leaderElection.renewDeadline, "leader-election-renew-deadline", 10*time.Second, "How long the leader keeps retrying to renew the lease before it gives up leadership and exits. Once its last renewal is this old, the leader also stops sending Vercel mutations and Kubernetes writes (a stopped or cut-off leader resuming after another took over); keep it below --leader-election-lease-duration by the longest expected request transit.")
	flag.DurationVar(&leaderElection.retryPeriod, "leader-election-retry-period", 2*time.Second, "How often replicas try to acquire or renew the lease.")
	flag.DurationVar(&gracefulShutdown, "graceful-shutdown-timeout", 30*time.Second, "On SIGTERM, how long in-flight reconciles get to finish before the manager releases the lease and exits; keep the pod's terminationGracePeriodSeconds above it.")
	flag.StringVar(&vercelURL, "vercel-api-url", "https://api.vercel.com", "Base URL of the Vercel Sandbox API (the emulator's URL when running locally).")
	flag.StringVar(&tokenFile, "vercel-token-file", "", "File holding the Vercel token (a mounted Secret), re-read every few seconds and after Vercel rejects the token, so a rotated Secret is used without a restart; the VERCEL_TOKEN environment variable is used when unset.")
	flag.StringVar(&teamID, "vercel-team-id", os.Getenv("VERCEL_TEAM_ID"), "Vercel team id (default $VERCEL_TEAM_ID).")
	flag.StringVar(&projectID, "vercel-project-id", os.Getenv("VERCEL_PROJECT_ID"), "Vercel project id (default $VERCEL_PROJECT_ID).")
	flag.IntVar(&requestsPerMinute, "vercel-requests-per-minute", 10000, "Client-side budget of Vercel control-plane requests per minute (Vercel Pro allows 10,000).")
	flag.DurationVar(&pollInterval, "poll-interval", time.Minute, "How often a running sandbox is observed for changes made outside the operator (jittered by up to 10%).")
	flag.DurationVar(&backoffCap, "backoff-cap", time.Minute, "Longest delay between retries after an error.")
	flag.IntVar(&concurrency, "max-concurrent-reconciles", 32, "Reconciles of each kind that run in parallel. Beyond --vercel-max-in-flight, the extra ones do their Kubernetes writes while others wait on Vercel.")
	flag.IntVar(&vercelInFlight, "vercel-max-in-flight", 32, "Vercel requests in flight at once, shared by all kinds (0: no bound); --vercel-requests-per-minute paces them too.")
	flag.IntVar(&vercelReserved, "vercel-reserved-in-flight", 1, "Vercel in-flight slots added to --vercel-max-in-flight for deletes, session stops and session extensions only, so that they never queue behind creates.")
	flag.DurationVar(&vercelTimeouts.call, "vercel-call-timeout", vercel.DefaultCallTimeout, "Deadline of each Vercel call, its retries included (and of a stream's response headers); a call that runs out is retried with backoff.")
	flag.DurationVar(&vercelTimeouts.streamIdle, "vercel-stream-idle-timeout", vercel.DefaultStreamIdleTimeout, "A Vercel stream (command output, a file read) that delivers no byte for this long is ended.")
	flag.DurationVar(&vercelTimeouts.stall, "vercel-stall-threshold", 5*time.Minute, "/healthz fails once every Vercel in-flight slot has been held this long, so that the kubelet restarts a wedged manager (0: no such check).")
	flag.DurationVar(&vercelTimeouts.reconcile, "reconcile-timeout", controllers.DefaultReconcileTimeout, "Deadline of each reconcile; must be longer than --vercel-call-timeout.")
	flag.DurationVar(&maxSessionLength, "max-session-length", controllers.DefaultMaxSessionLength, "The Vercel plan's maximum session length: heartbeats never extend a session beyond it (Pro and Enterprise 24h, Hobby 45m).")
	flag.DurationVar(&shutdownWarning, "shutdown-warning", controllers.DefaultShutdownWarning, "How long before a Sandbox's spec.shutdownTime the ShutdownWarning event is emitted.")
	flag.DurationVar(&referenceDeadline, "reference-deadline", controllers.DefaultReferenceDeadline, "How long a Sandbox's snapshotRef or a recipe's baseSnapshotRef may name a SandboxSnapshot that does not exist, is Failed, or (for bases) forms a cycle, before the object is Failed.")
	flag.Float64Var(&kubeQPS, "kube-api-qps", 0, "Client-side limit of Kubernetes API requests per second; 0 keeps controller-runtime's default of none (the API server's priority and fairness applies), a negative value also disables it.")
	flag.IntVar(&kubeBurst, "kube-api-burst", 0, "Burst allowed above --kube-api-qps when that is positive (default twice the QPS).")
	flag.IntVar(&shard.Count, "shards", 1, "Managers the namespaces are split between, by FNV-1a of the namespace name modulo this count; each runs with its own --shard-index and its own leader election Lease. 1: this manager reconciles every namespace.")
	flag.IntVar(&shard.Index, "shard-index", 0, "The shard this manager reconciles, in [0, --shards): the namespaces whose hash modulo --shards is this index.")
	flag.IntVar(&maxProbesPerNamespace, "max-probes-per-namespace", controllers.DefaultMaxProbesPerNamespace, "Exec readiness probe commands that run at once in one namespace; a Sandbox whose probe is due waits for one of them to end. Bounds the Vercel requests one namespace's probes cost (each running probe is polled).")
	var notifyOpts notify.Options
	flag.IntVar(&notifyOpts.Workers, "notify-workers", 4, "Webhook notifications delivered in parallel; each namespace has at most one in flight.")
	flag.IntVar(&notifyOpts.QueueSize, "notify-queue-size", 1000, "Webhook notifications waiting for delivery at most; when full, the oldest waiting one is dropped.")
	flag.DurationVar(&notifyOpts.Timeout, "notify-timeout", 5*time.Second, "Deadline of each webhook delivery attempt.")
	flag.DurationVar(&notifyOpts.MaxAge, "notify-max-age", 15*time.Minute, "How long a webhook notification is retried before it is dropped.")
	flag.Func("notify-allow-destinations", "Comma-separated internal destinations webhook receivers may use: CIDRs, IP addresses, host names and *.domain wildcards (e.g. 10.96.0.0/12 or *.notify-receivers.svc.cluster.local; a listed name may resolve to any address). Every other address that is not public unicast (loopback, link-local, private, CGNAT, ...) is refused when dialled. Default: none.", func(v string) error {
		a, err := notify.ParseAllowList(strings.Split(v, ","))
		notifyOpts.Allow = a
		return err
	})
	flag.StringVar(&clusterID, "cluster-id", "", "Names this cluster in the owner tags of every Vercel sandbox the manager creates or adopts, and in recipe builder names, so that clusters sharing one Vercel project never touch each other's sandboxes (1-63 characters of [A-Za-z0-9._-]). Default: the UID of the kube-system namespace. Keep it stable: sandboxes tagged with another id are not deleted.")
	flag.StringVar(&digestKey.Namespace, "manager-namespace", "", "The manager's own namespace, where the Secret named by --status-digest-key-secret is (the Deployment passes its pod's namespace). Default: the pod's namespace from its ServiceAccount mount, else $POD_NAMESPACE, else sandbox-controller-system.")
	flag.StringVar(&digestKey.Name, "status-digest-key-secret", controllers.DigestKeySecretName, "Secret in --manager-namespace holding the key of the Secret-value digests in Sandbox status: installed empty with the manager, which writes a random key into it on its first start (it may only get and update this Secret).")
	showVersion := flag.Bool("version", false, "Print the version and the commit this manager was built from, and exit.")
	opts := zap.Options{Development: false}
	opts.BindFlags(flag.CommandLine)
	flag.Parse()
	build := version.Get()
	if *showVersion {
		fmt.Println("manager", build)
		os.Exit(0)
	}
	ctrl.SetLogger(zap.New(zap.UseFlagOptions(&opts)))
	log := ctrl.Log.WithName("setup")

	if leaderElect {
		if err := leaderElection.validate(); err != nil {
			fmt.Fprintln(os.Stderr, "error:", err)
			os.Exit(2)
		}
	}
	if err := vercelTimeouts.validate(); err != nil {
		fmt.Fprintln(os.Stderr, "error:", err)
		os.Exit(2)
	}
	if vercelReserved < 0 {
		fmt.Fprintln(os.Stderr, "error: --vercel-reserved-in-flight must not be negative")
		os.Exit(2)
	}
	if clusterID != "" {
		if err := controllers.ValidateClusterID(clusterID); err != nil {
			fmt.Fprintln(os.Stderr, "error: --cluster-id:", err)
			os.Exit(2)
		}
	}
	if digestKey.Namespace == "" {
		digestKey.Namespace = controllers.ManagerNamespace()
	}
	if errs := validation.IsDNS1123Label(digestKey.Namespace); len(errs) > 0 {
		fmt.Fprintf(os.Stderr, "error: --manager-namespace %q: %s\n", digestKey.Namespace, strings.Join(errs, "; "))
		os.Exit(2)
	}
	if errs := validation.IsDNS1123Subdomain(digestKey.Name); len(errs) > 0 {
		fmt.Fprintf(os.Stderr, "error: --status-digest-key-secret %q: %s\n", digestKey.Name, strings.Join(errs, "; "))
		os.Exit(2)
	}
	if err := shard.Validate(); err != nil {
		fmt.Fprintln(os.Stderr, "error: --shards/--shard-index:", err)
		os.Exit(2)
	}
	if maxProbesPerNamespace < 1 {
		fmt.Fprintln(os.Stderr, "error: --max-probes-per-namespace must be at least 1")
		os.Exit(2)
	}
	if gracefulShutdown < 0 {
		fmt.Fprintln(os.Stderr, "error: --graceful-shutdown-timeout must not be negative")
		os.Exit(2)
	}
	metricsOpts, metricsCertWatcher, err := metrics.serverOptions(metricsAddr)
	if err != nil {
		fmt.Fprintln(os.Stderr, "error:", err)
		os.Exit(2)
	}

	token, err := readToken(tokenFile)
	if err != nil {
		fmt.Fprintln(os.Stderr, "error:", err)
		os.Exit(2)
	}
	vcfg := vercel.Config{
		BaseURL:           vercelURL,
		TeamID:            teamID,
		ProjectID:         projectID,
		RequestsPerMinute: requestsPerMinute,
		CallTimeout:       vercelTimeouts.call,
		StreamIdleTimeout: vercelTimeouts.streamIdle,
		UserAgent:         "sandbox-controller",
	}
	if tokenFile != "" {
		vcfg.TokenFile = tokenFile // the client reads it again when it changes
	} else {
		vcfg.Token = token
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
	// A leader that lost its Lease without noticing (stopped, or cut from
	// the API server) must not act until client-go ends it: past the renew
	// deadline without a renewal, its Vercel mutations and Kubernetes
	// writes are refused (internal/leaderfence).
	var fence *leaderfence.Fence
	var lock resourcelock.Interface
	var lockRecorders *lateRecorders
	if leaderElect {
		fence = leaderfence.New(leaderElection.renewDeadline)
		// The Lease carries the leader's version (kubectl sandbox version).
		if lock, lockRecorders, err = fencedLeaderElection(restConfig, leaderElection, controllers.LeaderElectionID(shard), build.LeaseLabels(), fence); err != nil {
			log.Error(err, "Failed to create the leader election lock")
			os.Exit(1)
		}
	}
	mgr, err := ctrl.NewManager(restConfig, ctrl.Options{
		Scheme:                  scheme,
		Metrics:                 metricsOpts,
		HealthProbeBindAddress:  probeAddr,
		GracefulShutdownTimeout: &gracefulShutdown,
		LeaderElection:          leaderElect,
		LeaderElectionID:        controllers.LeaderElectionID(shard),
		LeaderElectionNamespace: leaderElection.namespace,
		LeaseDuration:           &leaderElection.leaseDuration,
		RenewDeadline:           &leaderElection.renewDeadline,
		RetryPeriod:             &leaderElection.retryPeriod,
		// A replica stopped by a rolling update or `kubectl delete pod`
		// releases the lease once its reconciles have stopped, so the standby
		// takes over within a retry period instead of a lease duration. Safe
		// because main exits as soon as mgr.Start returns.
		LeaderElectionReleaseOnCancel:       true,
		LeaderElectionResourceLockInterface: lock,
		Cache:                               controllers.CacheOptions(),
	})
	if err != nil {
		log.Error(err, "Failed to create the manager")
		os.Exit(1)
	}
	var vercelGuard func(*http.Request) error
	if fence != nil {
		lockRecorders.bind(mgr)
		vercelGuard = fence.VercelGuard
	}
	if metricsCertWatcher != nil {
		if err := mgr.Add(metricsCertWatcher); err != nil {
			log.Error(err, "Failed to add the metrics certificate watcher")
			os.Exit(1)
		}
	}
	if err := controllers.SetupWithManager(mgr, vcfg, controllers.Options{
		MaxConcurrentReconciles: concurrency,
		VercelInFlight:          vercelInFlight,
		VercelReservedInFlight:  vercelReserved,
		VercelStallThreshold:    vercelTimeouts.stall,
		VercelGuard:             vercelGuard,
		ReconcileTimeout:        vercelTimeouts.reconcile,
		PollInterval:            pollInterval,
		BackoffCap:              backoffCap,
		MaxSessionLength:        maxSessionLength,
		ShutdownWarning:         shutdownWarning,
		ReferenceDeadline:       referenceDeadline,
		Notify:                  notifyOpts,
		ClusterID:               clusterID,
		Shard:                   shard,
		MaxProbesPerNamespace:   maxProbesPerNamespace,
		DigestKeySecret:         digestKey,
	}); err != nil {
		log.Error(err, "Failed to set up the controllers")
		os.Exit(1)
	}
	// Liveness is Ping plus controllers.SetupWithManager's check that the
	// Vercel in-flight slots are not all stuck (--vercel-stall-threshold);
	// readiness is Ping plus its check that Vercel accepts the credentials
	// and knows the team and project.
	if err := mgr.AddHealthzCheck("healthz", healthz.Ping); err != nil {
		log.Error(err, "Failed to add the health check")
		os.Exit(1)
	}
	if err := mgr.AddReadyzCheck("readyz", healthz.Ping); err != nil {
		log.Error(err, "Failed to add the ready check")
		os.Exit(1)
	}
	log.Info("Starting manager", "version", build.Version, "revision", build.Revision, "commitTime", build.Time, "goVersion", build.GoVersion, "vercelAPI", vercelURL, "team", teamID, "project", projectID, "shard", shard.String(), "notifyAllowDestinations", notifyOpts.Allow.String(), "managerNamespace", digestKey.Namespace)
	if err := mgr.Start(ctrl.SetupSignalHandler()); err != nil {
		log.Error(err, "Manager stopped with an error")
		os.Exit(1)
	}
}

// metricsFlags configure the metrics server as kubebuilder's scaffold does:
// HTTPS behind the API server's TokenReview and SubjectAccessReview.
type metricsFlags struct {
	secure                      bool
	certPath, certName, certKey string
	enableHTTP2                 bool
}

// serverOptions returns the metrics server's options, and the watcher of the
// given certificate (nil for a self-signed one), which the manager must run.
func (f metricsFlags) serverOptions(bindAddress string) (metricsserver.Options, *certwatcher.CertWatcher, error) {
	opts := metricsserver.Options{BindAddress: bindAddress, SecureServing: f.secure}
	if !f.enableHTTP2 {
		// HTTP/2 stream cancellation and rapid reset (CVE-2023-44487,
		// CVE-2023-39325) let a client exhaust the server; HTTP/1.1 is
		// plenty for a scrape.
		opts.TLSOpts = append(opts.TLSOpts, func(c *tls.Config) { c.NextProtos = []string{"http/1.1"} })
	}
	if !f.secure || bindAddress == "0" {
		return opts, nil, nil
	}
	// Every scrape is authenticated (TokenReview) and authorized
	// (SubjectAccessReview of GET on the non-resource URL /metrics) by the API
	// server: config/rbac/metrics_auth_role.yaml lets the manager ask,
	// metrics_reader_role.yaml is what a scraper binds to.
	opts.FilterProvider = filters.WithAuthenticationAndAuthorization
	if f.certPath == "" {
		return opts, nil, nil // controller-runtime generates a self-signed certificate
	}
	w, err := certwatcher.New(filepath.Join(f.certPath, f.certName), filepath.Join(f.certPath, f.certKey))
	if err != nil {
		return opts, nil, fmt.Errorf("metrics certificate in %s: %w", f.certPath, err)
	}
	opts.TLSOpts = append(opts.TLSOpts, func(c *tls.Config) { c.GetCertificate = w.GetCertificate })
	return opts, w, nil
}

// vercelTimeoutFlags are the deadlines of Vercel calls and reconciles.
type vercelTimeoutFlags struct {
	call, streamIdle, stall, reconcile time.Duration
}

// validate refuses deadlines that would turn a check off by accident or
// cut every reconcile short.
func (f vercelTimeoutFlags) validate() error {
	switch {
	case f.call <= 0:
		return errors.New("--vercel-call-timeout must be positive")
	case f.streamIdle <= 0:
		return errors.New("--vercel-stream-idle-timeout must be positive")
	case f.stall < 0:
		return errors.New("--vercel-stall-threshold must not be negative (0 turns the check off)")
	case f.stall > 0 && f.stall <= f.call:
		return errors.New("--vercel-stall-threshold must be longer than --vercel-call-timeout: a slot is held up to a call timeout in normal operation")
	case f.reconcile <= f.call:
		return errors.New("--reconcile-timeout must be longer than --vercel-call-timeout")
	}
	return nil
}

// leaderElectionFlags are the lease timings of client-go's leader election,
// with the defaults of the Kubernetes components (15s, 10s, 2s).
type leaderElectionFlags struct {
	namespace                                 string
	leaseDuration, renewDeadline, retryPeriod time.Duration
}

// inClusterNamespaceFile is where a pod reads its namespace (the
// ServiceAccount mount); controller-runtime puts the Lease there by default.
const inClusterNamespaceFile = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"

// validate refuses what client-go or controller-runtime would reject only
// once the manager runs, with the flag's name in the message.
func (f leaderElectionFlags) validate() error {
	if f.namespace == "" {
		if _, err := os.Stat(inClusterNamespaceFile); err != nil {
			return errors.New("--leader-elect out of a cluster needs --leader-election-namespace (the namespace of the leader election Lease)")
		}
	}
	switch {
	case f.retryPeriod <= 0:
		return errors.New("--leader-election-retry-period must be positive")
	case float64(f.renewDeadline) <= 1.2*float64(f.retryPeriod): // client-go's leaderelection.JitterFactor
		return errors.New("--leader-election-renew-deadline must be more than 1.2 times --leader-election-retry-period")
	case f.leaseDuration <= f.renewDeadline:
		return errors.New("--leader-election-lease-duration must be longer than --leader-election-renew-deadline")
	}
	return nil
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
