// Package perf is the side-by-side benchmark harness of the operator (issue
// 9). In one process tree it starts an envtest control plane, the Vercel
// emulator in its execute-nothing mode with a configurable per-request
// latency, and the manager with production settings, then measures three
// arms on the same emulator, interleaved round by round so that machine
// noise hits all alike:
//
//   - operator: create N Sandboxes and wait, through a watch, until each is
//     Ready;
//   - direct: create N Vercel sandboxes with the same Go client, request
//     budget and concurrency, and wait until each session runs;
//   - floor: a trivial controller (its own manager, over objects the operator
//     does not see) that marks each Sandbox Ready without calling Vercel —
//     the cost of the API server alone.
//
// After the grid it measures the two other kinds under load: SandboxSnapshot
// captures and one SandboxFork's children (kinds.go). It then keeps N
// Sandboxes running to measure a no-op resync, the steady-state Vercel
// request rate, the manager's memory and CPU, and the recovery from an
// emulated Vercel outage. Run it with `make bench` (cmd/bench); perf_test.go
// runs a short variant as an ordinary test.
package perf

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	sandboxv1 "github.com/getsentry/sandbox-controller/api/v1alpha1"
	"github.com/getsentry/sandbox-controller/controllers"
	"github.com/getsentry/sandbox-controller/internal/httplimit"
	"github.com/getsentry/sandbox-controller/internal/vercel"
	"github.com/getsentry/sandbox-controller/localstack"
	"github.com/getsentry/sandbox-controller/localstack/emulator"
	"github.com/getsentry/sandbox-controller/localstack/procfs"
)

// Config says what to measure. Zero fields take the defaults of
// DefaultConfig.
type Config struct {
	// Sizes and Latencies span the grid of arm runs: every N at every
	// emulated per-request latency.
	Sizes     []int
	Latencies []time.Duration
	// Rounds is how many interleaved rounds of the three arms each grid
	// point runs.
	Rounds int

	// The manager's knobs, as its flags name them. The direct arm uses the
	// same concurrency and request budget.
	Concurrency       int           // --max-concurrent-reconciles
	VercelInFlight    int           // --vercel-max-in-flight
	RequestsPerMinute int           // --vercel-requests-per-minute
	PollInterval      time.Duration // --poll-interval
	BackoffCap        time.Duration // --backoff-cap

	// CreateConcurrency is how many Sandbox creates the harness (the client
	// of the operator) keeps in flight.
	CreateConcurrency int
	// ReadyTimeout bounds the wait for one arm's N objects.
	ReadyTimeout time.Duration

	// IdleN Sandboxes (0: the largest size) stay running for the idle and
	// outage phases. IdleWindow is how long the steady state is observed
	// (0 skips the idle phase); Outage is how long Vercel answers 503 to
	// everything (0 skips the outage phase); RecoveryTimeout bounds the wait
	// for every object to be Synced again.
	IdleN           int
	IdleWindow      time.Duration
	Outage          time.Duration
	RecoveryTimeout time.Duration

	// Snapshots SandboxSnapshots, each capturing one Ready Sandbox, and one
	// SandboxFork of ForkReplicas children (at most 100, the CRD's limit)
	// from one SandboxSnapshot are measured after the grid, at its largest
	// latency (kinds.go); 0 skips either.
	Snapshots    int
	ForkReplicas int

	// Shards, above 1, adds the sharded arm: the operator split between
	// this many managers (--shards), over objects spread across several
	// namespaces. On 2 cores it shows correctness and overhead, not a
	// speed-up: the shards share the CPU, the API server and the Vercel
	// request budget.
	Shards int

	// ManagerBinary, when set, is a built cmd/manager: the idle and outage
	// phases then run it as a child process, so its RSS and CPU are its own.
	// Otherwise they run the in-process manager and report the whole
	// harness process (which also holds the emulator and the watches).
	ManagerBinary string

	// APIServerProfile, when set, is where a CPU profile of kube-apiserver
	// during the first operator arm at the largest N is written (pprof).
	APIServerProfile string

	// TTFC, when set, adds the time-to-first-command phase (ttfc.go) after
	// the kinds; TTFCOnly runs it alone (after the warm-up round).
	TTFC     *TTFCConfig
	TTFCOnly bool

	// AssetsDir holds kube-apiserver and etcd (KUBEBUILDER_ASSETS).
	AssetsDir string
	// RepoRoot is where config/crd/bases is found; "" searches upwards from
	// the working directory for go.mod.
	RepoRoot string
	// Log receives progress lines; nil discards them.
	Log io.Writer
}

