package controllers

import (
	"fmt"
	"time"

	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/getsentry/sandbox-controller/internal/httplimit"
	"github.com/getsentry/sandbox-controller/internal/metrics"
	"github.com/getsentry/sandbox-controller/internal/vercel"
)

// Options are the manager's knobs for the three controllers (cmd/manager's
// flags); zero values take each reconciler's default.
type Options struct {
	MaxConcurrentReconciles int
	// VercelInFlight bounds the Vercel requests in flight across all kinds.
	VercelInFlight   int
	PollInterval     time.Duration
	BackoffCap       time.Duration
	MaxSessionLength time.Duration
	ShutdownWarning  time.Duration
}

// SetupWithManager builds the Vercel client from vc — bounded in flight,
// reporting to VercelHealth and the metrics — and registers the Sandbox,
// SandboxSnapshot and SandboxFork controllers and the metrics with mgr. It
// is what cmd/manager runs; `make dev` and the benchmark call it too, so they
// run the same thing.
func SetupWithManager(mgr ctrl.Manager, vc vercel.Config, o Options) error {
	vc.HTTPClient = httplimit.Client(o.VercelInFlight)
	health := &VercelHealth{}
	vc.OnRequest = health.ObserveRequest
	metrics.InstrumentVercel(&vc)
	api, err := vercel.New(vc)
	if err != nil {
		return fmt.Errorf("vercel client: %w", err)
	}
	if err := (&SandboxReconciler{
		Client:                  mgr.GetClient(),
		APIReader:               mgr.GetAPIReader(),
		Vercel:                  api,
		Recorder:                mgr.GetEventRecorder("sandbox-controller"),
		PollInterval:            o.PollInterval,
		MaxConcurrentReconciles: o.MaxConcurrentReconciles,
		BackoffCap:              o.BackoffCap,
		MaxSessionLength:        o.MaxSessionLength,
		ShutdownWarning:         o.ShutdownWarning,
		VercelHealth:            health,
	}).SetupWithManager(mgr); err != nil {
		return fmt.Errorf("set up the Sandbox controller: %w", err)
	}
	if err := (&SandboxSnapshotReconciler{
		Client:                  mgr.GetClient(),
		APIReader:               mgr.GetAPIReader(),
		Vercel:                  api,
		Recorder:                mgr.GetEventRecorder("sandboxsnapshot-controller"),
		PollInterval:            o.PollInterval,
		MaxConcurrentReconciles: o.MaxConcurrentReconciles,
		BackoffCap:              o.BackoffCap,
	}).SetupWithManager(mgr); err != nil {
		return fmt.Errorf("set up the SandboxSnapshot controller: %w", err)
	}
	if err := (&SandboxForkReconciler{
		Client:                  mgr.GetClient(),
		Recorder:                mgr.GetEventRecorder("sandbox-controller"),
		MaxConcurrentReconciles: o.MaxConcurrentReconciles,
		BackoffCap:              o.BackoffCap,
	}).SetupWithManager(mgr); err != nil {
		return fmt.Errorf("set up the SandboxFork controller: %w", err)
	}
	if err := metrics.SetupWithManager(mgr); err != nil {
		return fmt.Errorf("set up the metrics: %w", err)
	}
	return nil
}
