package localstack

import (
	"context"
	"errors"
	"fmt"
	"time"

	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	"github.com/getsentry/sandbox-controller/controllers"
	"github.com/getsentry/sandbox-controller/internal/vercel"
)

// Manager is a manager running in this process.
type Manager struct {
	manager.Manager
	cancel  context.CancelFunc
	stopped chan struct{} // closed once Start returned, with err set
	err     error
}

// StartManager runs a manager with the controllers wired as cmd/manager wires
// them (controllers.SetupWithManager) against cfg (the stack's administrator
// when nil) and the Vercel API of vc, and returns once the controllers have
// started. mgrOpts is passed through; its Scheme defaults to Scheme().
func (s *Stack) StartManager(ctx context.Context, cfg *rest.Config, mgrOpts ctrl.Options, vc vercel.Config, opts controllers.Options) (*Manager, error) {
	if cfg == nil {
		cfg = s.Config
	}
	if mgrOpts.Scheme == nil {
		mgrOpts.Scheme = s.Scheme
	}
	// As cmd/manager's cache (controllers.CacheOptions), unless the caller
	// set its own.
	if mgrOpts.Cache.DefaultTransform == nil {
		mgrOpts.Cache.DefaultTransform = controllers.CacheOptions().DefaultTransform
	}
	if mgrOpts.Cache.ByObject == nil {
		mgrOpts.Cache.ByObject = controllers.CacheOptions().ByObject
	}
	// One process may run several managers in turn (a test package whose
	// tests each start a stack, a restart): controller-runtime's check that
	// controller names are unique per process would refuse the second.
	if mgrOpts.Controller.SkipNameValidation == nil {
		skip := true
		mgrOpts.Controller.SkipNameValidation = &skip
	}
	mgr, err := ctrl.NewManager(cfg, mgrOpts)
	if err != nil {
		return nil, fmt.Errorf("create the manager: %w", err)
	}
	// Out of a cluster the digest key Secret may be missing (only `make
	// dev` installs it, with the manager's RBAC): created here, where the
	// manager runs with an administrator's credentials. A deployed manager
	// may not create it.
	opts.DigestKeySecret.CreateMissing = true
	if err := controllers.SetupWithManager(mgr, vc, opts); err != nil {
		return nil, err
	}
	if err := mgr.AddHealthzCheck("healthz", healthz.Ping); err != nil {
		return nil, err
	}
	if err := mgr.AddReadyzCheck("readyz", healthz.Ping); err != nil {
		return nil, err
	}
	// Runnables that need leader election start with the controllers, after
	// the caches synced: this one marks the manager as up.
	started := make(chan struct{})
	if err := mgr.Add(manager.RunnableFunc(func(context.Context) error { close(started); return nil })); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(ctx)
	m := &Manager{Manager: mgr, cancel: cancel, stopped: make(chan struct{})}
	go func() { m.err = mgr.Start(ctx); close(m.stopped) }()
	select {
	case <-started:
		return m, nil
	case <-m.stopped:
		cancel()
		err := m.err
		if err == nil {
			err = errors.New("stopped during start-up")
		}
		return nil, fmt.Errorf("start the manager: %w", err)
	case <-time.After(time.Minute):
		cancel()
		return nil, errors.New("the manager did not start within a minute")
	}
}

// Stopped is closed once the manager stopped by itself or by Stop; Err then
// says why.
func (m *Manager) Stopped() <-chan struct{} { return m.stopped }

// Err is the manager's result once Stopped is closed.
func (m *Manager) Err() error {
	<-m.stopped
	return m.err
}

// Stop stops the manager and returns its result.
func (m *Manager) Stop() error {
	m.cancel()
	return m.Err()
}
