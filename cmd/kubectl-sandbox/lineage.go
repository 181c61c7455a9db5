package main

import (
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/getsentry/sandbox-controller/pkg/sandboxclient"
)

// defaultName is base-<UTC time>, short enough to be a label value (a fork's
// name labels its children) with room for a child's -<index>.
func defaultName(base string) string {
	const max = 60 - len("-20060102150405")
	base = strings.TrimRight(truncate(base, max), "-.")
	return base + "-" + time.Now().UTC().Format("20060102150405")
}

func truncate(s string, n int) string {
	if len(s) > n {
		return s[:n]
	}
	return s
}

func newSnapshotCommand(o *options) *cobra.Command {
	var (
		keepRunning bool
		expiration  time.Duration
		labels      []string
		wait        bool
	)
	cmd := &cobra.Command{
		Use:   "snapshot NAME [SNAPSHOT]",
		Short: "Capture a Sandbox's filesystem into a SandboxSnapshot (named NAME-<time> unless given)",
		Long: `snapshot creates a SandboxSnapshot of the Sandbox's running session and, unless --wait=false,
waits until it is ready to use. Capturing stops the session: the Sandbox stays stopped until a
heartbeat, an exec or a resume, unless --keep-running resumes it at once.
Boot from it with 'kubectl sandbox create NEW --snapshot SNAPSHOT' or fork it.`,
		Example: `  kubectl sandbox snapshot dev
  kubectl sandbox snapshot dev dev-before-upgrade --keep-running --expiration 72h -o name`,
		Args: cobra.RangeArgs(1, 2),
	}
	cmd.Flags().BoolVar(&keepRunning, "keep-running", false, "Resume the Sandbox right after the capture (spec.keepSourceRunning)")
	cmd.Flags().DurationVar(&expiration, "expiration", 0, "How long Vercel keeps the snapshot (spec.expirationSeconds); Vercel's default when 0")
	cmd.Flags().StringArrayVarP(&labels, "label", "l", nil, "Label the SandboxSnapshot: KEY=VALUE (repeatable)")
	cmd.Flags().BoolVar(&wait, "wait", true, "Wait until the snapshot is ready to use")
	timeout := timeoutFlag(cmd, 10*time.Minute)
	pf := printFlags(cmd, "created")
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		name, err := sandboxName(args[0])
		if err != nil {
			return err
		}
		snapName := defaultName(name)
		if len(args) == 2 {
			if _, snapName, err = parseRef(args[1]); err != nil {
				return err
			}
		}
		lbls, err := keyValues("--label", labels)
		if err != nil {
			return err
		}
		c, ns, err := o.client()
		if err != nil {
			return err
		}
		ctx, cancel := withTimeout(cmd.Context(), *timeout)
		defer cancel()
		snap, err := c.Snapshot(ctx, ns, name, snapName, sandboxclient.SnapshotOptions{
			KeepSourceRunning: keepRunning, ExpirationSeconds: int64(expiration.Seconds()), Labels: lbls})
		if err == nil && wait {
			pf.NamePrintFlags.Operation = "ready"
			snap, err = c.WaitSnapshotReady(ctx, ns, snapName)
		}
		return printResult(pf, snap, err, o.Out)
	}
	return cmd
}