// DefaultConfig is the production settings of cmd/manager and the full grid
// of the targets.
func DefaultConfig() Config {
	return Config{
		Sizes:             []int{100, 1000},
		Latencies:         []time.Duration{0, 50 * time.Millisecond},
		Rounds:            3,
		Concurrency:       32,
		VercelInFlight:    32,
		RequestsPerMinute: vercel.DefaultRequestsPerMinute,
		PollInterval:      time.Minute,
		BackoffCap:        time.Minute,
		CreateConcurrency: 16,
		ReadyTimeout:      3 * time.Minute,
		IdleWindow:        time.Minute,
		Outage:            5 * time.Minute,
		Snapshots:         100,
		ForkReplicas:      50,
		Shards:            2,
		RecoveryTimeout:   5 * time.Minute,
	}
}

func (c *Config) defaults() {
	d := DefaultConfig()
	if len(c.Sizes) == 0 {
		c.Sizes = d.Sizes
	}
	if len(c.Latencies) == 0 {
		c.Latencies = []time.Duration{0}
	}
	if c.Rounds <= 0 {
		c.Rounds = d.Rounds
	}
	if c.Concurrency <= 0 {
		c.Concurrency = d.Concurrency
	}
	if c.VercelInFlight == 0 {
		c.VercelInFlight = d.VercelInFlight
	}
	if c.RequestsPerMinute == 0 {
		c.RequestsPerMinute = d.RequestsPerMinute
	}
	if c.PollInterval <= 0 {
		c.PollInterval = d.PollInterval
	}
	if c.BackoffCap <= 0 {
		c.BackoffCap = d.BackoffCap
	}
	if c.CreateConcurrency <= 0 {
		c.CreateConcurrency = d.CreateConcurrency
	}
	if c.ReadyTimeout <= 0 {
		c.ReadyTimeout = d.ReadyTimeout
	}
	if c.RecoveryTimeout <= 0 {
		c.RecoveryTimeout = d.RecoveryTimeout
	}
	if c.IdleN <= 0 {
		for _, n := range c.Sizes {
			c.IdleN = max(c.IdleN, n)
		}
	}
	if c.Log == nil {
		c.Log = io.Discard
	}
}

// Labels that keep the arms apart: the operator's manager never sees floor
// objects and the floor's manager sees nothing else.
const (
	armLabel = "bench.sandbox.sentry.io/arm"
	armFloor = "floor"
)

// harness is one run's environment.
type harness struct {
	cfg Config
	// ttfcPoolSize is the pool arm's size for the running phase (ttfc_pool.go).
	ttfcPoolSize int32
	stack        *localstack.Stack
	rest         *rest.Config
	scheme       *runtime.Scheme
	kube         client.WithWatch
	emu          *emulator.Emulator
	// vercelURL serves the emulator through rec.
	vercelURL string
	rec       *requestRecorder
	emuSrv    *http.Server
	vcfg      vercel.Config // the operator's Vercel client configuration
	direct    *vercel.Client

	kubeconfig string            // admin kubeconfig file, for the child manager
	cpPIDs     map[string]string // kube-apiserver and etcd process ids

	operator *inProcess // nil while the child manager runs, or none
	child    *childManager
	floor    *inProcess
	sharded  *inProcess // the two shards of the sharded arm; nil without

	seq atomic.Int64 // namespace sequence

	profiled bool
}

