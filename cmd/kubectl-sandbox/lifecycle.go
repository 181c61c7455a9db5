package main

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	sandboxv1 "github.com/getsentry/sandbox-controller/api/v1alpha1"
	"github.com/getsentry/sandbox-controller/pkg/sandboxclient"
)

func newListCommand(o *options) *cobra.Command {
	var (
		allNamespaces bool
		selector      string
	)
	cmd := &cobra.Command{
		Use:     "ls [sandboxes|snapshots|forks|pools]",
		Aliases: []string{"list"},
		Short:   "List Sandboxes (or SandboxSnapshots, SandboxForks, SandboxPools)",
		Example: `  kubectl sandbox ls
  kubectl sandbox ls snapshots -A
  kubectl sandbox ls pools
  kubectl sandbox ls -o wide
  kubectl sandbox ls -l app=box -o name`,
		Args: cobra.MaximumNArgs(1),
	}
	cmd.Flags().BoolVarP(&allNamespaces, "all-namespaces", "A", false, "List in every namespace")
	cmd.Flags().StringVarP(&selector, "selector", "l", "", "Label selector, e.g. app=box")
	pf := printFlags(cmd, "")
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		kind := kindSandbox
		if len(args) == 1 {
			k, _, err := parseRef(args[0] + "/x")
			if err != nil {
				return fmt.Errorf("ls %s: want sandboxes, snapshots, forks or pools", args[0])
			}
			kind = k
		}
		c, ns, err := o.client()
		if err != nil {
			return err
		}
		if allNamespaces {
			ns = metav1.NamespaceAll
		}
		ctx := cmd.Context()
		opts := metav1.ListOptions{LabelSelector: selector}
		v1 := c.Clientset().SandboxV1alpha1()
		var list runtime.Object
		switch kind {
		case kindSandbox:
			list, err = v1.Sandboxes(ns).List(ctx, opts)
		case kindSnapshot:
			list, err = v1.SandboxSnapshots(ns).List(ctx, opts)
		case kindFork:
			list, err = v1.SandboxForks(ns).List(ctx, opts)
		case kindPool:
			list, err = v1.SandboxPools(ns).List(ctx, opts)
		}
		if err != nil {
			return err
		}
		items, err := meta.ExtractList(list)
		if err != nil {
			return err
		}
		if format := outputFormat(pf); kind == kindPool && (format == "" || format == "wide") {
			if len(items) == 0 {
				fmt.Fprintln(o.ErrOut, "No resources found.")
				return nil
			}
			return printPoolTable(o.Out, list.(*sandboxv1.SandboxPoolList).Items, listPrint{wide: format == "wide", allNamespaces: allNamespaces})
		} else if format == "wide" {
			return printTable(ctx, c, kind, ns, opts, listPrint{wide: true, allNamespaces: allNamespaces}, o)
		} else if format != "" {
			p, err := pf.ToPrinter()
			if err != nil {
				return err
			}
			if format == "name" { // the name printer takes one object at a time
				for _, it := range items {
					if err := p.PrintObj(it, o.Out); err != nil {
						return err
					}
				}
				return nil
			}
			// Items of a typed list carry no kind; kubectl prints them with one.
			for _, it := range items {
				it.GetObjectKind().SetGroupVersionKind(sandboxv1.GroupVersion.WithKind(string(kind)))
			}
			if err := meta.SetList(list, items); err != nil {
				return err
			}
			return p.PrintObj(list, o.Out)
		}
		return printTable(ctx, c, kind, ns, opts, listPrint{wide: false, allNamespaces: allNamespaces}, o)
	}
	return cmd
}

func newStatusCommand(o *options) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "status NAME|TYPE/NAME",
		Short: "Show the state of a Sandbox (or sandboxsnapshot/NAME, sandboxfork/NAME, pool/NAME)",
		Example: `  kubectl sandbox status dev
  kubectl sandbox status pool/workspace-pool
  kubectl sandbox status sandboxsnapshot/dev-snap -o yaml`,
		Args: cobra.ExactArgs(1),
	}
	pf := printFlags(cmd, "")
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		kind, name, err := parseRef(args[0])
		if err != nil {
			return err
		}
		c, ns, err := o.client()
		if err != nil {
			return err
		}
		obj, err := getObject(cmd.Context(), c, kind, ns, name)
		if err != nil {
			return err
		}
		if outputFormat(pf) == "" {
			return describe(o.Out, obj)
		}
		p, err := pf.ToPrinter()
		if err != nil {
			return err
		}
		return p.PrintObj(obj, o.Out)
	}
	return cmd
}

// waitCondition is a parsed --for.
type waitCondition struct {
	what   string // ready, stopped, delete, phase, condition
	value  string // the phase, or the condition type
	status string // the condition status wanted
}

