// Package metrics defines the operator's own Prometheus metrics and registers
// them on controller-runtime's registry, so they are served on the manager's
// metrics endpoint next to controller-runtime's workqueue and reconcile
// metrics.
//
// Every label value comes from a small fixed set (Vercel endpoint names, HTTP
// status codes, phases, build outcomes) or is a namespace; no metric carries
// an object name, so the number of series does not grow with the number of
// Sandboxes.
package metrics

import (
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/getsentry/sandbox-controller/internal/vercel"
)

const namespace = "sandbox_controller"

var (
	// VercelRequests counts HTTP attempts against the Vercel API (each retry
	// is one attempt). code is the HTTP status, or "none" when no answer
	// arrived (connection error, timeout, cancellation).
	VercelRequests = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: namespace,
		Name:      "vercel_requests_total",
		Help:      "HTTP requests sent to the Vercel Sandbox API, by endpoint and status code (\"none\" when no answer arrived).",
	}, []string{"endpoint", "code"})

	// VercelRequestDuration is the time to response headers per attempt.
	VercelRequestDuration = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Namespace: namespace,
		Name:      "vercel_request_duration_seconds",
		Help:      "Time from sending a Vercel API request to its response headers, by endpoint.",
		Buckets:   []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30},
	}, []string{"endpoint"})

	// VercelLimiterWait observes every delay the client-side rate limiter
	// (the --vercel-requests-per-minute budget) imposed; its _count is the
	// number of delayed requests.
	VercelLimiterWait = prometheus.NewHistogram(prometheus.HistogramOpts{
		Namespace: namespace,
		Name:      "vercel_rate_limiter_wait_seconds",
		Help:      "Delays imposed by the client-side Vercel request budget; _count is the number of delayed requests.",
		Buckets:   []float64{.001, .005, .01, .05, .1, .5, 1, 5, 10, 30},
	})

	// SandboxTimeToReady is the time from a Sandbox's creation until its
	// Ready condition first turned True.
	SandboxTimeToReady = prometheus.NewHistogram(prometheus.HistogramOpts{
		Namespace: namespace,
		Name:      "sandbox_time_to_ready_seconds",
		Help:      "Time from a Sandbox's creation until its Ready condition first turned True.",
		Buckets:   []float64{.05, .1, .25, .5, 1, 2.5, 5, 10, 20, 30, 60, 120, 300, 600},
	})

	// SnapshotBuildDuration is the wall time of recipe snapshot builds, by
	// outcome; see ObserveSnapshotBuild.
	SnapshotBuildDuration = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Namespace: namespace,
		Name:      "snapshot_build_duration_seconds",
		Help:      "Wall time of SandboxSnapshot recipe builds, from the builder sandbox's creation to the snapshot being ready or the build failing, by outcome.",
		Buckets:   []float64{1, 5, 10, 30, 60, 120, 300, 600, 1200, 1800, 3600},
	}, []string{"outcome"})
)

// Snapshot build outcomes: the only values the outcome label takes.
const (
	BuildSucceeded = "Succeeded"
	BuildFailed    = "Failed"
	// BuildAbandoned is a build that stopped without a result: its
	// SandboxSnapshot was deleted, or a newer recipe replaced it.
	BuildAbandoned = "Abandoned"
)

// ObserveSnapshotBuild records one finished recipe build. An outcome other
// than the Build* constants is recorded as "Other" to keep the label bounded.
func ObserveSnapshotBuild(outcome string, d time.Duration) {
	switch outcome {
	case BuildSucceeded, BuildFailed, BuildAbandoned:
	default:
		outcome = "Other"
	}
	SnapshotBuildDuration.WithLabelValues(outcome).Observe(d.Seconds())
}

var registerOnce sync.Once

// Register adds the package's collectors to controller-runtime's registry. It
// is safe to call more than once (a process may build several managers).
func Register() {
	registerOnce.Do(func() {
		ctrlmetrics.Registry.MustRegister(
			VercelRequests, VercelRequestDuration, VercelLimiterWait,
			SandboxTimeToReady, SnapshotBuildDuration, sandboxes, QuotaUsed, QuotaHard,
			PoolMembers, PoolClaims, PoolClaimSeconds, PoolMemberIdleSeconds,
			BuildInfo,
		)
		ctrlmetrics.Registry.MustRegister(usageCollectors()...)
	})
}

// InstrumentVercel sets the request and rate-limiter hooks of cfg so that
// every Vercel call is counted and timed, chaining any hooks already set.
func InstrumentVercel(cfg *vercel.Config) {
	Register()
	prevReq, prevWait := cfg.OnRequest, cfg.OnLimiterWait
	cfg.OnRequest = func(endpoint string, status int, d time.Duration) {
		code := "none"
		if status > 0 {
			code = statusCode(status)
		}
		VercelRequests.WithLabelValues(endpoint, code).Inc()
		VercelRequestDuration.WithLabelValues(endpoint).Observe(d.Seconds())
		if prevReq != nil {
			prevReq(endpoint, status, d)
		}
	}
	cfg.OnLimiterWait = func(d time.Duration) {
		VercelLimiterWait.Observe(d.Seconds())
		if prevWait != nil {
			prevWait(d)
		}
	}
}

// statusCode formats the common codes without allocating.
func statusCode(status int) string {
	switch status {
	case 200:
		return "200"
	case 201:
		return "201"
	case 404:
		return "404"
	case 429:
		return "429"
	case 500:
		return "500"
	case 503:
		return "503"
	}
	if status < 100 || status > 599 {
		return "other"
	}
	return strconv.Itoa(status)
}