// Run performs every phase cfg asks for and returns the report.
func Run(ctx context.Context, cfg Config) (_ *Report, err error) {
	cfg.defaults()
	h := &harness{cfg: cfg}
	rep := &Report{Started: time.Now().UTC(), Config: reportConfig(cfg), Host: hostInfo()}
	if err := h.start(ctx); err != nil {
		h.stop()
		return nil, err
	}
	defer h.stop()

	// A small untimed round first: the first reconciles, connections and
	// informers of a process are slower than any later ones.
	h.logf("warm-up round (N=20, not reported)")
	if _, err := h.runGrid(ctx, 20, 0, 1); err != nil {
		return rep, fmt.Errorf("warm-up: %w", err)
	}
	if cfg.TTFCOnly {
		cfg.Sizes, cfg.Snapshots, cfg.ForkReplicas, cfg.IdleWindow, cfg.Outage = nil, 0, 0, 0, 0
	}
	for _, n := range cfg.Sizes {
		for _, lat := range cfg.Latencies {
			r, err := h.runGrid(ctx, n, lat, cfg.Rounds)
			if err != nil {
				return rep, err
			}
			rep.Runs = append(rep.Runs, r)
		}
	}
	if cfg.Snapshots > 0 || cfg.ForkReplicas > 0 {
		kinds, err := h.runKinds(ctx)
		rep.Kinds = kinds
		if err != nil {
			return rep, fmt.Errorf("kinds: %w", err)
		}
	}
	if cfg.TTFC != nil {
		ttfc, err := h.runTTFC(ctx, *cfg.TTFC)
		rep.TTFC = ttfc
		if err != nil {
			return rep, fmt.Errorf("time to first command: %w", err)
		}
	}
	if cfg.IdleWindow > 0 || cfg.Outage > 0 {
		idle, outage, err := h.runIdleAndOutage(ctx)
		rep.Idle, rep.Outage = idle, outage
		if err != nil {
			return rep, err
		}
	}
	rep.ManagerMetrics = h.scrapeManagerMetrics(ctx)
	rep.Finished = time.Now().UTC()
	return rep, nil
}

func (h *harness) logf(format string, args ...any) {
	fmt.Fprintf(h.cfg.Log, "%s bench: %s\n", time.Now().UTC().Format("15:04:05.000"), fmt.Sprintf(format, args...))
}

