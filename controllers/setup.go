package controllers

import (
	"cmp"
	"context"
	"fmt"
	"net/http"
	"regexp"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/config"

	"github.com/getsentry/sandbox-controller/internal/httplimit"
	"github.com/getsentry/sandbox-controller/internal/metrics"
	"github.com/getsentry/sandbox-controller/internal/notify"
	"github.com/getsentry/sandbox-controller/internal/vercel"
)

// Options are the manager's knobs for the three controllers (cmd/manager's
// flags); zero values take each reconciler's default.
type Options struct {
	MaxConcurrentReconciles int
	// VercelInFlight bounds the Vercel requests in flight across all kinds.
	VercelInFlight int
	// VercelReservedInFlight adds in-flight slots that only deletes, stops
	// and session extensions may use (internal/httplimit's reserved lane).
	VercelReservedInFlight int
	// VercelStallThreshold makes /healthz fail once every Vercel in-flight
	// slot has been held this long; 0 adds no check.
	VercelStallThreshold time.Duration
	// VercelGuard, when set, is asked before every Vercel request of the
	// manager's client and of each SandboxClass's; an error fails the
	// request unsent. cmd/manager refuses mutations with it once the
	// leader election Lease may have passed to another replica.
	VercelGuard func(*http.Request) error
	// ReconcileTimeout bounds each reconcile (controller-runtime's
	// ReconciliationTimeout) unless the manager's options set one; 0 means
	// DefaultReconcileTimeout. Keep it above the Vercel call timeout.
	ReconcileTimeout time.Duration
	PollInterval     time.Duration
	BackoffCap       time.Duration
	MaxSessionLength time.Duration
	ShutdownWarning  time.Duration
	// ReferenceDeadline: see SandboxReconciler.ReferenceDeadline.
	ReferenceDeadline time.Duration
	// Notify configures the delivery of webhook notifications (workers,
	// queue size, request timeout, the internal destinations allowed); its
	// Resolve and Recorder are set here, to the namespaces'
	// sandbox-notifications ConfigMaps and the manager's events.
	Notify notify.Options
	// ClusterID names this cluster in the owner tags of every Vercel
	// sandbox and in builder names, so that clusters sharing a Vercel
	// project never touch each other's. Empty: the UID of the kube-system
	// namespace (ClusterIDFromKubeSystem).
	ClusterID string
	// Shard is the part of the cluster this manager reconciles: the
	// namespaces whose ShardOf is Shard.Index. The zero value is all of it.
	Shard Shard
	// MaxProbesPerNamespace bounds the exec readiness probe commands that
	// run at once in one namespace (SandboxReconciler.MaxProbesPerNamespace).
	MaxProbesPerNamespace int
	// DigestKeySecret is where the key of the Secret-value digests in
	// Sandbox status is kept (digest_key.go).
	DigestKeySecret DigestKeySecret

	// Test seams: the controller suite (controllers/suite_test.go) runs
	// this same wiring with them set; their zero values are what
	// cmd/manager runs.

	// WrapClient, when set, wraps the client the controllers read and
	// write Kubernetes objects with (the suite counts the writes per
	// object).
	WrapClient func(client.Client) client.Client
	// SnapshotClock, when set, is the SandboxSnapshot controller's clock
	// (expirationSeconds, maxAgeSeconds); nil is time.Now.
	SnapshotClock func() time.Time
	// ClassSecretReload, when set, is how often a SandboxClass's Secret is
	// read again (ClassClients.SecretReload); 0 is its default.
	ClassSecretReload time.Duration
	// RouteBase, when set, replaces the Vercel API base URL as the route
	// base of HTTP readiness probes (SandboxReconciler.RouteBase): the
	// suite's Vercel URL is a recording proxy, while the emulator serves
	// the routes on its own URL.
	RouteBase string
}

// +kubebuilder:rbac:groups="",resources=namespaces,verbs=get

// ClusterIDFromKubeSystem is the default cluster id: the UID of the
// kube-system namespace, which every cluster has and which stays the same
// for the cluster's life.
func ClusterIDFromKubeSystem(ctx context.Context, c client.Reader) (string, error) {
	ns := &corev1.Namespace{}
	if err := c.Get(ctx, types.NamespacedName{Name: metav1.NamespaceSystem}, ns); err != nil {
		return "", fmt.Errorf("derive the cluster id from the kube-system namespace's UID (or set --cluster-id): %w", err)
	}
	return string(ns.UID), nil
}