func parseFor(s string) (waitCondition, error) {
	switch {
	case s == "ready", s == "stopped", s == "delete":
		return waitCondition{what: s}, nil
	case strings.HasPrefix(s, "phase="):
		return waitCondition{what: "phase", value: strings.TrimPrefix(s, "phase=")}, nil
	case strings.HasPrefix(s, "condition="):
		typ, status, ok := strings.Cut(strings.TrimPrefix(s, "condition="), "=")
		if !ok {
			status = "True"
		}
		return waitCondition{what: "condition", value: typ, status: status}, nil
	}
	return waitCondition{}, fmt.Errorf("--for %q: want ready, stopped, delete, phase=PHASE or condition=TYPE[=STATUS]", s)
}

// check says whether an object of generation gen, with its phase and
// conditions, has reached a phase or condition wait. Like kubectl wait, a
// condition counts only when it was written for the current generation.
func (w waitCondition) check(gen int64, phase string, conds []metav1.Condition) bool {
	switch w.what {
	case "phase":
		return strings.EqualFold(phase, w.value)
	case "condition":
		c := meta.FindStatusCondition(conds, w.value)
		return c != nil && strings.EqualFold(string(c.Status), w.status) && c.ObservedGeneration >= gen
	}
	return false
}

func newWaitCommand(o *options) *cobra.Command {
	var forFlag string
	cmd := &cobra.Command{
		Use:   "wait NAME|TYPE/NAME [--for ready|stopped|delete|phase=PHASE|condition=TYPE[=STATUS]]",
		Short: "Wait until a Sandbox (or snapshot, or fork) is Ready, stopped, deleted, or in a phase",
		Long: `wait watches the object (no polling) until it reaches the state asked for, and fails at
once, with the condition's reason and message, when the object reports that it will not
(phase Failed, a spec Vercel refused, an expired snapshot). ready is: a Sandbox Ready for its
current spec, a snapshot ready to use, a fork with all its children Ready.`,
		Example: `  kubectl sandbox wait dev
  kubectl sandbox wait dev --for stopped --timeout 2m
  kubectl sandbox wait sandboxfork/tries --for delete`,
		Args: cobra.ExactArgs(1),
	}
	cmd.Flags().StringVar(&forFlag, "for", "ready", "ready, stopped (a Sandbox), delete, phase=PHASE or condition=TYPE[=STATUS]")
	timeout := timeoutFlag(cmd, 5*time.Minute)
	pf := printFlags(cmd, "condition met")
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		kind, name, err := parseRef(args[0])
		if err != nil {
			return err
		}
		cond, err := parseFor(forFlag)
		if err != nil {
			return err
		}
		if cond.what == "stopped" && kind != kindSandbox {
			return fmt.Errorf("--for stopped applies to a Sandbox only")
		}
		c, ns, err := o.client()
		if err != nil {
			return err
		}
		ctx, cancel := withTimeout(cmd.Context(), *timeout)
		defer cancel()
		obj, err := waitFor(ctx, c, kind, ns, name, cond)
		if cond.what == "delete" {
			if err == nil || !isNotFound(err) {
				if err == nil {
					err = errors.New("unexpected end of the watch")
				}
				return err
			}
			fmt.Fprintln(o.Out, qualified(kind, name)+" deleted")
			return nil
		}
		return printResult(pf, obj, err, o.Out)
	}
	return cmd
}

// waitFor runs one wait. For delete it never succeeds: the NotFound error
// that ends it is the caller's success.
func waitFor(ctx context.Context, c *sandboxclient.Client, kind resourceKind, ns, name string, cond waitCondition) (runtime.Object, error) {
	never := cond.what == "delete"
	switch kind {
	case kindPool:
		if cond.what == "ready" {
			return c.WaitPoolReady(ctx, ns, name)
		}
		return c.WaitPoolFor(ctx, ns, name, func(p *sandboxv1.SandboxPool) (bool, error) {
			return !never && cond.check(p.Generation, "", p.Status.Conditions), nil
		})
	case kindSnapshot:
		if cond.what == "ready" {
			return c.WaitSnapshotReady(ctx, ns, name)
		}
		return c.WaitSnapshotFor(ctx, ns, name, func(s *sandboxv1.SandboxSnapshot) (bool, error) {
			return !never && cond.check(s.Generation, string(s.Status.Phase), s.Status.Conditions), nil
		})
	case kindFork:
		if cond.what == "ready" {
			return c.WaitForkReady(ctx, ns, name)
		}
		return c.WaitForkFor(ctx, ns, name, func(f *sandboxv1.SandboxFork) (bool, error) {
			return !never && cond.check(f.Generation, string(f.Status.Phase), f.Status.Conditions), nil
		})
	}
	switch cond.what {
	case "ready":
		return c.WaitReady(ctx, ns, name)
	case "stopped":
		return c.WaitStopped(ctx, ns, name)
	}
	return c.WaitFor(ctx, ns, name, func(s *sandboxv1.Sandbox) (bool, error) {
		return !never && cond.check(s.Generation, string(s.Status.Phase), s.Status.Conditions), nil
	})
}

