// Package localstack starts what the operator runs against when there is no
// cluster and no Vercel account: a control plane (localstack/controlplane) with
// the CRDs rendered from config/crd as `make install` renders them and the
// admission policy of config/admission, the Vercel Sandbox API emulator, and
// the manager with the controllers as cmd/manager sets them up. `make dev`,
// `make demo` (through hack/dev), the controller suite, the benchmark and the
// install tests all start their environment here, so they cannot drift apart.
//
// The localstack tree (this package and its sub-packages: emulator,
// controlplane, admissionpolicy, managerpod, clienttest, procfs) is the local
// stack, kept apart from the operator's own parts under internal/: it imports
// controllers and internal, and only tests and development tools import it;
// the manager binary never links it.
package localstack

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	sandboxv1 "github.com/getsentry/sandbox-controller/api/v1alpha1"
	"github.com/getsentry/sandbox-controller/internal/vercel"
	"github.com/getsentry/sandbox-controller/localstack/admissionpolicy"
	"github.com/getsentry/sandbox-controller/localstack/controlplane"
	"github.com/getsentry/sandbox-controller/localstack/emulator"
	"github.com/getsentry/sandbox-controller/localstack/oidcissuer"
)

// The emulator's scope: any team and project id work, these are the ones
// every local client uses.
const (
	TeamID    = "team_emulator"
	ProjectID = "prj_emulator"
)

// Options says what to start.
type Options struct {
	// RepoRoot holds config/; the nearest directory above the working
	// directory with a go.mod when empty.
	RepoRoot string
	// AssetsDir, StateDir and ControllerManager are the control plane's
	// (controlplane.Options).
	AssetsDir         string
	StateDir          string
	ControllerManager bool
	// Workloads: see controlplane.Options.
	Workloads bool
	// ControlPlaneLog receives the control plane's output; discarded when nil.
	ControlPlaneLog io.Writer
	// InstallNothing leaves the CRDs and the admission policy to the caller
	// (test/e2e applies what `make deploy` renders instead).
	InstallNothing bool
	// Emulator configures the emulator; a temporary DataDir when empty.
	Emulator emulator.Options
	// EmulatorAddr is the emulator's listen address ("127.0.0.1:0" when
	// empty); "-" creates it without serving it, for callers that serve
	// Emulator.Handler() behind their own recorder.
	EmulatorAddr string
	// OIDC, when set, starts a local OIDC issuer shaped like Vercel's
	// (localstack/oidcissuer) before the API server, which trusts it for
	// these teams' functions (oidc.go).
	OIDC []oidcissuer.Trust
}

// Stack is a running local environment.
type Stack struct {
	RepoRoot     string
	ControlPlane *controlplane.ControlPlane
	// Config and Client authenticate as a cluster administrator.
	Config *rest.Config
	Client client.Client
	Scheme *runtime.Scheme

	Emulator *emulator.Emulator
	// EmulatorURL is where the emulator serves; empty with EmulatorAddr "-".
	EmulatorURL string
	// OIDCIssuer is the issuer the API server trusts; nil without
	// Options.OIDC.
	OIDCIssuer *oidcissuer.Issuer

	ownDataDir string
}

// Scheme holds the built-in kinds and the sandbox.sentry.io kinds.
func Scheme() *runtime.Scheme {
	s := runtime.NewScheme()
	utilruntime.Must(clientgoscheme.AddToScheme(s))
	utilruntime.Must(sandboxv1.AddToScheme(s))
	return s
}

// Start starts the control plane, installs config/crd and config/admission
// into it, and starts the emulator. On error whatever started is stopped.
func Start(ctx context.Context, opts Options) (_ *Stack, err error) {
	s := &Stack{RepoRoot: opts.RepoRoot, Scheme: Scheme()}
	if s.RepoRoot == "" {
		if s.RepoRoot, err = findRepoRoot(); err != nil {
			return nil, err
		}
	}
	defer func() {
		if err != nil {
			_ = s.Stop()
		}
	}()

	cpOpts := controlplane.Options{
		AssetsDir:         opts.AssetsDir,
		StateDir:          opts.StateDir,
		ControllerManager: opts.ControllerManager,
		Workloads:         opts.Workloads,
		Out:               opts.ControlPlaneLog,
	}
	if cpOpts.AuthenticationConfig, err = s.startOIDCIssuer(opts.OIDC); err != nil {
		return nil, err
	}
	if !opts.InstallNothing {
		if cpOpts.CRDs, err = controlplane.Render(s.RepoRoot, filepath.Join("config", "crd")); err != nil {
			return nil, fmt.Errorf("render the CRDs: %w", err)
		}
	}
	if s.ControlPlane, err = controlplane.Start(ctx, cpOpts); err != nil {
		return nil, err
	}
	s.Config = s.ControlPlane.Config
	if err := s.waitOIDCReady(ctx, opts.OIDC); err != nil {
		return nil, err
	}
	if s.Client, err = client.New(s.Config, client.Options{Scheme: s.Scheme}); err != nil {
		return nil, err
	}
	if !opts.InstallNothing {
		// As `make install` does: the finalizers are added at admission,
		// Secret references and snapshot ids are authorized there.
		if err := admissionpolicy.Install(ctx, s.Config, filepath.Join(s.RepoRoot, "config", "admission"), "default"); err != nil {
			return nil, err
		}
	}

	emuOpts := opts.Emulator
	if emuOpts.DataDir == "" {
		if s.ownDataDir, err = os.MkdirTemp("", "emulator-"); err != nil {
			return nil, err
		}
		emuOpts.DataDir = s.ownDataDir
	}
	if s.Emulator, err = emulator.New(emuOpts); err != nil {
		return nil, fmt.Errorf("emulator: %w", err)
	}
	switch addr := opts.EmulatorAddr; addr {
	case "-":
	case "":
		addr = "127.0.0.1:0"
		fallthrough
	default:
		if s.EmulatorURL, err = s.Emulator.Start(addr); err != nil {
			return nil, fmt.Errorf("start the emulator: %w", err)
		}
	}
	return s, nil
}

// Vercel returns the configuration of a Vercel client of the emulator at
// baseURL (EmulatorURL when empty): its token, team and project.
func (s *Stack) Vercel(baseURL string) vercel.Config {
	if baseURL == "" {
		baseURL = s.EmulatorURL
	}
	return vercel.Config{BaseURL: baseURL, Token: s.Emulator.Token(), TeamID: TeamID, ProjectID: ProjectID}
}

// Stop stops the emulator and the control plane.
func (s *Stack) Stop() error {
	var errs []error
	if s.Emulator != nil {
		errs = append(errs, s.Emulator.Close())
	}
	if s.ControlPlane != nil {
		errs = append(errs, s.ControlPlane.Stop())
	}
	if s.OIDCIssuer != nil {
		errs = append(errs, s.OIDCIssuer.Close())
	}
	if s.ownDataDir != "" {
		errs = append(errs, os.RemoveAll(s.ownDataDir))
	}
	return errors.Join(errs...)
}

func findRepoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("no go.mod above the working directory: set Options.RepoRoot")
		}
		dir = parent
	}
}