func (h *harness) start(ctx context.Context) error {
	assets := h.cfg.AssetsDir
	if assets == "" {
		assets = os.Getenv("KUBEBUILDER_ASSETS")
	}
	if assets == "" {
		return errors.New("no envtest binaries: set KUBEBUILDER_ASSETS (make bench does, via hack/envtest.sh)")
	}
	plan := emulator.PlanPro()
	// Rounds leave their sandboxes running (see deleteAll); the plan's
	// concurrency limit is not what is measured.
	plan.MaxRunning = 0
	dir, err := os.MkdirTemp("", "sandbox-bench-")
	if err != nil {
		return err
	}
	h.logf("starting the control plane (%s)", assets)
	h.stack, err = localstack.Start(ctx, localstack.Options{
		RepoRoot:  h.cfg.RepoRoot, // localstack searches upwards when empty
		AssetsDir: assets,
		// Without kube-controller-manager: its garbage collector and quota
		// informers would add their own API-server load to every arm, and
		// the figures in docs/dev/performance.md were measured without it.
		ControllerManager: false,
		Emulator:          emulator.Options{Exec: "none", Plan: plan, DataDir: filepath.Join(dir, "emulator")},
		EmulatorAddr:      "-", // served below, behind the request recorder
	})
	if err != nil {
		return err
	}
	h.rest, h.scheme, h.emu = h.stack.Config, h.stack.Scheme, h.stack.Emulator
	h.cpPIDs = map[string]string{}
	for _, p := range procfs.ControlPlane() {
		h.cpPIDs[p.Name] = strconv.Itoa(p.PID)
	}
	h.logf("control plane processes: %v", h.cpPIDs)
	// The harness is the operator's client: it gets the same unthrottled
	// configuration as the manager, so its own pacing does not count against
	// the operator.
	hc := rest.CopyConfig(h.rest)
	hc.QPS, hc.Burst = -1, 0
	if h.kube, err = client.NewWithWatch(hc, client.Options{Scheme: h.scheme}); err != nil {
		return err
	}
	h.kubeconfig = filepath.Join(dir, "kubeconfig")
	if err := h.stack.ControlPlane.WriteAdminKubeconfig(h.kubeconfig); err != nil {
		return err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	h.rec = newRequestRecorder()
	h.emuSrv = &http.Server{Handler: h.rec.wrap(h.emu.Handler()), ReadHeaderTimeout: 30 * time.Second}
	go func() { _ = h.emuSrv.Serve(ln) }()
	h.vercelURL = "http://" + ln.Addr().String()
	h.vcfg = h.stack.Vercel(h.vercelURL)
	h.vcfg.RequestsPerMinute, h.vcfg.UserAgent = h.cfg.RequestsPerMinute, "sandbox-controller"
	// The direct arm's client: same configuration, hence the same shared
	// request budget and the same in-flight bound, without the operator's
	// hooks (controllers.SetupWithManager adds them to the operator's).
	dcfg := h.vcfg
	dcfg.HTTPClient = httplimit.Client(h.cfg.VercelInFlight)
	if h.direct, err = vercel.New(dcfg); err != nil {
		return err
	}
	if h.operator, err = h.startOperator(ctx); err != nil {
		return err
	}
	if h.floor, err = h.startFloor(ctx); err != nil {
		return err
	}
	if h.cfg.Shards > 1 {
		if h.sharded, err = h.startSharded(ctx, h.cfg.Shards); err != nil {
			return err
		}
	}
	return nil
}

func (h *harness) stop() {
	if h.child != nil {
		h.child.stop()
	}
	if h.operator != nil {
		h.operator.stop()
	}
	if h.sharded != nil {
		h.sharded.stop()
	}
	if h.floor != nil {
		h.floor.stop()
	}
	if h.emuSrv != nil {
		_ = h.emuSrv.Close()
	}
	if h.stack != nil {
		_ = h.stack.Stop()
	}
	if h.kubeconfig != "" {
		_ = os.RemoveAll(filepath.Dir(h.kubeconfig))
	}
}

// inProcess is a manager running in this process, with its API-server
// requests counted.
type inProcess struct {
	stopFn      func()
	writes      *writeCounter
	metricsAddr string
}

func (m *inProcess) stop() { m.stopFn() }

// managerConfig is the manager's REST configuration: controller-runtime's
// GetConfig default (no client-side rate limit), with a transport that
// counts writes.
func (h *harness) managerConfig(w *writeCounter) *rest.Config {
	c := rest.CopyConfig(h.rest)
	c.QPS, c.Burst = -1, 0
	c.Wrap(w.wrap)
	return c
}

// startOperator starts the production manager in this process: the three
// controllers and the metrics with cmd/manager's settings.
func (h *harness) startOperator(ctx context.Context) (*inProcess, error) {
	w := newWriteCounter()
	notFloor, err := labels.Parse(armLabel + " notin (" + armFloor + "," + ArmSharded + ")")
	if err != nil {
		return nil, err
	}
	addr, err := freeAddr()
	if err != nil {
		return nil, err
	}
	// As cmd/manager sets them up (the direct arm's client is h.direct).
	mgr, err := h.stack.StartManager(ctx, h.managerConfig(w), ctrl.Options{
		Metrics:                metricsserver.Options{BindAddress: addr},
		HealthProbeBindAddress: "0",
		// The one difference from production: floor objects are invisible.
		Cache:      operatorCache(notFloor),
		Controller: config.Controller{SkipNameValidation: ptr.To(true)},
	}, h.vcfg, controllers.Options{
		MaxConcurrentReconciles: h.cfg.Concurrency,
		VercelInFlight:          h.cfg.VercelInFlight,
		// As the Deployment (--vercel-reserved-in-flight's default).
		VercelReservedInFlight: 1,
		PollInterval:           h.cfg.PollInterval,
		BackoffCap:             h.cfg.BackoffCap,
	})
	if err != nil {
		return nil, err
	}
	m := &inProcess{stopFn: func() { _ = mgr.Stop() }, writes: w}
	m.metricsAddr = addr
	return m, nil
}

// startSharded starts the sharded arm's managers: the operator as
// startOperator starts it, split into count shards (controllers.Shard), each
// seeing only the sharded arm's objects and calling Vercel with its own user
// agent, so that the recorder can tell which shard called for what. Their
// writes are counted together.
func (h *harness) startSharded(ctx context.Context, count int) (*inProcess, error) {
	w := newWriteCounter()
	only := labels.SelectorFromSet(labels.Set{armLabel: ArmSharded})
	var mgrs []*localstack.Manager
	stop := func() {
		for _, m := range mgrs {
			_ = m.Stop()
		}
	}
	for i := range count {
		c := controllers.CacheOptions()
		c.ByObject = map[client.Object]cache.ByObject{&sandboxv1.Sandbox{}: {Label: only}}
		vc := h.vcfg
		vc.UserAgent = shardUserAgent(i)
		mgr, err := h.stack.StartManager(ctx, h.managerConfig(w), ctrl.Options{
			Metrics:                metricsserver.Options{BindAddress: "0"},
			HealthProbeBindAddress: "0",
			Cache:                  c,
			Controller:             config.Controller{SkipNameValidation: ptr.To(true)},
		}, vc, controllers.Options{
			MaxConcurrentReconciles: h.cfg.Concurrency,
			VercelInFlight:          h.cfg.VercelInFlight,
			VercelReservedInFlight:  1,
			PollInterval:            h.cfg.PollInterval,
			BackoffCap:              h.cfg.BackoffCap,
			Shard:                   controllers.Shard{Index: i, Count: count},
		})
		if err != nil {
			stop()
			return nil, fmt.Errorf("shard %d: %w", i, err)
		}
		mgrs = append(mgrs, mgr)
	}
	return &inProcess{stopFn: stop, writes: w}, nil
}

// runManager starts mgr and returns once its controllers run.
func runManager(ctx context.Context, mgr manager.Manager, w *writeCounter) (*inProcess, error) {
	started := make(chan struct{})
	if err := mgr.Add(manager.RunnableFunc(func(context.Context) error { close(started); return nil })); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	select {
	case <-started:
		return &inProcess{stopFn: func() { cancel(); <-done }, writes: w}, nil
	case err := <-done:
		cancel()
		if err == nil {
			err = errors.New("manager stopped during start-up")
		}
		return nil, err
	case <-time.After(time.Minute):
		cancel()
		return nil, errors.New("manager did not start within a minute")
	}
}

// writeCounter counts the write requests a manager sends to the API server,
// by what they write.
type writeCounter struct {
	mu     sync.Mutex
	counts map[string]int64 // "PUT sandboxes", "PATCH sandboxes/status", "POST events", ...
	// Sandbox writes' summed round-trip time, for the mean write latency.
	sandboxNanos, sandboxN int64
}

func newWriteCounter() *writeCounter { return &writeCounter{counts: map[string]int64{}} }

func (w *writeCounter) wrap(rt http.RoundTripper) http.RoundTripper {
	return roundTripperFunc(func(r *http.Request) (*http.Response, error) {
		switch r.Method {
		case http.MethodGet, http.MethodHead, http.MethodOptions:
			return rt.RoundTrip(r)
		}
		res := resourceOf(r.URL.Path)
		start := time.Now()
		resp, err := rt.RoundTrip(r)
		d := time.Since(start)
		w.mu.Lock()
		w.counts[r.Method+" "+res]++
		if strings.HasPrefix(res, "sandboxes") {
			w.sandboxNanos += int64(d)
			w.sandboxN++
		}
		w.mu.Unlock()
		return resp, err
	})
}

// writeLatency returns the summed time and number of Sandbox writes so far.
func (w *writeCounter) writeLatency() (time.Duration, int64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return time.Duration(w.sandboxNanos), w.sandboxN
}

func (w *writeCounter) snapshot() map[string]int64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := make(map[string]int64, len(w.counts))
	for k, v := range w.counts {
		out[k] = v
	}
	return out
}

