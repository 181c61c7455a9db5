package main

// history and rewind: a persistent Sandbox's snapshot lineage
// (status.history) and a declarative rewind to one of its snapshots
// (spec.rewind), docs/sandbox.md#history-and-rewind.

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/util/duration"
	"sigs.k8s.io/yaml"

	sandboxv1 "github.com/getsentry/sandbox-controller/api/v1alpha1"
	"github.com/getsentry/sandbox-controller/pkg/sandboxclient"
)

func newHistoryCommand(o *options) *cobra.Command {
	var output string
	cmd := &cobra.Command{
		Use:   "history NAME",
		Short: "List a persistent Sandbox's snapshots, newest first, with the one its next session resumes from",
		Long: `history lists the latest snapshots of a persistent Sandbox's Vercel sandbox (status.history):
each pause, idle stop and capture takes one, up to spec.snapshotRetention.keepLast are kept. CURRENT
marks the one the next session resumes from. 'kubectl sandbox rewind NAME --id SNAPSHOT' goes back
to one of them.`,
		Example: `  kubectl sandbox history dev
  kubectl sandbox history dev -o json`,
		Args: cobra.ExactArgs(1),
	}
	cmd.Flags().StringVarP(&output, "output", "o", "", "json or yaml (the entries of status.history)")
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		switch output {
		case "", "json", "yaml":
		default:
			return fmt.Errorf("--output %q: history prints json or yaml", output)
		}
		name, err := sandboxName(args[0])
		if err != nil {
			return err
		}
		c, ns, err := o.client()
		if err != nil {
			return err
		}
		entries, err := c.History(cmd.Context(), ns, name)
		if err != nil {
			return err
		}
		if entries == nil {
			entries = []sandboxv1.SnapshotHistoryEntry{}
		}
		switch output {
		case "json":
			b, err := json.MarshalIndent(entries, "", "    ")
			if err != nil {
				return err
			}
			_, err = fmt.Fprintln(o.Out, string(b))
			return err
		case "yaml":
			b, err := yaml.Marshal(entries)
			if err != nil {
				return err
			}
			_, err = o.Out.Write(b)
			return err
		}
		if len(entries) == 0 {
			fmt.Fprintf(o.ErrOut, "Sandbox %s has no snapshots yet (a pause takes one).\n", name)
			return nil
		}
		return printHistory(o.Out, entries, time.Now())
	}
	return cmd
}

// printHistory is the history table.
func printHistory(w io.Writer, entries []sandboxv1.SnapshotHistoryEntry, now time.Time) error {
	tw := tabwriter.NewWriter(escapingWriter{w}, 0, 8, 3, ' ', 0)
	fmt.Fprintln(tw, strings.Join([]string{"CURRENT", "SNAPSHOT", "CREATED", "SIZE", "EXPIRES", "TAKEN-BY", "PARENT"}, "\t"))
	for _, e := range entries {
		current, created, expires, by := "", "<unknown>", "never", "request"
		if e.Current {
			current = "*"
		}
		if e.CreatedAt != nil {
			created = duration.HumanDuration(now.Sub(e.CreatedAt.Time)) + " ago"
		}
		if e.ExpiresAt != nil {
			expires = "in " + duration.HumanDuration(e.ExpiresAt.Sub(now))
		}
		if e.Automatic {
			by = "stop"
		}
		// Escaped per cell, before tabwriter measures the columns.
		fmt.Fprintln(tw, strings.Join([]string{current, escapeControl(e.ID), created, sizeText(e.SizeBytes), expires, by, escapeControl(orDash(e.ParentID))}, "\t"))
	}
	return tw.Flush()
}

func sizeText(b int64) string {
	const unit = 1024
	if b < unit {
		return fmt.Sprintf("%dB", b)
	}
	div, exp := int64(unit), 0
	for n := b / unit; n >= unit; n /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f%ciB", float64(b)/float64(div), "KMGTPE"[exp])
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func newRewindCommand(o *options) *cobra.Command {
	var to sandboxclient.RewindTarget
	var wait bool
	cmd := &cobra.Command{
		Use:   "rewind NAME (--to SANDBOXSNAPSHOT | --id SNAPSHOT_ID)",
		Short: "Take a persistent Sandbox back to an earlier snapshot (spec.rewind); waits until rewound",
		Long: `rewind sets spec.rewind with a new token: the operator stops a running session (as a pause, which
takes a snapshot of it, so nothing is lost from the history), makes the chosen snapshot the one the
next session resumes from, and resumes the Sandbox if its session was running. --to names a
SandboxSnapshot of the namespace captured from this Sandbox; --id a snapshot of its history
('kubectl sandbox history NAME'), which needs the RBAC verb use on vercelsnapshots.`,
		Example: `  kubectl sandbox rewind dev --id snap_0123456789abcdefghijklmnopqr
  kubectl sandbox rewind dev --to dev-before-upgrade`,
		Args: cobra.ExactArgs(1),
	}
	cmd.Flags().StringVar(&to.SnapshotName, "to", "", "A SandboxSnapshot in the namespace (spec.rewind.snapshotRef)")
	cmd.Flags().StringVar(&to.SnapshotID, "id", "", "A Vercel snapshot id of the Sandbox's history (spec.rewind.snapshotID)")
	cmd.MarkFlagsOneRequired("to", "id")
	cmd.MarkFlagsMutuallyExclusive("to", "id")
	cmd.Flags().BoolVar(&wait, "wait", true, "Wait until the operator has rewound it (and, when it was running, Ready again)")
	timeout := timeoutFlag(cmd, 5*time.Minute)
	pf := printFlags(cmd, "rewound")
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		name, err := sandboxName(args[0])
		if err != nil {
			return err
		}
		c, ns, err := o.client()
		if err != nil {
			return err
		}
		ctx, cancel := withTimeout(cmd.Context(), *timeout)
		defer cancel()
		sbx, token, err := c.Rewind(ctx, ns, name, to)
		if err == nil && wait {
			sbx, err = c.WaitRewound(ctx, ns, name, token)
			// A session that ran resumes from the snapshot; a resting
			// Sandbox stays as it was (a rewind is not activity).
			if err == nil && sbx.Status.Phase != sandboxv1.SandboxStopped && sbx.Status.Phase != sandboxv1.SandboxIdle &&
				sbx.Status.Phase != sandboxv1.SandboxFailed {
				sbx, err = c.WaitReady(ctx, ns, name)
			}
		}
		return printResult(pf, sbx, err, o.Out)
	}
	return cmd
}
