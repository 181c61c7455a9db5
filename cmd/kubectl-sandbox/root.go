package main

import (
	"context"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/cli-runtime/pkg/genericiooptions"

	"github.com/getsentry/sandbox-controller/internal/version"
	"github.com/getsentry/sandbox-controller/pkg/client/clientset/versioned/scheme"
	"github.com/getsentry/sandbox-controller/pkg/dataplane"
	"github.com/getsentry/sandbox-controller/pkg/sandboxclient"
)

// options is what every verb shares: kubectl's connection flags (-n,
// --context, --kubeconfig, ...) and the streams.
type options struct {
	genericiooptions.IOStreams
	config *genericclioptions.ConfigFlags
}

func newRootCommand(streams genericiooptions.IOStreams) *cobra.Command {
	o := &options{IOStreams: streams, config: genericclioptions.NewConfigFlags(true)}
	cmd := &cobra.Command{
		Use:   "kubectl-sandbox",
		Short: "Create, run commands in, snapshot, fork and delete Vercel sandboxes declared as Sandbox resources",
		Long: `kubectl sandbox drives Sandboxes, SandboxSnapshots, SandboxForks and SandboxPools (sandbox.sentry.io).

The control verbs only write and watch these resources; the operator makes Vercel match them.
exec, cp and shell run in the Sandbox's session through the Vercel Sandbox API, with the
credentials in VERCEL_TOKEN, VERCEL_TEAM_ID and VERCEL_PROJECT_ID (and VERCEL_API_URL for
another endpoint, such as the emulator of 'make dev').`,
		Annotations:   map[string]string{cobra.CommandDisplayNameAnnotation: "kubectl sandbox"},
		SilenceUsage:  true,
		SilenceErrors: true,
		// --version; `kubectl sandbox version` adds the manager's.
		Version: version.Get().String(),
	}
	cmd.SetVersionTemplate("kubectl-sandbox {{.Version}}\n")
	cmd.SetIn(streams.In)
	cmd.SetOut(streams.Out)
	cmd.SetErr(streams.ErrOut)
	o.config.AddFlags(cmd.PersistentFlags())
	cmd.AddCommand(
		newCreateCommand(o, false), newCreateCommand(o, true),
		newListCommand(o), newStatusCommand(o), newWaitCommand(o),
		newStateCommand(o, "pause"), newStateCommand(o, "resume"), newHeartbeatCommand(o),
		newSnapshotCommand(o), newForkCommand(o), newScaleCommand(o), newTreeCommand(o),
		newHistoryCommand(o), newRewindCommand(o),
		newExecCommand(o), newCpCommand(o), newShellCommand(o),
		newRmCommand(o), newVersionCommand(o), newUsageCommand(o),
	)
	return cmd
}

// namespace is -n, or the kubeconfig context's namespace, or "default".
func (o *options) namespace() (string, error) {
	ns, _, err := o.config.ToRawKubeConfigLoader().Namespace()
	if err != nil {
		return "", fmt.Errorf("namespace: %w", err)
	}
	return ns, nil
}

// client returns the control-plane client and the namespace to work in.
func (o *options) client() (*sandboxclient.Client, string, error) {
	cfg, err := o.config.ToRESTConfig()
	if err != nil {
		return nil, "", err
	}
	c, err := sandboxclient.NewForConfig(cfg)
	if err != nil {
		return nil, "", err
	}
	ns, err := o.namespace()
	return c, ns, err
}

// dataPlane returns the data-plane client from the VERCEL_* environment.
func dataPlane() (*dataplane.Client, error) {
	cfg := dataplane.ConfigFromEnv()
	if cfg.Token == "" && cfg.OIDCToken == "" {
		return nil, fmt.Errorf("exec, cp and shell talk to the Vercel Sandbox API: set %s (or %s), %s and %s (`make dev` prints them for its emulator)",
			dataplane.EnvToken, dataplane.EnvOIDCToken, dataplane.EnvTeamID, dataplane.EnvProjectID)
	}
	return dataplane.New(cfg)
}

// printFlags are -o json|yaml|name|jsonpath=... as kubectl has them; with
// no -o a verb prints kubectl's "<kind>.<group>/<name> <operation>" line.
func printFlags(cmd *cobra.Command, operation string) *genericclioptions.PrintFlags {
	pf := genericclioptions.NewPrintFlags(operation).WithTypeSetter(scheme.Scheme)
	pf.AddFlags(cmd)
	return pf
}

// printResult prints obj as -o asks, unless the verb that produced it failed.
func printResult(pf *genericclioptions.PrintFlags, obj runtime.Object, err error, out io.Writer) error {
	if err != nil {
		return err
	}
	p, err := pf.ToPrinter()
	if err != nil {
		return err
	}
	return p.PrintObj(obj, out)
}

// outputFormat is the -o value ("" when unset).
func outputFormat(pf *genericclioptions.PrintFlags) string {
	if pf.OutputFormat == nil {
		return ""
	}
	return *pf.OutputFormat
}

// timeoutFlag adds --timeout, the bound of every wait.
func timeoutFlag(cmd *cobra.Command, def time.Duration) *time.Duration {
	d := new(time.Duration)
	cmd.Flags().DurationVar(d, "timeout", def, "How long to wait; 0 waits forever")
	return d
}

// withTimeout is a context bounded by d (unbounded when d is 0).
func withTimeout(ctx context.Context, d time.Duration) (context.Context, context.CancelFunc) {
	if d <= 0 {
		return context.WithCancel(ctx)
	}
	return context.WithTimeout(ctx, d)
}

// resourceKind is one of the kinds a verb's argument can name.
type resourceKind string

const (
	kindSandbox  resourceKind = "Sandbox"
	kindSnapshot resourceKind = "SandboxSnapshot"
	kindFork     resourceKind = "SandboxFork"
	kindPool     resourceKind = "SandboxPool"
)

// parseRef reads NAME (a Sandbox) or TYPE/NAME, where TYPE is any of the
// names kubectl accepts for the kind (sandbox, sbx, sandboxsnapshot,
// sbxsnap, snapshot, sandboxfork, sbxfork, fork, sandboxpool, sbxpool, pool,
// plural or with the group, as -o name prints them).
func parseRef(arg string) (resourceKind, string, error) {
	typ, name, found := strings.Cut(arg, "/")
	if !found {
		return kindSandbox, arg, nil
	}
	if name == "" || strings.Contains(name, "/") {
		return "", "", fmt.Errorf("%q: want NAME or TYPE/NAME", arg)
	}
	typ = strings.TrimSuffix(strings.ToLower(typ), ".sandbox.sentry.io")
	switch typ {
	case "sandbox", "sandboxes", "sbx":
		return kindSandbox, name, nil
	case "sandboxsnapshot", "sandboxsnapshots", "sbxsnap", "snapshot", "snapshots":
		return kindSnapshot, name, nil
	case "sandboxfork", "sandboxforks", "sbxfork", "fork", "forks":
		return kindFork, name, nil
	case "sandboxpool", "sandboxpools", "sbxpool", "pool", "pools":
		return kindPool, name, nil
	}
	return "", "", fmt.Errorf("%q: unknown type %q (want sandbox, sandboxsnapshot, sandboxfork or sandboxpool)", arg, typ)
}

// sandboxName accepts NAME or sandbox/NAME for verbs that act on a Sandbox.
func sandboxName(arg string) (string, error) {
	kind, name, err := parseRef(arg)
	if err != nil {
		return "", err
	}
	if kind != kindSandbox {
		return "", fmt.Errorf("%q is a %s; this verb takes a Sandbox", arg, kind)
	}
	return name, nil
}