// newStateCommand is pause (spec.state Stopped) or resume (Running).
func newStateCommand(o *options, verb string) *cobra.Command {
	var wait bool
	cmd := &cobra.Command{
		Use:  verb + " NAME",
		Args: cobra.ExactArgs(1),
	}
	if verb == "pause" {
		cmd.Short = "Stop a Sandbox's session, keeping its filesystem (spec.state Stopped); waits until stopped"
	} else {
		cmd.Short = "Start a paused Sandbox again in a new session (spec.state Running); waits until Ready"
	}
	cmd.Flags().BoolVar(&wait, "wait", true, "Wait until the Sandbox is stopped (pause) or Ready (resume)")
	timeout := timeoutFlag(cmd, 5*time.Minute)
	pf := printFlags(cmd, map[string]string{"pause": "paused", "resume": "resumed"}[verb])
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
		var sbx *sandboxv1.Sandbox
		if verb == "pause" {
			sbx, err = c.Pause(ctx, ns, name)
			if err == nil && wait {
				sbx, err = c.WaitStopped(ctx, ns, name)
			}
		} else {
			sbx, err = c.Resume(ctx, ns, name)
			if err == nil && wait {
				sbx, err = c.WaitReady(ctx, ns, name)
			}
		}
		return printResult(pf, sbx, err, o.Out)
	}
	return cmd
}

func newHeartbeatCommand(o *options) *cobra.Command {
	return &cobra.Command{
		Use:   "heartbeat NAME",
		Short: "Record activity on a Sandbox now: keeps its session up for spec.timeoutSeconds more, wakes it if Idle",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			name, err := sandboxName(args[0])
			if err != nil {
				return err
			}
			c, ns, err := o.client()
			if err != nil {
				return err
			}
			if err := c.Heartbeat(cmd.Context(), ns, name, time.Now()); err != nil {
				return err
			}
			fmt.Fprintln(o.Out, qualified(kindSandbox, name)+" heartbeat recorded")
			return nil
		},
	}
}

func newRmCommand(o *options) *cobra.Command {
	var wait bool
	cmd := &cobra.Command{
		Use:     "rm NAME|TYPE/NAME...",
		Aliases: []string{"delete"},
		Short:   "Delete Sandboxes (or snapshots, or forks) and wait until they are gone in Vercel too",
		Long: `rm deletes each object and, unless --wait=false, waits until it is gone: its finalizer
ran, i.e. the Vercel sandbox or snapshot is deleted (or retained, per spec.deletionPolicy).
A fork takes its children and its own snapshot with it; a pool its unclaimed members (Sandboxes
that claimed one stay).`,
		Example: `  kubectl sandbox rm dev
  kubectl sandbox rm sandboxfork/tries sandboxsnapshot/dev-snap
  kubectl sandbox rm pool/workspace-pool`,
		Args: cobra.MinimumNArgs(1),
	}
	var ignoreNotFound bool
	cmd.Flags().BoolVar(&wait, "wait", true, "Wait until each object is gone")
	cmd.Flags().BoolVar(&ignoreNotFound, "ignore-not-found", false, "Treat a missing object as deleted")
	timeout := timeoutFlag(cmd, 5*time.Minute)
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		type ref struct {
			kind resourceKind
			name string
		}
		refs := make([]ref, len(args))
		for i, a := range args {
			k, n, err := parseRef(a)
			if err != nil {
				return err
			}
			refs[i] = ref{k, n}
		}
		c, ns, err := o.client()
		if err != nil {
			return err
		}
		ctx, cancel := withTimeout(cmd.Context(), *timeout)
		defer cancel()
		// The deletions run in parallel: each waits for its own finalizer.
		errs := make([]error, len(refs))
		var wg sync.WaitGroup
		for i, r := range refs {
			wg.Go(func() { errs[i] = remove(ctx, c, r.kind, ns, r.name, wait, ignoreNotFound) })
		}
		wg.Wait()
		for i, r := range refs {
			if errs[i] == nil {
				fmt.Fprintln(o.Out, qualified(r.kind, r.name)+" deleted")
			}
		}
		return errors.Join(errs...)
	}
	return cmd
}

// remove deletes one object and, with wait, watches until it is gone.
func remove(ctx context.Context, c *sandboxclient.Client, kind resourceKind, ns, name string, wait, ignoreNotFound bool) error {
	v1 := c.Clientset().SandboxV1alpha1()
	var err error
	switch kind {
	case kindSnapshot:
		err = v1.SandboxSnapshots(ns).Delete(ctx, name, metav1.DeleteOptions{})
	case kindFork:
		err = v1.SandboxForks(ns).Delete(ctx, name, metav1.DeleteOptions{})
	case kindPool:
		err = v1.SandboxPools(ns).Delete(ctx, name, metav1.DeleteOptions{})
	default:
		err = v1.Sandboxes(ns).Delete(ctx, name, metav1.DeleteOptions{})
	}
	switch {
	case isNotFound(err) && ignoreNotFound:
		return nil
	case err != nil:
		return err
	case !wait:
		return nil
	}
	_, err = waitFor(ctx, c, kind, ns, name, waitCondition{what: "delete"})
	if isNotFound(err) {
		return nil // gone: the finalizer ran
	}
	if err == nil {
		err = errors.New("unexpected end of the watch")
	}
	return err
}