// ValidateClusterID refuses cluster ids that cannot be a Vercel tag value.
func ValidateClusterID(id string) error {
	if !clusterIDPattern.MatchString(id) {
		return fmt.Errorf("cluster id %q: use 1 to 63 characters of [A-Za-z0-9._-]", id)
	}
	return nil
}

var clusterIDPattern = regexp.MustCompile(`^[A-Za-z0-9._-]{1,63}$`)

// instrumentedClient is a Vercel client from cfg over hc that reports every
// request to health and to the metrics: the manager's own client and each
// SandboxClass's (ClassClients.apiOf) are built the same way.
func instrumentedClient(cfg vercel.Config, hc *http.Client, health *VercelHealth) (*vercel.Client, error) {
	cfg.HTTPClient = hc
	cfg.OnRequest = health.ObserveRequest
	metrics.InstrumentVercel(&cfg)
	return vercel.New(cfg)
}

// DefaultReconcileTimeout bounds a reconcile: a few Vercel calls of at most
// vercel.DefaultCallTimeout each, and Kubernetes writes.
const DefaultReconcileTimeout = 2 * time.Minute

// withReconcileTimeout hands the controllers built on it a default
// ReconciliationTimeout: the builder reads the manager's controller options.
type withReconcileTimeout struct {
	ctrl.Manager
	timeout time.Duration
	// sharded: shards of one cluster may run in one process (the
	// benchmark's two-shard arm), each with controllers of the same names.
	sharded bool
}

func (m withReconcileTimeout) GetControllerOptions() config.Controller {
	o := m.Manager.GetControllerOptions()
	if m.sharded {
		o.SkipNameValidation = ptr.To(true)
	}
	if o.ReconciliationTimeout == 0 {
		o.ReconciliationTimeout = m.timeout
	}
	return o
}

// withClient hands the controllers built on it Options.WrapClient's client
// instead of the manager's.
type withClient struct {
	ctrl.Manager
	client client.Client
}

func (m withClient) GetClient() client.Client { return m.client }

// SetupWithManager builds the Vercel client from vc — bounded in flight with
// deadlines, reporting to VercelHealth and the metrics — and registers the
// Sandbox, SandboxSnapshot, SandboxFork and SandboxQuota controllers (each reconcile bounded
// by ReconcileTimeout), the metrics, and the stalled-slots health check with
// mgr. It is what cmd/manager runs; `make dev` and the benchmark call it too,
// so they run the same thing.
func SetupWithManager(mgr ctrl.Manager, vc vercel.Config, o Options) error {
	classes := newClassClients(mgr, vc, o)
	hc, err := vercelTransport(mgr, vc, o)
	if err != nil {
		return err
	}
	if o.ReconcileTimeout == 0 {
		o.ReconcileTimeout = DefaultReconcileTimeout
	}
	if err := o.Shard.Validate(); err != nil {
		return err
	}
	mgr = withReconcileTimeout{Manager: mgr, timeout: o.ReconcileTimeout, sharded: o.Shard.Sharded()}
	if o.WrapClient != nil {
		mgr = withClient{Manager: mgr, client: o.WrapClient(mgr.GetClient())}
	}
	api, health, err := checkedVercelClient(mgr, vc, hc)
	if err != nil {
		return err
	}
	notifier, err := addNotifier(mgr, o.Notify, notificationOutbox(mgr, o))
	if err != nil {
		return err
	}
	if o.ClusterID, err = clusterID(mgr, o.ClusterID); err != nil {
		return err
	}
	deps := controllerDeps{api: api, health: health, classes: classes, notifier: notifier, quota: NewQuotaLedger(mgr.GetCache())}
	if err := setupControllers(mgr, vc, o, deps); err != nil {
		return err
	}
	if err := metrics.SetupWithManager(mgr, o.Shard.Owns); err != nil {
		return fmt.Errorf("set up the metrics: %w", err)
	}
	return nil
}

// newClassClients is the source of the SandboxClasses' Vercel clients.
func newClassClients(mgr ctrl.Manager, vc vercel.Config, o Options) *ClassClients {
	// Each SandboxClass gets a client like the manager's own, with its own
	// credentials, in-flight slots, rate and retry budget and health.
	classBase := vc
	classBase.HTTPClient, classBase.OnRequest, classBase.OnLimiterWait = nil, nil, nil
	return &ClassClients{
		Client:    mgr.GetClient(),
		APIReader: mgr.GetAPIReader(),
		Base:      classBase,
		Limits:    httplimit.Options{MaxInFlight: o.VercelInFlight, Reserved: o.VercelReservedInFlight, Guard: o.VercelGuard},

		SecretReload: o.ClassSecretReload,
	}
}