type roundTripperFunc func(*http.Request) (*http.Response, error)

func (f roundTripperFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// resourceOf names the resource (and subresource) of an API path such as
// /apis/sandbox.sentry.io/v1alpha1/namespaces/ns/sandboxes/x/status.
func resourceOf(path string) string {
	parts := strings.Split(strings.Trim(path, "/"), "/")
	for i, p := range parts {
		if p == "namespaces" && i+2 < len(parts) {
			rest := parts[i+2:]
			switch len(rest) {
			case 1, 2:
				return rest[0]
			default:
				return rest[0] + "/" + rest[2]
			}
		}
	}
	if len(parts) > 0 {
		return parts[len(parts)-1]
	}
	return path
}

// sandboxWrites sums the writes to Sandboxes (the object and its status)
// between two snapshots; events are counted apart.
func sandboxWrites(before, after map[string]int64) (sandboxes, events int64) {
	for k, v := range after {
		d := v - before[k]
		switch {
		case strings.HasSuffix(k, " sandboxes"), strings.HasSuffix(k, " sandboxes/status"):
			sandboxes += d
		case strings.HasSuffix(k, " events"):
			events += d
		}
	}
	return sandboxes, events
}

func freeAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return l.Addr().String(), nil
}

// operatorCache is cmd/manager's cache (controllers.CacheOptions) with
// the floor arm's objects hidden.
func operatorCache(notFloor labels.Selector) cache.Options {
	c := controllers.CacheOptions()
	c.ByObject = map[client.Object]cache.ByObject{&sandboxv1.Sandbox{}: {Label: notFloor}}
	return c
}