func newForkCommand(o *options) *cobra.Command {
	var (
		replicas    int32
		keepRunning bool
		labels      []string
		wait        bool
	)
	cmd := &cobra.Command{
		Use:   "fork SOURCE [FORK]",
		Short: "Start --replicas new Sandboxes from one point in time of a Sandbox or a snapshot (a SandboxFork)",
		Long: `fork creates a SandboxFork named FORK (SOURCE-<time> unless given): --replicas Sandboxes named
FORK-0, FORK-1, ... that start from the same filesystem. SOURCE is a Sandbox (captured now, which
stops its session unless --keep-source-running) or sandboxsnapshot/NAME. Unless --wait=false it
waits until every child is Ready. 'kubectl sandbox ls -l sandbox.sentry.io/fork=FORK' lists them.`,
		Example: `  kubectl sandbox fork dev tries --replicas 3 --keep-source-running
  kubectl sandbox fork sandboxsnapshot/dev-snap tries --replicas 2`,
		Args: cobra.RangeArgs(1, 2),
	}
	cmd.Flags().Int32Var(&replicas, "replicas", 1, "How many Sandboxes to start")
	cmd.Flags().BoolVar(&keepRunning, "keep-source-running", false, "Resume a source Sandbox right after the capture")
	cmd.Flags().StringArrayVarP(&labels, "label", "l", nil, "Label the children: KEY=VALUE (repeatable)")
	cmd.Flags().BoolVar(&wait, "wait", true, "Wait until every child is Ready")
	timeout := timeoutFlag(cmd, 10*time.Minute)
	pf := printFlags(cmd, "created")
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		kind, source, err := parseRef(args[0])
		if err != nil {
			return err
		}
		var src sandboxclient.ForkSource
		switch kind {
		case kindSandbox:
			src.Sandbox = source
		case kindSnapshot:
			src.Snapshot = source
		default:
			return fmt.Errorf("fork %s: the source is a Sandbox or a sandboxsnapshot/NAME", args[0])
		}
		forkName := defaultName(source)
		if len(args) == 2 {
			if _, forkName, err = parseRef(args[1]); err != nil {
				return err
			}
		}
		opts := sandboxclient.ForkOptions{KeepSourceRunning: keepRunning}
		if opts.Template.Metadata.Labels, err = keyValues("--label", labels); err != nil {
			return err
		}
		c, ns, err := o.client()
		if err != nil {
			return err
		}
		ctx, cancel := withTimeout(cmd.Context(), *timeout)
		defer cancel()
		fork, err := c.Fork(ctx, ns, forkName, src, replicas, opts)
		if err == nil && wait {
			pf.NamePrintFlags.Operation = "ready"
			fork, err = c.WaitForkReady(ctx, ns, forkName)
		}
		return printResult(pf, fork, err, o.Out)
	}
	return cmd
}

func newScaleCommand(o *options) *cobra.Command {
	var (
		replicas int32
		wait     bool
	)
	cmd := &cobra.Command{
		Use:   "scale FORK|pool/NAME --replicas N",
		Short: "Set how many Sandboxes a SandboxFork runs, or how many members a SandboxPool keeps ready",
		Long: `scale sets the fork's spec.replicas: the operator creates the missing children or deletes the
highest-indexed ones. Unless --wait=false it waits until all of them are Ready.

For pool/NAME it sets the pool's spec.replicas through its scale subresource (as kubectl scale, an
HPA or KEDA do) and, unless --wait=false, waits until the pool holds its target of ready members.`,
		Example: `  kubectl sandbox scale tries --replicas 5
  kubectl sandbox scale pool/workspace-pool --replicas 10`,
		Args: cobra.ExactArgs(1),
	}
	cmd.Flags().Int32Var(&replicas, "replicas", -1, "How many Sandboxes the fork runs, or members the pool keeps (required)")
	cmd.Flags().BoolVar(&wait, "wait", true, "Wait until every child (a pool: its target of members) is Ready")
	timeout := timeoutFlag(cmd, 10*time.Minute)
	pf := printFlags(cmd, "scaled")
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		if replicas < 0 {
			return fmt.Errorf("--replicas is required")
		}
		kind, name, err := parseRef(args[0])
		if err != nil {
			return err
		}
		if strings.Contains(args[0], "/") && kind != kindFork && kind != kindPool {
			return fmt.Errorf("scale %s: only a SandboxFork or a SandboxPool scales", args[0])
		}
		c, ns, err := o.client()
		if err != nil {
			return err
		}
		ctx, cancel := withTimeout(cmd.Context(), *timeout)
		defer cancel()
		if kind == kindPool {
			pool, err := scalePool(ctx, c, ns, name, replicas, wait)
			return printResult(pf, pool, err, o.Out)
		}
		fork, err := c.Scale(ctx, ns, name, replicas)
		if err == nil && wait {
			fork, err = c.WaitForkReady(ctx, ns, name)
		}
		return printResult(pf, fork, err, o.Out)
	}
	return cmd
}