// vercelTransport is the HTTP client of the manager's Vercel client:
// bounded in flight, with deadlines, and, with a VercelStallThreshold, a
// health check that fails once every slot has been held that long.
func vercelTransport(mgr ctrl.Manager, vc vercel.Config, o Options) (*http.Client, error) {
	hc, slots := httplimit.NewClient(httplimit.Options{
		MaxInFlight: o.VercelInFlight,
		Reserved:    o.VercelReservedInFlight,
		Guard:       o.VercelGuard,
		// The same convention as vc.CallTimeout: 0 default, negative none.
		ResponseHeaderTimeout: vc.CallTimeout,
	})
	if o.VercelStallThreshold > 0 {
		if err := mgr.AddHealthzCheck("vercel-in-flight", func(*http.Request) error {
			return slots.Stalled(o.VercelStallThreshold)
		}); err != nil {
			return nil, fmt.Errorf("add the Vercel in-flight health check: %w", err)
		}
	}
	return hc, nil
}

// checkedVercelClient is the manager's Vercel client over hc, reporting to
// its health, whose team, project and credentials the manager checks.
func checkedVercelClient(mgr ctrl.Manager, vc vercel.Config, hc *http.Client) (*vercel.Client, *VercelHealth, error) {
	health := newVercelHealth()
	api, err := instrumentedClient(vc, hc, health)
	if err != nil {
		return nil, nil, fmt.Errorf("vercel client: %w", err)
	}
	// The team and project are checked at start: with a wrong project id
	// every delete answers 404, which must not pass for "deleted".
	if err := mgr.Add(&projectVerifier{api: api, health: health, first: time.Second, cap: time.Minute, idle: 5 * time.Second}); err != nil {
		return nil, nil, fmt.Errorf("add the Vercel project check: %w", err)
	}
	if err := mgr.AddReadyzCheck("vercel-credentials", health.CheckCredentials); err != nil {
		return nil, nil, fmt.Errorf("add the Vercel credentials readiness check: %w", err)
	}
	return api, health, nil
}

// NotificationOutboxName names the ConfigMaps of the manager's namespace
// that keep the notifications waiting for delivery (notify.Outbox); a shard
// has its own, as it has its own leader.
const NotificationOutboxName = "sandbox-notifications-outbox"

// The outbox's ConfigMaps are in the manager's namespace only (the Role this
// marker makes, bound in config/rbac/manager_namespace_role_binding.yaml):
// listed once per start, patched per batch of messages, deleted when emptied.
// +kubebuilder:rbac:groups="",namespace=system,resources=configmaps,verbs=list;create;patch;delete

// notificationOutbox is the notifier's outbox: in the manager's namespace,
// written with the manager's client, listed with its API reader (no
// ConfigMap informer).
func notificationOutbox(mgr ctrl.Manager, o Options) notify.Outbox {
	name := NotificationOutboxName
	if o.Shard.Sharded() {
		name += "-" + o.Shard.String()
	}
	return notify.Outbox{Client: mgr.GetClient(), Reader: mgr.GetAPIReader(), Namespace: o.DigestKeySecret.key().Namespace, Name: name}
}

// addNotifier runs the webhook notifier of no, resolving the namespaces'
// sandbox-notifications ConfigMaps, recording the manager's events and
// keeping its queue in outbox.
func addNotifier(mgr ctrl.Manager, no notify.Options, outbox notify.Outbox) (*notify.Notifier, error) {
	no.Resolve = notify.ConfigMapResolver(mgr.GetAPIReader())
	no.Recorder = mgr.GetEventRecorder("sandbox-controller")
	no.Outbox = &outbox
	notifier := notify.New(no)
	if err := mgr.Add(notifier); err != nil {
		return nil, fmt.Errorf("add the notifier: %w", err)
	}
	return notifier, nil
}

// clusterID is id, else the default (ClusterIDFromKubeSystem), once valid.
func clusterID(mgr ctrl.Manager, id string) (string, error) {
	if id == "" {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		var err error
		if id, err = ClusterIDFromKubeSystem(ctx, mgr.GetAPIReader()); err != nil {
			return "", err
		}
	}
	if err := ValidateClusterID(id); err != nil {
		return "", err
	}
	return id, nil
}

// controllerDeps is what the controllers share: the manager's Vercel client
// and its health, the classes' clients, the notifier and the quota ledger.
type controllerDeps struct {
	api      *vercel.Client
	health   *VercelHealth
	classes  *ClassClients
	notifier *notify.Notifier
	quota    *QuotaLedger
}

// setupControllers registers the six controllers with mgr.
func setupControllers(mgr ctrl.Manager, vc vercel.Config, o Options, d controllerDeps) error {
	if err := (&SandboxReconciler{
		Client:                  mgr.GetClient(),
		APIReader:               mgr.GetAPIReader(),
		Vercel:                  d.api,
		Classes:                 d.classes,
		Recorder:                mgr.GetEventRecorder("sandbox-controller"),
		Notifier:                d.notifier,
		PollInterval:            o.PollInterval,
		MaxConcurrentReconciles: o.MaxConcurrentReconciles,
		BackoffCap:              o.BackoffCap,
		MaxSessionLength:        o.MaxSessionLength,
		ShutdownWarning:         o.ShutdownWarning,
		ReferenceDeadline:       o.ReferenceDeadline,
		VercelHealth:            d.health,
		Quota:                   d.quota,
		ClusterID:               o.ClusterID,
		RouteBase:               cmp.Or(o.RouteBase, vc.BaseURL),
		Shard:                   o.Shard,
		MaxProbesPerNamespace:   o.MaxProbesPerNamespace,
		DigestKeySecret:         o.DigestKeySecret,
	}).SetupWithManager(mgr); err != nil {
		return fmt.Errorf("set up the Sandbox controller: %w", err)
	}
	if err := (&SandboxSnapshotReconciler{
		Client:                  mgr.GetClient(),
		APIReader:               mgr.GetAPIReader(),
		Vercel:                  d.api,
		Classes:                 d.classes,
		Recorder:                mgr.GetEventRecorder("sandboxsnapshot-controller"),
		Quota:                   d.quota,
		Notifier:                d.notifier,
		PollInterval:            o.PollInterval,
		MaxConcurrentReconciles: o.MaxConcurrentReconciles,
		BackoffCap:              o.BackoffCap,
		ReferenceDeadline:       o.ReferenceDeadline,
		ClusterID:               o.ClusterID,
		Shard:                   o.Shard,
		Now:                     o.SnapshotClock,
		DigestKeySecret:         o.DigestKeySecret,
	}).SetupWithManager(mgr); err != nil {
		return fmt.Errorf("set up the SandboxSnapshot controller: %w", err)
	}
	if err := (&SandboxForkReconciler{
		Client:                  mgr.GetClient(),
		Recorder:                mgr.GetEventRecorder("sandboxfork-controller"),
		Notifier:                d.notifier,
		MaxConcurrentReconciles: o.MaxConcurrentReconciles,
		BackoffCap:              o.BackoffCap,
		Classes:                 d.classes,
		Shard:                   o.Shard,
	}).SetupWithManager(mgr); err != nil {
		return fmt.Errorf("set up the SandboxFork controller: %w", err)
	}
	if err := (&SandboxPoolReconciler{
		Client:                  mgr.GetClient(),
		APIReader:               mgr.GetAPIReader(),
		Recorder:                mgr.GetEventRecorder("sandboxpool-controller"),
		MaxConcurrentReconciles: o.MaxConcurrentReconciles,
		BackoffCap:              o.BackoffCap,
		Shard:                   o.Shard,
	}).SetupWithManager(mgr); err != nil {
		return fmt.Errorf("set up the SandboxPool controller: %w", err)
	}
	if err := (&SandboxQuotaReconciler{
		Client:       mgr.GetClient(),
		APIReader:    mgr.GetAPIReader(),
		Recorder:     mgr.GetEventRecorder("sandboxquota-controller"),
		Quota:        d.quota,
		Shard:        o.Shard,
		Notifier:     d.notifier,
		PollInterval: o.PollInterval,
	}).SetupWithManager(mgr); err != nil {
		return fmt.Errorf("set up the SandboxQuota controller: %w", err)
	}
	// SandboxClasses are cluster-scoped: one shard keeps their status and
	// their finalizer (it counts the users of every shard); every shard
	// builds its own clients from the classes' Secrets (ClassClients).
	if !o.Shard.Sharded() || o.Shard.Index == 0 {
		if err := (&SandboxClassReconciler{Client: mgr.GetClient(), Classes: d.classes, Recorder: mgr.GetEventRecorder("sandboxclass-controller")}).SetupWithManager(mgr); err != nil {
			return fmt.Errorf("set up the SandboxClass controller: %w", err)
		}
	}
	return nil
}
